"""Where a process's cold-start time goes: wall seconds per phase of the
resolve of governed keys (the first meeting of each key), accumulated per
process and per key.

Phases (:data:`PHASES`), each the wall time of the resolving thread:

* ``compile``: compiling candidates, as the timing rank before it
  benchmarks one, or as a waiting rank compiling a share of another
  rank's pass (``DETD_SHARE_PASS``); with compile-ahead on, only the time
  the timing rank waited for a compile it needed next;
* ``benchmark``: the first measurement of every candidate (the tuner's
  own benchmarker; a candidate the adapter did not compile first includes
  its compile);
* ``remeasure``: the re-measure of the near-best candidates, and of the
  candidates measured while compiles ran (``DETD_COMPILE_OVERLAP``);
* ``waiting``: held by the daemon while another rank times the key, and
  waiting for the device's timing lock;
* ``daemon``: the daemon's calls (Decide answered without waiting,
  Report, Observe, a claim given back);
* ``other``: the rest of the resolve (pruning, keys, records, Python).

The phases of a resolve sum to its wall time (``total``): each phase is
measured as exclusive time, a phase opened inside another is taken out of
the outer one, the way a profiler's self time is. Besides the wall time,
``compile_work`` is the sum of every compile's own duration (threads of
the compile-ahead pool and compile workers included) and ``compile_max`` the longest one:
what the compile floor of ``tests/gpu/run_coldstart.py`` is computed from.

This module is process state at the bottom of the package: no import of
the package, cheap enough for the cold path only (a launch on a known key
runs none of it). ``snapshot()`` is what ``detd.stats()["phases"]``
returns; ``DETD_PHASES=<path>`` writes it as JSON when the process exits
(``{pid}`` and ``{rank}`` in the path are replaced).
"""

from __future__ import annotations

import atexit
import json
import os
import threading
import time
from typing import Dict, Optional

PHASES = ("compile", "benchmark", "remeasure", "waiting", "daemon", "other")

_lock = threading.Lock()
_tls = threading.local()


class _Totals:
    def __init__(self):
        self.sec: Dict[str, float] = dict.fromkeys(PHASES, 0.0)
        self.n: Dict[str, int] = dict.fromkeys(PHASES, 0)
        self.total = 0.0
        self.keys = 0
        self.compile_work = 0.0
        self.compile_max = 0.0
        self.compiles = 0


_totals = _Totals()


class _Frame:
    """An open phase on this thread: its start and the time its nested
    phases took (``child``); the outermost frame also collects the key's
    breakdown (``by``)."""

    __slots__ = ("name", "t0", "child", "by")

    def __init__(self, name: str, by: Optional[dict]):
        self.name, self.t0, self.child, self.by = name, time.perf_counter(), 0.0, by


def _stack() -> list:
    s = _tls.__dict__.get("stack")
    if s is None:
        s = _tls.stack = []
    return s


def _record(stack: list, name: str, seconds: float) -> None:
    with _lock:
        _totals.sec[name] += seconds
        _totals.n[name] += 1
    if stack and stack[0].by is not None:
        by = stack[0].by
        by[name] = by.get(name, 0.0) + seconds


def add(name: str, seconds: float) -> None:
    """``seconds`` of phase ``name`` measured by the caller (inside an
    open phase, which it is taken out of). Outside any resolve: ignored,
    so the phases always sum to the resolves' time."""
    stack = _stack()
    if not stack or seconds < 0:
        return
    _record(stack, name, seconds)
    stack[-1].child += seconds


def compiled(seconds: float) -> None:
    """One compile's own duration (any thread): ``compile_work`` and
    ``compile_max``; also the current key's (this thread's resolve)."""
    with _lock:
        _totals.compile_work += seconds
        _totals.compile_max = max(_totals.compile_max, seconds)
        _totals.compiles += 1
    stack = _stack()
    if stack and stack[0].by is not None:
        by = stack[0].by
        by["compile_work"] = by.get("compile_work", 0.0) + seconds
        by["compile_max"] = max(by.get("compile_max", 0.0), seconds)


class phase:
    """``with phase(name):`` the block's exclusive wall time is phase
    ``name``. ``key`` (a dict) opens the resolve of one key when no
    resolve is open on this thread: the dict receives the key's breakdown
    (seconds per phase, ``total``) as it goes. Outside a resolve a phase
    other than the resolve's own counts nothing."""

    __slots__ = ("name", "key", "frame")

    def __init__(self, name: str, key: Optional[dict] = None):
        self.name, self.key, self.frame = name, key, None

    def __enter__(self):
        stack = _stack()
        if not stack and self.key is None:
            return self
        self.frame = _Frame(self.name, self.key if not stack else None)
        stack.append(self.frame)
        return self

    def __exit__(self, *exc):
        f = self.frame
        if f is None:
            return False
        stack = _stack()
        if not stack or stack[-1] is not f:
            return False  # reset() in between (a forked child): not this process's time
        elapsed = time.perf_counter() - f.t0
        stack.pop()
        own = max(0.0, elapsed - f.child)
        if stack:
            _record(stack, self.name, own)
            stack[-1].child += elapsed
            return False
        _record([f], self.name, own)
        f.by["total"] = f.by.get("total", 0.0) + elapsed
        with _lock:
            _totals.total += elapsed
            _totals.keys += 1
        return False


def snapshot() -> dict:
    """This process's phases: seconds per phase (:data:`PHASES`, summing
    to ``total``), ``total`` (wall time of the resolves), ``keys``
    (resolves), ``counts`` (measured stretches per phase),
    ``compile_work``, ``compile_max`` and ``compiles``."""
    with _lock:
        t = _totals
        out = {p: round(t.sec[p], 6) for p in PHASES}
        out.update(total=round(t.total, 6), keys=t.keys, counts=dict(t.n), compile_work=round(t.compile_work, 6),
                   compile_max=round(t.compile_max, 6), compiles=t.compiles)
    return out


def reset() -> None:
    """Start from zero (a forked child: its parent's time is not its own)."""
    global _totals, _lock
    _lock = threading.Lock()
    _totals = _Totals()
    _tls.__dict__.pop("stack", None)


_exit_path = [None, False]  # the path, registered


def _write() -> None:
    path = _exit_path[0]
    if not path:
        return
    rank = os.environ.get("RANK", "")
    path = path.replace("{pid}", str(os.getpid())).replace("{rank}", rank or "x")
    try:
        with open(path, "w") as f:
            json.dump(dict(pid=os.getpid(), rank=int(rank) if rank.lstrip("-").isdigit() else -1,
                           phases=snapshot()), f)
    except OSError:
        pass  # the process is exiting: nowhere left to say it


def write_at_exit(path: Optional[str]) -> None:
    """Write :func:`snapshot` to ``path`` when the process exits (None or
    empty: don't). Registered once per process."""
    _exit_path[0] = path or None
    if path and not _exit_path[1]:
        _exit_path[1] = True
        atexit.register(_write)
