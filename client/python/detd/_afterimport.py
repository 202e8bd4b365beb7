"""A meta-path finder that runs a callback when one of the watched
modules finishes importing: how an adapter patches a package imported
after ``detd.install()`` (Inductor's modules, Helion's settings)."""
from __future__ import annotations

import importlib.abc
import sys
from typing import Callable, Sequence

__all__ = ["AfterImport"]


class AfterImport(importlib.abc.MetaPathFinder):
    """``after(name)`` runs once the module ``name`` (one of ``watch``)
    has executed; the real finder and loader do the import."""

    def __init__(self, watch: Sequence[str], after: Callable[[str], None]):
        self.WATCH, self._after = tuple(watch), after

    def find_spec(self, name, path=None, target=None):
        if name not in self.WATCH:
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
        run, after = loader.exec_module, self._after

        class _Loader(importlib.abc.Loader):
            def __getattr__(self, attr):  # get_source, get_filename, ...: the real loader's
                return getattr(loader, attr)

            def create_module(self, sp):
                return loader.create_module(sp)

            def exec_module(self, module):
                run(module)
                after(name)

        spec.loader = _Loader()
        return spec
