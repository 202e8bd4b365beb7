"""The daemon's log lines: one line per event, human or JSON.

A small workload (3 client processes racing on the same keys) runs
against a real daemon; every JSON line must parse and carry ts (RFC 3339
UTC, milliseconds), level and msg; every decision must be logged exactly
once, at info, with its fields, and they must match the store. With the
etcd backend, a decision learned from a peer is logged once on that node
too, naming the node it came from.
"""
import json
import os
import re
import shutil
import sqlite3
import sys
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from conftest import Daemon, requires  # noqa: E402
from etcd_cluster import EtcdCluster  # noqa: E402

TS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
HUMAN = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (error|warn |info |debug) detd: \S")
FIELDS = ("id", "namespace", "arch", "kernel", "key", "config", "source",
          "claim", "host", "pid", "rank", "uid", "node", "origin", "via")
# A key with characters JSON must escape, and non-ASCII text.
PREFIX = 'q"\\ü✓:'


def workload(d, tmp, keys=5, procs=3, prefix="k:"):
    ps = [d.client("--keys", keys, "--rank", r, "--key-prefix", prefix,
                   "--sleep-ms", 5, out=tmp / f"out{r}.json")
          for r in range(procs)]
    for p in ps:
        assert p.wait(60) == 0
    return [json.loads((tmp / f"out{r}.json").read_text()) for r in range(procs)]


def store_rows(d):
    con = sqlite3.connect(f"file:{d.state}/detd.sqlite?mode=ro", uri=True)
    try:
        return {r[0]: r[1:] for r in con.execute(
            "SELECT id, kernel, key, config, by_host, by_pid, by_rank FROM decisions")}
    finally:
        con.close()


def test_json_lines_each_decision_once(tmpdir_short):
    d = Daemon(tmpdir_short, extra_args=["--log-format", "json"]).start()
    try:
        outs = workload(d, tmpdir_short, prefix=PREFIX)
        assert d.detctl("reset", "--kernel", "m:none@0").returncode == 0  # removes nothing, logs once
    finally:
        assert d.stop() == 0
    lines = d.read_log().splitlines()
    assert len(lines) > 10
    events = [json.loads(ln) for ln in lines]   # every line parses
    for e in events:
        assert TS.match(e["ts"]), e
        assert e["level"] in ("error", "warn", "info", "debug")
        assert isinstance(e["msg"], str) and e["msg"]
    decided = [e for e in events if e["msg"] == "decided"]
    rows = store_rows(d)
    assert len(rows) == 5
    assert sorted(e["id"] for e in decided) == sorted(rows)   # once each
    for e in decided:
        assert e["level"] == "info"
        assert set(FIELDS) <= set(e), e
        kernel, key, config, host, pid, rank = rows[e["id"]]
        assert (e["kernel"], e["key"], e["config"]) == (kernel, key, config)
        assert (e["host"], e["pid"], e["rank"]) == (host, pid, rank)
        assert e["key"].startswith(PREFIX)
        assert e["namespace"] == "default" and e["source"] == "timed"
        assert e["origin"] == "local" and e["via"] == "report"
        assert isinstance(e["pid"], int) and isinstance(e["claim"], int)
        assert e["claim"] > 0, e  # 63 random bits, unsigned as elsewhere
        assert e["uid"] == os.getuid() and e["node"] != "", e
    # Every process launched the logged config.
    logged = {e["key"]: e["config"] for e in decided}
    for out in outs:
        for key, v in out["keys"].items():
            assert v["config"] == logged[key]
    assert any(e["msg"].startswith("detd ") and "serving on" in e["msg"] for e in events)
    # Every event naming a claim, a session, a key or a pid carries them as
    # members too: each report names its claim, key id, session, pid, uid
    # and rank, and the claim is the one its decision was logged with.
    (reset,) = [e for e in events if e["msg"].startswith("reset namespace ")]
    assert reset["namespace"] == "default" and reset["kernel"] == "m:none@0", reset
    reports = [e for e in events if e["msg"].startswith("report for claim ")]
    assert len(reports) == 5, [e["msg"] for e in events]
    claims = {e["claim"]: e for e in decided}
    for e in reports:
        assert {"claim", "key_id", "session", "pid", "uid", "rank"} <= set(e), e
        assert f"report for claim {e['claim']} on key {e['key_id']} from session {e['session']} " \
               f"(pid {e['pid']} uid {e['uid']} on " in e["msg"], e
        assert claims[e["claim"]]["id"].startswith(e["key_id"]) and len(e["key_id"]) == 12, e
        assert claims[e["claim"]]["pid"] == e["pid"] and claims[e["claim"]]["rank"] == e["rank"], e


def test_human_lines(tmpdir_short):
    d = Daemon(tmpdir_short).start()
    try:
        workload(d, tmpdir_short, keys=4, prefix="a b=c:")
    finally:
        assert d.stop() == 0
    lines = d.read_log().splitlines()
    for ln in lines:
        assert HUMAN.match(ln), ln
    decided = [ln for ln in lines if " detd: decided id=" in ln]
    assert len(decided) == 4
    # Other events are their message alone (the fields are JSON's only).
    reports = [ln for ln in lines if " detd: report for claim " in ln]
    assert len(reports) == 4 and all(re.search(r"rank -?\d+\)$", ln) for ln in reports), reports
    assert all(int(re.search(r" claim=(\d+) ", ln).group(1)) > 0 for ln in decided), decided
    ids = {re.search(r" id=([0-9a-f]{64}) ", ln).group(1) for ln in decided}
    assert ids == set(store_rows(d))
    for ln in decided:
        # A value with spaces or '=' is quoted; plain ones are bare.
        assert re.search(r' key="a b=c:\d+" ', ln), ln
        assert " namespace=default " in ln and " source=timed " in ln
        assert " origin=local via=report" in ln


@requires(shutil.which("etcd") is not None, "etcd-server is not installed")
def test_etcd_decision_logged_once_per_node_with_origin(tmpdir_short):
    etcd = EtcdCluster(tmpdir_short / "etcd", size=1)
    etcd.start()
    nodes = []
    try:
        for name in ("n0", "n1"):
            nodes.append(Daemon(tmpdir_short, name=name, extra_args=[
                "--etcd", etcd.endpoints, "--node-id", name, "--lease-ms", "2000",
                "--log-format", "json"]).start())
        # Only n0's clients ask: n1 learns every decision from etcd.
        workload(nodes[0], tmpdir_short, keys=3, procs=2, prefix="e:")
        ids = set(store_rows(nodes[0]))
        assert len(ids) == 3
        end = time.monotonic() + 10
        while time.monotonic() < end and set(store_rows(nodes[1])) != ids:
            time.sleep(0.05)
    finally:
        for nd in nodes:
            nd.stop()
        etcd.stop()
    for i, nd in enumerate(nodes):
        events = [json.loads(ln) for ln in nd.read_log().splitlines()]
        decided = [e for e in events if e["msg"] == "decided"]
        assert sorted(e["id"] for e in decided) == sorted(ids), i
        for e in decided:
            assert e["origin"] == "n0" and e["level"] == "info"
            assert e["key"].startswith("e:") and e["source"] == "timed"
        if i == 1:
            assert {e["via"] for e in decided} == {"watch"}
