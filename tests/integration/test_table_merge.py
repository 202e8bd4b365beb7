"""detctl table merge, report and import: real detctl on real files, and a
real detd (unix socket, SQLite store) answering Decide from imported
entries through libdetd (ctypes)."""

import itertools
import json
import os
import subprocess

import pytest

import detd_client as dc
from conftest import DETCTL, IS_ROOT, Daemon, counter, requires
from test_tables import CANDS, KERNEL, Lib, cfg, entry

SOURCE_TABLE, SOURCE_IMPORT = 2, 4


def detctl(*args, check=False):
    r = subprocess.run([str(DETCTL), *map(str, args)], capture_output=True, text=True, timeout=60)
    if check and r.returncode != 0:
        raise AssertionError(f"detctl {args} -> {r.returncode}\n{r.stdout}\n{r.stderr}")
    return r


def recording(path, kernels, arch="sm90"):
    """A Megatron per-rank recording (what MCORE_AUTOTUNE_RECORD writes)."""
    path.write_text(json.dumps({arch: kernels}))
    return path


def megatron_entry(block, warps=4, stages=1):
    return {"kwargs": {"BLOCK": block}, "num_warps": warps, "num_stages": stages}


@pytest.fixture
def inputs(tmpdir_short):
    """Three recordings and a table with provenance; [i:1] is a tie of
    512 (2 votes) and 256 (2 votes: the table's provenance weighs 2)."""
    t = tmpdir_short
    files = [
        recording(t / "rank0.json", {"m:f": {"[i:1]": megatron_entry(512), "[i:2]": megatron_entry(1024)}}),
        recording(t / "rank1.json", {"m:f": {"[i:1]": megatron_entry(512), "[i:2]": megatron_entry(1024)}}),
        recording(t / "rank2.json", {"m:f": {"[i:2]": megatron_entry(2048)}, "m:g": {"*": megatron_entry(256)}}),
    ]
    table = t / "old-sm90.json"
    table.write_text(json.dumps({
        "format": "detd-table-1", "arch": "sm90", "triton": "3.6.0",
        "kernels": {"m:f": {"[i:1]": entry(256)}},
        "provenance": {"m:f": {"[i:1]": {"votes": 2, "agree": 2, "devices": ["NVIDIA H200"], "hosts": 1}}},
    }))
    files.append(table)
    return t, files


def test_merge_majority_tie_and_bytes_in_every_order(inputs):
    t, files = inputs
    outs = []
    for i, perm in enumerate(itertools.permutations(files)):
        out = t / f"out{i}.json"
        r = detctl("table", "merge", *perm, "-o", out, "--verbose", check=True)
        assert "3 entries of 2 kernels, 2 with disagreeing inputs" in r.stdout, r.stdout
        # --verbose: kernel, key and the vote counts of each disagreement.
        assert f"m:f key [i:1]: {cfg(256)}: 2, {cfg(512)}: 2" in r.stdout, r.stdout
        assert f"m:f key [i:2]: {cfg(1024)}: 2, {cfg(2048)}: 1" in r.stdout, r.stdout
        outs.append(out.read_bytes())
    assert len(outs) == 24 and all(o == outs[0] for o in outs)
    doc = json.loads(outs[0])
    assert outs[0].endswith(b"}\n") and outs[0].startswith(b'{\n "arch": "sm90",')
    # The tie: {"kwargs":{"BLOCK":256},...} is the smaller canonical JSON.
    assert doc["kernels"]["m:f"]["[i:1]"]["kwargs"] == {"BLOCK": 256}
    assert doc["kernels"]["m:f"]["[i:2]"]["kwargs"] == {"BLOCK": 1024}
    assert doc["kernels"]["m:g"]["*"] == entry(256)  # defaults spelled out
    assert doc["provenance"]["m:f"]["[i:1]"] == {"votes": 4, "agree": 2, "devices": ["NVIDIA H200"]}
    assert doc["provenance"]["m:f"]["[i:2]"] == {"votes": 3, "agree": 2}
    assert doc["triton"] == "3.6.0" and doc["format"] == "detd-table-1"
    # report: the same inputs, per kernel.
    rep = json.loads(detctl("table", "report", *files, "--json", check=True).stdout)
    mf = rep["archs"]["sm90"]["kernels"]["m:f"]
    assert rep["inputs"] == 4
    assert (mf["entries"], mf["votes"], mf["disagreeing"]) == (2, 7, 2)
    assert mf["splits"][0] == {"key": "[i:1]", "votes": {cfg(256): 2, cfg(512): 2}}
    text = detctl("table", "report", *files, check=True).stdout
    assert "sm90: 3 entries, 8 votes, 2 with disagreeing inputs" in text, text
    assert f"key [i:2]: {cfg(1024)}: 2, {cfg(2048)}: 1" in text, text


def test_merge_errors_name_file_and_path_and_write_nothing(inputs):
    t, files = inputs
    bad = recording(t / "rank9.json", {"m:f": {"[i:1]": {"kwargs": {}, "num_warps": "4", "num_stages": 1}}})
    out = t / "merged.json"
    r = detctl("table", "merge", *files, bad, "-o", out)
    assert r.returncode == 2
    assert f'{bad}: "sm90"."m:f"."[i:1]".num_warps: expected an integer' in r.stderr, r.stderr
    assert not out.exists()
    table = t / "broken.json"
    table.write_text('{"arch": "sm90", "kernels": {"m:f": {"*": {"kwargs": {}, "num_warps": 4, "num_stages": 1, "x": 1}}}}')
    r = detctl("table", "merge", files[0], table, "-o", out)
    assert r.returncode == 2 and f'{table}: kernels."m:f"."*".x: unknown member' in r.stderr, r.stderr
    trunc = t / "trunc.json"
    trunc.write_text(files[0].read_text()[:-5])
    r = detctl("table", "merge", trunc, "-o", out)
    assert r.returncode == 2 and f"{trunc}: line 1" in r.stderr and "invalid JSON" in r.stderr, r.stderr
    # Several architectures: -o must be a directory; the error names them.
    other = recording(t / "b200.json", {"m:f": {"*": megatron_entry(64)}}, arch="sm100")
    r = detctl("table", "merge", files[0], other, "-o", out)
    assert r.returncode == 2 and "2 architectures (sm100, sm90)" in r.stderr, r.stderr
    assert not out.exists()
    assert not [p for p in t.iterdir() if ".tmp." in p.name]
    outdir = t / "tables"
    outdir.mkdir()
    r = detctl("table", "merge", files[0], other, "-o", outdir, check=True)
    assert sorted(p.name for p in outdir.iterdir()) == ["sm100.json", "sm90.json"]
    assert json.loads((outdir / "sm100.json").read_text())["arch"] == "sm100"


def test_megatron_table_round_trip_answers_through_table_key(tmpdir_short):
    t = tmpdir_short
    meg = t / "megatron-sm90.json"
    meg.write_text(json.dumps({"arch": "sm90", "kernels": {"row_sum": {
        "N=1|torch.float32": megatron_entry(512), "N=2|torch.float32": megatron_entry(1024)}}}))
    tables = t / "tables"
    tables.mkdir()
    r = detctl("table", "merge", meg, "-o", tables, check=True)
    assert "2 entries of 1 kernel, 0 with disagreeing inputs" in r.stdout, r.stdout
    rep = json.loads(detctl("table", "report", tables / "sm90.json", "--json", check=True).stdout)
    assert rep["archs"]["sm90"]["kernels"]["row_sum"] == {"entries": 2, "votes": 2, "disagreeing": 0, "splits": []}
    d = Daemon(t, ["--tables", str(tables)]).start()
    lib = Lib(d.socket)
    try:
        for n, block in ((1, 512), (2, 1024)):
            a = lib.decide(f"[i:{n}]", table_key=f"N={n}|torch.float32")
            assert a["outcome"] == dc.DECIDED and a["config"] == cfg(block), a
            assert a["source"] == SOURCE_TABLE
        assert counter(d.status(), "timing_passes") == 0
    finally:
        lib.close()
        d.stop()


@pytest.fixture
def import_daemon(tmpdir_short):
    d = Daemon(tmpdir_short, ["--namespace", "job1"]).start()
    lib = Lib(d.socket)
    yield d, lib, tmpdir_short
    lib.close()
    d.stop()


def write_doc(path, kernels, arch="sm90"):
    path.write_text(json.dumps({"format": "detd-table-1", "arch": arch, "kernels": kernels}))
    return path


def test_import_answers_decide_with_source_import(import_daemon):
    d, lib, t = import_daemon
    f = write_doc(t / "tuned.json", {"tests.tables:row_sum": {"[i:1]": entry(512), "N=2|torch.float32": entry(1024)},
                                     "row_sum": {"*": entry(2048)}})
    r = d.detctl("table", "import", f, check=True)
    assert "3 added, 0 replaced, 0 unchanged; 3 imported entries in the namespace" in r.stdout, r.stdout
    assert counter(d.status(), "imported_entries") == 3
    # Exact key, table_key, then the bare function name's "*".
    a = lib.decide("[i:1]")
    assert (a["outcome"], a["config"], a["source"]) == (dc.DECIDED, cfg(512), SOURCE_IMPORT), a
    b = lib.decide("[i:2]", table_key="N=2|torch.float32")
    assert (b["config"], b["source"]) == (cfg(1024), SOURCE_IMPORT), b
    c = lib.decide("[i:3]")
    assert (c["config"], c["source"]) == (cfg(2048), SOURCE_IMPORT), c
    st = d.status()
    assert counter(st, "timing_passes") == 0
    assert counter(st, "import_hits") == 3 and counter(st, "decisions_import") == 3
    dec = {x["key"]: x for x in json.loads(d.detctl("decisions", "--json", check=True).stdout)["decisions"]}
    assert dec["[i:1]"]["source"] == "import" and dec["[i:1]"]["table_file"] == str(f)
    # Explain: its own answer kind, for a key not decided yet.
    ex = json.loads(d.detctl("explain", "--kernel", KERNEL, "--key", "[i:9]", "--arch", "sm90",
                             *sum((["--candidate", c] for c in CANDS), []), "--json", check=True).stdout)
    assert ex["answer"] == "import", ex
    assert ex["import_entry"]["config"] == cfg(2048) and ex["import_entry"]["key"] == "*"
    assert ex["import_entry"]["file"] == str(f)
    text = d.detctl("explain", "--kernel", KERNEL, "--key", "[i:9]", "--arch", "sm90", check=True).stdout
    assert f"answer: imported entry (from {f})" in text, text
    # Re-import: idempotent. Another config for one entry: replaced, said so.
    r = d.detctl("table", "import", f, check=True)
    assert "0 added, 0 replaced, 3 unchanged; 3 imported entries" in r.stdout, r.stdout
    g = write_doc(t / "retuned.json", {"tests.tables:row_sum": {"[i:1]": entry(256)}})
    r = d.detctl("table", "import", g, check=True)
    assert "0 added, 1 replaced, 0 unchanged; 3 imported entries" in r.stdout, r.stdout
    assert f"replaced sm90 tests.tables:row_sum key [i:1]: {cfg(512)} (from {f}) -> {cfg(256)}" in r.stdout
    ex = json.loads(d.detctl("explain", "--kernel", KERNEL, "--key", "[i:1]", "--arch", "sm90",
                             "--json", check=True).stdout)
    assert ex["answer"] == "decision"  # the decision stands
    assert ex["imports_considered"][0]["config"] == cfg(256)
    # Another namespace sees none of them.
    ex = json.loads(d.detctl("explain", "--kernel", KERNEL, "--key", "[i:1]", "--arch", "sm90",
                             "--namespace", "other", "--json", check=True).stdout)
    assert ex["answer"] == "timed" and ex["imports_considered"] == []
    # reset --all keeps imports; with --imports they go too.
    r = d.detctl("reset", "--all", check=True)
    assert counter(d.status(), "imported_entries") == 3
    r = d.detctl("reset", "--all", "--imports", check=True)
    assert "removed 3 imported entries" in r.stdout, r.stdout
    assert counter(d.status(), "imported_entries") == 0
    a = lib.decide("[i:1]")
    assert a["outcome"] == dc.DESIGNATED, a


def test_stale_imported_entry_is_a_miss_then_timed(import_daemon):
    d, lib, t = import_daemon
    f = write_doc(t / "t.json", {"tests.tables:row_sum": {"[i:1]": entry(4096)}})
    d.detctl("table", "import", f, check=True)
    a = lib.decide("[i:1]")
    assert a["outcome"] == dc.DESIGNATED, a
    st = d.status()
    assert counter(st, "import_stale") == 1 and counter(st, "import_misses") == 1
    assert counter(st, "import_hits") == 0 and counter(st, "timing_passes") == 1
    ex = json.loads(d.detctl("explain", "--kernel", KERNEL, "--key", "[i:1]", "--arch", "sm90",
                             *sum((["--candidate", c] for c in CANDS), []), "--json", check=True).stdout)
    assert ex["answer"] == "timed" and ex["imports_considered"][0]["stale"] is True


def test_import_in_batches_over_one_mib(import_daemon):
    d, lib, t = import_daemon
    n = 12000
    kern = "tests.tables:row_sum_" + "x" * 120
    f = write_doc(t / "big.json", {kern: {f"[i:{i}]": entry(256 + i % 4) for i in range(n)}})
    assert f.stat().st_size > 1 << 20
    r = d.detctl("table", "import", f, check=True, timeout=120)
    batches = int(r.stdout.split(" batch")[0].rsplit(" ", 1)[1])
    assert batches >= 3, r.stdout
    assert f"{n} added" in r.stdout and counter(d.status(), "imported_entries") == n


def test_import_errors(import_daemon):
    d, lib, t = import_daemon
    bad = t / "bad.json"
    bad.write_text('{"arch": "sm90", "kernels": {"k": {"*": {"kwargs": {}, "num_warps": 4}}}}')
    r = d.detctl("table", "import", bad)
    assert r.returncode == 2 and 'kernels."k"."*".num_stages: missing' in r.stderr, r.stderr
    assert counter(d.status(), "imported_entries") == 0
    # The daemon checks each entry itself: a non-canonical config from a
    # raw client is refused naming the entry; nothing is stored.
    def s(num, b):
        b = b.encode()
        return bytes([num << 3 | 2, len(b)]) + b
    ent = s(1, "sm90") + s(2, "k") + s(3, "*") + s(4, "num_stages=1,num_warps=4,num_ctas=1")
    good = s(1, "sm90") + s(2, "k") + s(3, "[i:1]") + s(4, cfg(256))
    req = s(3, "raw.json") + bytes([4 << 3 | 2, len(good)]) + good + bytes([4 << 3 | 2, len(ent)]) + ent
    code, msg = d.probe("/detd.v1.Admin/ImportTable", req.hex())
    assert code == 3 and "entries[1]" in msg and "num_warps after num_stages" in msg, msg
    assert counter(d.status(), "imported_entries") == 0


@requires(IS_ROOT, "needs root to switch users")
def test_import_needs_an_admin(tmpdir_short):
    os.chmod(tmpdir_short, 0o755)
    d = Daemon(tmpdir_short, ["--allow-uid", "0", "--allow-uid", "65534", "--admin-uid", "0",
                              "--socket-mode", "0666"]).start()
    try:
        f = write_doc(tmpdir_short / "t.json", {"k": {"*": entry(256)}})
        os.chmod(f, 0o644)
        r = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", str(DETCTL),
                            "--socket", d.socket, "table", "import", str(f)],
                           capture_output=True, text=True, timeout=30)
        assert r.returncode == 4  # permission denied
        assert "ImportTable" in r.stderr and "not in --admin-uid/--admin-gid" in r.stderr, r.stderr
        assert counter(d.status(), "imported_entries") == 0
        d.detctl("table", "import", f, check=True)
        assert counter(d.status(), "imported_entries") == 1
    finally:
        d.stop()
