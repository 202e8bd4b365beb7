"""tests/bench/scale_bench.py: the model's fit on figures with a known
answer, and the benchmark itself at its smallest (2 daemons in their own
network namespaces, a real 3-member etcd cluster on a bridge address):
every phase completes (etcd coming up late included: the boot retries
counted), one designated rank per key, every node's claim
counted in etcd, and nothing (namespaces, bridge, processes) left behind.
Needs root (network namespaces) and etcd: missing, a failure under CI."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "integration"))
import scale_bench as sb  # noqa: E402
from conftest import CI, HAVE_ETCD, IS_ROOT  # noqa: E402


def need(ok, reason):
    """A requirement of the machine: missing, a failure under CI (as the
    integration suites' requires()), else a skip."""
    if not ok:
        if CI:
            pytest.fail(f"{reason} (CI is set: a missing requirement is a "
                        "failure)", pytrace=False)
        pytest.skip(reason)


def synthetic(n, m=3):
    """A configuration whose per-key costs are exactly linear in n."""
    cost = {"req": {"Txn": 1.0 + n, "Range": 2.0, "DeleteRange": 1.0},
            "writes": 2.0 + n, "reads": 2.0, "sent": 100.0 * n,
            "recv": 50.0, "wal": 500.0 * (2 + n), "proposals": 2.0 + n,
            "watch_msgs": 3.0 * n}
    return {"m": m, "n": n, "notes": [],
            "seq": {"keys": 10, "asked": 10, "all": [5.0, 7.0], "miss": [1.0],
                    "commit": [1.0], "cost": cost},
            "idle": {"req_per_daemon_s": 4.0, "bytes_per_daemon_s": 10.0 * n},
            "burst": {"keys": 10, "s": 1.0, "n_errors": 0,
                      "cost": {"proposals": 2.0 + n}},
            "prop": [1.0], "rss_daemon_kb": [1024], "rss_etcd_kb": [2048]}


def test_linfit_exact():
    a, b = sb.linfit([16, 32, 64], [18, 34, 66])
    assert abs(a - 2) < 1e-9 and abs(b - 1) < 1e-9


def test_model_predicts_from_the_fit():
    res = [synthetic(16), synthetic(32), synthetic(64), synthetic(16, m=5)]
    out = sb.model(res, nodes=1000, keys=10000, write_rate=20000)
    # Fitted on the 3-member figures only.
    assert out["m"] == 3 and out["xs"] == [16, 32, 64]
    assert abs(out["props_per_key"] - 1002) < 1e-6
    assert abs(out["total_props"] - 1002 * 10000) < 1e-3
    assert abs(out["time_s"] - 1002 * 10000 / 20000) < 1e-6
    assert abs(out["wal_mib"] - 500 * 1002 * 10000 / 2**20) < 1e-6
    assert abs(out["watch_msgs"] - 3000 * 10000) < 1e-3
    # One claim per key: the 1000 claims become 1.
    assert abs(out["props_per_key_one_claim"] - 3) < 1e-6
    assert abs(out["idle_req_s"] - 4000) < 1e-6
    # Without a given rate: the best burst (2 + 64 proposals x 10 keys/s).
    assert sb.model(res)["rate"] == pytest.approx(660.0)


def test_model_without_completed_configuration():
    r = synthetic(16)
    r["seq"]["keys"] = 0
    assert sb.model([r]) is None


def test_bench_smallest_run_leaves_nothing(tmp_path):
    need(HAVE_ETCD, "etcd-server and etcd-client are not installed")
    need(IS_ROOT, "the scale benchmark needs root (network namespaces)")
    before = subprocess.run([sb.IP, "netns", "list"], capture_output=True,
                            text=True).stdout
    out = tmp_path / "r.json"
    r = subprocess.run([sys.executable, str(HERE / "scale_bench.py"), "--nodes", "2",
                        "--members", "3", "--keys", "3", "--burst", "4",
                        "--idle-s", "1", "--late-s", "9", "--subnet", "10.233", "--json", str(out)],
                       capture_output=True, text=True, timeout=240,
                       env=dict(os.environ))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "NOT COMPLETE" not in r.stdout
    res = json.loads(out.read_text())["results"]
    assert len(res) == 1
    c = res[0]
    assert c["storm"]["up"] == 2 and c["restart"]["up"] == 2
    # Started while etcd was down: both retried (counted), both came up.
    # etcd stays down 9 s: a boot attempt fails only after its call's 3 s
    # budget (the revoke of a lease the restart phase's stop left, else the
    # grant), then waits up to 3 s of backoff; two failed attempts each.
    assert c["late"]["up"] == 2 and c["late"]["retries_seen"] == 2
    assert c["late"]["retries"] >= 2
    assert c["seq"]["keys"] == 3 and c["seq"]["n_errors"] == 0
    assert c["burst"]["n_errors"] == 0
    # One timing pass per key in the whole cluster, across both nodes.
    assert c["burst"]["passes"] == 4
    # One claimant per key: the owner's claim Txn and the commit, which
    # deletes the claim (each node its own claim before: 4); the other node
    # claims only when the owner answered later than its deferral, which a
    # loaded machine may cause. (Txn requests also count the reads before
    # a claim, transactions of reads only: not proposals.)
    assert 1.5 <= c["seq"]["cost"]["proposals"] <= 3.5
    assert len(c["prop"]) == 3
    assert "| time to decide all keys" in r.stdout
    after = subprocess.run([sb.IP, "netns", "list"], capture_output=True,
                           text=True).stdout
    assert after == before
    links = subprocess.run([sb.IP, "-br", "link"], capture_output=True,
                           text=True).stdout
    assert "dsb" not in links and "dsv" not in links
