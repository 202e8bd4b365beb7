"""Record-mode votes and `detctl table export`: a real daemon, real client
processes (detd_client.py through libdetd), real SQLite files.

Every test asserts outcomes: the stored votes, the exported entries and
their bytes, provenance counts, the error messages.
"""
import json
import subprocess
import sys
import types
from pathlib import Path

from conftest import REPO, Daemon, counter

sys.path.insert(0, str(REPO / "client" / "python"))
from detd import _triton  # noqa: E402  (pure Python: triton is imported lazily)

KERNEL = "tests.integration:row_sum@0123456789abcdef"


def cfg(block):
    return f"BLOCK={block},num_warps=4,num_stages=1,num_ctas=1"


def run_client(d, *args, out=None):
    p = d.client(*args, out=out, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    stdout, stderr = p.communicate(timeout=60)
    assert p.returncode == 0, stderr.decode()
    if out is not None:
        return json.loads(Path(out).read_text())
    return json.loads(stdout)


# Five voters on three keys: key 0 votes 3:2 for BLOCK=16, key 1 all for
# BLOCK=64, key 2 ties 2:2 between BLOCK=32 and BLOCK=128 (one for 16).
VOTERS = [
    ("node-a", "0,2,1", "NVIDIA H200"),
    ("node-a", "0,2,1", "NVIDIA H200"),
    ("node-b", "0,2,3", "NVIDIA H100"),
    ("node-b", "1,2,3", "NVIDIA H100"),
    ("node-c", "1,2,0", "NVIDIA H200"),
]


def cast_votes(d, tmp, order):
    for n, i in enumerate(order):
        host, spec, dev = VOTERS[i]
        r = run_client(d, "--keys", 3, "--full-configs", "--host", host, "--device", dev, "--rank", i,
                       "--kernel", KERNEL, "--vote", spec, out=tmp / f"v{n}.json")
        assert r["errors"] == [], r["errors"]


def export(d, out, *extra):
    return d.detctl("table", "export", "--arch", "sm90", "-o", str(out), *extra)


def test_votes_majority_provenance_and_identical_bytes(tmpdir_short):
    d1 = Daemon(tmpdir_short, name="a").start()
    d2 = Daemon(tmpdir_short, name="b").start()
    try:
        cast_votes(d1, tmpdir_short, [0, 1, 2, 3, 4])
        cast_votes(d2, tmpdir_short, [4, 3, 2, 1, 0])  # same votes, other order

        # detctl votes lists them all; status counts them.
        v = d1.detctl("votes", "--json", check=True)
        votes = json.loads(v.stdout)
        assert votes["total"] == 15 and len(votes["votes"]) == 15
        assert {x["table_key"] for x in votes["votes"]} == {"N=0|torch.float32", "N=1|torch.float32",
                                                            "N=2|torch.float32"}
        assert all(len(x["timings"]) == 4 for x in votes["votes"])
        assert counter(d1.status(), "votes") == 15
        text = d1.detctl("votes", "--kernel", "tests.integration:row_sum", check=True).stdout
        assert "15 votes listed" in text and "node-c" in text

        out1, out2 = tmpdir_short / "a.json", tmpdir_short / "b.json"
        r1 = export(d1, out1, "--votes")
        assert r1.returncode == 0, r1.stderr
        assert "2 entries with disagreeing ranks" in r1.stdout, r1.stdout
        assert "3 entries of 1 kernel from 15 votes" in r1.stdout, r1.stdout
        r2 = export(d2, out2, "--votes")
        assert r2.returncode == 0, r2.stderr
        assert out1.read_bytes() == out2.read_bytes()
        assert out1.read_bytes().endswith(b"}\n")

        t = json.loads(out1.read_text())
        assert t["format"] == "detd-table-1" and t["arch"] == "sm90" and t["triton"] == "3.6.0"
        entries = t["kernels"]["tests.integration:row_sum"]  # no @guard
        entry = {"kwargs": {"BLOCK": 16}, "num_warps": 4, "num_stages": 1, "num_ctas": 1, "maxnreg": None}
        assert entries["i:0"] == entry
        assert entries["i:1"] == dict(entry, kwargs={"BLOCK": 64})
        # The 2:2 tie goes to the bytewise smaller canonical JSON:
        # {"BLOCK":128} < {"BLOCK":32}.
        assert entries["i:2"] == dict(entry, kwargs={"BLOCK": 128})
        prov = t["provenance"]["tests.integration:row_sum"]
        assert prov["i:0"] == {"votes": 5, "agree": 3, "devices": ["NVIDIA H100", "NVIDIA H200"], "hosts": 3}
        assert prov["i:1"] == {"votes": 5, "agree": 5, "devices": ["NVIDIA H100", "NVIDIA H200"], "hosts": 3}
        assert prov["i:2"]["agree"] == 2 and prov["i:2"]["votes"] == 5
        # Sorted keys, indent 1: the file is its own canonical form.
        assert out1.read_text() == json.dumps(t, indent=1, sort_keys=True, ensure_ascii=False) + "\n"
    finally:
        d1.stop()
        d2.stop()


def test_repeated_vote_replaces_and_non_candidate_is_rejected(daemon, tmpdir_short):
    r = run_client(daemon, "--keys", 2, "--full-configs", "--vote", "0", "--revote", "3", out=tmpdir_short / "r.json")
    assert r["errors"] == []
    votes = json.loads(daemon.detctl("votes", "--json", check=True).stdout)["votes"]
    assert len(votes) == 2 and {x["config"] for x in votes} == {cfg(128)}

    bad = "BLOCK=999,num_warps=4,num_stages=1,num_ctas=1"
    r = run_client(daemon, "--keys", 1, "--key-prefix", "j:", "--full-configs", "--vote-config", bad,
                   out=tmpdir_short / "bad.json")
    assert len(r["errors"]) == 1, r
    key, rc, _, detail, what = r["errors"][0]
    assert what == "vote" and rc == -1000, r  # DETD_EINVAL
    assert bad in detail and "candidates" in detail, detail
    # Nothing stored, the daemon keeps serving.
    assert json.loads(daemon.detctl("votes", "--json", check=True).stdout)["total"] == 2
    assert daemon.detctl("health").returncode == 0


def test_vote_cap_refuses_naming_the_limit_and_reset_clears(tmpdir_short):
    d = Daemon(tmpdir_short, extra_args=["--max-votes", "3"]).start()
    try:
        r = run_client(d, "--keys", 4, "--full-configs", "--vote", "1", out=tmpdir_short / "c.json")
        assert len(r["keys"]) == 3 and len(r["errors"]) == 1, r
        assert "--max-votes 3" in r["errors"][0][3], r["errors"]
        st = d.status()
        assert counter(st, "votes") == 3 and counter(st, "votes_refused_full") == 1
        assert counter(st, "votes_max") == 3
        assert "FULL" in d.detctl("votes", check=True).stdout
        rs = d.detctl("reset", "--votes", "--all", check=True)
        assert "removed 3 votes" in rs.stdout
        r = run_client(d, "--keys", 1, "--key-prefix", "z:", "--full-configs", "--vote", "1",
                       out=tmpdir_short / "c2.json")
        assert r["errors"] == []
        # Decisions are not touched by a reset of votes.
        assert counter(d.status(), "votes") == 1
    finally:
        d.stop()


class _Config(types.SimpleNamespace):
    pass


def render(entry):
    """detd's canonical string of a table entry, by the Python function."""
    c = _Config(kwargs=dict(entry["kwargs"]), num_warps=entry["num_warps"], num_stages=entry["num_stages"],
                num_ctas=entry.get("num_ctas", 1), maxnreg=entry.get("maxnreg"))
    return _triton.config_string(c)


def test_export_decisions_round_trips_to_the_decided_config(daemon, tmpdir_short):
    # Timed decisions through Decide/Report (full configs) for two code
    # versions of one kernel: the newer one wins key i:0, with a warning.
    run_client(daemon, "--keys", 3, "--full-configs", "--kernel", "m.sub:fn@aaaaaaaaaaaaaaaa",
               out=tmpdir_short / "d1.json")
    new = run_client(daemon, "--keys", 1, "--full-configs", "--rank", 1, "--kernel", "m.sub:fn@bbbbbbbbbbbbbbbb",
                     out=tmpdir_short / "d2.json")
    # A decision whose config lacks num_stages cannot be a table entry.
    run_client(daemon, "--keys", 1, "--kernel", "other:k@cccccccccccccccc", out=tmpdir_short / "d3.json")
    decided = {x["kernel"] + "|" + x["key"]: x["config"]
               for x in json.loads(daemon.detctl("decisions", "--json", check=True).stdout)["decisions"]}
    assert len(decided) == 5

    out = tmpdir_short / "sm90.json"
    r = export(daemon, out, "--source", "unit test")
    assert r.returncode == 0, r.stderr
    assert "3 entries of 1 kernel from 5 decisions, 1 skipped, 1 superseded" in r.stdout, r.stdout
    assert "m.sub:fn@aaaaaaaaaaaaaaaa" in r.stderr and "m.sub:fn@bbbbbbbbbbbbbbbb" in r.stderr, r.stderr
    assert "skipped decision" in r.stderr and "other:k@cccccccccccccccc" in r.stderr and "num_stages" in r.stderr
    t = json.loads(out.read_text())
    assert t["source"] == "unit test" and "provenance" not in t
    entries = t["kernels"]["m.sub:fn"]
    assert sorted(entries) == ["i:0", "i:1", "i:2"]
    assert render(entries["i:0"]) == new["keys"]["i:0"]["config"]
    for k in ("i:1", "i:2"):
        assert render(entries[k]) == decided[f"m.sub:fn@aaaaaaaaaaaaaaaa|{k}"]
    # The same store gives the same bytes.
    out2 = tmpdir_short / "again.json"
    assert export(daemon, out2, "--source", "unit test").returncode == 0
    assert out.read_bytes() == out2.read_bytes()
    # --kernel narrows to one code version.
    r = export(daemon, out2, "--kernel", "m.sub:fn@aaaaaaaaaaaaaaaa")
    assert r.returncode == 0 and "3 entries" in r.stdout, r.stdout


def test_export_rejects_a_bad_arch_and_writes_nothing(daemon, tmpdir_short):
    out = tmpdir_short / "x.json"
    r = daemon.detctl("table", "export", "--arch", "hopper", "-o", str(out))
    assert r.returncode == 2 and "'hopper'" in r.stderr
    assert not out.exists()
    r = daemon.detctl("table", "frobnicate")
    assert r.returncode == 2 and "export" in r.stderr
