"""Code run when a module finishes importing.

``python -m detd.run`` installs detd before the script imports torch, so
the adapters that patch torch's modules (:mod:`detd._inductor`,
:mod:`detd._capture`) patch them when their import finishes: a finder at
the front of ``sys.meta_path`` wraps the loader of each watched module
and runs the callbacks registered for it right after the module's code
ran. ``sys.modules`` holds a module while it is still being executed
(Inductor's ``select_algorithm`` imports ``triton_heuristics`` half-way
through its own import), so :func:`loaded` says whether an import
finished, not whether it started.
"""

from __future__ import annotations

import importlib.abc
import sys
from typing import Callable, Dict, Iterable, List

_watch: Dict[str, List[Callable[[], None]]] = {}
_loaded = set()


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs the callbacks of a watched module once its import finished."""

    def find_spec(self, name, path=None, target=None):
        if name not in _watch:
            return None
        for finder in sys.meta_path:
            if finder is self:
                continue
            find = getattr(finder, "find_spec", None)
            spec = find(name, path, target) if find is not None else None
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        run = loader.exec_module

        class _Loader(importlib.abc.Loader):
            def __getattr__(self, attr):  # get_source, get_filename, ...: the real loader's
                return getattr(loader, attr)

            def create_module(self, sp):
                return loader.create_module(sp)

            def exec_module(self, module):
                run(module)
                _loaded.add(name)
                for fn in list(_watch.get(name, ())):
                    fn()

        spec.loader = _Loader()
        return spec


_finder = _AfterImport()


def watch(names: Iterable[str], fn: Callable[[], None]) -> None:
    """Call ``fn()`` each time one of ``names`` finishes importing
    (idempotent per name and function). A module imported completely
    before this call counts as :func:`loaded` at once; ``fn`` is not
    called for it (the caller checks :func:`loaded`)."""
    if _finder not in sys.meta_path:
        sys.meta_path.insert(0, _finder)
    for name in names:
        fns = _watch.setdefault(name, [])
        if fn not in fns:
            fns.append(fn)
        mod = sys.modules.get(name)
        if mod is not None and getattr(getattr(mod, "__spec__", None), "_initializing", False) is False:
            _loaded.add(name)


def loaded(name: str) -> bool:
    """Whether ``name`` finished importing (as far as this module saw)."""
    return name in _loaded
