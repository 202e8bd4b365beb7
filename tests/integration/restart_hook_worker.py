"""A real-Triton training-like process for the daemon-restart tests.

    PYTHON restart_hook_worker.py OUT.json STOP [FIRST_N]

Under the CPU interpreter (TRITON_INTERPRET=1), with detd.install() and
the settings from DETD_* variables, runs the test row-sum kernel of
tests/python/rowsum_kernels.py on a new shape (a new autotune key) each
step, N = FIRST_N, FIRST_N + 16, ..., until the file STOP exists. Writes,
per shape: the canonical config launched, the number of do_bench calls
its step made (a timing pass: one per candidate) and the error raised, if
any; plus every Decide/Report the hook made with time.monotonic() stamps
("calls") and detd.autotuners().
"""

import json
import os
import sys
import time

os.environ.setdefault("TRITON_INTERPRET", "1")
HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "tests", "python"))
sys.path.insert(0, os.path.join(REPO, "client", "python"))

import detd  # noqa: E402
from detd import _native, _triton  # noqa: E402


def main():
    out_path, stop = sys.argv[1], sys.argv[2]
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 16
    result = {"pid": os.getpid(), "shapes": {}, "calls": [], "error": None}
    calls = result["calls"]

    def stamp(name, orig):
        def wrapped(self, *a, **kw):
            key = a[0] if name == "decide" else a[1]
            t0 = time.monotonic()
            try:
                ans = orig(self, *a, **kw)
            except _native.DetdError as e:
                calls.append([name, t0, time.monotonic(), e.code, None, key.key])
                raise
            calls.append([name, t0, time.monotonic(), 0, _native.OUTCOME_NAMES.get(ans.outcome), key.key])
            return ans
        return wrapped

    _native.Client.decide = stamp("decide", _native.Client.decide)
    _native.Client.report = stamp("report", _native.Client.report)
    detd.install()
    import rowsum_kernels as rk

    open(out_path + ".ready", "w").close()
    while not os.path.exists(stop):
        x = rk.make_input(rows=2, n=n, seed=n)
        before = len(rk.CALLS)
        entry = {}
        try:
            rk.row_sum(x)
            cfg = dict.get(rk.row_sum_kernel.cache, (n, "torch.float32", "torch.float32"))
            entry["config"] = _triton.config_string(cfg) if cfg is not None else None
        except Exception as e:  # reported; the test decides
            entry["error"] = f"{type(e).__name__}: {e}"
        entry["bench_calls"] = len(rk.CALLS) - before
        result["shapes"][str(n)] = entry
        n += 16
    result["autotuners"] = detd.autotuners()
    with open(out_path, "w") as f:
        json.dump(result, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
