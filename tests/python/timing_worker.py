"""One process of test_timing.py: detd.install() from the environment,
then the cases named in argv[1] (comma-separated); prints one JSON line of
what happened.

``outside``: the package-style tuner of timing_kernels.py, timing
candidates with ``triton.testing.do_bench`` (called twice for one key:
timed once, then its own cache answers). ``governed``: its
``@triton.autotune`` kernel with Triton's default benchmarker
(``triton.testing.do_bench`` through the driver): detd's timing pass.
``script``: the program itself calls ``do_bench`` and
``do_bench_cudagraph`` (no tuner). ``many``: 70 call sites, one call
each.

What cannot run here, and its stand-in: Triton's benchmarkers need a GPU
driver (``triton.runtime.driver.active``). ``CpuBenchDriver`` gives them a
device interface whose events read ``time.perf_counter``, a host tensor
as the cache to clear, and ``triton.testing.do_bench`` as the benchmarker,
as the CUDA driver does; ``do_bench`` itself is Triton's own code.
``do_bench_cudagraph`` needs CUDA graphs, so ``script`` calls it with a
function that raises before any graph is made, inside a ``try``: the call
is seen (counted), its failure is the script's.
"""
import json
import sys
import time

import detd

detd.install()
import torch  # noqa: E402
import triton  # noqa: E402
import triton.testing  # noqa: E402

BENCH_RUNS = [0]  # Triton's do_bench calls that ran (events recorded)


class _Event:
    def __init__(self, enable_timing=False):
        self.t = None

    def record(self):
        self.t = time.perf_counter()

    def elapsed_time(self, end):
        return (end.t - self.t) * 1000.0


class _Device:
    Event = _Event

    @staticmethod
    def synchronize():
        pass


class CpuBenchDriver:
    def get_device_interface(self):
        return _Device

    def get_empty_cache_for_benchmark(self):
        BENCH_RUNS[0] += 1
        return torch.empty(1024, dtype=torch.int8)

    def clear_cache(self, cache):
        cache.zero_()

    def get_benchmarker(self):
        from triton.testing import do_bench

        return do_bench

    def get_current_device(self):
        return 0


triton.runtime.driver.set_active(CpuBenchDriver())

import timing_kernels as tk  # noqa: E402  (after install: as a package is imported)

out = {}
x = torch.arange(100, dtype=torch.float32)
for case in sys.argv[1].split(","):
    if case == "outside":
        b1, y = tk.run(x)
        b2, _ = tk.run(x)  # its own cache answers
        assert b1 == b2 and torch.equal(y, x * 2.0)
        out["outside"] = dict(block=b1, timed=len(tk.TIMED))
    elif case == "governed":
        config, y = tk.run_governed(x)
        assert torch.equal(y, x + 1.0)
        out["governed"] = dict(config=config)
    elif case == "script":
        y = torch.empty_like(x)
        triton.testing.do_bench(lambda: tk.launch(x, y, 32), warmup=1, rep=1)

        def no_graph():
            raise RuntimeError("no CUDA graphs here")

        try:
            triton.testing.do_bench_cudagraph(no_graph, rep=1)
        except Exception as e:  # noqa: BLE001 - the script's own failure, not detd's
            out["cudagraph"] = type(e).__name__
        out["script"] = "ok"
    elif case == "many":  # more call sites than detd lists (detd._timing.MAX_SITES)
        y = torch.empty_like(x)
        for i in range(70):
            ns = {"__name__": "timing_sites", "tk": tk, "x": x, "y": y, "triton": triton}
            exec(compile(f"def site_{i:02d}():\n    triton.testing.do_bench(lambda: tk.launch(x, y, 16), "
                         f"warmup=1, rep=1)\n", "timing_worker_sites", "exec"), ns)
            ns[f"site_{i:02d}"]()
        out["many"] = "ok"
out["bench_runs"] = BENCH_RUNS[0]
out["stats"] = {k: v for k, v in detd.stats().items() if k.startswith("timing_")}
tuners = detd.autotuners()
governed = [t for t in tuners if t["kind"] == "triton" and t["governed"]]
out["timing"] = [t for t in tuners if t["kind"] == "timing"]
out["governed_kernels"] = [t["kernel"] for t in governed]
# The candidates detd's passes here measured again (the noise band,
# detd._measure.recheck_set): which ones depends on the timings taken.
out["remeasured"] = sum(len(k.get("remeasured", ())) for t in governed for k in t["keys"])
print(json.dumps(out))
