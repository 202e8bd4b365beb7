"""One training-like process for the end-to-end tests.

    python worker.py OUT.json [--shapes 256,512] [--threads 8] [--fork]

Settings come from DETD_* variables (detd.install() with no arguments, as an
unmodified script would get them). Writes OUT.json with, per shape: the
canonical config launched (and Triton's best_config), the SHA-256 of the output bytes and the number of
do_bench calls made while running it (one timing pass = one call per
candidate); plus detd.autotuners() and any error raised. With
DETD_TEST_RECORD_REPORTS=1 also "reports": what each Report answered; with
DETD_TEST_DISK_CACHE_PROBE=1 "disk_cache_calls": the autotune disk-cache
lookups Triton made.
"""

import hashlib
import json
import os
import sys
import threading

os.environ.setdefault("TRITON_INTERPRET", "1")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import detd  # noqa: E402
from detd import _triton  # noqa: E402


def run_shape(rk, n, results, tag=None):
    x = rk.make_input(rows=4, n=n, seed=n)
    before = len(rk.CALLS)
    try:
        out = rk.row_sum(x)
    except Exception as e:  # reported, the test decides
        results[tag or str(n)] = {"error": f"{type(e).__name__}: {e}"}
        return
    key = (n, "torch.float32", "torch.float32")
    cfg = dict.get(rk.row_sum_kernel.cache, key)
    best = getattr(rk.row_sum_kernel, "best_config", None)
    results[tag or str(n)] = {
        "config": _triton.config_string(cfg) if cfg is not None else None,
        "best_config": _triton.config_string(best) if best is not None else None,
        "sha": hashlib.sha256(out.numpy().tobytes()).hexdigest(),
        "bench_calls": len(rk.CALLS) - before,
    }


def record_reports(out):
    """Keep what each Report answered (the committed config and whether
    this process's report was superseded), as the hook received it."""
    from detd import _native

    orig = _native.Client.report

    def report(self, *a, **kw):
        ans = orig(self, *a, **kw)
        out.append({"config": ans.config, "superseded": bool(ans.superseded), "source": ans.source})
        return ans

    _native.Client.report = report


def probe_disk_cache(tuner, result):
    """Count the tuner's autotune disk-cache lookups. The interpreter turns
    Triton's disk cache off (and it needs a GPU target), so the lookup is
    switched on here and replaced by a miss that runs the benchmark, as
    Triton's own lookup does when nothing is cached."""
    calls = result.setdefault("disk_cache_calls", [])
    result["disk_cache_probe"] = hasattr(tuner, "check_disk_cache")
    if not result["disk_cache_probe"]:
        return

    def check_disk_cache(tuning_key, configs, bench_fn):
        calls.append(str(tuning_key))
        bench_fn()
        return False

    tuner.cache_results = True
    tuner.check_disk_cache = check_disk_cache


def main():
    out_path = sys.argv[1]
    args = sys.argv[2:]
    shapes = [256]
    threads = 0
    fork = False
    i = 0
    while i < len(args):
        if args[i] == "--shapes":
            shapes = [int(s) for s in args[i + 1].split(",")]
            i += 2
        elif args[i] == "--threads":
            threads = int(args[i + 1])
            i += 2
        elif args[i] == "--fork":
            fork = True
            i += 1
        else:
            raise SystemExit(f"unknown argument {args[i]}")

    result = {"pid": os.getpid(), "shapes": {}, "error": None}
    if os.environ.get("DETD_TEST_RECORD_REPORTS") == "1":
        record_reports(result.setdefault("reports", []))
    try:
        detd.install()
    except Exception as e:
        result["error"] = f"{type(e).__name__}: {e}"
        json.dump(result, open(out_path, "w"))
        return 3
    import rowsum_kernels as rk

    if os.environ.get("DETD_TEST_DISK_CACHE_PROBE") == "1":
        probe_disk_cache(rk.row_sum_kernel, result)
    if threads:
        n = shapes[0]
        barrier = threading.Barrier(threads)

        def body(t):
            barrier.wait()
            run_shape(rk, n, result["shapes"], tag=f"{n}/t{t}")

        ts = [threading.Thread(target=body, args=(t,)) for t in range(threads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        result["bench_calls_total"] = len(rk.CALLS)
    elif fork:
        first, second = shapes[0], shapes[1]
        run_shape(rk, first, result["shapes"])
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            import signal

            signal.alarm(120)  # a hung child must not hang the test
            child = {}
            run_shape(rk, first, child, tag=f"{first}/child")
            run_shape(rk, second, child, tag=f"{second}/child")
            child["pid"] = os.getpid()
            child["autotuners"] = detd.autotuners()
            os.write(w, json.dumps(child).encode())
            os.close(w)
            os._exit(0)
        os.close(w)
        data = b""
        while True:
            chunk = os.read(r, 65536)
            if not chunk:
                break
            data += chunk
        _, wstatus = os.waitpid(pid, 0)
        child = json.loads(data) if data else {"error": f"child died (wait status {wstatus})"}
        result["child"] = child
        run_shape(rk, second, result["shapes"])
    else:
        for n in shapes:
            run_shape(rk, n, result["shapes"])
    result["autotuners"] = detd.autotuners()
    result["bench_calls_total"] = len(rk.CALLS)
    with open(out_path, "w") as f:
        json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
