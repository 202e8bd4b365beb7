"""One process of the resolve contract's conformance table
(test_conformance.py, docs/resolve-contract.md): resolves one key through
one of the three paths and writes what happened as JSON.

    python conformance_worker.py PATH N[,N...] OUT.json

PATH: ``triton`` (the hook on an autotuned Triton kernel, rowsum_kernels),
``inductor`` (the Inductor adapter's ``decide``) or ``native``
(``detd_autotune()`` of libdetd, called through ctypes with a CPU timer,
as a C caller would). N: the key (the row length); several keys are
resolved in turn, each with its own result. Settings come from the
DETD_* variables, as a user's process gets them; the native path maps
DETD_TIMEOUT_MS and DETD_MODE=pinned to its options (it has no on_miss:
its errors go to the caller).

Every path times with the same deterministic CPU timer: candidate i takes
1 + (i + RANK) % 4 ms, so processes timing on their own disagree. The
test drives phases through files, never sleeps: with $DETD_TEST_BENCH_GATE
the first timing creates GATE.waiting and blocks until GATE exists; with
$DETD_TEST_DIE_WHEN it does the same and then the process dies (exit 9)
in the middle of its pass; with $DETD_TEST_BENCH_FAIL every candidate
fails; with $DETD_TEST_BENCH_ENV the first timing meets an environment
error (ModuleNotFoundError for numpy; the native timer returns DETD_EENV).

OUT.json: per key N, config (None without one), timed_here, bench_calls
(timings made for that key), error (the exception's type, or the DETD_*
name of the native error), reason (its text), claims_lost, elapsed_s.
"""

import ctypes
import json
import os
import sys
import time

os.environ.setdefault("TRITON_INTERPRET", "1")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import gates  # noqa: E402

CANDS = ("BLOCK=16", "BLOCK=32", "BLOCK=64", "BLOCK=128")
CALLS = []


def _rank():
    r = os.environ.get("RANK")
    return int(r) if r not in (None, "") else os.getpid()


def _hold():
    """The first timing of a process: announce it, then wait for the gate
    (or die) as the test says."""
    if CALLS:
        return
    for var, die in (("DETD_TEST_DIE_WHEN", True), ("DETD_TEST_BENCH_GATE", False)):
        path = os.environ.get(var)
        if not path:
            continue
        gates.wait_for(path)
        if die:
            os._exit(9)


def cpu_ms(index):
    """The timer: candidate index's time in this process, or None when
    candidates fail."""
    _hold()
    if os.environ.get("DETD_TEST_BENCH_ENV"):
        raise ModuleNotFoundError("No module named 'numpy'", name="numpy")
    CALLS.append(index)
    if os.environ.get("DETD_TEST_BENCH_FAIL"):
        return None
    return 1.0 + ((index + _rank()) % len(CANDS))


def run_triton(n):
    import detd
    import rowsum_kernels as rk
    from detd import _triton

    detd.install()
    rk.row_sum(rk.make_input(rows=4, n=n, seed=n))
    rec = [e for t in detd.autotuners() for e in t["keys"] if e["key"].startswith(f"[i:{n},")]
    cfg = dict.get(rk.row_sum_kernel.cache, (n, "torch.float32", "torch.float32"))
    return dict(config=_triton.config_string(cfg) if cfg is not None else None,
                timed_here=bool(rec and rec[-1].get("timed_here")),
                claims_lost=_lost(rec[-1].get("note") if rec else None))


def _lost(note):
    """N of the adapters' note "claim lost Nx", else 0."""
    head, sep, _ = (note or "").partition("x (passed on")
    return int(head.rsplit(" ", 1)[-1]) if sep else 0


def run_inductor(n):
    import detd
    from detd import _inductor

    detd.install()

    def time_pass():
        rows = []
        for i, c in enumerate(CANDS):
            ms = cpu_ms(i)
            rows.append((c, [ms if ms is not None else float("inf")], ms is None))
        return rows

    out = _inductor.decide("inductor::conformance@1", "conformance", f"n={n}", CANDS, time_pass,
                           lambda cands: cands[-1])
    return dict(config=out.config, timed_here=bool(out.timed_here),
                claims_lost=_lost(out.note))


class _Options(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t), ("warmup", ctypes.c_uint), ("reps", ctypes.c_uint),
                ("timeout_ms", ctypes.c_int64), ("flags", ctypes.c_int), ("stream", ctypes.c_void_p),
                ("timer", ctypes.c_void_p), ("timer_user", ctypes.c_void_p), ("version", ctypes.c_char_p)]


class _Result(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t), ("index", ctypes.c_size_t), ("config", ctypes.c_char_p),
                ("source", ctypes.c_int), ("timed_here", ctypes.c_int), ("takeover", ctypes.c_int),
                ("superseded", ctypes.c_int), ("claims_lost", ctypes.c_uint), ("n_failed", ctypes.c_size_t),
                ("waited_ms", ctypes.c_uint32), ("observe_rc", ctypes.c_int)]


_LAUNCH = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p)
_TIMER = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_void_p,
                          ctypes.c_void_p, ctypes.c_uint, ctypes.c_uint, ctypes.POINTER(ctypes.c_double))


def run_native(n):
    from detd import _native

    before = len(CALLS)
    lib = _native.load()
    lib.detd_autotune.restype = ctypes.c_int
    lib.detd_autotune.argtypes = [ctypes.c_void_p, ctypes.c_void_p, _LAUNCH, ctypes.c_void_p,
                                  ctypes.POINTER(_Options), ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(_Result)]
    lib.detd_autotune_options_init.argtypes = [ctypes.POINTER(_Options)]

    @_TIMER
    def timer(user, index, config, launch, launch_user, warmup, reps, ret_ms):
        try:
            ms = cpu_ms(index)
        except ModuleNotFoundError:
            return _native.EENV  # this process cannot time at all
        if ms is None:
            return 1
        for r in range(reps):
            ret_ms[r] = ms
        return 0

    launch = _LAUNCH(lambda user, index, config: 0)
    opts = _Options()
    lib.detd_autotune_options_init(ctypes.byref(opts))
    opts.reps, opts.warmup = 1, 0
    opts.timer = ctypes.cast(timer, ctypes.c_void_p)
    if os.environ.get("DETD_TIMEOUT_MS"):
        opts.timeout_ms = int(os.environ["DETD_TIMEOUT_MS"])
    if os.environ.get("DETD_MODE") == "pinned":
        opts.flags |= 0x1  # DETD_AUTOTUNE_NO_CLAIM
    client = _native.Client(os.environ["DETD_SOCKET"], rank=_rank(), arch="cpu")
    ck = _native._CKey(_native.Key(None, "cpu", "native::conformance@1", f"n={n}", CANDS))
    index, res = ctypes.c_size_t(), _Result()
    res.size = ctypes.sizeof(_Result)
    rc = lib.detd_autotune(client._h, ctypes.byref(ck.s), launch, None, ctypes.byref(opts), ctypes.byref(index),
                           ctypes.byref(res))
    if rc != 0:
        return dict(config=None, timed_here=len(CALLS) > before, claims_lost=0,
                    error=_native._s(lib.detd_err_name(rc)), reason=_native._s(lib.detd_client_last_error()))
    return dict(config=CANDS[index.value], timed_here=bool(res.timed_here),
                claims_lost=res.claims_lost, takeover=bool(res.takeover))


def calls():
    """Timings made in this process, on any path."""
    rk = sys.modules.get("rowsum_kernels")
    return len(rk.CALLS) if rk is not None else len(CALLS)


def main():
    path, keys, out = sys.argv[1], [int(n) for n in sys.argv[2].split(",")], sys.argv[3]
    results = {}
    for n in keys:
        t0, before = time.monotonic(), calls()
        try:
            res = {"triton": run_triton, "inductor": run_inductor, "native": run_native}[path](n)
        except Exception as e:  # noqa: BLE001 - the outcome the test checks
            # The error's notes too (the next step detd adds).
            res = dict(config=None, timed_here=calls() > before, claims_lost=0, error=type(e).__name__,
                       reason=" ".join([str(e)] + list(getattr(e, "__notes__", []))))
        res["bench_calls"] = calls() - before
        res["elapsed_s"] = round(time.monotonic() - t0, 3)
        results[str(n)] = res
    with open(out, "w") as f:
        json.dump(results, f)


if __name__ == "__main__":
    main()
