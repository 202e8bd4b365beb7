"""A libdetd client process for the daemon-restart tests (test_restart.py).

    python3 restart_client.py --socket S --rank R --until STOP --out FILE
        [--sleep-ms T] [--timeout-ms MS] [--prefix P] [--hold-first FILE]

Asks fresh keys P0, P1, ... until the file STOP exists, following the rule
of detd/client.h ("Daemon restarts") for a designated process: time once
(sleep T ms, then per-process pseudo-timings that would make processes
timing on their own disagree), report; a report refused as stale (the
claim's session ended with the daemon) is not repeated blindly: ask again,
and when designated again report the timings already measured. Observes
what it launched. With --hold-first FILE, its first timing pass creates
FILE.held and waits for FILE before it reports (a pass held across a
restart, and so the other processes' Decides for that key). Writes
{"keys": {key: {"config", "passes", "designated", "lost"}}, "events":
[[key, what, t_start, t_end], ...], "errors": [...]} with time.monotonic()
stamps (one clock for every process of the host).
"""

import argparse
import ctypes
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from detd_client import DECIDED, DESIGNATED, Answer, Identity, Key, Timing, load  # noqa: E402

ESTALE = -1007


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--socket", required=True)
    ap.add_argument("--rank", type=int, default=0)
    ap.add_argument("--until", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--sleep-ms", type=int, default=50)
    ap.add_argument("--timeout-ms", type=int, default=60000)
    ap.add_argument("--prefix", default="r:")
    ap.add_argument("--kernel", default="tests.restart:row_sum@0123456789abcdef")
    ap.add_argument("--hold-first")
    a = ap.parse_args()

    lib = load()
    ident = Identity(b"node-a", a.rank, a.rank, 8, b"Test GPU", b"sm90", 132, b"restart")
    cl = ctypes.c_void_p()
    assert lib.detd_client_open(a.socket.encode(), ctypes.byref(ident), ctypes.byref(cl)) == 0
    cands = [f"BLOCK={16 << i},num_warps=4".encode() for i in range(4)]
    arr = (ctypes.c_char_p * len(cands))(*cands)
    out = {"rank": a.rank, "pid": os.getpid(), "keys": {}, "events": [], "errors": []}

    def detail():
        return (lib.detd_client_last_error() or b"").decode(errors="replace")

    i = 0
    while not os.path.exists(a.until):
        keystr = f"{a.prefix}{i}".encode()
        i += 1
        key = Key(None, b"sm90", a.kernel.encode(), keystr, arr, len(cands), None)
        entry = {"config": None, "passes": 0, "designated": 0, "lost": 0}
        timings = None
        deadline = time.monotonic() + a.timeout_ms / 1000
        while entry["config"] is None:
            left = int((deadline - time.monotonic()) * 1000)
            if left <= 0:
                out["errors"].append([keystr.decode(), "no decision before the deadline"])
                break
            ans = ctypes.POINTER(Answer)()
            t0 = time.monotonic()
            rc = lib.detd_decide(cl, ctypes.byref(key), 0, left, ctypes.byref(ans))
            out["events"].append([keystr.decode(), "decide", t0, time.monotonic(), rc])
            if rc != 0:
                out["errors"].append([keystr.decode(), "decide", rc, detail()])
                break
            outcome = ans.contents.outcome
            if outcome == DECIDED:
                entry["config"] = ans.contents.config.decode()
                lib.detd_answer_free(ans)
                break
            if outcome != DESIGNATED:
                out["errors"].append([keystr.decode(), "outcome", outcome])
                lib.detd_answer_free(ans)
                break
            claim = ans.contents.claim_id
            lib.detd_answer_free(ans)
            entry["designated"] += 1
            t_des = time.monotonic()
            if timings is None:  # one timing pass; reused if designated again
                time.sleep(a.sleep_ms / 1000.0)
                entry["passes"] += 1
                timings = []
                for j, c in enumerate(cands):
                    ms = 1.0 + ((j + a.rank + os.getpid()) % len(cands))
                    timings.append((c, (ctypes.c_double * 3)(ms, ms * 1.01, ms * 0.99)))
                if a.hold_first and i == 1:  # the first key's one pass
                    open(a.hold_first + ".held", "w").close()
                    while not os.path.exists(a.hold_first) and time.monotonic() < deadline:
                        time.sleep(0.02)
            tarr = (Timing * len(timings))(*[Timing(c, s, 3, 0) for c, s in timings])
            rep = ctypes.POINTER(Answer)()
            left = max(1, int((deadline - time.monotonic()) * 1000))
            rc = lib.detd_report(cl, claim, ctypes.byref(key), tarr, len(timings), b"3.6.0", left,
                                 ctypes.byref(rep))
            out["events"].append([keystr.decode(), "designated", t_des, time.monotonic(), rc])
            if rc == ESTALE:
                entry["lost"] += 1
                continue  # the rule: ask again
            if rc != 0:
                out["errors"].append([keystr.decode(), "report", rc, detail()])
                break
            entry["config"] = rep.contents.config.decode()
            lib.detd_answer_free(rep)
        if entry["config"] is not None:
            rc = lib.detd_observe(cl, ctypes.byref(key), entry["config"].encode(), 1, 1, a.timeout_ms)
            if rc != 0:
                out["errors"].append([keystr.decode(), "observe", rc, detail()])
        out["keys"][keystr.decode()] = entry
    lib.detd_client_close(cl)
    with open(a.out, "w") as f:
        json.dump(out, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
