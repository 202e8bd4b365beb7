"""Timing outside detd: tuners detd does not see, named.

detd governs the autotuners it can reach (Triton's ``Autotuner``, its
subclasses, Inductor's, Helion's) and lists those it cannot govern. A
package can also time candidates with its own loop around Triton's
benchmarker and keep the fastest (torchao's ``get_best_config_fn`` does,
for its int8 matmuls): that choice is made per process, from that
process's timings, and detd never sees it, so ranks can pick different
kernels while ``detctl verify`` says every key agrees.

While detd governs (``coordinated`` or ``pinned``), ``triton.testing``'s
``do_bench`` and ``do_bench_cudagraph`` are wrapped when ``triton.testing``
is imported (or at ``install()`` if it was before). A call is *outside
detd* when this thread is not resolving a key (:func:`detd._process.resolving_here`)
and no frame of a tuner detd governs or lists is on the stack: Triton's
``triton.runtime.autotuner`` (every ``Autotuner`` and subclass, governed
or listed as ungoverned), ``torch._inductor``, ``helion``, detd itself.
Such a call is attributed to its call site, the first frame on the stack
outside ``triton``, ``torch``, ``functools`` and ``contextlib``
(``module:qualname``), and each call site is:

- said once per process (a RuntimeWarning, and the ``detd`` logger when
  the program configured one);
- sent to the daemon once per process, as an observation of kernel
  ``timing::<module>:<qualname>``, key the benchmarker's name, config
  ``unseen``, source LOCAL, not governed, with why: ``detctl verify``
  lists it as ``UNGOVERNED timing timing::...`` beside the other tuners
  (counted as ungoverned, never a failure: the choice itself is not
  seen, so there is nothing to compare across ranks);
- listed by :func:`detd.autotuners` (``kind`` ``timing``, ``calls``,
  ``benchmarkers``).

Not seen: timing with one's own CUDA events or clocks, and a module that
bound ``do_bench`` (``from triton.testing import do_bench``) before
``install()`` wrapped it (``detd-run`` and ``python -m detd.run`` install
before the program's imports). Cost: per benchmarker call, one
thread-local lookup and a walk of at most ``MAX_FRAMES`` frames (a call
itself runs for at least tens of milliseconds); at most ``MAX_SITES`` call
sites are kept per process (past them, one more warning).
"""

from __future__ import annotations

import threading
from typing import Dict, List, Optional

from . import _imports, _native, _process, _triton

__all__ = ["install", "records", "counts", "site_of", "MAX_SITES", "MAX_FRAMES"]

MAX_SITES = 64
MAX_FRAMES = 64
CONFIG = "unseen"  # the choice such a tuner made: not seen
_TEXT = 256  # the daemon's cap on a kernel name is larger; sites are cut here

# A frame of one of these modules means a tuner detd governs or lists.
_LISTED = ("triton.runtime.autotuner", "torch._inductor", "helion", "detd")
# Frames passed over to find the call site: the benchmarker's own
# library and plain wrappers.
_LIBRARY = ("triton", "torch", "functools", "contextlib")


def _why(benchmarker: str) -> str:
    return (f"times candidates with triton.testing.{benchmarker} outside every autotuner detd governs: "
            "the choice it makes from those timings is this process's own, not seen by detd, and can "
            "differ between ranks")


class _State:
    def __init__(self):
        self.lock = threading.Lock()
        self.sites: Dict[str, dict] = {}  # site -> {calls, benchmarkers}
        self.calls = 0  # benchmarker calls outside detd
        self.send_errors = 0


_st = _State()


def site_of(frame) -> Optional[str]:
    """The call site (``module:qualname``) a benchmarker call made from
    ``frame`` is attributed to, or None when a tuner detd governs or lists
    is on the stack (or none was found within ``MAX_FRAMES``)."""
    site = _triton.call_site(frame, _LISTED, _LIBRARY, MAX_FRAMES)
    return site[:_TEXT] if site is not None else None


def _send(site: str, benchmarker: str) -> None:
    try:
        ident = _process.identity()
        key = _native.Key(_process.settings().namespace, ident["arch"], "timing::" + site,
                          f"triton.testing.{benchmarker}", (CONFIG,))
        _process.client().observe(key, CONFIG, _native.SOURCE_LOCAL, False, False, timeout_ms=2000,
                                  why=_why(benchmarker))
    except (_native.DetdError, _native.LibraryNotFound, OSError) as e:
        with _st.lock:
            _st.send_errors += 1
        _process.warn_once("timing-send", f"detd: cannot tell the daemon about timing outside detd: {e}")


def _note(benchmarker: str, frame) -> None:
    if not _process.active() or not _process.settings().governs_anything:
        return
    if _process.resolving_here():
        return  # a timing pass detd runs
    site = site_of(frame)
    if site is None:
        return
    with _st.lock:
        _st.calls += 1
        rec = _st.sites.get(site)
        if rec is None and len(_st.sites) < MAX_SITES:
            rec = _st.sites[site] = dict(calls=0, benchmarkers=[])
        new = rec is not None and benchmarker not in rec["benchmarkers"]
        if rec is not None:
            rec["calls"] += 1
            if new:
                rec["benchmarkers"].append(benchmarker)
    if rec is None:
        _process.warn_once("timing-full", f"detd: more than {MAX_SITES} call sites time with triton.testing "
                           "outside detd: those past the first are counted, not listed")
    elif new:
        _process.warn_once(f"timing:{site}:{benchmarker}",
                           f"detd: {site} {_why(benchmarker)} (listed by detd.autotuners() and detctl verify)")
        _send(site, benchmarker)


def _patch() -> None:
    with _st.lock:
        _triton.wrap_benchmarkers(_note)


def install() -> None:
    """Called by ``detd.install()``: wrap Triton's benchmarkers now when
    ``triton.testing`` is imported, else when it will be (once per
    process)."""
    _imports.watch((_triton.TESTING,), _patch)
    if _imports.loaded(_triton.TESTING):
        _patch()


def records() -> List[dict]:
    """One entry per call site seen timing outside detd, in
    :func:`detd.autotuners`' form (``kind`` ``timing``)."""
    with _st.lock:
        sites = {s: dict(r, benchmarkers=list(r["benchmarkers"])) for s, r in _st.sites.items()}
    return [dict(kind="timing", kernel="timing::" + s, name=s, governed=False,
                 why=_why(r["benchmarkers"][0]), calls=r["calls"], benchmarkers=r["benchmarkers"],
                 candidates=[], keys=[]) for s, r in sites.items()]


def counts() -> dict:
    """``timing_outside`` (benchmarker calls outside detd), ``timing_sites``
    (their call sites listed), ``timing_send_errors``."""
    with _st.lock:
        return dict(timing_outside=_st.calls, timing_sites=len(_st.sites), timing_send_errors=_st.send_errors)
