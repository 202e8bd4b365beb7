"""What a kill -9 of the etcd leader costs a key being decided: a real
3-member etcd cluster on loopback (the campaign's Raft timing), two
daemons, rank A on n0 designated for a key and rank B on n1 waiting for it.
The victim is killed, A reports 0.1 s later (the write lands in the
leaderless window) and the victim starts again after --down seconds.

    DETD_BUILD_DIR=build python3 tests/bench/leader_kill.py [--trials 6]
        [--victim leader|follower] [--down 1.2]

Per trial, seconds after the kill: when etcd took a write again (an
etcdctl put, 300 ms attempts), when A's report returned, when B was
answered (DECIDED, or DESIGNATED once A's pass ran past the 1 s pass bound;
B then times once for 0.14 s and reports, and while its report is refused
asks again and reports the same timings; B's reports are counted), B's
whole time on the key, and the configs both ended with (they must agree).
The last column is the fault cost the campaign's checker allows
(tests/campaign/checker.py fault_cost).
Exit status 1 when A and B ended with different configs.
"""

import argparse
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "integration"))
sys.path.insert(0, str(REPO / "tests" / "campaign"))

import checker  # noqa: E402
from conftest import Daemon, ServeClient  # noqa: E402
from etcd_cluster import EtcdCluster  # noqa: E402

DESIGNATED = 2
CONFIG_A = "BLOCK=16,num_warps=4"
CONFIG_B = "BLOCK=32,num_warps=4"
B_DECIDE_MS = 10000  # each of B's Decide calls
# A node registers within this once etcd serves (docs/multi-node.md, "Scale": the call
# under way, one backoff step and one attempt).
REGISTER_S = 10.0


def writable_after(cluster, t0, limit=15.0):
    """Seconds from t0 until an etcdctl put succeeds (300 ms attempts)."""
    while time.monotonic() - t0 < limit:
        if cluster.ctl("--command-timeout=300ms", "put", "/probe", "v", check=False).returncode == 0:
            return time.monotonic() - t0
    return None


def settled(cluster, daemons):
    """Until every member serves, both nodes are registered in etcd (their
    keys under their leases) and each daemon says it reaches etcd."""
    cluster.wait_healthy(timeout=30)
    want = sorted(f"/detd/v1/default/nodes/n{i}" for i in range(len(daemons)))
    end = time.monotonic() + REGISTER_S
    while True:
        r = cluster.ctl("get", "--prefix", "/detd/v1/default/nodes/", "--keys-only", check=False)
        if sorted(x for x in r.stdout.split() if x) == want and \
                all(d.status()["etcd"]["connected"] for d in daemons):
            return
        if time.monotonic() > end:
            raise RuntimeError(f"nodes not registered within {REGISTER_S} s: {r.stdout!r}")
        time.sleep(0.1)


def trial(cluster, a, b, key, victim_kind, down, b_node):
    ans_a = a.call(op="decide", key=key, timeout_ms=5000)
    if ans_a.get("outcome") != DESIGNATED:
        raise RuntimeError(f"rank A was not designated: {ans_a}")
    out = {}

    def wait_b():
        t = time.monotonic()
        reports = 0
        for _ in range(10):
            r = b.call(op="decide", key=key, timeout_ms=B_DECIDE_MS)
            if "b_first" not in out:
                out["b_first"] = time.monotonic()
                out["b_first_outcome"] = {1: "decided", DESIGNATED: "designated"}.get(
                    r.get("outcome"), str(r.get("outcome")))
            if r.get("outcome") != DESIGNATED:
                break
            # the pass bound moved the claim to B: it times once and
            # reports; a refused report (the claim moved on) asks again and
            # reports the same timings (the rule in detd/client.h, as the
            # Triton hook does)
            if reports == 0:
                time.sleep(0.14)
            reports += 1
            rep = b.call(op="report", key=key, claim_id=r["claim_id"],
                         timings=[{"config": CONFIG_B, "ms": [1.0]}])
            if rep["rc"] == 0:
                r["config"] = rep["config"]
                break
        out["b"] = r
        out["b_reports"] = reports
        out["b_done"] = time.monotonic()
        out["b_start"] = t

    mark = b_node.log_size()
    tb = threading.Thread(target=wait_b)
    tb.start()
    # B waits for A's claim (its node found it held by n0) before the kill,
    # or was answered already; bound: B's Decide deadline.
    end = time.monotonic() + B_DECIDE_MS / 1000
    while "held elsewhere" not in b_node.read_log()[mark:] and "b_first" not in out:
        if time.monotonic() > end:
            raise RuntimeError("rank B never waited for rank A's claim")
        time.sleep(0.01)
    lead = cluster.leader()
    victim = lead if victim_kind == "leader" else (lead + 1) % cluster.size
    t0 = time.monotonic()
    cluster.kill(victim)
    restart = threading.Timer(down, cluster._spawn, (victim,))
    restart.start()
    # A's report goes 0.1 s after the kill: inside the leaderless window,
    # which lasts at least the members' election timeout (1 s).
    time.sleep(0.1)

    def report_a():
        r = a.call(op="report", key=key, claim_id=ans_a["claim_id"],
                   timings=[{"config": CONFIG_A, "ms": [1.0]}])
        out["a"] = r
        out["a_done"] = time.monotonic()

    ta = threading.Thread(target=report_a)
    ta.start()
    tw = writable_after(cluster, t0)
    ta.join()
    tb.join()
    restart.join()
    cost = checker.fault_cost({"lease_ms": 1000, "election_ms": EtcdCluster.ELECTION_TIMEOUT_MS},
                              {"fault": "etcd_kill", "down": down, "leader": victim_kind == "leader"},
                              {})
    return {"victim": victim_kind, "etcd_writable_s": round(tw, 2) if tw is not None else None,
            "a_report_s": round(out["a_done"] - t0, 2), "b_first_s": round(out["b_first"] - t0, 2),
            "b_first_outcome": out["b_first_outcome"],
            "b_total_s": round(out["b_done"] - out["b_start"], 2),
            "config_a": out["a"].get("config"), "config_b": out["b"].get("config"),
            "model_cost_s": round(cost, 3), "b_reports": out["b_reports"]}


def run(trials=6, victim="leader", down=1.2):
    """The trials' rows (trial() above), on a cluster of their own."""
    root = Path(tempfile.mkdtemp(prefix="detd-lk-", dir="/tmp"))
    cluster = EtcdCluster(root / "etcd", size=3)
    cluster.start(timeout=60)
    daemons, actors = [], []
    rows = []
    try:
        for i in range(2):
            d = Daemon(root, name=f"n{i}",
                       extra_args=["--etcd", cluster.endpoints, "--node-id", f"n{i}",
                                   "--lease-ms", "1000", "--pass-timeout-ms", "1000"])
            d.start(wait=False)
            daemons.append(d)
        for d in daemons:
            d.wait_ready(15)
        settled(cluster, daemons)
        actors = [ServeClient(daemons[0], 0), ServeClient(daemons[1], 1)]
        for t in range(trials):
            rows.append(trial(cluster, actors[0], actors[1], f"lk:{t}", victim, down, daemons[1]))
            settled(cluster, daemons)
    finally:
        for x in actors:
            x.close()
        for d in daemons:
            d.stop()
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=6)
    ap.add_argument("--victim", choices=("leader", "follower"), default="leader")
    ap.add_argument("--down", type=float, default=1.2, help="seconds the victim stays down")
    a = ap.parse_args()
    rows = run(a.trials, a.victim, a.down)
    cols = ["victim", "etcd_writable_s", "a_report_s", "b_first_s", "b_first_outcome", "b_reports",
            "b_total_s", "config_a", "config_b", "model_cost_s"]
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for r in rows:
        print("| " + " | ".join(str(r[c]) for c in cols) + " |")
    bad = [r for r in rows if r["config_a"] != r["config_b"]]
    print(f"{len(rows)} trials, {len(bad)} with two configs; "
          f"A's report after the kill: max {max(r['a_report_s'] for r in rows)} s; "
          f"B's whole wait: max {max(r['b_total_s'] for r in rows)} s")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
