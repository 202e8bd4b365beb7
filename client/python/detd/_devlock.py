"""One timing pass at a time per device.

Processes that share a GPU (several ranks on one device, or a pass of one
key while another process times another key) measure each other: the
candidates of a pass that runs next to another pass are timed under
contention, and the winner is then the config that happened to run while
the GPU was quiet, not the fastest one. A designated rank therefore holds
an exclusive lock on its device while it benchmarks (``flock`` on a file
named after the device in ``/dev/shm``, or the temporary directory), so
two passes on one device never overlap; passes on different devices do
not wait for each other.

``DETD_TIMING_LOCK``: ``auto`` (default: on a CUDA or ROCm device, keyed
by its UUID), ``device`` (also without a GPU: the key is ``cpu``), ``off``.
``DETD_TIMING_LOCK_WAIT_S`` (default 10): the longest a pass waits for the
lock; after it the pass runs without it (a holder that hangs must not
stall every other pass), logged once per process; the key's entry in
``detd.autotuners()`` says so (``timing_lock``: seconds waited, held).
``DETD_TIMING_LOCK_DIR``: where the lock files are (default ``/dev/shm``,
else the temporary directory); processes that share a device must see the
same directory (containers on one GPU: mount one).

The lock is released by the kernel when the holder exits or is killed; a
holder that is stopped keeps it, which the wait bound covers.
"""

import errno
import fcntl
import os
import re
import tempfile
import time
from typing import Optional

from . import _policy

WAIT_S = 10.0
MODES = ("auto", "device", "off")


class Settings:
    __slots__ = ("mode", "wait_s", "dir")

    def __init__(self, mode: str = "auto", wait_s: float = WAIT_S, dir: Optional[str] = None):
        self.mode, self.wait_s, self.dir = mode, wait_s, dir


def parse(environ=None) -> Settings:
    """Settings from ``DETD_TIMING_LOCK`` and ``DETD_TIMING_LOCK_WAIT_S``;
    ValueError naming the bad variable."""
    env = os.environ if environ is None else environ
    mode = str(env.get("DETD_TIMING_LOCK", "")).strip().lower() or "auto"
    if mode not in MODES:
        raise ValueError(f"detd: invalid DETD_TIMING_LOCK={mode!r}: expected one of {', '.join(MODES)}")
    wait = _policy.env_seconds(env, "DETD_TIMING_LOCK_WAIT_S", WAIT_S)
    d = str(env.get("DETD_TIMING_LOCK_DIR", "")).strip() or None
    if d is not None and not os.path.isdir(d):
        raise ValueError(f"detd: invalid DETD_TIMING_LOCK_DIR={d!r}: not a directory")
    return Settings(mode, wait, d)


def device_key(mode: str) -> Optional[str]:
    """The name of the device this process times on, or None when no lock
    applies (mode off, or auto without a GPU)."""
    if mode == "off":
        return None
    try:
        import torch

        if torch.cuda.is_available():
            dev = torch.cuda.current_device()
            uuid = getattr(torch.cuda.get_device_properties(dev), "uuid", None)
            if uuid is not None:
                return f"gpu-{uuid}"
            # no UUID (old torch): the physical index the process sees
            visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
            ids = [v.strip() for v in visible.split(",") if v.strip()]
            return f"gpu-{ids[dev] if dev < len(ids) else dev}"
    except Exception:
        pass
    return "cpu" if mode == "device" else None


def _lock_dir(settings: Settings) -> str:
    if settings.dir:
        return settings.dir
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else tempfile.gettempdir()


class Held:
    """What acquire() got: ``waited_s``, ``locked`` (False: waited out or
    no lock applies) and ``key``. A context manager that releases it."""

    __slots__ = ("fd", "key", "waited_s", "locked", "timed_out")

    def __init__(self, fd, key, waited_s, locked, timed_out):
        self.fd, self.key, self.waited_s, self.locked, self.timed_out = fd, key, waited_s, locked, timed_out

    def release(self):
        if self.fd is not None:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_UN)
            finally:
                os.close(self.fd)
                self.fd = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()
        return False


def acquire(settings: Settings, key: Optional[str]) -> Held:
    """Take the device's timing lock, waiting at most ``settings.wait_s``.
    Never raises for the lock itself: a lock file that cannot be opened
    means no lock (``locked`` False)."""
    if key is None or settings.mode == "off":
        return Held(None, key, 0.0, False, False)
    name = "detd-timing-" + re.sub(r"[^A-Za-z0-9_.-]", "_", key) + ".lock"
    path = os.path.join(_lock_dir(settings), name)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
    except OSError:
        return Held(None, key, 0.0, False, False)
    t0 = time.monotonic()
    end = t0 + settings.wait_s
    delay = 0.002
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return Held(fd, key, time.monotonic() - t0, True, False)
        except OSError as e:
            if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EINTR):
                os.close(fd)
                return Held(None, key, time.monotonic() - t0, False, False)
        now = time.monotonic()
        if now >= end:
            os.close(fd)
            return Held(None, key, now - t0, False, True)
        time.sleep(min(delay, end - now))
        delay = min(delay * 2, 0.05)
