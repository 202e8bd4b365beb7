"""One timing pass at a time per device (detd._devlock): two processes
designated for two keys at once, with a real daemon and real Triton (CPU
interpreter), time one after the other when they share the device, and
side by side when the lock is off; a lock held by someone who never lets
go delays a pass only by DETD_TIMING_LOCK_WAIT_S. Under the interpreter
there is no GPU, so the tests ask for the lock on the CPU
(DETD_TIMING_LOCK=device); on a GPU the key is the device's UUID."""

import fcntl
import os
import time

import pytest

from detd import _devlock
from test_coldstart import finish, ok, start


def passes(log, pids):
    """{pid: (first start, last end)} of the measurements in the bench log."""
    spans = {}
    for line in log.read_text().split("\n"):
        if not line.strip():
            continue
        pid, t0, t1 = line.split()
        pid, t0, t1 = int(pid), float(t0), float(t1)
        a, b = spans.get(pid, (t0, t1))
        spans[pid] = (min(a, t0), max(b, t1))
    assert set(spans) == set(pids), (spans, pids)
    return spans


def two_passes(daemon, tmp_path, tag, mode):
    log = tmp_path / f"{tag}-bench.log"
    gate = tmp_path / f"{tag}-gate"
    env = dict(DETD_TIMING_LOCK=mode, DETD_TIMING_LOCK_DIR=str(tmp_path), CS_BENCH_SLEEP="0.15",
               CS_BENCH_LOG=str(log), CS_GATE=str(gate), DETD_WAIT_LOG_AFTER_S="0")
    a = start(daemon, tmp_path, f"{tag}-a", 0, CS_N="256", CS_IN_PASS=str(tmp_path / f"{tag}-a-in"), **env)
    b = start(daemon, tmp_path, f"{tag}-b", 1, CS_N="512", CS_IN_PASS=str(tmp_path / f"{tag}-b-in"), **env)
    # Both are designated (two keys). Without the lock, wait until both
    # passes are under way; with it, until one is and the other is waiting
    # in _devlock.acquire() (it holds the lock file open, as the one in its
    # pass does). Bound: a pass's gate holds it at most 60 s
    # (coldstart_worker.py).
    lock = os.path.realpath(tmp_path / "detd-timing-cpu.lock")

    def in_pass():
        return sorted(x for x in "ab" if os.path.exists(tmp_path / f"{tag}-{x}-in"))

    def opened(pid):
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            return False
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") == lock:
                    return True
            except OSError:
                pass
        return False

    deadline = time.monotonic() + 60
    while not (len(in_pass()) == 2 if mode == "off" else
               in_pass() and all(opened(p.pid) for p, _ in (a, b))):
        assert time.monotonic() < deadline, f"passes not under way: {in_pass()}"
        assert a[0].poll() is None and b[0].poll() is None, "a worker exited before its pass"
        time.sleep(0.01)
    started = in_pass()
    gate.touch()
    ra, rb = ok(daemon, a), ok(daemon, b)
    for r in (ra, rb):
        (k,) = r["keys"]
        assert k["timed_here"], k  # each timed its own key
    return started, passes(log, [ra["pid"], rb["pid"]]), ra, rb


def test_two_passes_on_one_device_do_not_overlap(daemon, tmp_path):
    started, spans, ra, rb = two_passes(daemon, tmp_path, "locked", "device")
    assert len(started) == 1, f"both passes started while sharing the device: {started}"
    (a0, a1), (b0, b1) = spans[ra["pid"]], spans[rb["pid"]]
    assert a1 <= b0 or b1 <= a0, f"passes overlapped: {spans}"
    first, second = (ra, rb) if a0 < b0 else (rb, ra)
    assert first["keys"][0]["timing_lock"][1] is True
    waited, locked = second["keys"][0]["timing_lock"]
    assert locked is True and waited >= 0.4, second["keys"][0]


def test_without_the_lock_passes_run_side_by_side(daemon, tmp_path):
    started, spans, ra, rb = two_passes(daemon, tmp_path, "free", "off")
    assert started == ["a", "b"]
    (a0, a1), (b0, b1) = spans[ra["pid"]], spans[rb["pid"]]
    assert a0 < b1 and b0 < a1, f"expected overlapping passes: {spans}"
    assert "timing_lock" not in ra["keys"][0] or ra["keys"][0]["timing_lock"][1] is False


def test_a_lock_never_released_delays_a_pass_only_by_the_wait_bound(daemon, tmp_path):
    path = tmp_path / "detd-timing-cpu.lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    fcntl.flock(fd, fcntl.LOCK_EX)  # a holder that hangs
    try:
        p = start(daemon, tmp_path, "held", 0, DETD_TIMING_LOCK="device", DETD_TIMING_LOCK_DIR=str(tmp_path),
                  DETD_TIMING_LOCK_WAIT_S="0.6")
        rc, r, text = finish(daemon, p)
    finally:
        os.close(fd)
    assert rc == 0 and r["ok"] and r["error"] is None, text[-3000:]
    (k,) = r["keys"]
    waited, locked = k["timing_lock"]
    assert locked is False and 0.6 <= waited < 5, k
    assert any("timing without the lock" in line and "DETD_TIMING_LOCK_WAIT_S=0.6" in line
               for line in r["lines"]), r["lines"]


def test_auto_takes_no_lock_without_a_gpu_and_settings_are_checked():
    assert _devlock.device_key("auto") is None  # no CUDA device here
    assert _devlock.device_key("device") == "cpu"
    assert _devlock.device_key("off") is None
    for env, name in (({"DETD_TIMING_LOCK": "always"}, "DETD_TIMING_LOCK"),
                      ({"DETD_TIMING_LOCK_WAIT_S": "-1"}, "DETD_TIMING_LOCK_WAIT_S"),
                      ({"DETD_TIMING_LOCK_WAIT_S": "soon"}, "DETD_TIMING_LOCK_WAIT_S"),
                      ({"DETD_TIMING_LOCK_DIR": "/nonexistent/x"}, "DETD_TIMING_LOCK_DIR")):
        with pytest.raises(ValueError, match=name):
            _devlock.parse(env)
    s = _devlock.parse({})
    assert (s.mode, s.wait_s, s.dir) == ("auto", 10.0, None)
