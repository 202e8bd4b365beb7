"""Compile worker processes (detd._workers, DETD_COMPILE_PROCESSES): real
worker processes started by the pool, compiling with Triton for sm90
(compiling needs no GPU), and every way a worker can fail: an error it
names, a worker that exits, one that hangs, one whose module prints on
import, messages over the cap. A failure costs time, never a result: the
future fails and the timing process compiles the candidate itself
(remote_compile_worker.py drives that side, with a stand-in for the CUDA
driver; the GPU run is tests/gpu/run_coldstart.py, which fails when no
binary a worker made is loaded)."""

import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def _env():
    e = {k: v for k, v in os.environ.items() if not k.startswith("DETD_") and k != "TRITON_INTERPRET"}
    pp = [HERE] + ([] if os.environ.get("DETD_TEST_INSTALLED") == "1" else [os.path.join(REPO, "client", "python")])
    e["PYTHONPATH"] = os.pathsep.join(pp + ([e["PYTHONPATH"]] if e.get("PYTHONPATH") else []))
    return e


def _version():
    import triton

    return tuple(int(x) for x in triton.__version__.split(".")[:2])


@pytest.fixture
def compiling(monkeypatch, tmp_path):
    """Workers that compile (no TRITON_INTERPRET in what they inherit), on
    a fresh cache, this directory on their path; the counters from zero.
    Triton 3.3 compiles nothing without a driver and detd uses no workers
    there (the first test checks that they are off)."""
    from detd import _measure, _workers

    if _version() < (3, 6):
        pytest.skip("compile workers are off on Triton 3.3 (remote_compiles)")

    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.syspath_prepend(HERE)
    monkeypatch.setattr(_workers, "_counts", dict.fromkeys(_workers._counts, 0))
    monkeypatch.setattr(_measure, "_counts", dict.fromkeys(_measure._counts, 0))
    pools = []
    yield tmp_path, pools
    for p in pools:
        p.close()


def _spec(source=None, module="timing_kernels"):
    """governed_scale's compile at BLOCK=64 for sm90; ``source``: the
    source hash the asking process says it has (a worker compares)."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler.compiler import make_backend

    opts = make_backend(GPUTarget("cuda", 90, 32)).parse_options({"num_warps": 4, "num_stages": 3})
    return dict(module=module, qualname="governed_scale", source=source or "?",
                signature={"x_ptr": "*fp32", "out_ptr": "*fp32", "N": "i32", "BLOCK": "constexpr"},
                constants={(3,): 64}, attrs={}, options=dict(opts.__dict__), target=("cuda", 90, 32))


def _children():
    """pid -> nice of this process's compile workers."""
    out = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == os.getpid() and b"detd._workers" in cmd:
            out[int(pid)] = int(fields[16])
    return out


@pytest.mark.triton_release
def test_the_timing_process_loads_what_a_worker_compiled():
    """A timing pass's first round with compile workers, as the hook runs
    it, in a process where Triton compiles (the stand-in driver says sm90):
    each candidate's compile is captured without compiling, made in a
    worker, and loaded here from Triton's cache as the worker left it (the
    same cache key: no new entry, the same hash); nothing is measured
    again for them (no compile thread ran beside the loop). A kernel
    defined in ``__main__`` cannot be found by a worker: it compiles in
    this process's threads. Triton 3.3 has no compile hook to capture:
    there, detd compiles in threads (remote_compiles off)."""
    from detd import _triton

    if _version() < (3, 6):
        assert not _triton.remote_compiles.__wrapped__()
        return
    got = {}
    for how in ("module", "main"):
        cache = tempfile.mkdtemp(prefix="detd-rc-")
        try:
            p = subprocess.run([sys.executable, os.path.join(HERE, "remote_compile_worker.py")]
                               + (["--main"] if how == "main" else []), env=dict(_env(), TRITON_CACHE_DIR=cache),
                               capture_output=True, text=True, timeout=300)
        finally:
            shutil.rmtree(cache, ignore_errors=True)
        assert p.returncode == 0, p.stdout + p.stderr
        got[how] = json.loads(p.stdout.strip().splitlines()[-1])
    r = got["module"]
    assert r["sent"] == [True, True, True], r
    assert r["counts"]["remote_compiles"] == 3 and r["counts"]["remote_loaded"] == 3, r
    assert r["counts"]["remote_compiled_here"] == 0 and r["counts"]["compile_workers_lost"] == 0, r
    assert len(r["before"]) == 3 and r["after"] == r["before"], r  # loaded, not compiled again
    assert len(set(r["hashes"])) == 3 and r["contended"] == 0, r
    m = got["main"]
    assert m["sent"] == [False, False, False] and m["counts"]["compile_workers_started"] == 0, m
    assert len(m["after"]) == 3 and len(set(m["hashes"])) == 3, m


def test_a_worker_names_what_it_cannot_compile_and_keeps_serving(compiling):
    """A kernel with other source in the worker than in the asking process,
    and a module the worker cannot import: each future fails with the
    worker's error naming the kernel or the module; the same worker then
    compiles a good spec (one worker started, none lost), NICE levels
    below this process."""
    import triton  # noqa: F401 - the backend for the spec

    from detd import _workers

    _, pools = compiling
    pool = _workers.Pool(1, nice=3)
    pools.append(pool)
    base = os.getpriority(os.PRIO_PROCESS, 0)
    e = pool.submit(_spec(source="not-this-source")).exception(timeout=300)
    assert "timing_kernels.governed_scale has other source here" in str(e), e
    e = pool.submit(_spec(module="no_such_kernels")).exception(timeout=300)
    assert "ModuleNotFoundError" in str(e) and "no_such_kernels" in str(e), e
    assert pool.submit(_spec(module="no_such_kernels")) is None  # not asked again: compiled in threads
    assert pool.submit(_spec(source="not-this-source")) is None
    kids = _children()
    assert len(kids) == 1 and list(kids.values()) == [min(19, base + 3)], (kids, base)
    c = _workers.counts()
    assert c["compile_workers_started"] == 1 and c["compile_workers_lost"] == 0, c
    assert c["remote_compile_errors"] == 2 and c["remote_compiles"] == 0, c


def test_noisy_module_exiting_and_hanging_workers(compiling, monkeypatch):
    """What a kernel's module prints on import does not reach the replies;
    a worker that exits (its module calls os._exit) or hangs (past the
    pool's timeout) fails that future, is replaced for the next request,
    and is counted lost; after MAX_LOST losses a pool turns itself off:
    submit returns None (the timing process compiles in threads)."""
    from detd import _workers

    tmp, pools = compiling
    (tmp / "noisy_kernels.py").write_text("print('x' * 100000)\nfrom timing_kernels import governed_scale\n")
    (tmp / "exiting_kernels.py").write_text("import os\nos._exit(3)\n")
    (tmp / "hanging_kernels.py").write_text("import time\ntime.sleep(3600)\n")
    monkeypatch.setattr(_workers, "MAX_LOST", 2)
    pool = _workers.Pool(1)
    pools.append(pool)
    e = pool.submit(_spec(module="noisy_kernels", source="x")).exception(timeout=pool.timeout + 60)
    assert "noisy_kernels.governed_scale has other source here" in str(e), e  # a reply, not the print
    e = pool.submit(_spec(module="exiting_kernels")).exception(timeout=pool.timeout + 60)
    assert "compile worker lost: EOFError: the worker exited (3)" in str(e), e
    c = _workers.counts()
    assert c["compile_workers_started"] == 1 and c["compile_workers_lost"] == 1 and c["compile_workers_off"] == 0, c
    hung = _workers.Pool(1, timeout=2.0)  # every request it serves hangs: a short timeout
    pools.append(hung)
    for n in (1, 2):
        e = hung.submit(_spec(module="hanging_kernels")).exception(timeout=hung.timeout + 60)
        assert "compile worker lost: TimeoutError" in str(e), (n, e)
    c = _workers.counts()
    assert c["compile_workers_started"] == 3 and c["compile_workers_lost"] == 3 and c["compile_workers_off"] == 1, c
    assert hung.submit(_spec()) is None and hung.submit(None) is None
    assert pool.submit(_spec(source="y")) is not None  # the other pool still serves


def test_messages_are_capped():
    """A length over MAX_MESSAGE, and a message cut short, raise naming
    what is wrong; so does sending one over the cap."""
    from detd import _workers

    for head, body, want in ((struct.pack(">I", _workers.MAX_MESSAGE + 1), b"", "over the cap"),
                             (struct.pack(">I", 10), b"abc", "cut short (10 bytes announced)")):
        r, w = os.pipe()
        os.write(w, head + body)
        os.close(w)
        with pytest.raises(ValueError, match=want.replace("(", r"\(").replace(")", r"\)")):
            _workers._recv(r)
        os.close(r)
    with open(os.devnull, "wb") as f, pytest.raises(ValueError, match="over the cap"):
        _workers._send(f, b"x" * (_workers.MAX_MESSAGE + 1))


def test_compiler_with_worker_futures():
    """Compiler with submit: a worker's binary is loaded (compile_one
    returns the worker's hash: remote_loaded); a candidate whose worker
    failed compiles in a thread (remote_compiled_here), as one not sent
    does; benchmarks after every thread's compile ended are not contended,
    with overlap and without."""
    from concurrent.futures import Future

    from detd import _measure

    before = _measure.counts()
    futs = {"a": Future(), "c": Future()}
    futs["a"].set_result({"hash": "H-a", "s": 0.5})
    futs["c"].set_exception(RuntimeError("lost"))
    called = []

    def compile_one(c):
        called.append(c)
        return "H-" + c

    for overlap in (True, False):
        called.clear()
        comp = _measure.Compiler(["a", "b", "c"], compile_one, 2, overlap, None, futs.get)
        assert sorted(comp.remote) == [0, 2]
        for f in comp.futures:
            f.exception()  # every compile ended: no benchmark below is contended
        for i in comp.order():
            comp(i)
        comp.close()
        assert sorted(called) == ["a", "b", "c"] and comp.contended() == [], called  # a: loaded
        assert sorted(comp.remote) == [0]  # c's failed worker: compiled in a thread
    after = _measure.counts()
    assert after["remote_loaded"] - before["remote_loaded"] == 2
    assert after["remote_compiled_here"] - before["remote_compiled_here"] == 2


def test_compile_processes_setting(monkeypatch):
    """DETD_COMPILE_PROCESSES: on, off (the default) or auto; a bad value
    names the variable. The pool: none under the CPU interpreter, with it
    off, or with no compiles ahead; one per process otherwise, of
    compile_ahead() workers."""
    from detd import _process, _triton

    assert _process.processes_option({}) is False
    assert _process.processes_option({"DETD_COMPILE_PROCESSES": "auto"}) is None
    assert _process.processes_option({"DETD_COMPILE_PROCESSES": "on"}) is True
    assert _process.processes_option({"DETD_COMPILE_PROCESSES": "0"}) is False
    with pytest.raises(ValueError, match="DETD_COMPILE_PROCESSES='threads'"):
        _process.processes_option({"DETD_COMPILE_PROCESSES": "threads"})
    monkeypatch.setattr(_process._state, "workers", None)
    monkeypatch.setattr(_process._state, "compile_ahead", 3)
    assert _process._state.compile_processes is False  # the default: threads
    monkeypatch.setattr(_process._state, "compile_processes", None)
    assert _triton.interpreting() and _process.compile_pool() is None
    monkeypatch.setattr(_triton, "interpreting", lambda: False)
    monkeypatch.setattr(_triton, "remote_compiles", lambda: True)
    pool = _process.compile_pool()
    assert pool is not None and pool.size == 3 and _process.compile_pool() is pool
    monkeypatch.setattr(_process._state, "compile_processes", False)
    assert _process.compile_pool() is None
    monkeypatch.setattr(_process._state, "compile_processes", True)
    monkeypatch.setattr(_process._state, "compile_ahead", 0)
    assert _process.compile_pool() is None
