"""One process launching a kernel tuned by flag-gems' LibTuner (the
stand-in under fake_flag_gems/; the real one on the GPU):

    python libtuner_worker.py OUT.json N[,N...] [--no-detd]

Calls detd.install() first unless --no-detd (the control: flag-gems on
its own). The kernel is rowsum_kernels' row-sum JIT function, so the output bits
depend on the config, timed with rowsum_kernels' per-rank CPU timer
(rank r prefers a different BLOCK). OUT.json: per N the config launched
(LibTuner's best_config), the SHA-256 of the output and the timings made
for it; plus detd.autotuners() and any error raised.
"""

import hashlib
import json
import os
import sys

os.environ.setdefault("TRITON_INTERPRET", "1")
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "fake_flag_gems"))

import rowsum_kernels as rk  # noqa: E402
import torch  # noqa: E402

out_path, keys = sys.argv[1], [int(n) for n in sys.argv[2].split(",")]
with_detd = "--no-detd" not in sys.argv[3:]
if with_detd:
    import detd

    detd.install()

from flag_gems.utils.libentry import libtuner  # noqa: E402


# rowsum_kernels' JIT function, tuned by LibTuner instead of @triton.autotune.
gems_row_sum = libtuner(configs=rk.configs(), key=["N"], do_bench=rk.fake_do_bench)(rk.row_sum_kernel.fn)


result = {"keys": {}}
try:
    for n in keys:
        before = len(rk.CALLS)
        x = rk.make_input(rows=4, n=n, seed=n)
        out = torch.empty(4, dtype=torch.float32)
        gems_row_sum[(4,)](x, out, n)
        result["keys"][str(n)] = {
            "config": "BLOCK=%d" % gems_row_sum.best_config.kwargs["BLOCK"],
            "sha": hashlib.sha256(out.numpy().tobytes()).hexdigest(),
            "bench_calls": len(rk.CALLS) - before,
        }
except Exception as e:  # reported, the test decides
    import traceback
    traceback.print_exc()
    result["error"] = f"{type(e).__name__}: {e}"
if with_detd:
    result["autotuners"] = detd.autotuners()
with open(out_path, "w") as f:
    json.dump(result, f)
