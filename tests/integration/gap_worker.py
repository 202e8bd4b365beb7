"""A rank for the restart-gap test (test_restart_gap.py): the package's
one resolve loop (detd._loop.resolve, what the Triton and Inductor
adapters call) over the real libdetd, without Triton.

    python3 gap_worker.py --socket S --rank R --keys A,B --out FILE [--hold FILE]

Resolves the keys in order with the settings from DETD_* variables. A
timing pass sleeps --sleep-ms and reports per-rank pseudo-timings (ranks
timing on their own would disagree); with --hold FILE the first pass
creates FILE.held and waits for FILE before it reports (a pass held
across a daemon restart). Writes {"keys": {key: {"config", "passes",
"lost", "reason"}}, "stats": detd.stats(), "outage_warnings": n}.
"""

import argparse
import json
import os
import sys
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "client", "python"))

import detd  # noqa: E402
from detd import _loop, _native, _policy, _process  # noqa: E402

KERNEL = "tests.gap:row_sum@0123456789abcdef"
CANDIDATES = tuple(f"BLOCK={16 << i},num_warps=4" for i in range(4))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--socket", required=True)
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--keys", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--hold")
    ap.add_argument("--sleep-ms", type=int, default=50)
    a = ap.parse_args()

    settings = _policy.Settings(socket=a.socket, timeout_ms=int(os.environ.get("DETD_TIMEOUT_MS", "120000")),
                                arch="sm90")
    _process.configure(settings)
    out = {"rank": a.rank, "pid": os.getpid(), "keys": {}}
    held = [False]

    def time_pass(answer, key):
        out["keys"][key]["passes"] += 1
        time.sleep(a.sleep_ms / 1000.0)
        rows = [(c, [1.0 + (j + a.rank) % len(CANDIDATES)] * 3, False) for j, c in enumerate(CANDIDATES)]
        if a.hold and not held[0]:
            held[0] = True
            open(a.hold + ".held", "w").close()
            end = time.monotonic() + settings.timeout_ms / 1000.0
            while not os.path.exists(a.hold) and time.monotonic() < end:
                time.sleep(0.02)
        return rows

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for key in a.keys.split(","):
            out["keys"][key] = {"passes": 0}
            dkey = _native.Key(None, "sm90", KERNEL, key, CANDIDATES)
            res = _loop.resolve(dkey, KERNEL, key, "3.6.0", lambda ans, k=key: time_pass(ans, k))
            ok = res.answer is not None and res.answer.outcome == _native.OUTCOME_DECIDED
            out["keys"][key].update(config=res.answer.config if ok else None, lost=res.lost,
                                    reason=None if ok else res.reason)
    out["stats"] = detd.stats()
    out["outage_warnings"] = [str(w.message) for w in caught if "unreachable" in str(w.message)]
    with open(a.out, "w") as f:
        json.dump(out, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
