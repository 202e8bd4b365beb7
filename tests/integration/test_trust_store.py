"""The store's edges, with real daemons and real files: a damaged page is
refused at start-up and salvaged by --repair, one daemon per state
directory, and a full disk answers UNAVAILABLE naming the store (logged
once, counted, retried by the client until there is room again)."""

import json
import os
import sqlite3
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from conftest import DETD, IS_ROOT, Daemon, counter, requires
from test_metrics import free_port

N_KEYS = 600


def run_client(daemon, out, keys=N_KEYS, extra=()):
    p = daemon.client("--keys", keys, "--sleep-ms", 0, "--full-configs", *extra, out=out)
    assert p.wait(300) == 0
    return json.loads(Path(out).read_text())


def varint(b, i):
    """SQLite's big-endian varint at b[i:]: (value, next index)."""
    v = 0
    for k in range(9):
        c = b[i + k]
        if k == 8:
            return (v << 8) | c, i + 9
        v = (v << 7) | (c & 0x7F)
        if c < 0x80:
            return v, i + k + 1
    raise AssertionError("unreachable")


def table_leaves(data, root, psize):
    """Leaf pages of the table b-tree at root, left to right, each with the
    rowids of its cells."""
    leaves, stack = [], [root]
    while stack:
        n = stack.pop()
        off = (n - 1) * psize
        h = off + (100 if n == 1 else 0)
        kind = data[h]
        ncell = int.from_bytes(data[h + 3:h + 5], "big")
        if kind == 0x0D:  # table leaf
            ptrs = [int.from_bytes(data[h + 8 + 2 * i:h + 10 + 2 * i], "big") for i in range(ncell)]
            rowids = []
            for p in ptrs:
                _, j = varint(data, off + p)
                rowid, _ = varint(data, j)
                rowids.append(rowid)
            leaves.append((n, rowids))
        elif kind == 0x05:  # table interior
            ptrs = [int.from_bytes(data[h + 12 + 2 * i:h + 14 + 2 * i], "big") for i in range(ncell)]
            kids = [int.from_bytes(data[off + p:off + p + 4], "big") for p in ptrs]
            kids.append(int.from_bytes(data[h + 8:h + 12], "big"))
            stack.extend(reversed(kids))
        else:
            raise AssertionError(f"page {n}: type {kind:#x} in a table b-tree")
    return leaves


def corrupt_middle_leaf(store_path):
    """Overwrite one leaf page of the decisions table (the middle one) with
    garbage; returns the decision ids that were on it."""
    with sqlite3.connect(f"file:{store_path}?mode=ro", uri=True) as db:
        root = db.execute("SELECT rootpage FROM sqlite_schema WHERE name = 'decisions'").fetchone()[0]
        ids = dict(db.execute("SELECT rowid, id FROM decisions").fetchall())
    assert not Path(str(store_path) + "-wal").exists() or Path(str(store_path) + "-wal").stat().st_size == 0
    data = Path(store_path).read_bytes()
    psize = int.from_bytes(data[16:18], "big")
    psize = 65536 if psize == 1 else psize
    leaves = table_leaves(data, root, psize)
    assert len(leaves) >= 3, leaves
    page, rowids = leaves[len(leaves) // 2]
    with open(store_path, "r+b") as f:
        f.seek((page - 1) * psize)
        f.write(bytes((i * 151 + 7) & 0xFF for i in range(psize)))
        f.flush()
        os.fsync(f.fileno())
    return {ids[r] for r in rowids}


def key_ids(store_path):
    """key string -> decision id, read from a sound store."""
    with sqlite3.connect(f"file:{store_path}?mode=ro", uri=True) as db:
        return dict(db.execute("SELECT key, id FROM decisions").fetchall())


def test_damaged_page_refused_then_repaired(tmpdir_short):
    d = Daemon(tmpdir_short).start()
    written = run_client(d, tmpdir_short / "w.json")
    assert written["errors"] == []
    assert sum(1 for e in written["keys"].values() if e["timed"]) == N_KEYS
    assert d.status()["decisions"] == N_KEYS
    assert d.stop() == 0
    store = Path(d.state) / "detd.sqlite"
    by_key = key_ids(store)
    assert len(by_key) == N_KEYS
    lost_ids = corrupt_middle_leaf(store)
    assert 0 < len(lost_ids) < N_KEYS // 4

    # Refused: non-zero, the file and the problem named, --repair offered.
    r = subprocess.run([str(DETD), "--socket", d.socket, "--state-dir", d.state],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    assert f"store '{store}' is damaged" in r.stderr, r.stderr
    assert "(integrity check" in r.stderr and "malformed" in r.stderr, r.stderr
    assert "--repair" in r.stderr, r.stderr
    assert not os.path.exists(d.socket)

    # --repair: salvages, reports kept and lost, serves.
    d.extra_args = ["--repair"]
    d.start()
    log = d.read_log()
    kept = N_KEYS - len(lost_ids)
    assert f"decisions {kept} kept, {len(lost_ids)} lost" in log, log[-3000:]
    asides = sorted(Path(d.state).glob("detd.sqlite.corrupt-*"))
    asides = [a for a in asides if not a.name.endswith(("-wal", "-shm"))]
    assert len(asides) == 1, asides
    assert f"the damaged file is kept as '{asides[0]}'" in log
    assert asides[0].read_bytes()[:16] == b"SQLite format 3\x00"
    assert d.status()["decisions"] == kept

    # Every survivor is served from the store, byte-equal to what was
    # written; the lost keys are timed again.
    again = run_client(d, tmpdir_short / "a.json")
    assert again["errors"] == []
    lost_keys = {k for k, i in by_key.items() if i in lost_ids}
    assert len(lost_keys) == len(lost_ids)
    for k, e in again["keys"].items():
        if k in lost_keys:
            assert e["timed"], k
        else:
            assert not e["timed"] and e["outcome"] == 1, (k, e)
            assert e["config"].encode() == written["keys"][k]["config"].encode(), k
    assert d.stop() == 0

    # The repaired store is sound: a plain start passes the check.
    d.extra_args = []
    at = d.log_size()
    d.start()
    d.wait_log("integrity check ok", after=at)
    assert d.status()["decisions"] == N_KEYS
    assert d.stop() == 0


def test_repair_of_a_sound_store_changes_nothing(tmpdir_short):
    d = Daemon(tmpdir_short, extra_args=["--repair"]).start()
    d.wait_log("--repair: the store is sound, nothing to repair")
    assert d.stop() == 0
    assert list(Path(d.state).glob("detd.sqlite.corrupt-*")) == []


def test_a_version_7_store_keeps_its_decisions_with_unknown_peers(tmpdir_short):
    d = Daemon(tmpdir_short, ["--node-id", "node-7"]).start()
    first = run_client(d, tmpdir_short / "w.json", keys=3, extra=("--key-prefix", "old:"))
    assert first["errors"] == []
    before = {x["key"]: x for x in json.loads(d.detctl("decisions", "--json", check=True).stdout)["decisions"]}
    assert len(before) == 3 and all(x["decided_peer"]["uid"] == os.getuid() for x in before.values())
    assert d.stop() == 0
    # The file as detd of schema version 7 left it: no by_uid, by_node,
    # by_claimed_pid, by_world_size or by_job in decisions, no claimed_pid, by_uid or by_node in
    # failures.
    store = Path(d.state) / "detd.sqlite"
    db = sqlite3.connect(store)
    db.executescript("ALTER TABLE decisions DROP COLUMN timing_json;"
                     "DROP TABLE lock_skips;"
                     "ALTER TABLE decisions DROP COLUMN by_world_size;"
                     "ALTER TABLE decisions DROP COLUMN by_job;"
                     "ALTER TABLE failures DROP COLUMN claimed_pid;"
                     "ALTER TABLE failures DROP COLUMN by_uid;"
                     "ALTER TABLE failures DROP COLUMN by_node;"
                     "ALTER TABLE decisions DROP COLUMN by_uid;"
                     "ALTER TABLE decisions DROP COLUMN by_node;"
                     "ALTER TABLE decisions DROP COLUMN by_claimed_pid;"
                     "PRAGMA user_version = 7;")
    db.close()
    d.start()
    after = {x["key"]: x for x in json.loads(d.detctl("decisions", "--json", check=True).stdout)["decisions"]}
    assert set(after) == set(before)
    for k, x in after.items():
        # (the job of the timing process was not kept before schema 10)
        job = ("world_size", "job")
        assert x["config"] == before[k]["config"], x
        assert {f: v for f, v in x["decided_by"].items() if f not in job} == \
            {f: v for f, v in before[k]["decided_by"].items() if f not in job}, x
        assert (x["decided_by"]["world_size"], x["decided_by"]["job"]) == (0, ""), x
        # The pid the daemon saw was always kept; the rest was not.
        assert x["decided_peer"] == {"pid": first["pid"], "uid": -1, "node": "", "claimed_pid": 0}, x
    # Served from the store: nothing is timed again.
    again = run_client(d, tmpdir_short / "a.json", keys=3, extra=("--key-prefix", "old:"))
    assert not any(e["timed"] for e in again["keys"].values()), again
    assert {k: e["config"] for k, e in again["keys"].items()} == {k: x["config"] for k, x in after.items()}
    # A decision made now records its reporter in full.
    new = run_client(d, tmpdir_short / "n.json", keys=1, extra=("--key-prefix", "new:"))
    (fresh,) = [x for x in json.loads(d.detctl("decisions", "--json", check=True).stdout)["decisions"]
                if x["key"] == "new:0"]
    assert fresh["decided_peer"] == {"pid": new["pid"], "uid": os.getuid(), "node": "node-7",
                                     "claimed_pid": new["pid"]}, fresh
    with sqlite3.connect(f"file:{store}?mode=ro", uri=True) as ro:
        assert ro.execute("PRAGMA user_version").fetchone()[0] == 11
    assert d.stop() == 0


def test_second_daemon_on_one_state_dir_refuses(tmpdir_short):
    first = Daemon(tmpdir_short, name="one").start()
    out = run_client(first, tmpdir_short / "one.json", keys=5)
    assert out["errors"] == []
    second = subprocess.run([str(DETD), "--socket", str(tmpdir_short / "two.sock"),
                             "--state-dir", first.state],
                            capture_output=True, text=True, timeout=30)
    assert second.returncode != 0
    assert f"state directory '{first.state}' is in use by another detd (pid {first.proc.pid}," \
        in second.stderr, second.stderr
    assert not os.path.exists(tmpdir_short / "two.sock")
    # The first keeps serving what it decided.
    again = run_client(first, tmpdir_short / "one-again.json", keys=5)
    assert again["errors"] == []
    assert all(not e["timed"] for e in again["keys"].values())
    assert first.status()["decisions"] == 5
    assert first.stop() == 0
    # Once it is gone, the lock is free.
    third = Daemon(tmpdir_short, name="three")
    third.state = first.state
    third.start()
    assert third.status()["decisions"] == 5
    assert third.stop() == 0


@pytest.fixture
def small_fs(tmpdir_short):
    mnt = tmpdir_short / "fs"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {r.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)])


def fill(path):
    """Write to path until the filesystem is full; returns the bytes written."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    n = 0
    try:
        for size in (1 << 16, 4096, 512, 1):
            block = b"\0" * size
            while True:
                try:
                    n += os.write(fd, block)
                except OSError:
                    break
    finally:
        os.close(fd)
    return n


def metric(port, name, **labels):
    """One sample of the daemon's /metrics (0 when absent)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    want = name + ("{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}" if labels else "")
    for line in text.splitlines():
        if line.startswith(want + " "):
            return float(line.split()[-1])
    return 0.0


@requires(IS_ROOT, "mounting a small tmpfs needs root")
def test_disk_full_is_unavailable_logged_once_and_retried(tmpdir_short, small_fs):
    port = free_port()
    d = Daemon(tmpdir_short, ["--metrics", f"127.0.0.1:{port}"])
    # "etcd" in the store's path: libdetd must not take the store's
    # UNAVAILABLE for the daemon's final verdict on etcd.
    d.state = str(small_fs / "etcd-state")
    d.start()
    before = run_client(d, tmpdir_short / "b.json", keys=20)
    assert before["errors"] == []
    filler = small_fs / "filler"
    assert fill(filler) > 0
    with pytest.raises(OSError):
        (small_fs / "probe").write_bytes(b"x" * 4096)

    # Each Report fails on the disk: UNAVAILABLE, which libdetd retries
    # until the call's own deadline (1 s each), naming the store.
    mark = d.log_size()
    full = run_client(d, tmpdir_short / "f.json", keys=2,
                      extra=("--key-prefix", "full:", "--timeout-ms", 1000))
    store = Path(d.state) / "detd.sqlite"
    assert len(full["errors"]) == 2, full
    for key, rc, name, detail, what in full["errors"]:
        assert what == "report", full["errors"]
        assert name == "daemon unavailable", full["errors"]
        assert "disk full" in detail and f"'{store}'" in detail, detail
    failed = counter(d.status(), "store_disk_full")
    assert failed >= 2  # every failed call counted, retries included
    assert metric(port, "detd_store_write_failures_total", cause="disk_full") >= failed
    # Logged once for the whole episode, naming the file and the error.
    log = d.read_log()[mark:]
    lines = [ln for ln in log.splitlines() if "store write failed" in ln]
    assert len(lines) == 1, lines
    assert "disk full" in lines[0] and f"'{store}'" in lines[0], lines[0]
    # Decided keys are still served, from the store and the hot cache.
    again = run_client(d, tmpdir_short / "g.json", keys=20)
    assert again["errors"] == []
    assert all(not e["timed"] for e in again["keys"].values())
    assert {k: e["config"] for k, e in again["keys"].items()} == \
        {k: e["config"] for k, e in before["keys"].items()}
    assert d.status()["decisions"] == 20  # nothing half-written

    # A client retrying while the disk is full succeeds once there is room:
    # free it once the daemon has refused this client's Report (counted).
    late = d.client("--keys", 1, "--key-prefix", "late:", "--sleep-ms", 0, "--full-configs",
                    "--timeout-ms", 60000, out=tmpdir_short / "l.json")
    end = time.monotonic() + 30
    while counter(d.status(), "store_disk_full") == failed:
        assert late.poll() is None and time.monotonic() < end, d.read_log()[-2000:]
        time.sleep(0.05)
    filler.unlink()
    assert late.wait(60) == 0
    result = json.loads((tmpdir_short / "l.json").read_text())
    assert result["errors"] == [] and result["keys"]["late:0"]["timed"], result
    d.wait_log("writes again after", after=mark)
    log = d.read_log()[mark:]
    assert len([ln for ln in log.splitlines() if "store write failed" in ln]) == 1
    assert d.status()["decisions"] == 21
    assert d.stop() == 0
    d.start()
    assert d.status()["decisions"] == 21
    assert d.stop() == 0
