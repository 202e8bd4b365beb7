"""Tables in etcd mode: 2 detd daemons on one real 3-member etcd cluster,
both with the same --tables directory; client processes on both nodes ask
the same keys at the same time. Every answer is the table's config with
source table, each key is committed once in etcd (with its table_file),
and no timing pass runs anywhere."""

import base64
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from conftest import counter, release_clients  # noqa: E402
from test_cluster import (CLIENT, CLIENT_RUN_S, NS, PROPAGATE_S, client_env, etcd, finish,  # noqa: E402,F401
                          nodes, pytestmark)

KERNEL = "tests.integration:row_sum@0123456789abcdef"
KEYS = 24
SOURCE_TABLE = 2


def config(i):
    return f"BLOCK={16 << (i % 4)},num_warps=4,num_stages=1,num_ctas=1"


def write_table(d):
    d.mkdir()
    kernels = {"tests.integration:row_sum": {
        f"tab:{i}": {"kwargs": {"BLOCK": 16 << (i % 4)}, "num_warps": 4, "num_stages": 1}
        for i in range(KEYS)}}
    (d / "sm90.json").write_text(json.dumps({"arch": "sm90", "kernels": kernels}))
    return d / "sm90.json"


def test_table_hits_commit_once_through_etcd(tmpdir_short, etcd, nodes):
    table = write_table(tmpdir_short / "tables")
    ns = nodes(2, extra=("--tables", str(table.parent)))
    start = tmpdir_short / "start"
    procs = []
    for i, nd in enumerate(ns):
        for r in range(3):
            out = tmpdir_short / f"c-{nd.name}-{r}.json"
            p = subprocess.Popen(
                [sys.executable, str(CLIENT), "--socket", nd.socket, "--keys", str(KEYS),
                 "--key-prefix", "tab:", "--rank", str(i * 3 + r), "--full-configs",
                 "--kernel", KERNEL, "--wait-start", str(start), "--out", str(out)],
                env=client_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            p.out_path = out
            procs.append(p)
    release_clients(start, procs, CLIENT_RUN_S)
    results = finish(procs)
    for res in results:
        assert res["errors"] == [], res["errors"]
        assert len(res["keys"]) == KEYS
        for k, e in res["keys"].items():
            i = int(k.split(":")[1])
            assert e["outcome"] == 1 and not e["timed"], (k, e)
            assert e["config"] == config(i) and e["source"] == SOURCE_TABLE, (k, e)
    # One decision per key in etcd, never on a lease, naming the table.
    r = etcd.ctl("get", "--prefix", f"/detd/v1/{NS}/decisions/", "-w", "json")
    kvs = json.loads(r.stdout).get("kvs", [])
    assert len(kvs) == KEYS
    for kv in kvs:
        assert kv.get("lease", 0) == 0
        v = json.loads(base64.b64decode(kv["value"]))
        assert v["table_file"] == str(table), v
        assert v["source"] == SOURCE_TABLE and v["config"] == config(int(v["key"].split(":")[1])), v
        assert int(kv.get("version", 1)) == 1  # written once, never overwritten
    # No timing pass anywhere; each node's store holds every decision.
    for nd in ns:
        st = json.loads(nd.detctl("status", "--json", check=True).stdout)
        assert counter(st, "timing_passes") == 0, st["counters"]
        assert counter(st, "table_hits") >= 1
        end = time.monotonic() + PROPAGATE_S  # by the watch (test_cluster.py)
        while len(nd.decisions()) < KEYS and time.monotonic() < end:
            time.sleep(0.1)
        assert len(nd.decisions()) == KEYS
