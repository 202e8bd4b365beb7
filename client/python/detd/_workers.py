"""Compile workers: processes that compile a timing pass's candidates
ahead of its benchmarks (``DETD_COMPILE_PROCESSES``, docs/python.md), so
that the timing process's benchmark loop shares neither its interpreter
lock nor its threads with the compiles. The timing process asks for each
candidate (:func:`detd._triton.remote_spec`: what Triton's own compile of
it takes, captured without compiling), a worker compiles it into
Triton's on-disk cache (:func:`detd._triton.compile_spec`), and the timing
process then loads the binary instead of compiling it (the cache key is
the same: same source, options and target).

A worker is ``python -m detd._workers NICE``, started by :class:`Pool` with
this process's ``sys.path`` and environment, NICE levels below it. It
reads requests on its stdin and answers on the pipe that was its stdout,
which it moves aside first (its own stdout goes to its stderr, which is
discarded: what a kernel's module prints on import cannot corrupt a
reply). Each message is a 4-byte big-endian length and its body, at most
:data:`MAX_MESSAGE` bytes: a request is a pickle of the spec (from the
process that started the worker), a reply JSON (``{"hash", "s"}``, or
``{"error"}`` naming what failed). A worker exits at end of input or when
its parent dies (``PR_SET_PDEATHSIG``).

What can go wrong costs time, never a result: a failed, lost (exited,
killed, out of protocol) or hung (:data:`COMPILE_TIMEOUT_S`) compile fails
its future, and the timing process compiles that candidate itself. A lost
or hung worker is replaced for the next request; after
:data:`MAX_LOST` such losses the pool turns itself off for the rest of the
process (logged once, counted in :func:`counts`).
"""

from __future__ import annotations

import json
import logging
import os
import pickle
import queue
import select
import signal
import struct
import subprocess
import sys
import threading
import time
from concurrent.futures import Future
from typing import Optional

from . import _triton

log = logging.getLogger("detd")

MAX_MESSAGE = 1 << 24  # bytes of one request or reply
COMPILE_TIMEOUT_S = 600.0  # one compile in a worker, then it counts as hung
MAX_LOST = 8  # workers lost (or hung) before the pool turns itself off

_counts_lock = threading.Lock()
_counts = dict(compile_workers_started=0, compile_workers_lost=0, compile_workers_off=0, remote_compiles=0,
               remote_compile_errors=0)


def _count(name: str, n: int = 1) -> None:
    with _counts_lock:
        _counts[name] += n


def counts() -> dict:
    """This process's counters: ``compile_workers_started``,
    ``compile_workers_lost`` (exited, killed, out of protocol or hung),
    ``compile_workers_off`` (1 once the pool turned itself off),
    ``remote_compiles`` (candidates a worker compiled) and
    ``remote_compile_errors`` (a worker's compile raised: compiled here)."""
    with _counts_lock:
        return dict(_counts)


def _send(f, body: bytes) -> None:
    if len(body) > MAX_MESSAGE:
        raise ValueError(f"message of {len(body)} bytes over the cap of {MAX_MESSAGE}")
    f.write(struct.pack(">I", len(body)) + body)
    f.flush()


def _read_exact(fd: int, n: int, deadline: Optional[float]) -> Optional[bytes]:
    """n bytes from fd; None at end of input; TimeoutError past deadline."""
    buf = b""
    while len(buf) < n:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise TimeoutError("no reply in time")
        chunk = os.read(fd, n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf


def _recv(fd: int, deadline: Optional[float] = None) -> Optional[bytes]:
    """One message's body from fd (None at end of input before one);
    ValueError for a length over :data:`MAX_MESSAGE` or a message cut
    short."""
    head = _read_exact(fd, 4, deadline)
    if head is None:
        return None
    (n,) = struct.unpack(">I", head)
    if n > MAX_MESSAGE:
        raise ValueError(f"message length {n} over the cap of {MAX_MESSAGE}")
    body = _read_exact(fd, n, deadline)
    if body is None:
        raise ValueError(f"message cut short ({n} bytes announced)")
    return body


class _Worker:
    """One worker process and its pipes."""

    def __init__(self, nice: int):
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        self.proc = subprocess.Popen([sys.executable, "-m", "detd._workers", str(nice)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, close_fds=True)
        _count("compile_workers_started")

    def ask(self, body: bytes, timeout: float) -> dict:
        """Send a request, return its reply; raises what makes the worker
        unusable (ValueError, TimeoutError, OSError, EOFError)."""
        _send(self.proc.stdin, body)
        got = _recv(self.proc.stdout.fileno(), time.monotonic() + timeout)
        if got is None:
            try:
                code = self.proc.wait(timeout=5)  # its pipe closes just before it can be waited for
            except subprocess.TimeoutExpired:
                code = None
            raise EOFError(f"the worker exited ({code})")
        reply = json.loads(got)
        if not isinstance(reply, dict) or not ("error" in reply or "hash" in reply):
            raise ValueError("a reply out of protocol")
        return reply

    def stop(self) -> None:
        try:
            self.proc.kill()
            self.proc.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            pass
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                f.close()
            except OSError:
                pass


class Pool:
    """``size`` worker processes, started as the first requests come (each
    by the thread that serves it), ``nice`` levels below this process.
    :meth:`submit` returns a future of the worker's reply."""

    def __init__(self, size: int, nice: int = 0, timeout: float = COMPILE_TIMEOUT_S):
        self.size, self.nice, self.timeout = max(1, size), nice, timeout
        self.jobs: "queue.SimpleQueue" = queue.SimpleQueue()
        self.lock = threading.Lock()
        self.lost, self.off, self.threads = 0, False, []
        self.unfindable: set = set()  # (module, name) of kernels a worker could not import or find

    def submit(self, spec) -> Optional[Future]:
        """A future of ``{"hash", "s"}`` for compiling ``spec`` (a
        :func:`detd._triton.remote_spec`) in a worker, raising what failed;
        None when there is nothing to send (``spec`` None or not
        picklable) or the pool is off."""
        if spec is None or self.off or (spec.get("module"), spec.get("qualname")) in self.unfindable:
            return None
        try:
            body = pickle.dumps(spec)
        except Exception as e:  # noqa: BLE001 - compiled here instead
            log.debug("detd: cannot send %s to a compile worker: %s", spec.get("qualname"), e)
            return None
        fut: Future = Future()
        with self.lock:
            if len(self.threads) < self.size:
                t = threading.Thread(target=self._serve, name=f"detd-compile-io-{len(self.threads)}", daemon=True)
                self.threads.append(t)
                t.start()
        self.jobs.put((body, fut, (spec.get("module"), spec.get("qualname"))))
        return fut

    def close(self) -> None:
        """Stop the workers (each ends its current compile first) and wait
        for them (at most a minute each); the pool is off from now on. A
        process that exits without it leaves its workers at end of input,
        or to their PR_SET_PDEATHSIG."""
        self.off = True
        with self.lock:
            threads = list(self.threads)
            for _ in threads:
                self.jobs.put(None)
        for t in threads:
            t.join(timeout=60)

    def _serve(self) -> None:
        worker = None
        while True:
            job = self.jobs.get()
            if job is None:
                if worker is not None:
                    try:
                        worker.proc.stdin.close()  # end of input: it exits
                        worker.proc.wait(timeout=30)
                    except (OSError, subprocess.TimeoutExpired):
                        pass
                    worker.stop()
                return
            body, fut, kernel = job
            if not fut.set_running_or_notify_cancel():
                continue  # the pass no longer needs it
            if self.off:
                fut.set_exception(RuntimeError("detd: the compile workers are off"))
                continue
            try:
                if worker is None:
                    worker = _Worker(self.nice)
                reply = worker.ask(body, self.timeout)
            except Exception as e:  # noqa: BLE001 - lost: replaced for the next request
                if worker is not None:
                    worker.stop()
                worker = None
                self._lose(e)
                fut.set_exception(RuntimeError(f"detd: compile worker lost: {type(e).__name__}: {e}"))
                continue
            if "error" in reply:
                _count("remote_compile_errors")
                self._unfindable(kernel, str(reply["error"]))
                fut.set_exception(RuntimeError(f"detd: compile worker: {reply['error']}"))
            else:
                _count("remote_compiles")
                fut.set_result(reply)

    def _unfindable(self, kernel, error: str) -> None:
        """A kernel the workers cannot import or find (or find with other
        source): its compiles stay in this process from now on (logged
        once per kernel)."""
        if error.split(":", 1)[0] not in ("LookupError", "ImportError", "ModuleNotFoundError"):
            return
        with self.lock:
            if kernel in self.unfindable:
                return
            self.unfindable.add(kernel)
        log.warning("detd: compile workers cannot use kernel %s.%s (%s); it compiles in this process",
                    kernel[0], kernel[1], error)

    def _lose(self, e: Exception) -> None:
        _count("compile_workers_lost")
        with self.lock:
            self.lost += 1
            if self.lost < MAX_LOST or self.off:
                log.warning("detd: a compile worker was lost (%s: %s); replaced", type(e).__name__, e)
                return
            self.off = True
        _count("compile_workers_off")
        log.warning("detd: %d compile workers lost; compiling in this process from now on", self.lost)


def _die_with_parent() -> None:
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def main(argv) -> int:
    """A worker's loop (module docstring)."""
    replies = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # what the kernel's module prints goes where stderr goes
    requests = os.dup(0)
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    parent = os.getppid()
    _die_with_parent()
    if os.getppid() != parent:
        return 0
    nice = int(argv[0]) if argv else 0
    if nice:
        os.nice(nice)
    while True:
        try:
            body = _recv(requests)
        except ValueError:
            return 2
        if body is None:
            return 0
        t0 = time.perf_counter()
        try:
            reply = dict(hash=_triton.compile_spec(pickle.loads(body)), s=round(time.perf_counter() - t0, 6))
        except Exception as e:  # noqa: BLE001 - said to the parent, which compiles it itself
            reply = dict(error=f"{type(e).__name__}: {e}"[:4000])
        _send(replies, json.dumps(reply).encode())


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
