"""Triton's launcher built beside a timing pass's compiles
(detd._triton.prepare_launcher): Triton 3.3 to 3.6 compile a C launcher
with the system's C compiler the first time a kernel of a new signature
launches, which in a cold run is the timing pass's first benchmark of each
kernel. detd builds it at the pass's start, in a thread beside the
compiles, and the first benchmark waits for it. Here: the real build
(launcher_worker.py, the C compiler, a stand-in libcuda.so.1 and CUDA
driver), the wait, and a failure that costs nothing but the count."""

import json
import os
import subprocess
import sys
import threading

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))

# What Triton 3.6's launcher of the test's kernel links from libcuda
# (nm -D -u): the stand-in defines each, failing, so that it loads.
CUDA_SYMBOLS = ("cuCtxGetCurrent", "cuCtxSetCurrent", "cuDeviceGet", "cuDevicePrimaryCtxRetain",
                "cuFuncSetAttribute", "cuGetErrorString", "cuPointerGetAttribute")


def _version():
    import triton

    return tuple(int(x) for x in triton.__version__.split(".")[:2])


def _env(libcuda, cache):
    e = {k: v for k, v in os.environ.items() if not k.startswith("DETD_") and k != "TRITON_INTERPRET"}
    pp = [HERE] + ([] if os.environ.get("DETD_TEST_INSTALLED") == "1" else [os.path.join(REPO, "client", "python")])
    e["PYTHONPATH"] = os.pathsep.join(pp + ([e["PYTHONPATH"]] if e.get("PYTHONPATH") else []))
    ld = [libcuda] + ([e["LD_LIBRARY_PATH"]] if e.get("LD_LIBRARY_PATH") else [])
    return dict(e, TRITON_LIBCUDA_PATH=libcuda, LD_LIBRARY_PATH=os.pathsep.join(ld), TRITON_CACHE_DIR=cache)


def test_the_launcher_is_built_once_beside_the_compiles(tmp_path):
    """A pass's compiles with the launcher prepared: one C build, made
    while preparing; then every candidate's binary makes its launcher from
    Triton's cache (the same source: no second build), and the counter
    says one was prepared. Triton 3.9 has one launcher for all kernels and
    3.3 no compile hook to capture the signature from: nothing is built
    ahead there (the first launch builds it, as before)."""
    lib = tmp_path / "libcuda"
    lib.mkdir()
    (lib / "stub.c").write_text("".join(f"int {s}(void) {{ return 1; }}\n" for s in CUDA_SYMBOLS))
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(lib / "libcuda.so.1"), str(lib / "stub.c")], check=True)
    os.symlink("libcuda.so.1", lib / "libcuda.so")
    p = subprocess.run([sys.executable, os.path.join(HERE, "launcher_worker.py")],
                       env=_env(str(lib), str(tmp_path / "cache")), capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    r = json.loads(p.stdout.strip().splitlines()[-1])
    if _version() >= (3, 9) or _version() < (3, 6):
        assert r["per_signature"] == (_version() < (3, 9)), r
        assert r["prepared"] == [] and r["counts"]["launchers_prepared"] == 0, r
        assert r["counts"]["launcher_errors"] == 0, r
        return
    assert r["prepared"] == ["__triton_launcher"], r
    assert r["builds"] == ["__triton_launcher"], r  # each binary's first launch found it built
    assert r["counts"]["launchers_prepared"] == 1 and r["counts"]["launcher_errors"] == 0, r


def _main_frame_in(func, main_id, bound_s):
    """Wait (at most bound_s) until the main thread's stack is inside
    ``func``; True if it got there."""
    import time

    end = time.monotonic() + bound_s
    while time.monotonic() < end:
        f = sys._current_frames().get(main_id)
        while f is not None:
            if f.f_code.co_name == func:
                return True
            f = f.f_back
        time.sleep(0.001)
    return False


def test_the_first_benchmark_waits_for_the_launcher():
    """``prepare`` runs in a thread of its own from the start; the first
    candidate handed to the benchmark (``compiler(i)``) waits for it, and
    only the first. Here the launcher's build holds until the main thread
    is seen waiting for it inside the first ``compiler(i)``."""
    from detd import _measure

    release, seen = threading.Event(), []
    main_id = threading.get_ident()

    def prepare():
        release.wait(120)
        return True

    def watcher():
        seen.append(_main_frame_in("_wait_prepared", main_id, 120))
        release.set()

    before = _measure.counts()
    comp = _measure.Compiler(["a", "b", "c"], lambda c: True, 2, True, None, None, prepare)
    w = threading.Thread(target=watcher)
    w.start()
    order = list(comp.order())
    comp(order[0])
    w.join(130)
    assert seen == [True] and comp.prepared is None
    for i in order[1:]:
        comp(i)
    comp.close()
    after = _measure.counts()
    assert after["launchers_prepared"] - before["launchers_prepared"] == 1
    assert after["launcher_errors"] == before["launcher_errors"]


def test_a_failed_launcher_costs_only_its_count(caplog):
    """What preparing raises is counted and logged (at debug), not the
    pass's: every candidate is still compiled and handed to the benchmark,
    whose first launch builds the launcher as before. Without compiles
    ahead (one thread of work, or one candidate) nothing is prepared."""
    from detd import _measure

    def prepare():
        raise OSError("cc: not found")

    before = _measure.counts()
    done = []
    comp = _measure.Compiler(["a", "b"], lambda c: done.append(c) or True, 2, False, None, None, prepare)
    with caplog.at_level("DEBUG", logger="detd"):
        for i in comp.order():
            comp(i)
    comp.close()
    assert sorted(done) == ["a", "b"]
    after = _measure.counts()
    assert after["launcher_errors"] - before["launcher_errors"] == 1
    assert after["launchers_prepared"] == before["launchers_prepared"]
    assert "preparing the launcher of a failed: OSError: cc: not found" in caplog.text
    calls = []
    for objs, workers in ((["a", "b"], 0), (["a"], 2)):
        comp = _measure.Compiler(objs, lambda c: True, workers, False, None, None, lambda: calls.append(1))
        for i in comp.order():
            comp(i)
        comp.close()
    assert calls == [] and _measure.counts()["launcher_errors"] == after["launcher_errors"]


def test_a_launcher_not_ready_in_time_is_left_to_the_first_launch(monkeypatch, caplog):
    """The first benchmark waits for the launcher at most PREPARE_WAIT_S
    (a C build that hangs must not hang the pass): then it is counted,
    said as a warning, and the benchmark goes on (its launch builds the
    launcher itself)."""
    from detd import _measure

    monkeypatch.setattr(_measure, "PREPARE_WAIT_S", 0.2)
    release = threading.Event()
    before = _measure.counts()
    comp = _measure.Compiler(["a", "b"], lambda c: True, 2, False, None, None, lambda: release.wait(120))
    try:
        with caplog.at_level("WARNING", logger="detd"):
            for i in comp.order():
                comp(i)
    finally:
        release.set()
        comp.close()
    assert _measure.counts()["launcher_errors"] - before["launcher_errors"] == 1
    assert "the launcher of a was not ready after 0.2 s; the first launch builds it" in caplog.text


def test_a_fork_during_a_capture_leaves_the_child_able_to_capture():
    """A process forked while a thread of its parent captured a compile
    (Triton's compile hook replaced, the capture's lock held): in the
    child the lock is free and the hook is the one before the capture
    (detd._process's fork hook calls detd._triton.after_fork). Triton 3.3
    has no compile hook (and detd captures nothing there): the lock alone."""
    import triton

    from detd import _process, _triton  # noqa: F401 - _process registers the fork hook

    knobs = getattr(triton, "knobs", None)

    def mine(**kw):
        return None

    def capture_hook(**kw):
        return True

    capture_hook.detd_prev = mine
    old = knobs.runtime.jit_cache_hook if knobs is not None else None
    r, w = os.pipe()
    with _triton._capture_lock:
        if knobs is not None:
            knobs.runtime.jit_cache_hook = capture_hook
        try:
            pid = os.fork()
            if pid == 0:
                ok = _triton._capture_lock.acquire(timeout=30)
                ok = ok and (knobs is None or knobs.runtime.jit_cache_hook is mine)
                os.write(w, b"1" if ok else b"0")
                os._exit(0)
        finally:
            if knobs is not None:
                knobs.runtime.jit_cache_hook = old
    os.close(w)
    got = os.read(r, 1)
    os.close(r)
    os.waitpid(pid, 0)
    assert got == b"1"
