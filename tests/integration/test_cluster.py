"""The etcd backend end to end: a real 3-member etcd cluster on loopback,
4 detd daemons (--etcd), client processes on each (detd_client.py, libdetd
through ctypes).

What is checked, per test: one timing pass per key in the whole cluster,
every node's SQLite store and etcd holding the same single decision per
key, and that no daemon decides a new key while it cannot reach etcd.
Stores are read directly (sqlite3, read-only), etcd with etcdctl.
"""

import base64
import ctypes
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from conftest import DETD, HAVE_ETCD, Daemon, clients_up, counter, release_clients, requires  # noqa: E402
from etcd_cluster import EtcdCluster  # noqa: E402
import detd_client as dc  # noqa: E402

CLIENT = HERE / "detd_client.py"
NS = "default"
LEASE_MS = 2000

# The daemon's etcd timing (daemon/cluster/cluster_int.h, etcd_stream.c,
# app/coord.c), from which this file's waits are bounded.
ETCD_CALL_S = 3.0     # CLUSTER_BUDGET_MS: one etcd call, retries included
BOOT_BACKOFF_S = 3.0  # CLUSTER_BOOT_RETRY_CAP_MS: a failed boot's longest backoff step
MONITOR_S = 1.0       # CLUSTER_MONITOR_MS: the status monitor's round (nodes/ read when dirty)
WATCH_RETRY_S = 2.0   # RECONNECT_MAX_MS: the longest wait before a broken watch reconnects
PERSIST_S = 0.5       # COORD_PERSIST_MS: how often the applied revision is stored
RECHECK_S = 1.0       # COORD_RECLAIM_MS: a waiting node re-reads a claim held elsewhere
CLAIM_TRUST_S = 3.0   # CLUSTER_CLAIM_TRUST_MS: a claim read held is trusted this long
# A boot on a reachable etcd: its calls (revoke, grant, put, the resync's
# read, the watch) each within its budget.
BOOT_S = 5 * ETCD_CALL_S
# A decision reaches a connected node's store by its watch; a broken watch
# reconnects and, compacted, resyncs: twice that for a loaded machine.
PROPAGATE_S = 2 * (WATCH_RETRY_S + ETCD_CALL_S)
# Registered once etcd serves (docs/multi-node.md, "Scale"): the call under
# way, one backoff step and one attempt, rounded up as that page states it.
REGISTER_S = 10.0
# A change to nodes/ is in every daemon's status after its monitor's next
# round: the round's wait, then its calls (the members' status, the read).
REGISTRY_S = MONITOR_S + 3 * ETCD_CALL_S

pytestmark = requires(HAVE_ETCD, "etcd-server and etcd-client are not installed")


# ---- helpers ----------------------------------------------------------------

@pytest.fixture
def etcd(tmpdir_short):
    c = EtcdCluster(tmpdir_short / "etcd", size=3)
    try:
        c.start()
        yield c
    finally:
        c.stop()


class Node(Daemon):
    def __init__(self, root, name, endpoints, extra=()):
        super().__init__(root, name=name,
                         extra_args=["--etcd", endpoints, "--node-id", name,
                                     "--lease-ms", str(LEASE_MS), *extra])
        self.name = name

    def start(self, wait=True):
        mark = self.log_size()
        super().start(wait=False)
        if wait:
            self.wait_log("serving on", after=mark)
        return self

    def stop(self, sig=signal.SIGTERM, timeout=15):
        rc = super().stop(sig, timeout)
        log = self.read_log()
        # Under -DDETD_SANITIZE=ON: any report fails the test.
        assert "Sanitizer" not in log and "runtime error" not in log, \
            log[-6000:]
        return rc

    def decisions(self):
        """{decision id: config} from this node's store (read-only)."""
        db = Path(self.state) / "detd.sqlite"
        if not db.exists():
            return {}
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
        try:
            return dict(con.execute("SELECT id, config FROM decisions"))
        finally:
            con.close()

    def meta(self, name):
        db = Path(self.state) / "detd.sqlite"
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
        try:
            r = con.execute("SELECT value FROM meta WHERE name = ?",
                            (name,)).fetchone()
            return r[0] if r else None
        finally:
            con.close()


@pytest.fixture
def nodes(tmpdir_short, etcd):
    made = []

    def make(n=4, endpoints=None, extra=()):
        for i in range(n):
            nd = Node(tmpdir_short, f"n{len(made)}", endpoints or etcd.endpoints,
                      extra)
            made.append(nd)
        for nd in made[-n:]:
            nd.start()
        return made[-n:]

    yield make
    for nd in made:
        nd.stop()


def etcd_decisions(cluster):
    """{decision id: config} and the raw count, from etcd."""
    r = cluster.ctl("get", "--prefix", f"/detd/v1/{NS}/decisions/", "-w", "json")
    kvs = json.loads(r.stdout).get("kvs", [])
    out = {}
    for kv in kvs:
        key = base64.b64decode(kv["key"]).decode()
        val = json.loads(base64.b64decode(kv["value"]))
        assert kv.get("lease", 0) == 0, f"decision {key} is attached to a lease"
        out[key.rsplit("/", 1)[1]] = val["config"]
    return out, len(kvs)


def etcd_revision(cluster):
    r = cluster.ctl("get", "/", "-w", "json")
    return int(json.loads(r.stdout)["header"]["revision"])


def client_env():
    """Clients may load libdetd from another build than the daemon's
    (DETD_CLIENT_BUILD_DIR): a sanitizer build of the daemon cannot be
    loaded into a plain python3."""
    env = dict(os.environ)
    if env.get("DETD_CLIENT_BUILD_DIR"):
        env["DETD_BUILD_DIR"] = env["DETD_CLIENT_BUILD_DIR"]
    return env


def spawn_client(tmp, node, rank, keys, prefix="i:", sleep_ms=30,
                 timeout_ms=30000, start=None, hold=False, tag=""):
    out = Path(tmp) / f"c-{node.name}-{rank}{tag}.json"
    args = [sys.executable, str(CLIENT), "--socket", node.socket,
            "--keys", str(keys), "--key-prefix", prefix, "--rank", str(rank),
            "--sleep-ms", str(sleep_ms), "--timeout-ms", str(timeout_ms),
            "--out", str(out)]
    if start:
        args += ["--wait-start", str(start)]
    if hold:
        args.append("--hold")
    p = subprocess.Popen(args, env=client_env(), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    p.out_path = out
    return p


CLIENT_RUN_S = 90  # finish(): the bound on each client's whole run


def finish(procs, timeout=CLIENT_RUN_S):
    results = []
    for p in procs:
        try:
            _, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.communicate()
            raise AssertionError("client did not finish")
        assert p.returncode == 0, err
        results.append(json.loads(p.out_path.read_text()))
    return results


def storm(tmp, nodes, per_node, keys, prefix, sleep_ms=30, timeout_ms=30000,
          during=None):
    """Clients on every node race on the same keys; returns their results.
    during(): called once every client is running."""
    start = Path(tmp) / f"start-{prefix.strip(':')}"
    procs = [spawn_client(tmp, nd, i * per_node + r, keys, prefix, sleep_ms,
                          timeout_ms, start, tag=prefix.strip(":"))
             for i, nd in enumerate(nodes) for r in range(per_node)]
    release_clients(start, procs, CLIENT_RUN_S)
    if during is not None:
        during()
    return finish(procs)


def check_agreement(results, nodes, cluster, keys, prefix):
    """Every client used the etcd decision; one decision per key
    everywhere; returns {key: number of timing passes}."""
    passes = {}
    configs = {}
    for res in results:
        assert res["errors"] == [], res["errors"]
        for k, e in res["keys"].items():
            configs.setdefault(k, set()).add(e["config"])
            if e["timed"] and not e.get("superseded"):
                passes[k] = passes.get(k, 0) + 1
    assert len(configs) == keys
    for k, cs in configs.items():
        assert len(cs) == 1, f"key {k}: clients used {cs}"
    in_etcd, raw = etcd_decisions(cluster)
    assert raw == len(in_etcd)
    for nd in nodes:
        wait_for(lambda: set(in_etcd) <= set(nd.decisions()), PROPAGATE_S,
                 f"{nd.name} has every decision")
        local = nd.decisions()
        for i, cfg in in_etcd.items():
            assert local[i] == cfg, f"{nd.name}: {i[:12]} {local[i]} != etcd {cfg}"
    used = {next(iter(cs)) for cs in configs.values()}
    assert used <= set(in_etcd.values())
    return passes


KERNEL = "tests.integration:row_sum@0123456789abcdef"  # detd_client.py's defaults
CANDS = [f"BLOCK={16 << i},num_warps=4" for i in range(4)]


def key_id(key, ns=NS, arch="sm90", kernel=KERNEL, cands=CANDS):
    """The decision id detd gives a detd_client.py key (daemon/core/keyid.h)."""
    import hashlib
    fp = hashlib.sha256("".join(c + "\n" for c in sorted(set(cands))).encode()).hexdigest()
    return hashlib.sha256(("detd-key-v1\n" + "\0".join([ns, arch, kernel, key, fp])).encode()).hexdigest()


def owner_of(key_hex, names):
    """The key's rendezvous owner among node names (cluster_rendezvous_rank()
    in daemon/cluster/cluster_nodes.c: FNV-1a 64 of node NUL id, splitmix64)."""
    m = (1 << 64) - 1

    def weight(node):
        h = 0xcbf29ce484222325
        for b in node.encode() + b"\0" + key_hex.encode():
            h = ((h ^ b) * 0x100000001b3) & m
        h ^= h >> 30
        h = (h * 0xbf58476d1ce4e5b9) & m
        h ^= h >> 27
        h = (h * 0x94d049bb133111eb) & m
        return h ^ (h >> 31)
    return max(names, key=lambda n: (weight(n), [-ord(ch) for ch in n]))


def wait_for(pred, timeout, what):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting until {what}")


class Proxy:
    """A loopback TCP proxy in front of one etcd member that can be cut:
    cut() closes every connection and refuses new ones until heal()."""

    def __init__(self, target_port):
        self.target = ("127.0.0.1", target_port)
        self.lsock = socket.socket()
        self.lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.lsock.bind(("127.0.0.1", 0))
        self.lsock.listen(64)
        self.port = self.lsock.getsockname()[1]
        self.cut_now = False
        self.conns = []
        self.lock = threading.Lock()
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self.closed:
            try:
                c, _ = self.lsock.accept()
            except OSError:
                return
            if self.cut_now:
                c.close()
                continue
            try:
                u = socket.create_connection(self.target, timeout=2)
            except OSError:
                c.close()
                continue
            with self.lock:
                self.conns += [c, u]
            for a, b in ((c, u), (u, c)):
                threading.Thread(target=self._pump, args=(a, b),
                                 daemon=True).start()

    @staticmethod
    def _pump(a, b):
        try:
            while True:
                data = a.recv(65536)
                if not data:
                    break
                b.sendall(data)
        except OSError:
            pass
        for s in (a, b):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def cut(self):
        self.cut_now = True
        with self.lock:
            for s in self.conns:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                    s.close()
                except OSError:
                    pass
            self.conns = []

    def heal(self):
        self.cut_now = False

    def close(self):
        self.closed = True
        self.cut()
        self.lsock.close()


# ---- tests ------------------------------------------------------------------

def test_race_one_timing_pass_per_key(tmpdir_short, etcd, nodes):
    ns = nodes(4)
    keys = 20
    res = storm(tmpdir_short, ns, 2, keys, "race:")
    passes = check_agreement(res, ns, etcd, keys, "race:")
    assert len(passes) == keys, f"keys without a pass: {keys - len(passes)}"
    assert all(v == 1 for v in passes.values()), passes
    # Every node serves the same decision afterwards, as a hit.
    again = storm(tmpdir_short, ns, 1, keys, "race:", sleep_ms=0)
    for r in again:
        assert all(e["outcome"] == 1 and not e["timed"]
                   for e in r["keys"].values())
    check_agreement(res + again, ns, etcd, keys, "race:")


def test_leader_killed_during_storm(tmpdir_short, etcd, nodes):
    ns = nodes(4)
    keys = 40
    killed = []

    def kill_leader():
        # Mid-storm: once its first decision is committed (bound: the
        # clients' deadline, 45 s), while the other keys are still asked.
        wait_for(lambda: etcd_decisions(etcd)[1] >= 1, 45, "the storm's first decision")
        killed.append(etcd.kill_leader())

    res = storm(tmpdir_short, ns, 2, keys, "lk:", sleep_ms=20,
                timeout_ms=45000, during=kill_leader)
    assert killed
    passes = check_agreement(res, ns, etcd, keys, "lk:")
    assert len(passes) == keys
    # A pass may repeat only if a claim's lease lapsed during the election;
    # the decision never does (checked above on every node and in etcd).
    assert sum(passes.values()) <= keys + 4, passes


def test_quorum_loss_serves_existing_and_refuses_new(tmpdir_short, etcd, nodes):
    ns = nodes(4)
    res = storm(tmpdir_short, ns, 1, 5, "q:", sleep_ms=10)
    check_agreement(res, ns, etcd, 5, "q:")
    leader = etcd.leader()
    others = [i for i in range(3) if i != leader]
    etcd.kill(others[0])
    etcd.kill(leader)
    # Existing decisions: hits from the local copy, fast.
    t0 = time.monotonic()
    hit = finish([spawn_client(tmpdir_short, nd, 10 + i, 5, "q:", 0, 3000,
                               tag="-hit") for i, nd in enumerate(ns)])
    assert time.monotonic() - t0 < 15
    for r in hit:
        assert r["errors"] == []
        assert all(e["outcome"] == 1 for e in r["keys"].values())
    # New keys: a clear error naming etcd after the deadline, never a pass.
    t0 = time.monotonic()
    miss = finish([spawn_client(tmpdir_short, nd, 20 + i, 1, "new:", 0, 2500,
                                tag="-miss") for i, nd in enumerate(ns)])
    took = time.monotonic() - t0
    assert 2.0 < took < 20, took
    for r in miss:
        assert r["keys"] == {}, r
        assert len(r["errors"]) == 1
        assert "etcd" in r["errors"][0][3], r["errors"]
    # Quorum back: progress resumes.
    etcd.restart(leader)
    etcd.restart(others[0])
    res = storm(tmpdir_short, ns, 1, 3, "new:", sleep_ms=10)
    passes = check_agreement(res, ns, etcd, 3, "new:")
    assert sorted(passes.values()) == [1, 1, 1]


def test_restart_catches_up_then_resyncs_after_compaction(tmpdir_short, etcd,
                                                         nodes):
    ns = nodes(4)
    late = ns[3]
    # Its first resync stored a revision to resume from.
    wait_for(lambda: late.meta("etcd_revision") is not None, BOOT_S + PERSIST_S,
             "the first resync stored its revision")
    late.stop()
    rev_before = int(late.meta("etcd_revision"))
    res = storm(tmpdir_short, ns[:3], 1, 10, "a:", sleep_ms=10)
    check_agreement(res, ns[:3], etcd, 10, "a:")
    late.start()
    in_etcd, _ = etcd_decisions(etcd)
    wait_for(lambda: set(in_etcd) <= set(late.decisions()), BOOT_S,
             "the restarted node caught up")
    assert "full resync" not in late.read_log().split("etcd backend:")[-1]
    wait_for(lambda: int(late.meta("etcd_revision")) > rev_before, 10 * PERSIST_S,
             "the caught-up revision is stored")

    # Down again; more decisions; history compacted past its revision.
    late.stop()
    res = storm(tmpdir_short, ns[:3], 1, 10, "b:", sleep_ms=10)
    check_agreement(res, ns[:3], etcd, 10, "b:")
    etcd.compact(etcd_revision(etcd))
    mark = late.log_size()
    late.start()
    # A boot, then the watch's "compacted" and the resync it causes.
    late.wait_log("resync from etcd", timeout=BOOT_S + PROPAGATE_S, after=mark)
    in_etcd, _ = etcd_decisions(etcd)
    assert len(in_etcd) == 20
    wait_for(lambda: late.decisions() == in_etcd, BOOT_S,
             "the restarted node resynced every decision")
    # And it serves them as hits.
    hit = finish([spawn_client(tmpdir_short, late, 99, 10, "b:", 0, 5000,
                               tag="-hit")])
    assert all(e["outcome"] == 1 for e in hit[0]["keys"].values())


def etcd_decision_values(cluster):
    """{etcd key: decoded JSON value} of every decision in etcd."""
    r = cluster.ctl("get", "--prefix", f"/detd/v1/{NS}/decisions/", "-w", "json")
    return {base64.b64decode(kv["key"]).decode(): json.loads(base64.b64decode(kv["value"]))
            for kv in json.loads(r.stdout).get("kvs", [])}


def peers_by_key(node):
    """{key: decided_peer} as detctl decisions --json shows them."""
    out = node.detctl("decisions", "--json", check=True).stdout
    return {x["key"]: x["decided_peer"] for x in json.loads(out)["decisions"]}


def test_decided_peer_is_the_same_on_every_node(tmpdir_short, etcd, nodes):
    n0, n1 = nodes(2)
    (res,) = finish([spawn_client(tmpdir_short, n0, 0, 2, "p:", 10)])
    want = {"pid": res["pid"], "uid": os.getuid(), "node": "n0", "claimed_pid": res["pid"]}
    values = etcd_decision_values(etcd)
    assert len(values) == 2
    for v in values.values():
        assert (v["by_pid"], v["by_uid"], v["by_node"], v["by_claimed_pid"]) == \
            (res["pid"], os.getuid(), "n0", res["pid"]), v
    for nd in (n0, n1):
        wait_for(lambda: len(nd.decisions()) == 2, PROPAGATE_S, f"{nd.name} has both decisions")
        assert peers_by_key(nd) == {"p:0": want, "p:1": want}, nd.name

    # p:1 as a daemon older than these fields wrote it (none of them): a
    # node reading it from etcd serves it with the peer unknown.
    (k1,) = [k for k, v in values.items() if v["key"] == "p:1"]
    old = {f: x for f, x in values[k1].items() if f not in ("by_uid", "by_node", "by_claimed_pid")}
    etcd.ctl("put", k1, json.dumps(old, separators=(",", ":")))
    (n2,) = nodes(1)
    wait_for(lambda: len(n2.decisions()) == 2, BOOT_S, "the new node read both decisions")
    assert "malformed" not in n2.read_log()
    assert peers_by_key(n2) == {"p:0": want,
                                "p:1": {"pid": res["pid"], "uid": -1, "node": "", "claimed_pid": 0}}
    # The nodes that stored it first keep what they stored.
    assert peers_by_key(n1) == {"p:0": want, "p:1": want}


def test_designated_client_killed_waiter_on_other_node_takes_over(
        tmpdir_short, etcd, nodes):
    ns = nodes(4)
    # The designated client dies: its node gives the claim up at once.
    holder = spawn_client(tmpdir_short, ns[0], 0, 1, "t:", hold=True,
                          tag="-hold")
    assert holder.stdout.readline().strip() == "HOLD"
    mark = ns[1].log_size()
    waiter = spawn_client(tmpdir_short, ns[1], 1, 1, "t:", sleep_ms=10,
                          timeout_ms=30000, tag="-wait")
    # Waiting for the holder's pass: its node found the claim held by n0
    # (within the waiter's own deadline, past which it would give up).
    ns[1].wait_log("held elsewhere", timeout=30, after=mark)
    assert waiter.poll() is None
    holder.kill()
    holder.wait()
    t0 = time.monotonic()
    r = finish([waiter])[0]
    assert time.monotonic() - t0 < LEASE_MS / 1000 + 5
    e = r["keys"]["t:0"]
    assert e["timed"] and not e["superseded"]

    # The designated client's whole daemon dies (kill -9): the waiter on
    # another node takes over once the node lease expires.
    holder = spawn_client(tmpdir_short, ns[2], 2, 1, "u:", hold=True,
                          tag="-hold2")
    assert holder.stdout.readline().strip() == "HOLD"
    mark = ns[3].log_size()
    waiter = spawn_client(tmpdir_short, ns[3], 3, 1, "u:", sleep_ms=10,
                          timeout_ms=30000, tag="-wait2")
    ns[3].wait_log("held elsewhere", timeout=30, after=mark)
    ns[2].kill9()
    t0 = time.monotonic()
    r = finish([waiter])[0]
    took = time.monotonic() - t0
    assert took < LEASE_MS / 1000 * 3 + 5, took
    assert r["keys"]["u:0"]["timed"]
    holder.kill()
    holder.wait()
    in_etcd, raw = etcd_decisions(etcd)
    assert raw == 2


def test_a_claim_passed_on_reaches_a_waiter_on_another_node(tmpdir_short, etcd, nodes):
    """The holder, still attached, passes its claim on untimed with no
    waiter on its own node: its node drops the local claim and the
    cluster claim with it, and the waiter on the other node is designated
    and times the key, while the holder is still alive (without the
    pass-on it would wait its whole bound: no decision)."""
    from test_promises import KERNEL
    from test_trust_claims import PASSING_RANK

    ns = nodes(2)
    go, done = Path(tmpdir_short) / "go", Path(tmpdir_short) / "done"
    holder = subprocess.Popen([sys.executable, "-c", PASSING_RANK, str(CLIENT), ns[0].socket, KERNEL, "p:0", str(go),
                               str(done)], stdout=subprocess.PIPE, text=True, env=client_env())
    try:
        assert holder.stdout.readline().split()[:2] == ["DESIGNATED", "1"]
        mark = ns[1].log_size()
        waiter = spawn_client(tmpdir_short, ns[1], 1, 1, "p:", sleep_ms=10, timeout_ms=30000, tag="-pass")
        ns[1].wait_log("held elsewhere", timeout=30, after=mark)
        go.write_text("")
        assert holder.stdout.readline().split()[:2] == ["PASSED", "0"]
        e = finish([waiter])[0]["keys"]["p:0"]
        assert e["timed"] and e["outcome"] == dc.DESIGNATED, e
        assert holder.poll() is None  # designated while the holder is still attached
        assert "no waiter: dropped" in ns[0].read_log()
        done.write_text("")
        assert holder.wait(30) == 0
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
    in_etcd, raw = etcd_decisions(etcd)
    assert raw == 1


def test_asking_again_under_a_held_claim_is_one_pass_cluster_wide(tmpdir_short, etcd, nodes):
    """On the etcd backend too, a holder asking again under its claim is
    designated under the same claim and counted once; the decision lands
    in etcd once and the other node answers it without timing."""
    from test_trust_claims import ask_again_and_report

    ns = nodes(2)
    lines = ask_again_and_report(ns[0].socket, "g:0", Path(tmpdir_short))
    assert lines[0][0] == "DESIGNATED" and lines[1] == ["AGAIN", "1", "1"], lines
    assert lines[2][:2] == ["REPORTED", "0"], lines
    assert counter(ns[0].status(), "timing_passes") == 1, ns[0].status()["counters"]
    e = finish([spawn_client(tmpdir_short, ns[1], 1, 1, "g:", sleep_ms=1, timeout_ms=30000, tag="-again")])[0]
    assert not e["keys"]["g:0"]["timed"] and e["keys"]["g:0"]["config"] == lines[2][2], e
    assert counter(ns[1].status(), "timing_passes") == 0
    in_etcd, raw = etcd_decisions(etcd)
    assert raw == 1


def test_restarted_daemon_revokes_its_killed_runs_lease_at_once(
        tmpdir_short, etcd, nodes):
    # A node with a long lease (30 s) is killed -9 while its client times a
    # key, and comes back at once on the same state directory: it revokes
    # the lease its previous run left, so the waiter on another node takes
    # the key over now, not when that lease would have expired.
    long_lease = 30000
    other = nodes(1)[0]
    victim = Node(tmpdir_short, "nv", etcd.endpoints,
                  ["--lease-ms", str(long_lease)])
    victim.start()
    try:
        lease_file = Path(victim.state) / "etcd-lease"
        wait_for(lease_file.exists, BOOT_S, "the node's lease file")
        first = int(lease_file.read_text())
        holder = spawn_client(tmpdir_short, victim, 0, 1, "v:", hold=True,
                              tag="-holdv")
        assert holder.stdout.readline().strip() == "HOLD"
        mark = other.log_size()
        waiter = spawn_client(tmpdir_short, other, 1, 1, "v:", sleep_ms=10,
                              timeout_ms=60000, tag="-waitv")
        # Waiting for the holder's pass (bound: the waiter's deadline).
        other.wait_log("held elsewhere", timeout=60, after=mark)
        assert waiter.poll() is None
        victim.kill9()
        holder.kill()
        holder.wait()
        t0 = time.monotonic()
        mark = victim.log_size() if victim.log_path.exists() else 0
        victim.start()
        r = finish([waiter])[0]
        took = time.monotonic() - t0
        assert took < 10, f"waited {took:.1f} s: the killed run's lease was not revoked"
        assert r["keys"]["v:0"]["timed"]
        victim.wait_log(f"revoked lease {first:x}", after=mark)
        assert int(lease_file.read_text()) != first
    finally:
        victim.stop()
    # a clean stop revokes the lease and removes the file
    assert not (Path(victim.state) / "etcd-lease").exists()


def test_restart_while_etcd_is_down_fails_the_boot_at_the_revoke(
        tmpdir_short, etcd, nodes):
    """A node killed -9 leaves its lease file; it starts again while no
    etcd member runs. Each boot attempt then fails at the revoke of that
    lease (named in the status's etcd error, counted as a boot retry) and
    backs off, without spending a lease grant's budget too; the file stays
    for the next attempt. Once etcd is back, the old lease is revoked and
    the node registers under a new one."""
    port = free_port()
    victim = nodes(1, extra=["--metrics", f"127.0.0.1:{port}"])[0]
    lease_file = Path(victim.state) / "etcd-lease"
    wait_for(lease_file.exists, BOOT_S, "the node's lease file")
    first = int(lease_file.read_text())
    victim.kill9()
    etcd.stop()
    mark = victim.log_size()
    victim.start()
    wait_for(lambda: boot_retries(port) >= 1, BOOT_S, "a counted boot retry")
    st = json.loads(detctl("--socket", victim.socket, "status", "--json").stdout)
    assert st["etcd"]["error"].startswith("revoke previous lease: "), st["etcd"]
    assert int(lease_file.read_text()) == first  # kept for the next attempt
    etcd.resume()
    victim.wait_log(f"revoked lease {first:x}", after=mark, timeout=2 * REGISTER_S)
    wait_for(lambda: lease_file.exists() and int(lease_file.read_text()) != first, 2 * REGISTER_S,
             "a new lease in the lease file")
    r = etcd.ctl("get", f"/detd/v1/{NS}/nodes/{victim.name}", "--keys-only")
    assert victim.name in r.stdout


def test_cut_off_daemon_never_decides_alone_and_catches_up(tmpdir_short, etcd,
                                                           nodes):
    proxies = [Proxy(m["client_port"]) for m in etcd.members]
    try:
        ns = nodes(3)
        via = ",".join(f"http://127.0.0.1:{p.port}" for p in proxies)
        cut_node = nodes(1, endpoints=via)[0]
        res = storm(tmpdir_short, ns + [cut_node], 1, 3, "pre:", sleep_ms=10)
        check_agreement(res, ns + [cut_node], etcd, 3, "pre:")

        for p in proxies:
            p.cut()
        # Its clients: existing keys served, new keys refused (naming etcd).
        alone = finish([spawn_client(tmpdir_short, cut_node, 50, 3, "pre:", 0,
                                     3000, tag="-pre"),
                        spawn_client(tmpdir_short, cut_node, 51, 2, "cut:", 0,
                                     2500, tag="-cut")])
        assert all(e["outcome"] == 1 for e in alone[0]["keys"].values())
        assert alone[1]["keys"] == {}
        assert all("etcd" in e[3] for e in alone[1]["errors"]), alone[1]
        assert len(alone[1]["errors"]) == 2
        # Meanwhile the connected nodes decide the same keys.
        res = storm(tmpdir_short, ns, 1, 2, "cut:", sleep_ms=10)
        in_etcd, _ = etcd_decisions(etcd)
        assert len(in_etcd) == 5
        assert not (set(in_etcd) - set(ns[0].decisions()))
        assert len(cut_node.decisions()) == 3  # decided nothing alone

        for p in proxies:
            p.heal()
        # Its node lease (LEASE_MS) lapsed while cut: it boots again, then
        # its watch catches up; twice a boot for a loaded machine.
        wait_for(lambda: cut_node.decisions() == in_etcd, 2 * BOOT_S,
                 "the reconnected node caught up")
        after = finish([spawn_client(tmpdir_short, cut_node, 52, 2, "cut:", 0,
                                     5000, tag="-after")])
        for k, e in after[0]["keys"].items():
            assert e["outcome"] == 1
        check_agreement(res + after, ns + [cut_node], etcd, 2, "cut:")
    finally:
        for p in proxies:
            p.close()


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def detctl(*args, timeout=30):
    from conftest import DETCTL
    return subprocess.run([str(DETCTL), *args], capture_output=True,
                          text=True, timeout=timeout)


def test_status_listen_and_verify_cluster(tmpdir_short, etcd, nodes):
    ns = []
    for _ in range(4):
        ns += nodes(1, extra=["--listen", f"127.0.0.1:{free_port()}"])
    # Every rank observes what it used; one rank on the last node uses
    # another config on purpose (a divergence only visible cluster-wide).
    procs = [spawn_client(tmpdir_short, nd, i, 3, "v:", 10, 20000,
                          tag="-v") for i, nd in enumerate(ns)]
    finish(procs)
    # The same keys again, observed: every node saw its own ranks only.
    def observe(nd, rank, use=None):
        out = Path(tmpdir_short) / f"o-{nd.name}-{rank}.json"
        args = [sys.executable, str(CLIENT), "--socket", nd.socket, "--keys",
                "3", "--key-prefix", "v:", "--rank", str(rank), "--observe",
                "--out", str(out)]
        if use:
            args += ["--use", use]
        subprocess.run(args, check=True, timeout=60, env=client_env())
    for i, nd in enumerate(ns[:3]):
        observe(nd, 10 + i)
    ok = detctl("--socket", ns[0].socket, "verify", "--cluster", "--json")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    v = json.loads(ok.stdout)
    assert sorted(v["nodes_checked"]) == sorted(n.name for n in ns)
    assert v["observations"] == 9 and v["divergences"] == []
    observe(ns[3], 13, use="BLOCK=16,num_warps=4;bad")
    # The local view of node 0 sees nothing wrong; the cluster view does.
    assert detctl("--socket", ns[0].socket, "verify").returncode == 0
    bad = detctl("--socket", ns[0].socket, "verify", "--cluster", "--json")
    assert bad.returncode == 1, bad.stdout + bad.stderr
    v = json.loads(bad.stdout)
    assert v["observations"] == 12
    assert len(v["divergences"]) == 3
    for d in v["divergences"]:
        hosts = {c["rank"] for u in d["uses"] for c in u["clients"]}
        assert 13 in hosts
    # Status over TCP (--address), from any node.
    st = detctl("--address", ns[2].extra_args[-1], "status", "--json")
    assert st.returncode == 0, st.stderr
    s = json.loads(st.stdout)
    assert s["backend"] == "etcd"
    e = s["etcd"]
    assert e["node_id"] == "n2" and e["connected"]
    assert e["last_revision"] > 0
    assert len(e["endpoints"]) == 3
    assert all(x["healthy"] for x in e["endpoints"])
    assert sum(x["leader"] for x in e["endpoints"]) == 1
    wait_for(lambda: len(json.loads(detctl("--socket", ns[1].socket, "status",
                                           "--json").stdout)["etcd"]["nodes"])
             == 4, REGISTRY_S, "4 nodes registered")
    txt = detctl("--socket", ns[1].socket, "status")
    assert "nodes (4 registered)" in txt.stdout and "leader" in txt.stdout
    # A node going away leaves the registry with its lease.
    ns[3].stop()
    wait_for(lambda: len(json.loads(detctl("--socket", ns[1].socket, "status",
                                           "--json").stdout)["etcd"]["nodes"])
             == 3, REGISTRY_S, "the stopped node unregistered")


def test_verify_cluster_pages_through_every_node(tmpdir_short, etcd, nodes):
    """A node with 2,600 observations (three ListObservations pages): the
    cluster check reads every page of it, so it passes with all of them
    compared, and a divergence only its third page shows (another node
    used another config for that key) fails it."""
    ns = []
    for _ in range(2):
        ns += nodes(1, extra=["--listen", f"127.0.0.1:{free_port()}"])
    lib = dc.load()
    cands = (ctypes.c_char_p * 2)(b"BLOCK=16", b"BLOCK=32")

    def observe(nd, host, keys, config):
        ident = dc.Identity(host, 0, 0, 1, b"Test GPU", b"sm90", 132, b"")
        h = ctypes.c_void_p()
        assert lib.detd_client_open(nd.socket.encode(), ctypes.byref(ident), ctypes.byref(h)) == 0
        for i in keys:
            key = dc.Key(None, b"sm90", b"m:k@1", f"[i:{i}]".encode(), cands, 2, None)
            assert lib.detd_observe(h, ctypes.byref(key), config, 1, 1, 30000) == 0
        lib.detd_client_close(h)

    observe(ns[1], b"node-b", range(2600), b"BLOCK=16")
    r = detctl("--socket", ns[0].socket, "verify", "--cluster", "--json")
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
    v = json.loads(r.stdout)
    assert sorted(v["nodes_checked"]) == sorted(n.name for n in ns), v["nodes_checked"]
    assert v["observations"] == 2600 and v["divergences"] == [] and not v.get("nodes_unreachable"), v
    observe(ns[0], b"node-a", [2555], b"BLOCK=32")
    assert detctl("--socket", ns[0].socket, "verify").returncode == 0  # node a alone: one use, no divergence
    r = detctl("--socket", ns[0].socket, "verify", "--cluster", "--json")
    assert r.returncode == 1, r.stdout[-2000:] + r.stderr[-4000:]
    v = json.loads(r.stdout)
    assert v["observations"] == 2601
    (d,) = v["divergences"]
    assert d["key"] == "[i:2555]", d


def etcd_calls(etcd, method="Range"):
    """Requests of a gRPC method (Range, Txn, ...) every member of the
    cluster served so far."""
    return etcd_snapshot(etcd)[method]


def etcd_snapshot(etcd):
    """Requests per gRPC method (summed over the members), and each
    member's leader changes and committed proposals: what a count of
    proposals is made of, for a failed bound's message."""
    import collections
    import urllib.request
    snap = collections.Counter()
    for i in range(etcd.size):
        with urllib.request.urlopen(etcd.endpoint(i) + "/metrics", timeout=5) as r:
            for line in r.read().decode().splitlines():
                if line.startswith("grpc_server_handled_total{"):
                    m = line.split('grpc_method="', 1)[1].split('"', 1)[0]
                    snap[m] += float(line.rsplit(" ", 1)[1])
                elif line.startswith(("etcd_server_leader_changes_seen_total ",
                                      "etcd_server_proposals_committed_total ",
                                      "etcd_debugging_lease_revoked_total ")):
                    snap[f"{line.split()[0]}[{i}]"] = float(line.split()[1])
    return snap


def etcd_delta(before, after):
    return {k: after[k] - before.get(k, 0) for k in sorted(after) if after[k] != before.get(k, 0)}


def key_proposals(etcd, before, after):
    """Raft proposals committed between two snapshots (every member
    commits each: the highest count) less those no key made: the
    daemons' lease grants and registry puts (one per request), leases
    revoked (by a daemon or expired: counted where applied, the highest
    count) and the empty entry each new leader appends. A loaded machine
    brings those (a starved keepalive lapses a 2 s node lease, a slow
    member loses its leader); the claim and the commit are the key's."""
    def most(name):
        return max(after.get(f"{name}[{i}]", 0) - before.get(f"{name}[{i}]", 0) for i in range(etcd.size))

    noise = (after["LeaseGrant"] - before.get("LeaseGrant", 0)) + (after["Put"] - before.get("Put", 0)) + \
        most("etcd_debugging_lease_revoked_total") + most("etcd_server_leader_changes_seen_total")
    return most("etcd_server_proposals_committed_total") - noise


def wait_registered(ns, n, what):
    """Until every daemon of ns lists n registered nodes in its status."""
    wait_for(lambda: all(len(json.loads(detctl("--socket", nd.socket, "status", "--json").stdout)["etcd"]["nodes"])
                         == n for nd in ns), REGISTRY_S, what)


def wait_settled(etcd, ns):
    """Until the boots of ns and the registry reads they caused are over:
    every node has resynced (the boot's last read) and lists all of ns,
    then etcd serves no Range for two monitor rounds (a read a daemon
    still owes, marked due by a join or by its resync, comes on its next
    round). Bound: a boot and a registry change, then that quiet span as
    many times as there are daemons that may owe a read."""
    for nd in ns:
        nd.wait_log("resync from etcd", timeout=BOOT_S)
    wait_registered(ns, len(ns), f"{len(ns)} nodes registered")
    quiet = 2 * MONITOR_S
    end = time.monotonic() + len(ns) * (quiet + REGISTRY_S)
    last, since = etcd_calls(etcd, "Range"), time.monotonic()
    while time.monotonic() - since < quiet:
        assert time.monotonic() < end, "etcd never went quiet after the joins"
        time.sleep(0.1)
        now = etcd_calls(etcd, "Range")
        if now != last:
            last, since = now, time.monotonic()


def test_idle_daemons_do_not_read_the_registry_every_second(tmpdir_short, etcd, nodes):
    """The status monitor reads nodes/ when the watch shows a change (and
    every 30 s), not every second: 3 idle daemons make no Range request in
    6 s; a node that joins is in every daemon's status within seconds."""
    ns = nodes(3)
    wait_settled(etcd, ns)
    before = etcd_calls(etcd, "Range")
    # Absence over a window: a daemon reading nodes/ every monitor round
    # (MONITOR_S) would read 6 times in it; the 30 s refresh
    # (CLUSTER_NODES_REFRESH_MS) is not due within it.
    time.sleep(6)
    idle = etcd_calls(etcd, "Range") - before
    assert idle == 0, f"{idle} Range requests from 3 idle daemons in 6 s"
    ns += nodes(1)
    wait_registered(ns, 4, "the new node in every daemon's status")


def test_waiting_nodes_recheck_a_held_claim_by_reading_it(tmpdir_short, etcd, nodes):
    """While the key's owner times it for 4 s, the other nodes (deferring,
    then waiting) check the claim by reading the claim key, not by writing:
    the whole pass costs etcd the owner's claim transaction and the
    commit's, however long it runs and however many nodes wait."""
    ns = nodes(3)
    wait_settled(etcd, ns)
    kid = key_id("recheck:0")
    owner = owner_of(kid, [nd.name for nd in ns])
    snap0 = etcd_snapshot(etcd)
    # The owner's client asks first, the others once the owner holds the
    # claim. (Asked together, an owner that a loaded machine makes ask
    # after the others' deferral, --claim-defer-ms, lets one of them claim
    # too: a claim transaction more, a case the next test allows for.)
    # Here any claim transaction but the owner's is a waiting node writing.
    first, then = Path(tmpdir_short) / "start-recheck-owner", Path(tmpdir_short) / "start-recheck"
    procs = [spawn_client(tmpdir_short, nd, i, 1, "recheck:", 4000, start=first if nd.name == owner else then,
                          tag="recheck") for i, nd in enumerate(ns)]
    by_owner = [p for p, nd in zip(procs, ns) if nd.name == owner]
    others = [p for p in procs if p not in by_owner]
    clients_up(then, others, CLIENT_RUN_S)  # up before the owner asks: they ask within its 4 s pass
    release_clients(first, by_owner, CLIENT_RUN_S)
    # Its claim: a read of the claim key, then the transaction.
    next(nd for nd in ns if nd.name == owner).wait_log(f"cluster claim on {kid[:12]} won",
                                                       timeout=2 * ETCD_CALL_S)
    release_clients(then, others, CLIENT_RUN_S)
    res = finish(procs)
    snap1 = etcd_snapshot(etcd)
    props, delta = key_proposals(etcd, snap0, snap1), etcd_delta(snap0, snap1)
    passes = check_agreement(res, ns, etcd, 1, "recheck:")
    assert list(passes.values()) == [1], passes
    assert [r["keys"]["recheck:0"]["timed"] for r in res] == [nd.name == owner for nd in ns], res
    # The owner's claim and the commit, which deletes the claim in the
    # same Txn (3 when the claim's delete was a request of its own, 3 + 2
    # before one claimant per key).
    assert props <= 2, f"{props} Raft proposals for one key timed for 4 s on 3 nodes: {delta}"
    # The reads before a claim are Txns of reads only (the claim and the
    # decision at once): the owner's, and the two waiting nodes' when
    # their deferral ended.
    txn = delta.get("Txn", 0)
    assert txn >= 2 + 3, f"{txn} Txn requests: the waiting nodes did not re-check: {delta}"


def test_one_claimant_per_key_and_keys_the_owner_never_meets(tmpdir_short, etcd, nodes):
    """One claimant per key (README "Scale"). Every node asks the same new
    keys at once: only each key's rendezvous owner writes a claim (an early
    claim more for a key whose owner is slow on a loaded machine; every
    node claimed before: 4 + 1 Raft proposals per key and the claim's
    delete; the commit deletes the claim in its own Txn now). Then keys whose owner (n0) never asks them,
    as in pipeline or expert parallelism: the nodes that do meet them defer
    (no answer before the deferral ends), then the first of them claims and times
    it: exactly one timing pass per key, every asker answered within
    the longest deferral plus the claim's and the commit's etcd calls. The daemons
    run with a deferral of their own (--claim-defer-ms and the step and
    slots options): the bounds follow it."""
    defer_ms, step_ms, slots = 800, 25, 2
    ns = nodes(4, extra=["--claim-defer-ms", str(defer_ms), "--claim-defer-step-ms",
                         str(step_ms), "--claim-defer-slots", str(slots)])
    names = [nd.name for nd in ns]
    wait_settled(etcd, ns)
    keys = 6
    snap0 = etcd_snapshot(etcd)
    res = storm(tmpdir_short, ns, 1, keys, "own:", sleep_ms=0)
    snap1 = etcd_snapshot(etcd)
    props, delta = key_proposals(etcd, snap0, snap1), etcd_delta(snap0, snap1)
    passes = check_agreement(res, ns, etcd, keys, "own:")
    assert sorted(passes.values()) == [1] * keys, passes
    # The owner's claim and the commit (which deletes the claim) per key,
    # 2 Raft proposals; a claim more for a key whose owner answered after
    # the others' deferral, on fewer than all keys; 3 + an early claim
    # before the commit deleted the claim, 5 + 1 before one claimant per
    # key.
    assert props < 3 * keys, f"{props} Raft proposals for {keys} keys on 4 nodes: {delta}"
    # The owners' ids as computed here are the ids detd stored: the
    # helpers agree with the daemon.
    in_etcd, _ = etcd_decisions(etcd)
    assert {key_id(f"own:{i}") for i in range(keys)} <= set(in_etcd)

    # Keys owned by n0 that only n1..n3 ask (their names are the first
    # such keys of "part:"; each client asks its keys in order).
    owned = [i for i in range(200) if owner_of(key_id(f"part:{i}#0"), names) == "n0"][:2]
    assert len(owned) == 2
    start = Path(tmpdir_short) / "start-part"
    procs = [spawn_client(tmpdir_short, nd, 10 + j, 1, f"part:{k}#", sleep_ms=0,
                          start=start, tag=f"part{k}")
             for k in owned for j, nd in enumerate(ns[1:])]
    release_clients(start, procs, CLIENT_RUN_S)
    res = finish(procs)
    bound_ms = defer_ms + step_ms * slots + 3 * ETCD_CALL_S * 1000
    for k in owned:
        mine = [r for r in res if f"part:{k}#0" in r["keys"]]
        entries = [r["keys"][f"part:{k}#0"] for r in mine]
        assert sum(e["timed"] for e in entries) == 1, entries
        assert len({e["config"] for e in entries}) == 1, entries
        # Nobody was answered before the deferral ended (n0 owns it and
        # never claimed), everybody within the bound.
        assert min(e["wait_ms"] for e in entries) >= defer_ms, entries
        assert max(e["wait_ms"] for e in entries) <= bound_ms, entries
    in_etcd, raw = etcd_decisions(etcd)
    assert raw == len(in_etcd) == keys + 2


def boot_retries(port):
    """detd_etcd_boot_retries_total from the daemon's /metrics."""
    import urllib.request
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics",
                                timeout=10) as r:
        for line in r.read().decode().splitlines():
            if line.startswith("detd_etcd_boot_retries_total "):
                return float(line.split()[1])
    raise AssertionError("detd_etcd_boot_retries_total missing")


def test_etcd_up_late_daemons_serve_back_off_then_register(tmpdir_short, etcd,
                                                           nodes):
    """Daemons started while no etcd member runs serve at once (a new key
    gets a clear error naming etcd, never a timing pass of their own),
    retry the boot with backoff (counted in detd_etcd_boot_retries_total)
    and register within the bound docs/multi-node.md states once etcd is back; then one
    timing pass per key cluster-wide."""
    etcd.stop()
    ports = [free_port() for _ in range(4)]
    ns = []
    for p in ports:
        ns += nodes(1, extra=["--metrics", f"127.0.0.1:{p}"])
    miss = finish([spawn_client(tmpdir_short, nd, i, 1, "late:", 0, 1500,
                                tag="-late") for i, nd in enumerate(ns)])
    for r in miss:
        assert r["keys"] == {}, r
        assert "etcd" in r["errors"][0][3], r["errors"]
    # Each boot attempt is one lease-grant call that itself retries for its
    # 3 s budget, then the boot waits its backoff step (0 to 3 s): every
    # daemon keeps retrying, counted, and none spins. The first attempt is
    # counted once its call's budget is spent (bound: one whole cycle,
    # attempt, backoff and the next attempt).
    wait_for(lambda: all(boot_retries(p) >= 1 for p in ports),
             ETCD_CALL_S + BOOT_BACKOFF_S + ETCD_CALL_S, "a counted boot retry on every daemon")
    before = [boot_retries(p) for p in ports]
    # A window longer than one cycle (3 s + at most 3 s): at least one more
    # failure each; every failure takes the call's 3 s: at most 4 in 8 s.
    time.sleep(8.0)
    grown = [boot_retries(p) - b for p, b in zip(ports, before)]
    assert all(1 <= g <= 4 for g in grown), grown
    etcd.resume()
    t0 = time.monotonic()
    # Registered (node keys under the node leases) within the bound
    # docs/multi-node.md states once etcd serves: the call under way (retried within its
    # 3 s budget), the backoff step (3 s at most) and one attempt: 10 s.
    def registered():
        r = etcd.ctl("get", "--prefix", f"/detd/v1/{NS}/nodes/", "--keys-only")
        return len([x for x in r.stdout.split() if x]) == 4
    wait_for(registered, 10, "4 nodes registered after etcd came up")
    assert time.monotonic() - t0 < 10
    res = storm(tmpdir_short, ns, 1, 3, "late:", sleep_ms=10)
    passes = check_agreement(res, ns, etcd, 3, "late:")
    assert sorted(passes.values()) == [1, 1, 1]
