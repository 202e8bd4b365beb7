"""One process of the GPU agreement run.

    python worker.py --mode {default,detd} --out FILE [--no-fla] [--keys suite|mamba]
    python worker.py --mode ... --time-workload --out FILE   (kernel time)
    python worker.py --mode ... --launch-overhead --out FILE

Writes a JSON file: the config each autotuner chose per key, the output
digests, how many timing passes and benchmark calls this process ran, and
how long the first (autotuning) pass over the workload took.
"""

import argparse
import json
import os
import sys
import time
import weakref

import torch
from triton.runtime import autotuner as _at

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

COUNTS = {"passes": 0, "bench_calls": 0, "bench_s": 0.0, "compile_s": 0.0}
# --floor: each benchmark is preceded by its compile (warmup), and both are
# timed, so bench_s is the benchmarker's own cost per candidate; each
# compile's seconds are kept per pass (PASS_COMPILES: [kernel, [s, ...]]),
# which on a fresh cache are the compiles alone, one at a time.
FLOOR = "--floor" in sys.argv
PASS_COMPILES = []
T0 = [time.perf_counter()]
TUNERS = weakref.WeakSet()

# Triton's own methods. A timing pass is a prune_configs followed by a
# benchmark that really runs: the counting wrapper of prune_configs wraps
# whatever is installed (detd's patch resolves a direct tuner's new key
# there), and the count happens in Triton's own _bench (under detd, the one
# its patch calls), so a measurement detd skips is not counted.
_orig_prune = _at.Autotuner.prune_configs
_orig_bench = _at.Autotuner._bench
_orig_run = _at.Autotuner.run
_pending = weakref.WeakKeyDictionary()


def _bench(self, *a, **k):
    if _pending.pop(self, False):
        COUNTS["passes"] += 1
        if FLOOR:
            PASS_COMPILES.append([getattr(self.fn, "__name__", str(self.fn)), []])
    COUNTS["bench_calls"] += 1
    t0 = time.perf_counter()
    if FLOOR:
        meta = {n: v for n, v in k.items() if n not in ("config", "grid", "warmup")}
        try:
            self.fn.warmup(*a, grid=(1,), **meta, **k["config"].all_kwargs())
        except Exception:  # noqa: BLE001 - the benchmark meets it again
            pass
        t1 = time.perf_counter()
        COUNTS["compile_s"] += t1 - t0
        if PASS_COMPILES:
            PASS_COMPILES[-1][1].append(round(t1 - t0, 4))
        t0 = t1
    try:
        return _orig_bench(self, *a, **k)
    finally:
        COUNTS["bench_s"] += time.perf_counter() - t0


def install_counters(detd_mode):
    """Wrap prune_configs (after detd.install()) and count real benchmarks."""
    prune = _at.Autotuner.prune_configs

    def counted_prune(self, *a, **k):
        _pending[self] = True
        return prune(self, *a, **k)

    _at.Autotuner.prune_configs = counted_prune
    if detd_mode:
        from detd import _hook, _triton

        _triton._original_bench = _bench  # detd's patched _bench calls this
        timing_pass = _hook._timing_pass

        def counted_pass(ctx, *a):  # a designated pass times the pruned candidates
            _pending[ctx.tuner] = True
            return timing_pass(ctx, *a)

        _hook._timing_pass = counted_pass
    else:
        _at.Autotuner._bench = _bench


CALLS = {}  # entry -> (tuner, args, kwargs) of the call that resolved it


def _run(self, *a, **k):
    TUNERS.add(self)
    before = set(dict(self.cache)) if isinstance(self.cache, dict) else set()
    ret = _orig_run(self, *a, **k)
    for key in set(dict(self.cache)) - before:
        CALLS[entry_name(self, key)] = (self, a, dict(k))
        if os.environ.get("COLDSTART_PROGRESS"):  # a default run cut short still says how far it got
            with open(os.environ["COLDSTART_PROGRESS"], "a") as f:
                f.write(f"{time.perf_counter() - T0[0]:.3f} {len(CALLS)}\n")
    return ret


def entry_name(tuner, key):
    fn = tuner.base_fn
    return f"{fn.__module__}:{fn.__qualname__}|{key!r}"


def canonical(cfg):
    parts = [f"{k}={v}" for k, v in sorted(cfg.kwargs.items())]
    for f in ("num_warps", "num_stages", "num_ctas", "maxnreg"):
        v = getattr(cfg, f, None)
        if v is not None:
            parts.append(f"{f}={v}")
    return ",".join(parts)


def chosen():
    out = {}
    for t in list(TUNERS):
        for key, cfg in dict(t.cache).items():
            out[entry_name(t, key)] = canonical(cfg)
    return out


def compare(other):
    """Kernel time of this process's fresh autotune picks against the
    configs in other (entry -> canonical string), entry by entry, with the
    tuner's own benchmarker on the call's own arguments, alternating A/B in
    one process so both see the same GPU state."""
    import statistics

    mine = chosen()
    rows = []
    for entry, (tuner, args, kwargs) in sorted(CALLS.items()):
        a, b = mine.get(entry), other.get(entry)
        if a is None or b is None:
            continue
        live = {canonical(c): c for c in tuner.configs}
        ta, tb = [], []
        pairs = [(live[a], ta)] if a == b else [(live[a], ta), (live[b], tb)]
        for _ in range(5):
            for cfg, acc in pairs:
                tuner.nargs = dict(zip(tuner.arg_names, args))
                t = _orig_bench(tuner, *args, config=cfg, **kwargs)
                acc.append(t[0] if isinstance(t, (list, tuple)) else t)
        fa = statistics.median(ta)
        rows.append({"entry": entry, "fresh": a, "detd": b, "same": a == b, "fresh_ms": fa,
                     "detd_ms": fa if a == b else statistics.median(tb)})
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=["default", "detd"], required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--no-fla", action="store_true")
    ap.add_argument("--keys", choices=("suite", "mamba"), default="suite",
                    help="the kernels: the suite's and FLA's, or mamba_ssm's (kernels.py)")
    ap.add_argument("--time-workload", action="store_true")
    ap.add_argument("--launch-overhead", action="store_true")
    ap.add_argument("--launch-paired", action="store_true",
                    help="detd mode: unpatched and hooked launches alternated in one process")
    ap.add_argument("--compare", help="JSON file: entry -> config to time against this process's picks")
    ap.add_argument("--floor", action="store_true", help="default mode: compile each candidate before its "
                    "benchmark and time the two apart (bench_s, compile_s)")
    args = ap.parse_args()

    if args.mode == "detd":
        import detd

        detd.install()  # settings from DETD_* (coordinated by default)
    launch_run = _at.Autotuner.run  # Triton's own, or detd's patch
    install_counters(args.mode == "detd")
    _at.Autotuner.run = _run if args.mode == "default" else _wrap_detd_run()

    import kernels

    torch.cuda.set_device(0)
    data = kernels.inputs(keys=args.keys)
    torch.cuda.synchronize()
    res = {"mode": args.mode, "rank": int(os.environ.get("RANK", "0")), "pid": os.getpid()}

    if args.launch_paired:
        res.update(launch_paired(kernels, launch_run))
        json.dump(res, open(args.out, "w"))
        return
    if args.launch_overhead:
        res.update(launch_overhead(kernels, launch_run))
        json.dump(res, open(args.out, "w"))
        return

    t0 = T0[0] = time.perf_counter()
    outs = kernels.workload(data, with_fla=not args.no_fla, keys=args.keys)
    torch.cuda.synchronize()
    res["startup_s"] = time.perf_counter() - t0
    res["digests"] = {k: kernels.digest(v) for k, v in outs.items()}
    res["configs"] = chosen()
    res.update(COUNTS)
    if FLOOR:
        res["pass_compiles"] = PASS_COMPILES

    if args.compare:
        res["compare"] = compare(json.load(open(args.compare)))
    if args.time_workload:
        import triton.testing

        fn = lambda: kernels.workload(data, with_fla=not args.no_fla, keys=args.keys)  # noqa: E731
        res["workload_ms"] = [triton.testing.do_bench(fn, warmup=200, rep=1500, return_mode="median")
                              for _ in range(3)]
    if args.mode == "detd":
        import detd

        res["verify"] = detd.verify(strict=False)
        res["sources"] = {f"{t['kernel']}|{k['key']}": k["source"] for t in detd.autotuners()
                          for k in t["keys"]}
        # The passes timed here: wall seconds of the first round and the
        # re-measure, and the candidates timed.
        res["pass_s"] = {f"{t['kernel']}|{k['key']}": dict(k.get("pass_s") or {}, candidates=len(k.get("timings") or {}))
                         for t in detd.autotuners() for k in t["keys"] if k.get("timed_here")}
        # Where this process's time in detd went: per phase, and per key
        # (detd._phases), with whether it timed the key.
        res["phases"] = detd.stats()["phases"]
        from detd import _process

        res["compile_ahead"], res["screen"] = _process.compile_ahead(), _process.screen()  # as in effect
        res["compile_nice"] = _process.compile_nice()
        res["compile_processes"] = _process.compile_pool() is not None  # DETD_COMPILE_PROCESSES in effect
        res["workers"] = {k: v for k, v in detd.stats().items() if k.startswith(("compile_workers", "remote_", "launcher"))}
        res["key_phases"] = {f"{t['kernel']}|{k['key']}": dict(k["phases"], timed_here=bool(k.get("timed_here")),
                                                              candidates=len(k.get("candidates") or ()))
                             for t in detd.autotuners() for k in t["keys"] if k.get("phases")}
    json.dump(res, open(args.out, "w"))


def _wrap_detd_run():
    patched = _at.Autotuner.run  # detd's patch

    def run(self, *a, **k):
        TUNERS.add(self)
        return patched(self, *a, **k)

    return run


def launch_overhead(kernels, launch_run):
    """Time per launch on a decided key: a tiny kernel (host-bound: the
    launch path is all there is) and a GPU-bound one (a 4096x16384 row
    sum), each as 20000 / 2000 back-to-back launches, median of 5."""
    import statistics

    tiny_x = torch.randn(64, 512, device="cuda")
    tiny_o = torch.empty(64, device="cuda")
    big_x = torch.randn(4096, 16384, device="cuda")
    big_o = torch.empty(4096, device="cuda")
    k = kernels.row_sum_kernel
    for x, o in ((tiny_x, tiny_o), (big_x, big_o)):
        k[(x.shape[0],)](x, o, x.shape[1], x.stride(0))  # decide (or time) once
    torch.cuda.synchronize()
    # The launch path as users get it, without the counting wrapper.
    _at.Autotuner.run = launch_run
    out = {}
    for name, (x, o, n) in {"launch_us": (tiny_x, tiny_o, 20000),
                            "gpu_bound_launch_us": (big_x, big_o, 2000)}.items():
        runs = []
        for _ in range(5):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(n):
                k[(x.shape[0],)](x, o, x.shape[1], x.stride(0))
            torch.cuda.synchronize()
            runs.append((time.perf_counter() - t0) / n * 1e6)
        out[name] = statistics.median(runs)
        out[name + "_all"] = runs
    return out


def launch_paired(kernels, launch_run):
    """Host time per launch of a tiny kernel on a decided key, unpatched
    Triton and detd alternated in one process (10 rounds of 5000 launches
    each), so both see the same CPU state. Needs --mode detd."""
    import statistics

    k = kernels.row_sum_kernel
    x = torch.randn(64, 512, device="cuda")
    o = torch.empty(64, device="cuda")
    _at.Autotuner.run = launch_run
    for _ in range(2):  # resolve through detd, then go direct
        k[(64,)](x, o, 512, x.stride(0))
    torch.cuda.synchronize()
    detd_cache, detd_inst = k.cache, k.__dict__.get("run")
    plain_cache = dict(detd_cache)

    def use(plain):
        if plain:
            k.__dict__.pop("run", None)
            _at.Autotuner.run = _orig_run
            k.cache = plain_cache
        else:
            _at.Autotuner.run = launch_run
            k.cache = detd_cache
            if detd_inst is not None:
                k.__dict__["run"] = detd_inst

    t = {True: [], False: []}
    for _ in range(10):
        for plain in (True, False):
            use(plain)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(5000):
                k[(64,)](x, o, 512, x.stride(0))
            torch.cuda.synchronize()
            t[plain].append((time.perf_counter() - t0) / 5000 * 1e6)
    use(False)
    p, d = statistics.median(t[True]), statistics.median(t[False])
    diffs = [b - a for a, b in zip(t[True], t[False])]
    return {"paired_plain_us": p, "paired_detd_us": d, "paired_overhead": d / p - 1.0,
            "paired_diff_us_median": statistics.median(diffs), "paired_plain_all": t[True],
            "paired_detd_all": t[False], "direct": detd_inst is not None}


if __name__ == "__main__":
    main()
