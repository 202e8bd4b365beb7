"""CUDA graph capture: decisions final before a graph records them.

A CUDA graph records the kernels launched while it is captured, configs
included, and replays exactly those. A process that launched a key's
``on_miss`` fallback (its wait for another process's timing pass ran out,
or the daemon was away) and then captures bakes that fallback into its
graph, while the processes that got the decision bake the decision: the
graphs differ across ranks for as long as they are replayed (TensorRT-LLM
met this with its own tuner, and now waits for final choices before it
captures). So, with detd governing (``coordinated`` or ``pinned``),
``torch.cuda.CUDAGraph.capture_begin`` first runs :func:`before_capture`:
``torch.cuda.graph``, ``torch.cuda.make_graphed_callables`` and
``torch.compile``'s CUDA graph trees all capture through it.

``DETD_CAPTURE`` (read by ``install()``; ValueError naming a bad value):

``wait`` (the default)
    :func:`detd._loop.wait_final` with ``DETD_CAPTURE_WAIT_S`` (default:
    the ``timeout_ms`` setting): the keys other threads of this process
    resolve are waited for, and every fallback this process launched is
    replaced by its decision once made, so the graph records the
    decisions. Keys still undecided at the bound follow ``on_miss``:
    ``error`` raises :class:`detd.NotFinalError` before the capture
    starts; ``first`` and ``cheapest`` warn, naming the keys and who times
    them, and the capture records this process's fallbacks.
``warn``
    No wait: one look at each fallback's key (a decision already made
    replaces the fallback) and, when keys are still not final, a warning
    for this capture naming them and who times them.
``off``
    Nothing.

A capture begun by a timing pass itself (Triton's ``do_bench_cudagraph``
for ``use_cuda_graph=True`` tuners) is part of choosing and is not
checked. Keys a capture itself meets for the first time are resolved
where they launch, as without a capture (a designated process's timing pass inside
a capture fails as Triton's own would): warm up before capturing, as
torch's documentation asks. Counters: :func:`counts`.
"""

from __future__ import annotations

import os
import threading
import warnings
from typing import Optional

from . import _imports, _loop, _policy, _process

_GRAPHS = "torch.cuda.graphs"
MODES = ("wait", "warn", "off")


class _State:
    def __init__(self):
        self.mode = "wait"
        self.wait_s: Optional[float] = None  # None: the timeout_ms setting
        self.orig = None  # CUDAGraph.capture_begin before the patch
        self.lock = threading.Lock()
        self.captures = 0  # captures that met detd's check
        self.warned = 0  # captures warned about (keys not final)
        self.refused = 0  # captures refused (NotFinalError, on_miss=error)


_st = _State()


def options(environ=None):
    """(mode, wait seconds or None) from ``DETD_CAPTURE`` and
    ``DETD_CAPTURE_WAIT_S``; ValueError naming a bad variable."""
    env = os.environ if environ is None else environ
    mode = str(env.get("DETD_CAPTURE", "")).strip().lower() or "wait"
    if mode not in MODES:
        raise ValueError(f"detd: invalid DETD_CAPTURE={env.get('DETD_CAPTURE')!r}: expected one of "
                         + ", ".join(MODES))
    wait_s = _policy.env_seconds(env, "DETD_CAPTURE_WAIT_S", -1.0)
    return mode, (None if wait_s < 0 else wait_s)


def counts() -> dict:
    """``capture_checks`` (captures detd checked before they began),
    ``capture_warnings`` (those that began with keys not final, warned)
    and ``capture_refused`` (those refused: NotFinalError)."""
    with _st.lock:
        return dict(capture_checks=_st.captures, capture_warnings=_st.warned, capture_refused=_st.refused)


def _warn(e: "_loop.NotFinalError", mode: str) -> None:
    with _st.lock:
        _st.warned += 1
    shown = "; ".join(f"kernel {k['kernel']} key {k['key']}: {k['why']}" for k in e.keys[:3])
    more = f"; and {len(e.keys) - 3} more" if len(e.keys) > 3 else ""
    msg = (f"detd: a CUDA graph capture begins while {len(e.keys)} key(s) of this process are not decided "
           f"(DETD_CAPTURE={mode}, waited {e.waited_s:.1f} s): {shown}{more}; the graph records the configs this "
           "process launches now, which may differ from other processes'")
    if _process.log.hasHandlers():
        _process.log.warning(msg)
    warnings.warn(msg, RuntimeWarning, stacklevel=4)


def before_capture() -> Optional[dict]:
    """What runs before every CUDA graph capture while detd governs (see
    the module docstring): returns :func:`detd._loop.wait_final`'s summary,
    or None when nothing was checked or keys were left not final (warned);
    raises :class:`detd._loop.NotFinalError` under ``DETD_CAPTURE=wait``
    with ``on_miss=error``."""
    settings = _process.settings()
    if not _process.active() or not settings.governs_anything or _st.mode == "off":
        return None
    if _process.resolving_here():
        return None  # a timing pass's own graph (Triton's do_bench_cudagraph): part of choosing
    with _st.lock:
        _st.captures += 1
    mode = _st.mode
    try:
        return _loop.wait_final(_st.wait_s if mode == "wait" else 0.0, forget=False)
    except _loop.NotFinalError as e:
        if mode == "wait" and settings.on_miss == "error":
            with _st.lock:
                _st.refused += 1
            if hasattr(e, "add_note"):  # Python 3.11+
                e.add_note("detd: the CUDA graph capture did not begin (DETD_CAPTURE=wait, on_miss=error); "
                           "DETD_CAPTURE_WAIT_S waits longer, DETD_CAPTURE=warn captures anyway")
            raise
        _warn(e, mode)
        return None


def _patched_capture_begin(self, *args, **kwargs):
    before_capture()
    return _st.orig(self, *args, **kwargs)


def _patch() -> None:
    import sys

    mod = sys.modules.get(_GRAPHS)
    cls = getattr(mod, "CUDAGraph", None)
    if cls is None or _st.orig is not None:
        return
    with _st.lock:
        if _st.orig is None and callable(getattr(cls, "capture_begin", None)):
            _st.orig = cls.capture_begin
            cls.capture_begin = _patched_capture_begin


def install() -> None:
    """Called by ``detd.install()``: read ``DETD_CAPTURE`` and
    ``DETD_CAPTURE_WAIT_S`` (ValueError naming a bad one), and patch
    ``CUDAGraph.capture_begin`` now when torch is imported, else when
    it will be (once per process; a new install only changes the
    settings)."""
    _st.mode, _st.wait_s = options()
    _imports.watch((_GRAPHS,), _patch)
    if _imports.loaded(_GRAPHS):
        _patch()
