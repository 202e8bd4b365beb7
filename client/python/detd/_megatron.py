"""Side by side with Megatron-LM's ``megatron.core.tuning``.

Megatron-LM ships its own answer to autotune nondeterminism: its
``megatron.core.tuning.install()`` (called by Megatron's initialization,
``install_from_env()``) replaces ``triton.runtime.autotuner.Autotuner.run``
with a wrapper (``interception.policy_run``) that, in ``pinned`` mode,
narrows a tuner's candidates to one config chosen from its tables (or the
cheapest) before calling the original ``run``; its module flag
``interception._installed`` makes a second ``install()`` return at once.
Two packages patching the same method would both act on every launch
(Megatron's pin first, so detd would see a single config and decide
nothing), so exactly one of them governs and the other stands down, with a
log line (the ``detd`` logger and a ``RuntimeWarning``) saying which:

* ``megatron="detd"`` (the default; ``DETD_MEGATRON``): detd governs.
  If Megatron's interception is loaded already, its patch of
  ``Autotuner.run`` is undone (the function it wraps is put back) and its
  ``_installed`` flag is set, so its ``install()`` patches nothing later;
  if it is loaded after ``detd.install()``, the flag is set as the module
  is imported.  Megatron's policy is then not applied at all: detd's
  tables (which read Megatron's files, ``detd --tables`` / ``detctl table
  import``) take its place, and its ``MCORE_AUTOTUNE_*`` variables are
  read by detd (:mod:`detd._policy`).
* ``megatron="megatron"``: Megatron governs; ``detd.install()`` patches
  nothing (and an earlier install is made inactive), observes nothing.

Nothing is imported to find out: the hook on Megatron's import costs one
entry in ``sys.meta_path`` and is added only when a top-level ``megatron``
package exists.  This module touches Megatron's module only (its
``_installed`` flag); the undoing of its patch is :func:`detd._triton.
restore_run`.  Megatron-LM itself is not installable where the tests run:
they use a stand-in package that patches the autotuner as the real one does.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import logging
import sys
import threading
import warnings

from . import _triton

MODULE = "megatron.core.tuning.interception"

log = logging.getLogger("detd")
_lock = threading.Lock()
_said = set()


def _say(msg: str):
    if msg in _said:
        return
    _said.add(msg)
    if log.hasHandlers():
        log.warning(msg)
    warnings.warn(msg, RuntimeWarning, stacklevel=3)


def _stand_down(mod, when: str):
    """Megatron's interception stands down: it never patches again, and
    its patch in place (if any) is undone."""
    mod._installed = True  # its install() returns at once from now on
    undone = False
    if "triton" in sys.modules or "triton.runtime.autotuner" in sys.modules:
        undone = _triton.restore_run(MODULE)
    _say(f"detd: megatron.core.tuning is installed as well ({when}"
         f"{'; its patch of Autotuner.run was undone' if undone else ''}): detd governs Triton's autotuner, "
         "megatron.core.tuning stands down (its policy is not applied; set DETD_MEGATRON=megatron to have it "
         "govern instead)")


class _Loader(importlib.abc.Loader):
    """Megatron's loader, and the stand-down right after the module ran."""

    def __init__(self, inner):
        self._inner = inner

    def create_module(self, spec):
        return self._inner.create_module(spec)

    def exec_module(self, module):
        self._inner.exec_module(module)
        with _lock:
            _stand_down(module, "imported after detd.install()")


class _Finder(importlib.abc.MetaPathFinder):
    """Finds nothing itself: wraps the loader of Megatron's interception."""

    def find_spec(self, name, path, target=None):
        if name != MODULE:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _Loader(spec.loader)
                return spec
        return None


_finder = _Finder()


def _findable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def coexist(settings) -> str:
    """Settle who governs before ``detd.install()`` patches: returns
    ``"detd"`` or ``"megatron"`` (then detd must not patch)."""
    with _lock:
        if settings.megatron == "megatron":
            if _finder in sys.meta_path:
                sys.meta_path.remove(_finder)
            _say("detd: DETD_MEGATRON=megatron: megatron.core.tuning governs Triton's autotuner; detd stands down "
                 "(it patches nothing and observes nothing)")
            return "megatron"
        mod = sys.modules.get(MODULE)
        if mod is not None:
            _stand_down(mod, "imported before detd.install()")
        elif "megatron" in sys.modules or _findable("megatron"):
            if _finder not in sys.meta_path:
                sys.meta_path.insert(0, _finder)
        return "detd"
