"""A real-Triton process for the lockfile tests.

    PYTHON lock_hook_worker.py OUT.json N [N ...]

Under the CPU interpreter (TRITON_INTERPRET=1), with detd installed from
the DETD_* settings (detd-run installs it first when it runs this file),
runs the test row-sum kernel of tests/python/rowsum_kernels.py on one row
of each width N (one autotune key each) and writes the canonical config
launched per N, the do_bench calls made (a timing pass: one per
candidate), torch's version and the CUDA of its build.
"""

import importlib.metadata
import json
import os
import sys

os.environ.setdefault("TRITON_INTERPRET", "1")
HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "tests", "python"))
sys.path.insert(0, os.path.join(REPO, "client", "python"))

import detd  # noqa: E402
from detd import _triton  # noqa: E402


def main():
    out_path, widths = sys.argv[1], [int(a) for a in sys.argv[2:]]
    detd.install()
    import rowsum_kernels as rk
    import torch

    configs = {}
    for n in widths:
        rk.row_sum(rk.make_input(rows=1, n=n, seed=n))
        cfg = dict.get(rk.row_sum_kernel.cache, (n, "torch.float32", "torch.float32"))
        configs[str(n)] = _triton.config_string(cfg) if cfg is not None else None
    with open(out_path, "w") as f:
        json.dump({"configs": configs, "bench_calls": len(rk.CALLS), "torch": importlib.metadata.version("torch"),
                   "cuda": torch.version.cuda or "none"}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
