"""A client process for integration tests, driving libdetd through ctypes.

    python3 detd_client.py --socket S --keys N [--kernel K] [--rank R]
        [--candidates C] [--sleep-ms T] [--out FILE] [--observe]
        [--hold] [--use CONFIG] [--timeout-ms MS] [--wait-start FILE]

For each key: detd_decide; when designated, simulate a timing pass (sleep
T ms, then report per-process pseudo-timings that rank the candidates in a
rotated order, so processes timing on their own would disagree), and use
the config the daemon committed. --hold stops (sleeps) right after the
first designation, so a test can kill -9 this process mid-pass. --use
observes CONFIG instead of the answer (a deliberately diverging rank);
--use other observes the candidate after the answer.
Writes {"keys": {key: {"config", "outcome", "timed", "source"}}, ...}.

Serve mode: --serve reads one JSON command per line from stdin and answers
each with one JSON line on stdout (serve() below): decide, report, device,
share. Each process is one handle, one session: a test drives a holder and
its helpers as separate processes.

Record mode: --vote I[,J...] votes (detd_vote) instead of deciding: key i
gets candidate number I, J, ... (cycled), with pseudo-timings that make it
the fastest; --vote-config S votes the string S instead (a non-candidate
test); --revote I votes a second time, replacing the first. --full-configs
uses candidates with every launch option (BLOCK=16,num_warps=4,
num_stages=1,num_ctas=1); --host, --arch and --device set the identity.
"""

import argparse
import ctypes
import json
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# The library to load: DETD_CLIENT_BUILD_DIR when the daemon under test is a
# sanitizer build (an ASan library cannot be loaded into a plain Python).
BUILD = Path(os.environ.get("DETD_CLIENT_BUILD_DIR") or os.environ.get("DETD_BUILD_DIR") or REPO / "build")


class Identity(ctypes.Structure):
    _fields_ = [("host", ctypes.c_char_p), ("rank", ctypes.c_int32), ("local_rank", ctypes.c_int32),
                ("world_size", ctypes.c_int32), ("device_name", ctypes.c_char_p), ("arch", ctypes.c_char_p),
                ("sm_count", ctypes.c_int32), ("job", ctypes.c_char_p)]


class Key(ctypes.Structure):
    _fields_ = [("namespace_", ctypes.c_char_p), ("arch", ctypes.c_char_p), ("kernel", ctypes.c_char_p),
                ("key", ctypes.c_char_p), ("candidates", ctypes.POINTER(ctypes.c_char_p)),
                ("n_candidates", ctypes.c_size_t), ("table_key", ctypes.c_char_p)]


class Timing(ctypes.Structure):
    _fields_ = [("config", ctypes.c_char_p), ("ms", ctypes.POINTER(ctypes.c_double)), ("n_ms", ctypes.c_size_t),
                ("failed", ctypes.c_int)]


class Answer(ctypes.Structure):
    _fields_ = [("outcome", ctypes.c_int), ("config", ctypes.c_char_p), ("source", ctypes.c_int),
                ("decision_id", ctypes.c_char_p), ("claim_id", ctypes.c_uint64), ("lease_ms", ctypes.c_uint32),
                ("takeover", ctypes.c_int), ("superseded", ctypes.c_int), ("decided_by_host", ctypes.c_char_p),
                ("decided_by_rank", ctypes.c_int32), ("decided_by_pid", ctypes.c_int32),
                ("waited_ms", ctypes.c_uint32), ("holder_host", ctypes.c_char_p), ("holder_rank", ctypes.c_int32),
                ("holder_pid", ctypes.c_int32), ("held_ms", ctypes.c_uint32), ("share_index", ctypes.c_uint32),
                ("bench", ctypes.c_int)]


class Share(ctypes.Structure):  # struct detd_share
    _fields_ = [("claim_id", ctypes.c_uint64), ("take", ctypes.c_char_p), ("reclaim", ctypes.c_int),
                ("timings", ctypes.POINTER(Timing)), ("n_timings", ctypes.c_size_t),
                ("reference_ms", ctypes.POINTER(ctypes.c_double)), ("n_reference_ms", ctypes.c_size_t),
                ("collect", ctypes.c_int)]


class ShareTiming(ctypes.Structure):  # struct detd_share_timing
    _fields_ = [("config", ctypes.c_char_p), ("ms", ctypes.POINTER(ctypes.c_double)), ("n_ms", ctypes.c_size_t),
                ("failed", ctypes.c_int), ("device", ctypes.c_char_p),
                ("reference_ms", ctypes.POINTER(ctypes.c_double)), ("n_reference_ms", ctypes.c_size_t),
                ("helper", ctypes.c_uint32)]


class ShareAnswer(ctypes.Structure):  # struct detd_share_answer
    _fields_ = [("open", ctypes.c_int), ("granted", ctypes.c_int), ("reference", ctypes.c_char_p),
                ("given", ctypes.POINTER(ShareTiming)), ("n_given", ctypes.c_size_t),
                ("pending", ctypes.POINTER(ctypes.c_char_p)), ("n_pending", ctypes.c_size_t)]


DECIDED, DESIGNATED, MISS, TIMEOUT = 1, 2, 3, 4
DECIDE_NO_CLAIM, DECIDE_SHARE, DECIDE_BENCH, DECIDE_WAIT_ONLY = 0x1, 0x2, 0x4, 0x8


def load():
    lib = ctypes.CDLL(str(BUILD / "client" / "libdetd.so"))
    lib.detd_client_open.argtypes = [ctypes.c_char_p, ctypes.POINTER(Identity), ctypes.POINTER(ctypes.c_void_p)]
    lib.detd_decide.argtypes = [ctypes.c_void_p, ctypes.POINTER(Key), ctypes.c_int, ctypes.c_int64,
                                ctypes.POINTER(ctypes.POINTER(Answer))]
    lib.detd_report.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.POINTER(Key), ctypes.POINTER(Timing),
                                ctypes.c_size_t, ctypes.c_char_p, ctypes.c_int64,
                                ctypes.POINTER(ctypes.POINTER(Answer))]
    lib.detd_observe.argtypes = [ctypes.c_void_p, ctypes.POINTER(Key), ctypes.c_char_p, ctypes.c_int, ctypes.c_int,
                                 ctypes.c_int64]
    lib.detd_vote.argtypes = [ctypes.c_void_p, ctypes.POINTER(Key), ctypes.c_char_p, ctypes.POINTER(Timing),
                              ctypes.c_size_t, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int64]
    lib.detd_answer_free.argtypes = [ctypes.POINTER(Answer)]
    lib.detd_client_set_device.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    lib.detd_share.argtypes = [ctypes.c_void_p, ctypes.POINTER(Key), ctypes.POINTER(Share), ctypes.c_int64,
                               ctypes.POINTER(ctypes.POINTER(ShareAnswer))]
    lib.detd_share_answer_free.argtypes = [ctypes.POINTER(ShareAnswer)]
    lib.detd_client_close.argtypes = [ctypes.c_void_p]
    lib.detd_strerror.restype = ctypes.c_char_p
    lib.detd_client_last_error.restype = ctypes.c_char_p
    return lib


def err(lib, keystr, rc, what):
    detail = lib.detd_client_last_error() or b""
    return [keystr.decode(), rc, lib.detd_strerror(rc).decode(), detail.decode(errors="replace"), what]


def timing_array(timings):
    """[{"config", "ms", "failed"}] as a Timing array (and what keeps its
    sample arrays alive)."""
    keep = []
    tms = []
    for t in timings:
        samples = (ctypes.c_double * max(1, len(t["ms"])))(*t["ms"])
        keep.append(samples)
        tms.append(Timing(t["config"].encode(), samples, len(t["ms"]), int(t.get("failed", False))))
    return (Timing * max(1, len(tms)))(*tms), len(tms), keep


def share_call(lib, cl, key, cmd):
    """One detd_share() call of a serve command: the answer as a dict."""
    tarr, n, keep = timing_array(cmd.get("timings", []))
    ref = cmd.get("reference_ms", [])
    rarr = (ctypes.c_double * max(1, len(ref)))(*ref)
    take = cmd.get("take")
    sh = Share(cmd.get("claim_id", 0), take.encode() if take is not None else None, int(cmd.get("reclaim", False)),
               tarr, n, rarr, len(ref), int(cmd.get("collect", False)))
    ans = ctypes.POINTER(ShareAnswer)()
    rc = lib.detd_share(cl, ctypes.byref(key), ctypes.byref(sh), cmd.get("timeout_ms", 30000), ctypes.byref(ans))
    del keep
    if rc != 0:
        return {"rc": rc, "error": (lib.detd_client_last_error() or b"").decode(errors="replace")}
    a = ans.contents
    out = {"rc": 0, "open": bool(a.open), "granted": bool(a.granted),
           "reference": a.reference.decode() if a.reference else None, "given": [],
           "pending": [a.pending[i].decode() for i in range(a.n_pending)]}
    for i in range(a.n_given):
        g = a.given[i]
        out["given"].append({"config": g.config.decode(), "ms": [g.ms[j] for j in range(g.n_ms)],
                             "failed": bool(g.failed), "device": g.device.decode(),
                             "reference_ms": [g.reference_ms[j] for j in range(g.n_reference_ms)],
                             "helper": g.helper})
    lib.detd_share_answer_free(ans)
    return out


def serve(lib, cl, make_key):
    """Answer JSON commands from stdin, one line each, until EOF:
    {"op": "decide", "key", "flags": ["share", "bench", "no_claim", "wait_only"]},
    {"op": "report", "key", "claim_id", "timings"}, {"op": "device", "device"},
    {"op": "share", "key", "claim_id", "take", "reclaim", "timings",
    "reference_ms", "collect"}."""
    flag_bits = {"no_claim": DECIDE_NO_CLAIM, "share": DECIDE_SHARE, "bench": DECIDE_BENCH,
                 "wait_only": DECIDE_WAIT_ONLY}
    for line in sys.stdin:
        cmd = json.loads(line)
        op = cmd["op"]
        key = make_key(cmd.get("key", "i:0"))
        if op == "device":
            dev = cmd.get("device")
            rc = lib.detd_client_set_device(cl, dev.encode() if dev is not None else None)
            out = {"rc": rc}
        elif op == "decide":
            flags = sum(flag_bits[f] for f in cmd.get("flags", []))
            ans = ctypes.POINTER(Answer)()
            rc = lib.detd_decide(cl, ctypes.byref(key), flags, cmd.get("timeout_ms", 30000), ctypes.byref(ans))
            out = {"rc": rc}
            if rc == 0:
                a = ans.contents
                out.update(outcome=a.outcome, claim_id=a.claim_id, share_index=a.share_index, bench=bool(a.bench),
                           config=a.config.decode() if a.config else None)
                lib.detd_answer_free(ans)
        elif op == "report":
            tarr, n, keep = timing_array(cmd["timings"])
            rep = ctypes.POINTER(Answer)()
            rc = lib.detd_report(cl, cmd["claim_id"], ctypes.byref(key), tarr, n, b"3.6.0", 30000, ctypes.byref(rep))
            out = {"rc": rc}
            if rc == 0:
                out["config"] = rep.contents.config.decode()
                lib.detd_answer_free(rep)
        elif op == "share":
            out = share_call(lib, cl, key, cmd)
        else:
            out = {"rc": -1, "error": f"unknown op {op}"}
        if out["rc"] != 0 and "error" not in out:
            out["error"] = (lib.detd_client_last_error() or b"").decode(errors="replace")
        out["pid"] = os.getpid()
        print(json.dumps(out), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--socket", required=True)
    ap.add_argument("--keys", type=int, default=10)
    ap.add_argument("--key-prefix", default="i:")
    ap.add_argument("--kernel", default="tests.integration:row_sum@0123456789abcdef")
    ap.add_argument("--rank", type=int, default=0)
    ap.add_argument("--candidates", type=int, default=4)
    ap.add_argument("--sleep-ms", type=int, default=20)
    ap.add_argument("--out")
    ap.add_argument("--observe", action="store_true")
    ap.add_argument("--hold", action="store_true")
    ap.add_argument("--use")
    ap.add_argument("--timeout-ms", type=int, default=60000)
    ap.add_argument("--wait-start", help="create FILE.ready.PID, then spin until FILE exists (start line)")
    ap.add_argument("--arch", default="sm90")
    ap.add_argument("--cands", help="candidate configs separated by ';' (instead of --candidates)")
    ap.add_argument("--cands-json", help="candidate configs as a JSON list (for candidates holding ';')")
    ap.add_argument("--table-key-prefix", help="send table_key PREFIX<i> with key i")
    ap.add_argument("--until", help="ask fresh keys (0, 1, ...) until this file exists; "
                                    "the order of answers goes to \"sequence\"")
    ap.add_argument("--vote")
    ap.add_argument("--vote-config")
    ap.add_argument("--revote")
    ap.add_argument("--full-configs", action="store_true")
    ap.add_argument("--host", default="node-a")
    ap.add_argument("--device", default="Test GPU")
    ap.add_argument("--serve", action="store_true", help="answer JSON commands from stdin (serve())")
    a = ap.parse_args()

    lib = load()
    ident = Identity(a.host.encode(), a.rank, a.rank, 16, a.device.encode(), a.arch.encode(), 132, b"it")
    cl = ctypes.c_void_p()
    rc = lib.detd_client_open(a.socket.encode(), ctypes.byref(ident), ctypes.byref(cl))
    assert rc == 0, rc
    if a.full_configs:
        cands = [f"BLOCK={16 << i},num_warps=4,num_stages=1,num_ctas=1".encode() for i in range(a.candidates)]
    else:
        cands = [f"BLOCK={16 << i},num_warps=4".encode() for i in range(a.candidates)]
    if a.cands:
        cands = [c.encode() for c in a.cands.split(";")]
    if a.cands_json:
        cands = [c.encode() for c in json.loads(a.cands_json)]
    arr = (ctypes.c_char_p * len(cands))(*cands)
    if a.serve:
        serve(lib, cl, lambda k: Key(None, a.arch.encode(), a.kernel.encode(), k.encode(), arr, len(cands), None))
        lib.detd_client_close(cl)
        return
    if a.wait_start:
        # Up (library loaded, handle open): the test starts the race once
        # every client says so (conftest.release_clients).
        Path(f"{a.wait_start}.ready.{os.getpid()}").touch()
        while not os.path.exists(a.wait_start):
            time.sleep(0.001)
    result = {"rank": a.rank, "pid": os.getpid(), "keys": {}, "errors": [], "sequence": []}
    i = -1
    while True:
        i += 1
        if a.until is not None:
            if os.path.exists(a.until):
                break
        elif i >= a.keys:
            break
        keystr = f"{a.key_prefix}{i}".encode()
        tkey = f"{a.table_key_prefix}{i}".encode() if a.table_key_prefix else None
        key = Key(None, a.arch.encode(), a.kernel.encode(), keystr, arr, len(cands), tkey)
        if a.vote is not None or a.vote_config is not None:
            specs = [a.vote or "0"] + ([a.revote] if a.revote is not None else [])
            for spec in specs:
                picks = [int(x) for x in spec.split(",")]
                win = picks[i % len(picks)]
                cfg = a.vote_config.encode() if a.vote_config is not None else cands[win]
                tms, keep = [], []
                for j, c in enumerate(cands):
                    ms = 1.0 if j == win else 2.0 + j
                    samples = (ctypes.c_double * 2)(ms, ms * 1.01)
                    keep.append(samples)
                    tms.append(Timing(c, samples, 2, 0))
                tarr = (Timing * len(tms))(*tms)
                rc = lib.detd_vote(cl, ctypes.byref(key), cfg, tarr, len(tms), b"3.6.0",
                                   f"N={i}|torch.float32".encode(), a.timeout_ms)
                if rc != 0:
                    result["errors"].append(err(lib, keystr, rc, "vote"))
                    continue
                result["keys"][keystr.decode()] = {"voted": cfg.decode()}
            continue
        ans = ctypes.POINTER(Answer)()
        t0 = time.monotonic()
        rc = lib.detd_decide(cl, ctypes.byref(key), 0, a.timeout_ms, ctypes.byref(ans))
        if rc != 0:
            result["errors"].append(err(lib, keystr, rc, "decide"))
            continue
        outcome = ans.contents.outcome
        entry = {"outcome": outcome, "timed": False, "takeover": bool(ans.contents.takeover),
                 "wait_ms": round((time.monotonic() - t0) * 1000, 1)}
        if outcome == DESIGNATED:
            claim = ans.contents.claim_id
            if a.hold:
                if os.environ.get("DETD_CLIENT_CLAIM_FILE"):  # for a late report by hand
                    Path(os.environ["DETD_CLIENT_CLAIM_FILE"]).write_text(str(claim))
                print("HOLD", flush=True)
                time.sleep(3600)
            time.sleep(a.sleep_ms / 1000.0)
            tms = []
            keep = []
            for j, c in enumerate(cands):
                ms = 1.0 + ((j + a.rank + os.getpid()) % len(cands))
                samples = (ctypes.c_double * 3)(ms, ms * 1.01, ms * 0.99)
                keep.append(samples)
                tms.append(Timing(c, samples, 3, 0))
            tarr = (Timing * len(tms))(*tms)
            rep = ctypes.POINTER(Answer)()
            rc = lib.detd_report(cl, claim, ctypes.byref(key), tarr, len(tms), b"3.6.0", a.timeout_ms,
                                 ctypes.byref(rep))
            if rc != 0:
                result["errors"].append(err(lib, keystr, rc, "report"))
                lib.detd_answer_free(ans)
                continue
            entry["timed"] = True
            entry["config"] = rep.contents.config.decode()
            entry["source"] = rep.contents.source
            entry["superseded"] = bool(rep.contents.superseded)
            lib.detd_answer_free(rep)
        elif outcome == DECIDED:
            entry["config"] = ans.contents.config.decode()
            entry["source"] = ans.contents.source
        lib.detd_answer_free(ans)
        if a.observe and "config" in entry:
            used = (a.use or entry["config"]).encode()
            if a.use == "other":  # the next candidate after the decided one
                j = cands.index(entry["config"].encode())
                used = cands[(j + 1) % len(cands)]
            rc = lib.detd_observe(cl, ctypes.byref(key), used, entry.get("source", 1), 1, a.timeout_ms)
            if rc != 0:
                result["errors"].append(err(lib, keystr, rc, "observe"))
        result["keys"][keystr.decode()] = entry
        if a.until is not None:
            result["sequence"].append([keystr.decode(), entry.get("config"), entry.get("source"), outcome])
    lib.detd_client_close(cl)
    if a.out:
        with open(a.out, "w") as f:
            json.dump(result, f)
    else:
        json.dump(result, sys.stdout)


if __name__ == "__main__":
    main()
