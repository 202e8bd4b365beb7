"""Integration tests of per-architecture tables: a real detd on a temporary
unix socket with --tables directories of real files, driven by libdetd
(ctypes, in this process and in client processes) and detctl."""

import ctypes
import json
import shutil
import signal
import time
from pathlib import Path

import pytest

import detd_client as dc
from conftest import Daemon, counter

FIXTURES = Path(__file__).resolve().parents[1] / "tables"
KERNEL = "tests.tables:row_sum@0123456789abcdef"


def cfg(block, warps=4, stages=1):
    return f"BLOCK={block},num_warps={warps},num_stages={stages},num_ctas=1"


CANDS = [cfg(256), cfg(512), cfg(1024), cfg(2048)]


def entry(block, warps=4, stages=1):
    return {"kwargs": {"BLOCK": block}, "num_warps": warps, "num_stages": stages, "num_ctas": 1, "maxnreg": None}


def write_table(dirpath, arch, kernels, **extra):
    dirpath = Path(dirpath)
    dirpath.mkdir(parents=True, exist_ok=True)
    doc = {"format": "detd-table-1", "arch": arch, "kernels": kernels, **extra}
    path = dirpath / f"{arch}.json"
    tmp = dirpath / f".{arch}.json.tmp"
    tmp.write_text(json.dumps(doc))
    tmp.rename(path)  # never a half-written file for a concurrent reload
    return path


class Lib:
    """libdetd through ctypes, in this process."""

    def __init__(self, socket, arch="sm90"):
        self.lib = dc.load()
        self.lib.detd_client_last_error.restype = ctypes.c_char_p
        ident = dc.Identity(b"node-a", 0, 0, 1, b"Test GPU", arch.encode(), 132, b"it")
        self.cl = ctypes.c_void_p()
        assert self.lib.detd_client_open(socket.encode(), ctypes.byref(ident), ctypes.byref(self.cl)) == 0

    def decide(self, key, cands=CANDS, kernel=KERNEL, arch="sm90", table_key=None, no_claim=False):
        arr = (ctypes.c_char_p * len(cands))(*[c.encode() for c in cands])
        k = dc.Key(None, arch.encode(), kernel.encode(), key.encode(), arr, len(cands),
                   table_key.encode() if table_key is not None else None)
        ans = ctypes.POINTER(dc.Answer)()
        rc = self.lib.detd_decide(self.cl, ctypes.byref(k), 1 if no_claim else 0, 10000, ctypes.byref(ans))
        if rc != 0:
            return {"rc": rc, "error": self.lib.detd_client_last_error().decode()}
        a = ans.contents
        out = {"rc": 0, "outcome": a.outcome, "source": a.source,
               "config": a.config.decode() if a.config else None,
               "id": a.decision_id.decode() if a.decision_id else None}
        self.lib.detd_answer_free(ans)
        return out

    def close(self):
        self.lib.detd_client_close(self.cl)


@pytest.fixture
def tables_daemon(tmpdir_short):
    """A daemon with two table directories: a (first) and b."""
    a, b = tmpdir_short / "a", tmpdir_short / "b"
    a.mkdir()
    b.mkdir()
    write_table(a, "sm90", {"tests.tables:row_sum": {"[i:1]": entry(512), "[i:2]": entry(4096)}})
    write_table(b, "sm90", {"tests.tables:row_sum": {"[i:2]": entry(1024), "*": entry(2048)}})
    d = Daemon(tmpdir_short, ["--tables", str(a), "--tables", str(b)]).start()
    lib = Lib(d.socket)
    yield d, lib, a, b
    lib.close()
    d.stop()


def decisions(d):
    return {x["key"]: x for x in json.loads(d.detctl("decisions", "--json", check=True).stdout)["decisions"]}


def test_table_hit_becomes_a_decision_without_timing(tables_daemon):
    d, lib, a, b = tables_daemon
    r = lib.decide("[i:1]")
    assert r["rc"] == 0 and r["outcome"] == dc.DECIDED, r
    assert r["config"] == cfg(512) and r["source"] == 2  # SOURCE_TABLE
    # [i:2]: a's entry is stale (BLOCK=4096 is no candidate): b answers.
    r2 = lib.decide("[i:2]")
    assert r2["outcome"] == dc.DECIDED and r2["config"] == cfg(1024), r2
    # Any other key: b's "*".
    r3 = lib.decide("[i:77]")
    assert r3["outcome"] == dc.DECIDED and r3["config"] == cfg(2048), r3
    # Asked again: the stored decision (same id, same config).
    again = lib.decide("[i:1]")
    assert again["config"] == cfg(512) and again["id"] == r["id"]
    dec = decisions(d)
    assert dec["[i:1]"]["source"] == "table"
    assert dec["[i:1]"]["table_file"] == str(a / "sm90.json")
    assert dec["[i:2]"]["table_file"] == str(b / "sm90.json")
    assert dec["[i:1]"]["claim_id"] == 0
    st = d.status()
    assert counter(st, "timing_passes") == 0
    assert counter(st, "table_hits") == 3
    assert counter(st, "decisions_table") == 3
    assert counter(st, "table_stale") == 0  # a stale entry passed over is not a miss
    assert "source table" in d.read_log()


def test_stale_entry_is_a_miss_counted_in_status(tables_daemon):
    d, lib, a, b = tables_daemon
    # Only BLOCK=4096 and 8192 are live: a's [i:2] entry (4096) answers,
    # but for [i:1] a's entry (512) and b's "*" (2048) are both stale.
    live = [cfg(4096), cfg(8192)]
    r = lib.decide("[i:2]", cands=live)
    assert r["config"] == cfg(4096) and r["source"] == 2
    r = lib.decide("[i:1]", cands=live, no_claim=True)
    assert r["rc"] == 0 and r["outcome"] == dc.MISS, r
    st = d.status()
    assert counter(st, "table_stale") == 1
    assert counter(st, "table_misses") == 1
    assert counter(st, "table_hits") == 1
    # Without no_claim the stale key goes to the normal timing pass.
    r = lib.decide("[i:1]", cands=live)
    assert r["outcome"] == dc.DESIGNATED, r
    assert counter(d.status(), "table_stale") == 2


def test_megatron_format_answers_through_table_key(tmpdir_short):
    t = tmpdir_short / "megatron"
    t.mkdir()
    shutil.copy(FIXTURES / "megatron" / "sm100.json", t / "sm100.json")
    d = Daemon(tmpdir_short, ["--tables", str(t)]).start()
    lib = Lib(d.socket, arch="sm100")
    try:
        cands = [cfg(512), cfg(1024)]
        kernel = "tests.kernels:row_sum_kernel@00aa"
        r = lib.decide("[i:4096,s:\"torch.float32\",s:\"torch.float32\"]", cands=cands, kernel=kernel,
                       arch="sm100", table_key="N=4096|torch.float32|torch.float32")
        assert r["outcome"] == dc.DECIDED and r["config"] == cfg(1024) and r["source"] == 2, r
        # Without the table_key only the file's "*" entry applies.
        r = lib.decide("[i:8192]", cands=cands, kernel=kernel, arch="sm100")
        assert r["config"] == cfg(512), r
        # The table_key is an alias: not part of the decision id.
        a1 = lib.decide("[i:3]", cands=cands, kernel=kernel, arch="sm100", table_key="N=3|x")
        a2 = lib.decide("[i:3]", cands=cands, kernel=kernel, arch="sm100", table_key="N=3|y")
        assert a1["id"] == a2["id"] and a1["config"] == a2["config"]
        files = d.status()["table_files"]
        assert files == [{"path": str(t / "sm100.json"), "arch": "sm100", "entries": 5}]
        assert counter(d.status(), "timing_passes") == 0
    finally:
        lib.close()
        d.stop()


def test_bad_file_is_skipped_and_listed_while_good_ones_serve(tmpdir_short):
    good, bad = tmpdir_short / "good", tmpdir_short / "bad"
    write_table(good, "sm90", {"tests.tables:row_sum": {"*": entry(256)}})
    bad.mkdir()
    (bad / "sm80.json").write_text('{"arch": "sm80", "kernels": {"k": {"[i:1]": {"kwargs": {}, '
                                   '"num_warps": "four", "num_stages": 1}}}}')
    (bad / "sm89.json").write_text('{"arch": "sm89", "kernels": {')
    (bad / "sm75.json").write_text('{"arch": "sm90", "kernels": {}}')
    d = Daemon(tmpdir_short, ["--tables", str(bad), "--tables", str(good)]).start()
    lib = Lib(d.socket)
    try:
        st = d.status()
        errs = {Path(e["path"]).name: e["error"] for e in st["table_errors"]}
        assert set(errs) == {"sm80.json", "sm89.json", "sm75.json"}
        assert str(bad / "sm80.json") in errs["sm80.json"]
        assert 'kernels."k"."[i:1]".num_warps: expected an integer' in errs["sm80.json"]
        assert "invalid JSON" in errs["sm89.json"]
        assert "does not match the file name" in errs["sm75.json"]
        assert [f["path"] for f in st["table_files"]] == [str(good / "sm90.json")]
        r = lib.decide("[i:5]")
        assert r["outcome"] == dc.DECIDED and r["config"] == cfg(256)
        text = d.detctl("status", check=True).stdout
        assert "1 loaded, 3 skipped" in text
        assert "SKIPPED " + str(bad / "sm80.json") in text
        assert "table file skipped: " + str(bad / "sm89.json") in d.read_log()
    finally:
        lib.close()
        d.stop()


def test_hot_reload_under_load(tmpdir_short):
    t = tmpdir_short / "t"
    write_table(t, "sm90", {"tests.tables:row_sum": {"*": entry(256)}})
    d = Daemon(tmpdir_short, ["--tables", str(t)]).start()
    stop = tmpdir_short / "stop"
    cands = ";".join(CANDS)
    procs = []
    for r in range(3):
        out = tmpdir_short / f"c{r}.json"
        p = d.client("--rank", r, "--key-prefix", f"i:{r}-", "--cands", cands, "--kernel", KERNEL,
                     "--until", stop, "--timeout-ms", 10000, out=out)
        procs.append((p, out))
    try:
        def answered():
            return counter(d.status(), "table_hits")

        def wait_more(n):
            end = time.monotonic() + 20
            base = answered()
            while answered() < base + n:
                assert time.monotonic() < end, "clients stopped getting answers"
                time.sleep(0.05)

        wait_more(30)
        # The 30 hits can all be other ranks' while one client is still
        # starting: its first key must be decided on the first table
        # before the swap, as the check at the end says.
        end = time.monotonic() + 20
        while not all(f"i:{r}-0" in decisions(d) for r in range(3)):
            assert time.monotonic() < end, "a client never got its first answer"
            time.sleep(0.05)
        write_table(t, "sm90", {"tests.tables:row_sum": {"*": entry(512)}})
        d.proc.send_signal(signal.SIGHUP)
        d.wait_log("tables reloaded")
        wait_more(30)
        write_table(t, "sm90", {"tests.tables:row_sum": {"*": entry(1024)}, "other:k": {"*": entry(1)}})
        out = d.detctl("reload", check=True).stdout
        assert "reloaded: 1 table file, 2 entries, 0 skipped" in out, out
        assert str(t / "sm90.json") + " (sm90, 2 entries)" in out
        wait_more(30)
    finally:
        stop.touch()
    order = {cfg(256): 0, cfg(512): 1, cfg(1024): 2}
    for p, out in procs:
        assert p.wait(60) == 0
        res = json.loads(out.read_text())
        assert res["errors"] == [], res["errors"][:3]
        seq = res["sequence"]
        assert all(o == dc.DECIDED and s == 2 for _, _, s, o in seq), seq[:5]
        ranks = [order[c] for _, c, _, _ in seq]
        # Every key is new: answers move from the old table to the new one
        # and never back (the set is swapped whole).
        assert ranks == sorted(ranks), ranks
        assert ranks[-1] == 2
    # Decided keys keep their config after the reload.
    lib = Lib(d.socket)
    try:
        r = lib.decide("i:0-0")
        assert r["config"] == cfg(256), r
    finally:
        lib.close()
    st = d.status()
    assert counter(st, "timing_passes") == 0
    assert counter(st, "table_reloads") == 2
    d.stop()


def explain(d, *args):
    r = d.detctl("explain", "--json", *args)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_explain_outcomes_and_reasons(tables_daemon):
    d, lib, a, b = tables_daemon
    # Would come from a table (no candidates: usable if live).
    e = explain(d, "--kernel", KERNEL, "--key", "[i:1]", "--arch", "sm90")
    assert e["answer"] == "table" and not e["candidates_checked"]
    assert e["table_entry"]["file"] == str(a / "sm90.json")
    assert e["table_entry"]["kernel"] == "tests.tables:row_sum" and e["table_entry"]["key"] == "[i:1]"
    assert e["table_entry"]["config"] == cfg(512)
    assert "usable if" in e["table_entry"]["reason"]
    # With candidates: a's [i:2] entry is stale, b's answers.
    args = ["--kernel", KERNEL, "--key", "[i:2]", "--arch", "sm90"]
    for c in CANDS:
        args += ["--candidate", c]
    e = explain(d, *args)
    assert e["answer"] == "table" and e["candidates_checked"]
    assert e["table_entry"]["config"] == cfg(1024) and e["table_entry"]["file"] == str(b / "sm90.json")
    stale = [c for c in e["considered"] if c["stale"]]
    assert len(stale) == 1 and stale[0]["config"] == cfg(4096)
    assert "stale" in stale[0]["reason"] and cfg(4096) in stale[0]["reason"]
    assert "not among the 4 candidates" in stale[0]["reason"]
    # Would be timed: an unknown kernel, and a known kernel without the key.
    e = explain(d, "--kernel", "tests.tables:other@1", "--key", "[i:1]", "--arch", "sm90")
    assert e["answer"] == "timed" and any("kernel absent" in n for n in e["notes"])
    e = explain(d, "--kernel", KERNEL, "--key", "[i:1]", "--arch", "sm80")
    assert e["answer"] == "timed" and any("no table file for arch sm80" in n for n in e["notes"])
    # An existing decision, once a Decide committed the entry.
    r = lib.decide("[i:2]")
    e = explain(d, *args)
    assert e["answer"] == "decision"
    assert e["decision"]["id"] == r["id"] and e["decision"]["config"] == cfg(1024)
    assert e["decision"]["source"] == "table"
    # The text form names where the answer comes from; exit code 0.
    t = d.detctl("explain", *args)
    assert t.returncode == 0
    assert "answer: existing decision " + r["id"] in t.stdout
    assert "source  table" in t.stdout
    t = d.detctl("explain", "--kernel", KERNEL, "--key", "[i:9]", "--arch", "sm90", "--candidate", cfg(1))
    assert t.returncode == 0 and "answer: would be timed" in t.stdout
    assert "stale: its config " + cfg(2048) + " is not among the 1 candidates" in t.stdout
    # Bad usage names what is missing.
    t = d.detctl("explain", "--kernel", KERNEL)
    assert t.returncode == 2 and "--key" in t.stderr


def test_timed_decision_explained_with_its_rank(tmpdir_short):
    d = Daemon(tmpdir_short).start()
    try:
        p = d.client("--keys", 1, "--kernel", KERNEL, out=tmpdir_short / "c.json")
        assert p.wait(60) == 0
        e = explain(d, "--kernel", KERNEL, "--key", "i:0", "--arch", "sm90")
        assert e["answer"] == "decision" and e["decision"]["source"] == "timed"
        assert e["decision"]["decided_by"]["host"] == "node-a"
        assert e["table_files"] == 0
    finally:
        d.stop()
