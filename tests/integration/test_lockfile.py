"""Lockfiles through two real daemons (two "clusters") and detctl: a job's
decisions exported with provenance and a content hash, imported into a
fresh store whose clients then get them DECIDED without a timing pass,
provenance filters at import, a changed file refused naming both hashes,
keys a lock does not hold (other candidates, another arch, a new key)
missing from it with the reason, and verify --lock passing and failing
(docs/lockfile.md). With a real Triton process (the CPU interpreter): the
provenance of its timing pass (benchmarker, settings, timing lock, torch
and driver) recorded, exported, imported, and a mismatch a miss that
explain names; detd-run --lock starting a job warm."""
import base64
import contextlib
import ctypes
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import BUILD, DETCTL, DETD, HAVE_ETCD, REPO, Daemon, counter, requires, triton_python

sys.path.insert(0, str(Path(__file__).resolve().parent))
import detd_client as dc  # noqa: E402
from etcd_cluster import EtcdCluster  # noqa: E402
from test_metrics import free_port, scrape, val  # noqa: E402

KERNEL = "tests.lock:row_sum@0123456789abcdef"
CANDS = [f"BLOCK={16 << i},num_warps=4" for i in range(4)]
SOURCE_TIMED, SOURCE_FALLBACK = 1, 5


def detctl(d, *args):
    env = dict(os.environ)
    for v in ("DETD_NAMESPACE", "DETD_JOB", "TORCHELASTIC_RUN_ID", "SLURM_JOB_ID", "PMIX_NAMESPACE"):
        env.pop(v, None)
    return subprocess.run([str(DETCTL), "--socket", d.socket, *map(str, args)], capture_output=True, text=True,
                          timeout=60, env=env)


class Rank:
    """One process: decides keys (timing when designated: key i's winner is
    candidate i mod 4, or `winner`), observes what it launched."""

    def __init__(self, d, rank, job, arch="sm90", cands=CANDS):
        self.lib = dc.load()
        self.ident = dc.Identity(f"node-{rank}-{job}".encode(), rank, rank, 2, b"Test GPU", arch.encode(), 132,
                                 job.encode())
        self.h = ctypes.c_void_p()
        assert self.lib.detd_client_open(d.socket.encode(), ctypes.byref(self.ident), ctypes.byref(self.h)) == 0
        self.arch, self.cands = arch.encode(), cands
        self.arr = (ctypes.c_char_p * len(cands))(*[c.encode() for c in cands])

    def key(self, i):
        return dc.Key(None, self.arch, KERNEL.encode(), f"[i:{i}]".encode(), self.arr, len(self.cands), None)

    def decide(self, i, no_claim=False, winner=None):
        key = self.key(i)
        ans = ctypes.POINTER(dc.Answer)()
        flags = dc.DECIDE_NO_CLAIM if no_claim else 0
        assert self.lib.detd_decide(self.h, ctypes.byref(key), flags, 30000, ctypes.byref(ans)) == 0
        outcome = ans.contents.outcome
        if outcome == dc.DESIGNATED:
            n = len(self.cands)
            w = i % n if winner is None else winner
            samples = [(ctypes.c_double * 3)(*[1.0 + (j - w) % n] * 3) for j in range(n)]
            tarr = (dc.Timing * n)(*[dc.Timing(c.encode(), s, 3, 0) for c, s in zip(self.cands, samples)])
            rep = ctypes.POINTER(dc.Answer)()
            assert self.lib.detd_report(self.h, ans.contents.claim_id, ctypes.byref(key), tarr, n, b"3.6.0",
                                        30000, ctypes.byref(rep)) == 0
            cfg = rep.contents.config.decode()
            self.lib.detd_answer_free(rep)
        elif outcome == dc.DECIDED:
            cfg = ans.contents.config.decode()
        else:
            cfg = None
        self.lib.detd_answer_free(ans)
        return outcome, cfg

    def run(self, keys, **kw):
        """Decide and observe each key (a miss launches the first candidate,
        observed as the fallback it is); {key: (outcome, config)}."""
        out = {}
        for i in keys:
            outcome, cfg = self.decide(i, **kw)
            src = SOURCE_TIMED
            if cfg is None:
                cfg, src = self.cands[0], SOURCE_FALLBACK
            assert self.lib.detd_observe(self.h, ctypes.byref(self.key(i)), cfg.encode(), src, 1, 30000) == 0
            out[i] = (outcome, cfg)
        return out

    def close(self):
        self.lib.detd_client_close(self.h)


def job(d, name, ranks=2, keys=(0, 1, 2), **kw):
    res = []
    for r in range(ranks):
        p = Rank(d, r, name, **{k: v for k, v in kw.items() if k in ("arch", "cands")})
        res.append(p.run(keys, **{k: v for k, v in kw.items() if k in ("no_claim", "winner")}))
        p.close()
    return res


@pytest.fixture
def two(tmpdir_short):
    a = Daemon(tmpdir_short, name="a").start(wait=False)
    b = Daemon(tmpdir_short, name="b").start(wait=False)
    a.wait_ready()
    b.wait_ready()
    yield a, b
    a.stop()
    b.stop()


def test_lock_round_trip_starts_a_second_store_warm(two, tmpdir_short):
    a, b = two
    first = job(a, "run-1")
    assert counter(a.status(), "timing_passes") == 3
    lock = tmpdir_short / "run-1.lock.json"
    r = detctl(a, "lock", "export", "-o", lock)
    assert r.returncode == 0 and f"wrote {lock}: 3 decisions of the job, sha256 " in r.stdout, r.stdout + r.stderr
    doc = json.loads(lock.read_text())
    assert doc["kind"] == "Lockfile" and doc["format"] == 1 and doc["job"] == "run-1" and len(doc["sha256"]) == 64
    assert "median" in doc["winner_rule"]["text"] and doc["created_by"]["detctl"]
    e0 = doc["entries"][0]
    assert e0["source"] == "timed" and e0["arch"] == "sm90" and e0["n_candidates"] == 4
    p = e0["provenance"]
    assert p["triton_version"] == "3.6.0" and p["device"] == "Test GPU" and p["timed_by"]["host"] == "node-0-run-1"
    assert p["seen"]["pid"] == os.getpid() and len(p["timings"]) == 4 and int(p["claim_id"]) > 0
    assert {e["config"] for e in doc["entries"]} == {first[0][i][1] for i in (0, 1, 2)}

    # A file changed after export is refused, naming both hashes.
    bad = dict(doc, entries=[dict(e0, config=CANDS[3])] + doc["entries"][1:])
    tampered = tmpdir_short / "tampered.json"
    tampered.write_text(json.dumps(bad))
    r = detctl(b, "lock", "import", tampered)
    assert r.returncode == 2 and f"lockfile '{tampered}': content hash mismatch: the file says sha256 " \
        f"{doc['sha256']}, its content hashes to " in r.stderr, r.stderr
    # Provenance the importer asks for: entries timed elsewhere are misses.
    r = detctl(b, "lock", "import", lock, "--namespace", "other", "--triton-version", "3.5.0")
    assert r.returncode == 0 and r.stdout.count(
        "triton_version: the lock says 3.6.0, this run 3.5.0 (must match): a miss, timed by the job") == 3, r.stdout
    assert "0 added, 0 unchanged, 0 conflicting (kept as stored), 3 skipped" in r.stdout, r.stdout
    # A provenance field the lock does not record is a mismatch too.
    r = detctl(b, "lock", "import", lock, "--namespace", "other", "--require", "torch_version=2.11.0")
    assert r.stdout.count("torch_version: the lock says (not recorded), this run 2.11.0") == 3, r.stdout
    assert counter(b.status(), "lock_skipped") == 6
    r = detctl(b, "lock", "import", lock, "--require", "torch=2")
    assert r.returncode == 2 and "--require 'torch=2' is not FIELD=VALUE with FIELD one of" in r.stderr, r.stderr
    r = detctl(b, "lock", "import", lock, "--namespace", "other", "--arch", "sm80")
    assert r.stdout.count("decided for arch sm90, not sm80 (--arch)") == 3, r.stdout

    r = detctl(b, "lock", "import", lock)
    assert r.returncode == 0 and "3 added, 0 unchanged, 0 conflicting" in r.stdout, r.stdout + r.stderr
    r = detctl(b, "lock", "import", lock)
    assert r.returncode == 0 and "0 added, 3 unchanged" in r.stdout, r.stdout
    # The second store answers every key of the lock: decided, never timed,
    # the first job's configs.
    second = job(b, "run-2")
    assert all(res == {i: (dc.DECIDED, first[0][i][1]) for i in (0, 1, 2)} for res in second), second
    st = b.status()
    assert counter(st, "timing_passes") == 0 and counter(st, "decisions_import") == 3
    r = detctl(b, "verify", "--lock", lock)
    assert r.returncode == 0 and r.stdout.startswith("job: run-2 (the only job observed)"), r.stdout
    assert json.loads(detctl(b, "verify", "--lock", lock, "--json").stdout)["lock"]["entries"] == 3
    d = json.loads(detctl(b, "decisions", "--json").stdout)["decisions"]
    assert {x["table_file"] for x in d} == {"lock:run-1.lock.json"} and {x["source"] for x in d} == {"import"}

    # Keys the lock does not answer: other candidates, another arch (pinned
    # ranks: a miss, then their fallback), a key it never held (timed), and
    # a rank that launched another config than the lock's.
    job(b, "run-3", ranks=1, keys=(0,), cands=CANDS[:3], no_claim=True)
    job(b, "run-3", ranks=1, keys=(1,), arch="sm80", no_claim=True)
    res = job(b, "run-3", ranks=1, keys=(7,))
    assert res[0][7][0] == dc.DESIGNATED
    p = Rank(b, 5, "run-3")
    assert p.lib.detd_observe(p.h, ctypes.byref(p.key(2)), CANDS[3].encode(), SOURCE_TIMED, 1, 30000) == 0
    p.close()
    r = detctl(b, "verify", "--lock", lock)
    assert r.returncode == 1, r.stdout
    assert r.stdout.startswith("job: run-3 (observed last by this user's processes, of 2 jobs"), r.stdout
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("LOCK ")]
    assert len(lines) == 4, r.stdout
    text = "\n".join(lines)
    assert f"[i:0] [sm90]: not from the lock {lock}: it holds this kernel and key for other candidates" in text
    assert f"[i:1] [sm80]: not from the lock {lock}: it holds this kernel and key for arch sm90, not sm80" in text
    assert f"[i:7] [sm90]: not in the lock {lock}" in text
    assert f"[i:2] [sm90]: ran {CANDS[3]}; the lock {lock} says {first[0][2][1]}" in text
    # explain names why the lock does not answer such an ask.
    cands = [a for c in CANDS[:3] for a in ("--candidate", c)]
    e = json.loads(detctl(b, "explain", "--kernel", KERNEL, "--key", "[i:0]", "--arch", "sm90", *cands,
                          "--json").stdout)
    assert e["answer"] == "timed" and any(
        "the lock 'run-1.lock.json' decided this kernel and key for other candidates" in n for n in e["notes"]), e
    r = detctl(b, "explain", "--kernel", KERNEL, "--key", "[i:1]", "--arch", "sm80",
               *[a for c in CANDS for a in ("--candidate", c)])
    assert "the lock 'run-1.lock.json' decided this kernel and key for arch sm90, not sm80" in r.stdout, r.stdout
    vj = json.loads(detctl(b, "verify", "--lock", lock, "--json").stdout)
    assert sorted(f["key"] for f in vj["failures"] if f["kind"] == "lock") == ["[i:0]", "[i:1]", "[i:2]", "[i:7]"]
    assert detctl(b, "verify", "--lock", tampered).returncode == 2


def test_lock_import_keeps_a_conflicting_decision_and_says_so(two, tmpdir_short):
    a, b = two
    first = job(a, "run-1", ranks=1, keys=(0, 1))
    lock = tmpdir_short / "l.json"
    assert detctl(a, "lock", "export", "-o", lock, "--all").returncode == 0
    # b decided key 0 already, with another winner.
    other = job(b, "mine", ranks=1, keys=(0,), winner=3)
    assert other[0][0][1] == CANDS[3] != first[0][0][1]
    r = detctl(b, "lock", "import", lock)
    assert r.returncode == 1, r.stdout + r.stderr
    assert f"CONFLICT {KERNEL} [i:0] [sm90]: decided already as {CANDS[3]} (timed); the lock says " \
           f"{first[0][0][1]}: kept" in r.stdout, r.stdout
    assert "1 added, 0 unchanged, 1 conflicting (kept as stored)" in r.stdout
    assert "lock 'l.json': " in b.read_log()
    r = detctl(b, "lock", "export")
    assert r.returncode == 2 and "needs -o FILE" in r.stderr
    r = detctl(b, "lock", "frobnicate")
    assert r.returncode == 2 and "the subcommands are export and import" in r.stderr


def test_a_lock_given_to_the_daemon_at_start(two, tmpdir_short):
    a, _ = two
    first = job(a, "run-1", ranks=1)
    lock = tmpdir_short / "l.json"
    assert detctl(a, "lock", "export", "-o", lock).returncode == 0
    c = Daemon(tmpdir_short, extra_args=["--lock", lock], name="c").start()
    try:
        assert job(c, "run-2", ranks=1) == [{i: (dc.DECIDED, first[0][i][1]) for i in (0, 1, 2)}]
        assert counter(c.status(), "timing_passes") == 0 and counter(c.status(), "decisions_import") == 3
        assert "lock 'l.json' (sha256 " in c.read_log() and "3 decisions added" in c.read_log()
    finally:
        c.stop()
    # --lock-require: the lock's entries were timed with Triton 3.6.0, not
    # 3.5.0: none stored, each logged as skipped and counted.
    port = free_port()
    c = Daemon(tmpdir_short, extra_args=["--lock", lock, "--lock-require", "triton_version=3.5.0", "--metrics",
                                         f"127.0.0.1:{port}"], name="c2").start()
    try:
        assert counter(c.status(), "lock_skipped") == 3 and counter(c.status(), "decisions_import") == 0
        assert val(scrape(port)[0], "detd_lock_skipped_total") == 3
        assert "lock 'l.json': not imported (a miss, timed by the job): " in c.read_log()
        assert "triton_version: the lock says 3.6.0, this run 3.5.0 (must match)" in c.read_log()
    finally:
        c.stop()
    r = subprocess.run([str(DETD), "--check-config", "--lock", lock, "--lock-require", "torch2.11"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "lock-require: 'torch2.11' is not FIELD=VALUE with FIELD one of " \
        "triton_version, torch_version, cuda_version, driver" in r.stderr, r.stderr
    # A changed file stops the daemon before it serves, naming both hashes.
    doc = json.loads(lock.read_text())
    doc["entries"][0]["config"] = CANDS[3]
    lock.write_text(json.dumps(doc))
    r = subprocess.run([str(DETD), "--socket", tmpdir_short / "d.sock", "--state-dir", tmpdir_short / "d-st",
                        "--lock", lock], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and f"--lock '{lock}': content hash mismatch: the file says sha256 " \
        f"{doc['sha256']}, its content hashes to " in r.stderr, r.stderr
    assert not (tmpdir_short / "d.sock").exists()
    r = subprocess.run([str(DETD), "--check-config", "--socket", tmpdir_short / "d.sock", "--state-dir",
                        tmpdir_short / "d-st", "--lock", tmpdir_short / "none.json"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 2 and f"lock: '{tmpdir_short / 'none.json'}': No such file or directory" in r.stderr, \
        r.stderr


# ---- the etcd backend ----

# The daemon's bounds (daemon/ops/lock.h, daemon/cluster/cluster_int.h):
# start-up waits at most LOCK_START_ETCD_MS for etcd to take a --lock's
# entries; one etcd call, retries included, takes at most CLUSTER_BUDGET_MS.
LOCK_START_S = 10.0
ETCD_CALL_S = 3.0
# A daemon on etcd is ready after its boot's calls and the lock's commits
# (one whose etcd is down stops by then).
READY_S = LOCK_START_S + 5 * ETCD_CALL_S
# Import with etcd down: detctl's deadline; the daemon answers 5% of it
# before (daemon/app/decide.c, decide_answer_by()).
DOWN_TIMEOUT_MS = 6000
# A decision reaches every connected node by its watch (a broken watch
# reconnects within 2 s, then one etcd call): twice that on a loaded machine.
PROPAGATE_S = 2 * (2.0 + ETCD_CALL_S)


def etcd_held(cluster, ns="default"):
    """{key: (config, source)} of the decisions etcd holds in ns."""
    r = cluster.ctl("get", "--prefix", f"/detd/v1/{ns}/decisions/", "-w", "json")
    out = {}
    for kv in json.loads(r.stdout).get("kvs", []):
        v = json.loads(base64.b64decode(kv["value"]))
        out[v["key"]] = (v["config"], v["source"])
    return out


@contextlib.contextmanager
def one_etcd(tmpdir):
    """A one-member etcd, started, and the list the test puts its daemons
    in; on the way out every daemon and etcd are stopped and, when the
    body passed, no daemon's log holds a sanitizer report (under
    -DDETD_SANITIZE=ON any report fails the test)."""
    etcd = EtcdCluster(tmpdir / "etcd", size=1)
    nodes = []
    try:
        etcd.start()
        yield etcd, nodes
    finally:
        for nd in nodes:
            nd.stop()
        etcd.stop()
    for nd in nodes:
        log = nd.read_log()
        assert "Sanitizer" not in log and "runtime error" not in log, log[-6000:]


@requires(HAVE_ETCD, "etcd-server and etcd-client are not installed")
def test_a_lock_given_to_an_etcd_cluster_decides_every_node(two, tmpdir_short):
    a, b = two
    with one_etcd(tmpdir_short) as (etcd, nodes):
        first = job(a, "run-1")
        lock = tmpdir_short / "run-1.lock.json"
        assert detctl(a, "lock", "export", "-o", lock).returncode == 0
        # Another store decided key 0 otherwise (and key 3), then key 4.
        job(b, "mine", ranks=1, keys=(0, 3), winner=3)
        other, later = tmpdir_short / "other.json", tmpdir_short / "later.json"
        assert detctl(b, "lock", "export", "-o", other, "--all").returncode == 0
        job(b, "more", ranks=1, keys=(4,), winner=3)
        assert detctl(b, "lock", "export", "-o", later, "--all").returncode == 0

        # A daemon given a lock at start whose etcd does not answer (nothing
        # listens there) stops after LOCK_START_S, naming how many entries
        # etcd did not take; it never serves. Checked at the end.
        n3 = Daemon(tmpdir_short, name="n3", extra_args=["--etcd", f"http://127.0.0.1:{free_port()}", "--node-id",
                                                         "n3", "--lock", later])
        nodes.append(n3.start(wait=False))

        # Two nodes on etcd: n1 given the lock at start (detd --lock), n0
        # importing through detctl.
        port = free_port()
        for name, extra in (("n0", ["--metrics", f"127.0.0.1:{port}"]), ("n1", ["--lock", lock])):
            nd = Daemon(tmpdir_short, name=name, extra_args=["--etcd", etcd.endpoints, "--node-id", name, *extra])
            nodes.append(nd.start(wait=False))
        n0, n1 = nodes[1:]
        for nd in (n0, n1):
            nd.wait_ready(timeout=READY_S)
        assert "lock 'run-1.lock.json' (sha256 " in n1.read_log() and \
            "3 decisions added, 0 unchanged, 0 conflicting (kept as stored), 0 skipped (provenance), through etcd" \
            in n1.read_log(), n1.read_log()[-3000:]
        # etcd holds the lock's decisions: a cluster decision each (source import).
        assert etcd_held(etcd) == {f"[i:{i}]": (first[0][i][1], 4) for i in (0, 1, 2)}

        # A lock whose key 0 the cluster decided otherwise: CONFLICT, kept.
        r = detctl(n0, "lock", "import", other)
        assert r.returncode == 1, r.stdout + r.stderr
        assert f"CONFLICT {KERNEL} [i:0] [sm90]: decided already as {first[0][0][1]} (import); the lock says " \
            f"{CANDS[3]}: kept" in r.stdout, r.stdout
        assert "1 added, 0 unchanged, 1 conflicting (kept as stored), 0 skipped" in r.stdout, r.stdout
        assert "the cluster's decision is kept" in n0.read_log()
        r = detctl(n0, "lock", "import", lock)
        assert r.returncode == 0 and "0 added, 3 unchanged, 0 conflicting" in r.stdout, r.stdout + r.stderr
        # A node that holds nothing yet (given the other lock at start, before
        # its watch delivered anything) learns the conflict from etcd itself.
        n2 = Daemon(tmpdir_short, name="n2", extra_args=["--etcd", etcd.endpoints, "--node-id", "n2", "--lock", other])
        nodes.append(n2.start(wait=False))
        n2.wait_ready(timeout=READY_S)
        assert "lock 'other.json' (sha256 " in n2.read_log() and "0 decisions added, 1 unchanged, 1 conflicting (kept " \
            "as stored), 0 skipped (provenance), through etcd" in n2.read_log(), n2.read_log()[-3000:]
        assert f"key [i:0] is decided already as {first[0][0][1]}, the lock says {CANDS[3]}: the cluster's decision " \
            "is kept" in n2.read_log()
        held = etcd_held(etcd)
        assert held["[i:0]"] == (first[0][0][1], 4) and held["[i:3]"] == (CANDS[3], 4), held

        # A client on each node: every key DECIDED with the lock's config
        # (key 3 with the other lock's), nothing timed anywhere.
        for nd in (n0, n1):
            assert job(nd, "run-2", ranks=1) == [{i: (dc.DECIDED, first[0][i][1]) for i in (0, 1, 2)}]
            p = Rank(nd, 1, "run-2")
            assert p.decide(3) == (dc.DECIDED, CANDS[3])
            p.close()
            st = nd.status()
            assert counter(st, "timing_passes") == 0 and counter(st, "decisions_import") == 4, st
        r = detctl(n0, "verify", "--lock", lock)
        assert r.returncode == 0, r.stdout + r.stderr

        # etcd unreachable: the import fails naming what etcd did not take
        # and what landed (here: what this node held already).
        n1.stop()
        n2.stop()
        etcd.kill(0)
        r = subprocess.run([str(DETCTL), "--socket", n0.socket, "--timeout", str(DOWN_TIMEOUT_MS), "lock", "import",
                            later], capture_output=True, text=True, timeout=60)
        assert r.returncode == 3, r.stdout + r.stderr
        assert f"detctl: lock import (detd at '{n0.socket}'): etcd did not take 1 of the 3 entries of this request " \
            f"(etcd unreachable: no answer by the deadline): {KERNEL} [i:4] [sm90]; those are not known to be decided" in r.stderr \
            and "landed: 0 added, 1 unchanged, 1 conflicting (kept as stored), 0 skipped" in r.stderr, r.stderr
        assert n0.read_log().count("lock 'later.json': 1 of 3 entries not committed (etcd unreachable") == 1
        assert counter(n0.status(), "lock_not_committed") == 1
        assert val(scrape(port)[0], "detd_lock_not_committed_total") == 1
        assert n3.proc.wait(timeout=READY_S) != 0
        assert f"--lock '{later}': etcd did not take 3 of its 3 entries (etcd unreachable: no answer by the " \
            "deadline): the daemon does not start on a lock half given (0 landed" in n3.read_log(), n3.read_log()[-3000:]
        assert "serving on" not in n3.read_log() and not Path(n3.socket).exists()


# One lock imported by every node at once (issue 28). The daemon's bounds
# (daemon/cluster/etcd.h, daemon/ops/lock.h): a commit Txn holds at most
# ETCD_BATCH_MAX keys; a node that is not the lock's rendezvous owner
# waits at most its --claim-defer-ms (plus a step per rank) for the
# owner's decisions before it reads etcd again and writes what is still
# missing.
ETCD_BATCH_MAX = 64
LOCK_DEFER_MS = 3000
# An import's wait for the owner ends as soon as its writes arrive: a long
# deferral costs nothing then, and keeps a loaded machine's slow owner
# from making the others write too (at most half the call's time left:
# detctl's --timeout below is twice this and more).
IMPORT_DEFER_MS = 12000
IMPORT_TIMEOUT_MS = 30000


def wide_lock(a, tmpdir, keys):
    """A job's keys decided on daemon a, and the lock of them: (the
    job's decisions, the lock's path)."""
    first = job(a, "wide", ranks=1, keys=range(keys))[0]
    lock = tmpdir / "wide.lock.json"
    assert detctl(a, "lock", "export", "-o", lock).returncode == 0
    return first, lock


def assert_written_once(etcd, snap0, snap1, nodes, first, tmpdir):
    """A lock of the job's decisions `first` (2 * ETCD_BATCH_MAX keys)
    cost etcd its owner's commits between the snapshots, ETCD_BATCH_MAX
    keys per Txn (the registrations and lease grants are not counted), one
    more for a Txn sent again after an attempt that timed out on a loaded
    machine; etcd and every node hold the lock's decisions."""
    from test_cluster import etcd_delta, key_proposals
    keys = len(first)
    props = key_proposals(etcd, snap0, snap1)
    bound = keys // ETCD_BATCH_MAX + 1
    assert props <= bound, f"{props} Raft proposals for {keys} keys on {len(nodes)} nodes (bound {bound}): " \
        f"{etcd_delta(snap0, snap1)}"
    want = {f"[i:{i}]": first[i][1] for i in range(keys)}
    assert {k: c for k, (c, _) in etcd_held(etcd).items()} == want
    assert_every_node_holds(nodes, want, tmpdir)


def assert_every_node_holds(nodes, want, tmpdir):
    """Every node's store holds exactly want ({key: config}) once its
    watch delivered it (within PROPAGATE_S), the same bytes on each."""
    exports = []
    for i, nd in enumerate(nodes):
        out = tmpdir / f"node{i}.lock.json"
        end = time.monotonic() + PROPAGATE_S
        while True:
            assert detctl(nd, "lock", "export", "--all", "-o", out).returncode == 0
            entries = json.loads(out.read_text())["entries"]
            if len(entries) == len(want) or time.monotonic() > end:
                break
            time.sleep(0.1)
        assert {e["key"]: e["config"] for e in entries} == want, f"node {i}"
        exports.append(json.dumps(sorted(entries, key=lambda e: e["id"]), sort_keys=True))
    assert len(set(exports)) == 1


@requires(HAVE_ETCD, "etcd-server and etcd-client are not installed")
def test_one_lock_imported_by_every_node_at_once_is_written_once(two, tmpdir_short):
    """4 daemons on one etcd each import the same 128-entry lock at the
    same moment (as every node's detd --lock does at job start): the
    lock's rendezvous owner writes it (2 Txns of 64 keys), the other nodes
    read etcd (no Raft proposal) and wait for the watch to bring it. Every
    node ends with every decision, byte for byte the same."""
    from test_cluster import etcd_snapshot
    keys = 2 * ETCD_BATCH_MAX
    first, lock = wide_lock(two[0], tmpdir_short, keys)
    with one_etcd(tmpdir_short) as (etcd, nodes):
        for i in range(4):
            nd = Daemon(tmpdir_short, name=f"w{i}", extra_args=[
                "--etcd", etcd.endpoints, "--node-id", f"w{i}", "--claim-defer-ms", str(IMPORT_DEFER_MS)])
            nodes.append(nd.start(wait=False))
        for nd in nodes:
            nd.wait_ready(timeout=READY_S)
        # Every node knows every other (the registry the owner is chosen
        # from): its status lists 4 nodes, read by its monitor within a
        # round and an etcd call of the last registration.
        end = time.monotonic() + READY_S
        while not all(len(nd.status()["etcd"]["nodes"]) == 4 for nd in nodes):
            assert time.monotonic() < end, "the 4 nodes never all listed each other"
            time.sleep(0.1)
        snap0 = etcd_snapshot(etcd)
        procs = [subprocess.Popen([str(DETCTL), "--socket", nd.socket, "--timeout", str(IMPORT_TIMEOUT_MS), "lock",
                                   "import", lock], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for nd in nodes]
        outs = [p.communicate(timeout=2 * IMPORT_TIMEOUT_MS / 1000) for p in procs]
        snap1 = etcd_snapshot(etcd)
        for p, (out, err) in zip(procs, outs):
            assert p.returncode == 0, out + err
        added = [int(out.split(" added")[0].split()[-1]) for out, _ in outs]
        assert sum(added) == keys, outs
        # The owner's commits: etcd was read before them and the others
        # wait for them (every node writing: 4 per 64 keys).
        assert_written_once(etcd, snap0, snap1, nodes, first, tmpdir_short)


# The start-up wait for the registry (daemon/cluster/cluster_int.h,
# daemon/ops/lock.h): the registry is read by a monitor round
# (CLUSTER_MONITOR_MS) the claim deferral after the node registered; the
# lock's owner is chosen from it then (the bound: the deferral and two
# rounds).
CLUSTER_MONITOR_MS = 1000


@requires(HAVE_ETCD, "etcd-server and etcd-client are not installed")
def test_one_lock_given_to_every_node_at_start_is_written_once(two, tmpdir_short):
    """4 daemons started at once, each with detd --lock of the same
    128-entry lock (every node's daemon at job start): each waits until
    the registry lists it, read the claim deferral after it registered (the
    nodes started with it are in it), so all 4 name the same owner, which
    writes the lock (2 Txns of 64 keys); the others read etcd and wait for
    the watch. Every node ends with every decision, the lock's."""
    from test_cluster import etcd_snapshot
    keys = 2 * ETCD_BATCH_MAX
    first, lock = wide_lock(two[0], tmpdir_short, keys)
    with one_etcd(tmpdir_short) as (etcd, nodes):
        snap0 = etcd_snapshot(etcd)
        # Nodes of a job start at the same moment; here etcd is held
        # stopped until every daemon has begun settling its lock, so all 4
        # meet etcd (register, read the lock's keys) together.
        pid = etcd.members[0]["pid"]
        os.kill(pid, signal.SIGSTOP)
        try:
            for i in range(4):
                nd = Daemon(tmpdir_short, name=f"s{i}", extra_args=[
                    "--etcd", etcd.endpoints, "--node-id", f"s{i}", "--claim-defer-ms", str(LOCK_DEFER_MS),
                    "--lock", lock])
                nodes.append(nd.start(wait=False))
            for nd in nodes:
                nd.wait_log("start: lockfile", timeout=READY_S)
        finally:
            os.kill(pid, signal.SIGCONT)
        # Ready only once the lock is settled: the registry wait, the
        # reads, the owner's writes (the others' wait ends when they arrive).
        for nd in nodes:
            nd.wait_ready(timeout=READY_S + (LOCK_DEFER_MS + 2 * CLUSTER_MONITOR_MS) / 1000)
        snap1 = etcd_snapshot(etcd)
        logs = [nd.read_log() for nd in nodes]
        for i, log in enumerate(logs):
            assert "through etcd" in log and "registry did not list" not in log, f"s{i}: " + log[-3000:]
            assert counter(nodes[i].status(), "lock_registry_late") == 0
        added = [int(log.split(" decisions added")[0].split()[-1]) for log in logs]
        assert sum(added) == keys, added
        # Without the wait each node counting itself the owner wrote.
        assert_written_once(etcd, snap0, snap1, nodes, first, tmpdir_short)


# ---- provenance of a real timing pass, and detd-run --lock ----

HERE = Path(__file__).resolve().parent
PY_TRITON = triton_python()


def hook_env(root, **more):
    """A real-Triton process's environment: the CPU interpreter, the
    package from this tree, the device timing lock (held on the CPU)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DETD_") or k in ("DETD_BUILD_DIR",)}
    # Python processes load the plain libdetd (DETD_CLIENT_BUILD_DIR) when
    # the daemon under test is a sanitizer build (test_restart.py says why).
    lib = Path(os.environ.get("DETD_CLIENT_BUILD_DIR") or BUILD) / "client" / "libdetd.so"
    env.update(TRITON_INTERPRET="1", PYTHONPATH=str(REPO / "client" / "python"), DETD_MODE="coordinated",
               DETD_LIBRARY=str(lib), DETD_TIMEOUT_MS="60000",
               DETD_TIMING_LOCK="device", DETD_TIMING_LOCK_DIR=str(root), DETD_DETCTL=str(DETCTL), **more)
    return env


def run_hook(args, env, what):
    r = subprocess.run([PY_TRITON, *map(str, args)], capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, f"{what}: {r.stdout}{r.stderr}"
    return r


@requires(PY_TRITON is not None, "no Python with triton and torch (set DETD_TRITON_PYTHON or DETD_VENV_ROOT)")
def test_provenance_of_a_real_timing_pass_travels_with_the_lock(two, tmpdir_short):
    a, b = two
    out = tmpdir_short / "w1.json"
    run_hook([HERE / "lock_hook_worker.py", out, 64], hook_env(tmpdir_short, DETD_SOCKET=a.socket), "run 1")
    w1 = json.loads(out.read_text())
    assert w1["bench_calls"] == 4, w1  # one timing pass: each candidate once
    dec = json.loads(detctl(a, "decisions", "--json").stdout)["decisions"]
    assert len(dec) == 1 and dec[0]["source"] == "timed", dec
    t = dec[0]["timing"]
    assert t["benchmarker"] == {"name": "rowsum_kernels:fake_do_bench", "warmup": 0.0, "rep": 0.0,
                                "return_mode": "quantiles=0.5,0.2,0.8", "cuda_graphs": False,
                                "timing_lock": True}, t
    assert t["torch_version"] == w1["torch"] and t["cuda_version"] == w1["cuda"] and t["driver"] == "none", t
    assert t["package"] is None and t["package_version"] is None, t  # a test file: no distribution

    cands = [x for c in dec[0]["timings"] for x in ("--candidate", c["config"])]
    r = detctl(a, "explain", "--kernel", dec[0]["kernel"], "--key", dec[0]["key"], "--arch", dec[0]["arch"], *cands)
    assert f"  timed   rowsum_kernels:fake_do_bench (warmup 0 ms, rep 0 ms, quantiles=0.5,0.2,0.8, CUDA graphs no, " \
        f"timing lock yes); torch {w1['torch']}, CUDA {w1['cuda']}, driver none; package - \n" in r.stdout, r.stdout
    lock = tmpdir_short / "l.json"
    assert detctl(a, "lock", "export", "-o", lock, "--all").returncode == 0
    doc = json.loads(lock.read_text())
    p = doc["entries"][0]["provenance"]
    assert p["benchmarker"] == t["benchmarker"] and p["torch_version"] == w1["torch"] and p["driver"] == "none"
    # The content hash covers it.
    bad = json.loads(lock.read_text())
    bad["entries"][0]["provenance"]["benchmarker"]["rep"] = 100.0
    tampered = tmpdir_short / "t.json"
    tampered.write_text(json.dumps(bad))
    r = detctl(b, "lock", "import", tampered)
    assert r.returncode == 2 and "content hash mismatch" in r.stderr, r.stderr

    # A run whose torch is not the lock's: not imported, a miss with the
    # field and both values, counted, and explain says it.
    kernel, key = dec[0]["kernel"], dec[0]["key"]
    r = detctl(b, "lock", "import", lock, "--require", "torch_version=0.0.0", "--require", "driver=none")
    why = f"torch_version: the lock says {w1['torch']}, this run 0.0.0 (must match)"
    assert r.returncode == 0 and f"SKIPPED {kernel} {key} [{dec[0]['arch']}]: {why}: a miss, timed by the job" \
        in r.stdout and "0 added, 0 unchanged, 0 conflicting (kept as stored), 1 skipped" in r.stdout, r.stdout
    assert counter(b.status(), "lock_skipped") == 1
    e = json.loads(detctl(b, "explain", "--kernel", kernel, "--key", key, "--arch", dec[0]["arch"], *cands,
                          "--json").stdout)
    assert e["answer"] == "timed" and f"the lock 'l.json' holds this key but was not imported for it: {why}: " \
        "a miss (timed by the job)" in e["notes"], e

    # detd-run --lock, two jobs at once: with a daemon already answering
    # (b: imported through detctl, the Admin call, the job's Triton and
    # torch required), and starting this user's daemon (given with --lock;
    # the job runs warm: the lock's config, no do_bench call).
    script = tmpdir_short / "hello.py"
    script.write_text("print('script ran')\n")
    run_dir, state, out2 = tmpdir_short / "run", tmpdir_short / "state", tmpdir_short / "w2.json"
    jobs = [subprocess.Popen([PY_TRITON, *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, env=env)
            for args, env in (
                (["-m", "detd.run", "--lock", lock, script], hook_env(tmpdir_short, DETD_SOCKET=b.socket)),
                (["-m", "detd.run", "--lock", lock, HERE / "lock_hook_worker.py", out2, 64],
                 hook_env(tmpdir_short, XDG_RUNTIME_DIR=str(run_dir), XDG_STATE_HOME=str(state),
                          DETD_DAEMON=str(DETD))))]
    (out_b, err_b), (_, err_own) = [j.communicate(timeout=300) for j in jobs]
    sock = run_dir / "detd" / "detd.sock"
    started = json.loads(subprocess.run([str(DETCTL), "--socket", str(sock), "status", "--json"],
                                        capture_output=True, text=True, timeout=60).stdout or "{}")
    try:
        assert jobs[0].returncode == 0 and "script ran" in out_b, err_b
        assert err_b.count(f"detd: lock {lock}: imported into namespace 'default': 1 added, 0 unchanged, "
                           "0 conflicting") == 1, err_b
        b_dec = json.loads(detctl(b, "decisions", "--json").stdout)["decisions"]
        assert [(x["config"], x["source"], x["timing"]) for x in b_dec] == [(dec[0]["config"], "import", t)], b_dec
        assert jobs[1].returncode == 0, err_own
        assert f"detd: lock {lock}: given to the daemon started at {sock} (detd --lock" in err_own, err_own
        w2 = json.loads(out2.read_text())
        assert w2["configs"] == w1["configs"] and w2["bench_calls"] == 0, w2
        assert counter(started, "timing_passes") == 0 and counter(started, "decisions_import") == 1, started
    finally:
        if started.get("pid"):
            os.kill(started["pid"], 15)


def test_decisions_past_one_message_are_listed_and_exported_in_pages(two, tmpdir_short):
    """More decisions than one 1 MiB answer holds (700 keys of 64 candidates,
    about 2 KiB each with their timings): detctl decisions, verify and lock
    export read every page of ListDecisions (at most 512 KiB each), where
    one answer used to exceed the client's message limit and fail."""
    a, _ = two
    kernel = "tests.lock:wide@0123456789abcdef"
    p = subprocess.run([str(BUILD / "tests" / "detd_loadgen"), "--socket", a.socket, "--keys", "700",
                        "--candidates", "64", "--kernel", kernel, "--sleep-ms", "0", "--observe"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    r = detctl(a, "decisions", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    rows = doc["decisions"]
    assert len(rows) == 700 and doc["truncated"] is False, (len(rows), doc["truncated"])
    assert len({(x["kernel"], x["key"]) for x in rows}) == 700
    assert [(x["kernel"], x["key"]) for x in rows] == sorted((x["kernel"], x["key"]) for x in rows)
    assert len(r.stdout) > (1 << 20), len(r.stdout)  # the whole list is over one message
    lock = tmpdir_short / "wide.json"
    r = detctl(a, "lock", "export", "-o", lock, "--all")
    assert r.returncode == 0 and f"wrote {lock}: 700 decisions" in r.stdout, r.stdout + r.stderr
    assert len(json.loads(lock.read_text())["entries"]) == 700
    v = detctl(a, "verify", "--all-jobs")
    assert v.returncode == 0 and "700 keys checked" in v.stdout, v.stdout + v.stderr
