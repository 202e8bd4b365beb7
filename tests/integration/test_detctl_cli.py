"""detctl as a command line through a real detd: per-command option sets
and --help, the documented exit codes, the JSON envelope of every
document, UTC times, --kernel by bare name, explain with the key as Triton
prints it, DETD_NAMESPACE, and verify's checks and reports."""
import ctypes
import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from conftest import DETCTL, Daemon

sys.path.insert(0, str(Path(__file__).resolve().parent))
import detd_client as dc  # noqa: E402

KERNEL = "tests.cli:row_sum@0123456789abcdef"
TRITON_KEY = '[i:1024,s:"torch.float32"]'
CANDS = [f"BLOCK={16 << i},num_warps=4" for i in range(3)]
SOURCE_FALLBACK = 5


def detctl(d, *args, env=None):
    e = dict(os.environ)
    e.pop("DETD_NAMESPACE", None)
    e.update(env or {})
    return subprocess.run([str(DETCTL), "--socket", d.socket, *map(str, args)], capture_output=True, text=True,
                          timeout=30, env=e)


class Lib:
    """libdetd through ctypes: decide/report/observe one key of KERNEL."""

    def __init__(self, d, rank=0, ns=None):
        self.lib = dc.load()
        # one host per rank: the store keeps one observation per host and pid
        self.ident = dc.Identity(f"node-{rank}".encode(), rank, rank, 4, b"Test GPU", b"sm90", 132, b"it")
        self.h = ctypes.c_void_p()
        assert self.lib.detd_client_open(d.socket.encode(), ctypes.byref(self.ident), ctypes.byref(self.h)) == 0
        self.ns = ns.encode() if ns else None
        self.arr = (ctypes.c_char_p * len(CANDS))(*[c.encode() for c in CANDS])

    def key(self, k):
        return dc.Key(self.ns, b"sm90", KERNEL.encode(), k.encode(), self.arr, len(CANDS), None)

    def decide(self, k, failed=()):
        key = self.key(k)
        ans = ctypes.POINTER(dc.Answer)()
        assert self.lib.detd_decide(self.h, ctypes.byref(key), 0, 30000, ctypes.byref(ans)) == 0
        if ans.contents.outcome == dc.DESIGNATED:
            keep, tms = [], []
            for j, c in enumerate(CANDS):
                s = (ctypes.c_double * 3)(1.0 + j, 1.01 + j, 0.99 + j)
                keep.append(s)
                tms.append(dc.Timing(c.encode(), s, 3, 1 if c in failed else 0))
            tarr = (dc.Timing * len(tms))(*tms)
            rep = ctypes.POINTER(dc.Answer)()
            assert self.lib.detd_report(self.h, ans.contents.claim_id, ctypes.byref(key), tarr, len(tms), b"3.6.0",
                                        30000, ctypes.byref(rep)) == 0
            cfg = rep.contents.config.decode()
            self.lib.detd_answer_free(rep)
        else:
            cfg = ans.contents.config.decode()
        self.lib.detd_answer_free(ans)
        return cfg

    def observe(self, k, config, source=1):
        key = self.key(k)
        assert self.lib.detd_observe(self.h, ctypes.byref(key), config.encode(), source, 1, 30000) == 0

    def close(self):
        self.lib.detd_client_close(self.h)


def run_ranks(d, keys, ranks, ns=None, fallback=None):
    """Every rank decides and observes every key; rank `fallback` (if any)
    observes its own pick with source FALLBACK instead."""
    for r in ranks:
        lib = Lib(d, rank=r, ns=ns)
        for k in keys:
            cfg = lib.decide(k)
            if r == fallback:
                lib.observe(k, CANDS[-1], SOURCE_FALLBACK)
            else:
                lib.observe(k, cfg)
        lib.close()


@pytest.fixture
def d(tmpdir_short):
    dd = Daemon(tmpdir_short).start()
    yield dd
    dd.stop()


# ---- options and help -------------------------------------------------------

@pytest.mark.parametrize("cmd,bad", [
    (["status"], "--kernel"), (["status"], "--namespace"), (["health"], "--all"), (["reload"], "--kernel"),
    (["decisions"], "--cluster"), (["verify"], "--kernel"), (["votes"], "--cluster"), (["reset"], "--key"),
    (["explain"], "--all"), (["table", "export"], "--cluster"), (["table", "import"], "--votes"),
])
def test_an_option_the_command_does_not_take_is_a_usage_error(d, cmd, bad):
    r = detctl(d, *cmd, bad, "x" if bad in ("--kernel", "--namespace", "--key") else "--json")
    assert r.returncode == 2, (cmd, bad, r.stdout, r.stderr)
    assert f"'{bad}': not an option of '{' '.join(cmd)}'" in r.stderr, r.stderr
    assert r.stdout == ""


def test_unknown_command_option_and_values_are_usage_errors(d):
    for args, needle in [(["frobnicate"], "unknown command 'frobnicate'"),
                         (["--frob", "status"], "unknown option '--frob'"),
                         (["status", "-o", "yaml"], "-o 'yaml': the formats are text and json"),
                         (["verify", "--expect-ranks", "zero"], "--expect-ranks 'zero'"),
                         (["decisions", "--kernel"], "--kernel needs a value"),
                         (["status", "extra"], "unexpected argument 'extra'"),
                         (["--timeout", "-5", "status"], "--timeout '-5'"),
                         ([], "usage: detctl")]:
        r = detctl(d, *args)
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        assert needle in r.stderr, (args, r.stderr)


def test_per_command_help_lists_its_options_and_the_exit_codes(d):
    r = detctl(d, "verify", "--help")
    assert r.returncode == 0
    for o in ("--allow-empty", "--expect-ranks N", "--job J", "--report FILE", "--junit FILE", "-o, --output"):
        assert o in r.stdout, r.stdout
    assert "--kernel" not in r.stdout and "--votes" not in r.stdout
    for code in ("0  ok", "1  the check said no", "2  usage", "3  daemon unreachable", "4  permission denied"):
        assert code in r.stdout
    r = detctl(d, "status", "-h")
    assert r.returncode == 0 and "--namespace" not in r.stdout and "--json" in r.stdout
    r = detctl(d, "help", "explain")
    assert r.returncode == 0 and "--candidate C" in r.stdout and "(1024, 'torch.float32')" in r.stdout
    r = detctl(d, "--help")
    assert r.returncode == 0 and "DETD_NAMESPACE" in r.stdout and "verify" in r.stdout


# ---- exit codes -------------------------------------------------------------

def test_exit_codes(tmpdir_short, d):
    # 3: nothing listens on the socket.
    gone = Daemon(tmpdir_short, name="gone")
    for cmd in (["status"], ["verify"], ["health"], ["decisions", "-o", "json"]):
        r = detctl(gone, *cmd)
        assert r.returncode == 3, (cmd, r.stderr)
        assert f"cannot reach detd at '{gone.socket}'" in r.stderr
    # 0 and 1: verify passes, then fails on a divergence.
    run_ranks(d, ["[i:1]"], [0, 1])
    assert detctl(d, "verify").returncode == 0
    lib = Lib(d, rank=2)
    lib.observe("[i:1]", CANDS[0] if lib.decide("[i:1]") != CANDS[0] else CANDS[1])
    lib.close()
    r = detctl(d, "verify")
    assert r.returncode == 1 and "DIVERGED" in r.stdout and "rank 2" in r.stdout, r.stdout
    # 5: the daemon refuses a request (a kernel id over its 1024-byte cap).
    r = detctl(d, "explain", "--kernel", "m:" + "k" * 2000 + "@1", "--key", "[i:1]", "--arch", "sm90")
    assert r.returncode == 5, (r.returncode, r.stderr)


def test_permission_denied_is_exit_4(tmpdir_short):
    os.chmod(tmpdir_short, 0o755)
    dd = Daemon(tmpdir_short, ["--allow-uid", "0", "--allow-uid", "65534", "--admin-uid", "0",
                               "--socket-mode", "0666"]).start()
    try:
        r = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", str(DETCTL),
                            "--socket", dd.socket, "reset", "--all"], capture_output=True, text=True, timeout=30)
        assert r.returncode == 4, r.stderr
        assert "not in --admin-uid/--admin-gid" in r.stderr
    finally:
        dd.stop()


# ---- JSON envelope, UTC -----------------------------------------------------

ISO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{3})?Z$")


def test_every_json_document_has_api_version_and_kind(d, tmpdir_short):
    run_ranks(d, ["[i:1]"], [0])
    cases = {
        ("status", "-o", "json"): "Status",
        ("decisions", "--json"): "DecisionList",
        ("verify", "-o", "json"): "VerifyReport",
        ("health", "-o", "json"): "Health",
        ("reload", "--json"): "ReloadResult",
        ("votes", "-o", "json"): "VoteList",
        ("explain", "--kernel", KERNEL, "--key", "[i:1]", "--arch", "sm90", "-o", "json"): "Explanation",
        ("reset", "--kernel", "nothing:here", "-o", "json"): "ResetResult",
    }
    for args, kind in cases.items():
        r = detctl(d, *args)
        assert r.returncode == 0, (args, r.stderr)
        doc = json.loads(r.stdout)
        assert doc["api_version"] == 1 and doc["kind"] == kind, (args, doc)
    st = json.loads(detctl(d, "status", "-o", "json").stdout)
    assert st["selected_namespace"] == {"name": "default", "source": "daemon"}
    dec = json.loads(detctl(d, "decisions", "--json").stdout)
    assert dec["namespace"] == "default" and dec["namespace_source"] == "daemon"
    row = dec["decisions"][0]
    assert ISO.match(row["decided_at"]), row
    assert row["decided_at"].startswith(__import__("time").strftime("%Y-%m-%dT", __import__("time").gmtime(
        row["decided_at_ms"] / 1000)))
    # table report (files only) carries the envelope too.
    t = tmpdir_short / "t.json"
    t.write_text(json.dumps({"sm90": {"m:f": {"[i:1]": {"kwargs": {"B": 1}, "num_warps": 4, "num_stages": 1}}}}))
    doc = json.loads(detctl(d, "table", "report", t, "-o", "json").stdout)
    assert doc["api_version"] == 1 and doc["kind"] == "TableReport"


def test_text_times_are_utc_with_z(d):
    run_ranks(d, ["[i:1]"], [0])
    ms = json.loads(detctl(d, "decisions", "--json").stdout)["decisions"][0]["decided_at_ms"]
    r = subprocess.run([str(DETCTL), "--socket", d.socket, "decisions"], capture_output=True, text=True,
                       env=dict(os.environ, TZ="America/New_York"), timeout=30)
    want = __import__("time").strftime("%Y-%m-%dT%H:%M:%SZ", __import__("time").gmtime(ms // 1000))
    assert want in r.stdout, r.stdout


# ---- --kernel and explain's key ---------------------------------------------

def test_kernel_by_bare_name_and_module_qualname(d):
    run_ranks(d, ["[i:1]", "[i:2]"], [0])
    other = Lib(d)
    other.lib.detd_client_close(other.h)
    for pattern in ("row_sum", "tests.cli:row_sum", KERNEL):
        doc = json.loads(detctl(d, "decisions", "--kernel", pattern, "--json").stdout)
        assert len(doc["decisions"]) == 2 and {x["kernel"] for x in doc["decisions"]} == {KERNEL}, pattern
    assert json.loads(detctl(d, "decisions", "--kernel", "row", "--json").stdout)["decisions"] == []
    e = json.loads(detctl(d, "explain", "--kernel", "row_sum", "--key", "[i:1]", "--arch", "sm90", "--json").stdout)
    assert e["kernel"] == KERNEL and e["answer"] == "decision"
    r = detctl(d, "explain", "--kernel", "nosuch", "--key", "[i:1]", "--arch", "sm90")
    assert r.returncode == 2 and "give module:qualname" in r.stderr
    r = detctl(d, "reset", "--kernel", "row_sum")
    assert r.returncode == 0 and "removed 2 decisions" in r.stdout, r.stdout
    assert json.loads(detctl(d, "decisions", "--json").stdout)["decisions"] == []


def test_explain_takes_the_key_as_triton_prints_it(d):
    lib = Lib(d)
    cfg = lib.decide(TRITON_KEY)
    lib.close()
    r = detctl(d, "explain", "--kernel", "row_sum", "--key", "(1024, 'torch.float32')", "--arch", "sm90", "--json")
    assert r.returncode == 0, r.stderr
    e = json.loads(r.stdout)
    assert e["key"] == TRITON_KEY and e["answer"] == "decision" and e["decision"]["config"] == cfg
    t = detctl(d, "explain", "--kernel", KERNEL, "--key", "(1024, 'torch.float32')", "--arch", "sm90")
    assert "key: " + TRITON_KEY in t.stdout and "answer: existing decision" in t.stdout
    r = detctl(d, "explain", "--kernel", KERNEL, "--key", "(1024, 'torch.float32'", "--arch", "sm90")
    assert r.returncode == 2 and "missing ')'" in r.stderr


# ---- namespaces -------------------------------------------------------------

def test_detd_namespace_is_honoured_and_printed(d):
    run_ranks(d, ["[i:1]"], [0, 1], ns="chaos")
    # rank 2 in namespace chaos diverges: the default namespace has nothing.
    lib = Lib(d, rank=2, ns="chaos")
    cfg = lib.decide("[i:1]")
    lib.observe("[i:1]", next(c for c in CANDS if c != cfg))
    lib.close()
    env = {"DETD_NAMESPACE": "chaos"}
    r = detctl(d, "verify", env=env)
    assert r.returncode == 1, r.stdout
    assert "namespace: chaos (DETD_NAMESPACE)" in r.stdout and "DIVERGED" in r.stdout
    r = detctl(d, "decisions", env=env)
    assert "namespace: chaos (DETD_NAMESPACE)" in r.stdout and "1 decision\n" in r.stdout
    assert "0 decisions" in detctl(d, "decisions").stdout
    assert "namespace: default (the daemon's)" in detctl(d, "decisions").stdout
    # --namespace wins over the environment.
    doc = json.loads(detctl(d, "decisions", "--namespace", "default", "--json", env=env).stdout)
    assert doc["namespace"] == "default" and doc["namespace_source"] == "--namespace"
    st = detctl(d, "status", env=env)
    assert "selected     chaos (DETD_NAMESPACE" in st.stdout
    assert json.loads(detctl(d, "status", "--json", env=env).stdout)["selected_namespace"] == {
        "name": "chaos", "source": "DETD_NAMESPACE"}


def test_verify_on_an_empty_or_mistyped_namespace_fails_unless_allowed(d):
    run_ranks(d, ["[i:1]"], [0, 1], ns="chaos")
    for env in ({"DETD_NAMESPACE": "choas"}, {}):
        r = detctl(d, "verify", env=env)
        assert r.returncode == 1, r.stdout
        assert "EMPTY nothing was checked" in r.stdout and "FAIL: 0 keys checked" in r.stdout
        doc = json.loads(detctl(d, "verify", "--json", env=env).stdout)
        assert doc["ok"] is False and [f["kind"] for f in doc["failures"]] == ["empty"]
        r = detctl(d, "verify", "--allow-empty", env=env)
        assert r.returncode == 0 and "ok: 0 keys checked" in r.stdout
    assert detctl(d, "verify", env={"DETD_NAMESPACE": "chaos"}).returncode == 0


# ---- verify's checks ----------------------------------------------------------

def test_expect_ranks_names_the_missing_ranks(d):
    run_ranks(d, ["[i:1]", "[i:2]"], [0, 1, 3])
    assert detctl(d, "verify", "--expect-ranks", 3).returncode == 1
    r = detctl(d, "verify", "--expect-ranks", 4)
    assert r.returncode == 1
    assert r.stdout.count("observed by 3 of 4 ranks; missing rank 2") == 2, r.stdout
    doc = json.loads(detctl(d, "verify", "--expect-ranks", 4, "--json").stdout)
    assert all(k["missing_ranks"] == [2] and k["ranks"] == [0, 1, 3] for k in doc["keys"]), doc["keys"]
    run_ranks(d, ["[i:1]", "[i:2]"], [2])
    assert detctl(d, "verify", "--expect-ranks", 4).returncode == 0
    r = detctl(d, "verify", "--expect-ranks", 4, "--cluster")
    assert r.returncode == 2


def test_fallback_observations_fail_verify(d):
    run_ranks(d, ["[i:1]"], [0, 1, 2], fallback=2)
    r = detctl(d, "verify")
    assert r.returncode == 1, r.stdout
    assert "FALLBACK" in r.stdout and "rank 2" in r.stdout and "on_miss fallback" in r.stdout, r.stdout
    doc = json.loads(detctl(d, "verify", "--json").stdout)
    assert doc["fallbacks"] == 1 and "fallback" in [f["kind"] for f in doc["failures"]]


def test_a_decided_config_whose_timing_failed_fails_verify(d):
    lib = Lib(d)
    cfg = lib.decide("[i:5]", failed=(CANDS[1],))
    lib.observe("[i:5]", cfg)
    lib.close()
    assert detctl(d, "verify").returncode == 0  # a failed candidate that was not chosen is fine
    doc = json.loads(detctl(d, "verify", "--json").stdout)
    t = {x["config"]: x for x in doc["keys"][0]["timings"]}
    assert t[CANDS[1]]["failed"] is True and t[cfg]["decided"] is True


def test_job_takes_no_cluster(d):
    run_ranks(d, ["[i:1]"], [0])
    assert detctl(d, "verify", "--job", "it").returncode == 0  # the label Lib attaches with
    assert detctl(d, "verify", "--job", "it", "--cluster").returncode == 2


# ---- reports ------------------------------------------------------------------

def test_markdown_html_and_junit_reports(d, tmpdir_short):
    run_ranks(d, ["[i:1]", "[i:2]", "[i:3]"], [0, 1])
    lib = Lib(d, rank=2)
    cfg = lib.decide("[i:2]")
    other = next(c for c in CANDS if c != cfg)
    lib.observe("[i:2]", other)
    lib.close()
    md, html, xml = tmpdir_short / "r.md", tmpdir_short / "r.html", tmpdir_short / "j.xml"
    r = detctl(d, "verify", "--report", md, "--junit", xml)
    assert r.returncode == 1
    detctl(d, "verify", "--report", html)
    text = md.read_text()
    assert text.startswith("# detd verify report") and "| result | **FAIL** |" in text
    assert f"### `{KERNEL}`" in text
    # one row per candidate of each key, the decided one marked, who used it
    rows = [line for line in text.splitlines() if line.startswith("| `[i:")]
    assert len(rows) == 3 * len(CANDS), rows
    assert any(f"`[i:2]` | sm90 | `{other}`" in x and "rank 2 node-2" in x for x in rows), rows
    decided = [x for x in rows if "| yes |" in x]
    assert len(decided) == 3 and all("rank 0 node-0" in x and "rank 1 node-1" in x for x in decided), decided
    assert re.search(r"\| 2\.0000 \| 3 \|", text)  # medians of the timings
    h = html.read_text()
    assert h.startswith("<!DOCTYPE html>") and "<table>" in h and "<td>FAIL</td>" in h and "<code>[i:2]</code>" in h
    root = ET.parse(xml).getroot()
    suites = root.findall("testsuite")
    assert len(suites) == 1
    cases = suites[0].findall("testcase")
    assert len(cases) == 3 and root.get("tests") == "3" and root.get("failures") == "1"
    failed = [c for c in cases if c.find("failure") is not None]
    assert len(failed) == 1 and failed[0].get("name") == "[i:2] [sm90]"
    assert failed[0].get("classname") == KERNEL
    assert failed[0].find("failure").get("type") == "divergence"
    # An empty namespace: one failing run-wide testcase.
    detctl(d, "verify", "--namespace", "nothing", "--junit", xml)
    root = ET.parse(xml).getroot()
    cases = root.findall("testsuite/testcase")
    assert len(cases) == 1 and cases[0].get("name") == "run" and cases[0].find("failure").get("type") == "empty"
    # An unwritable report: exit 5, nothing left behind.
    r = detctl(d, "verify", "--report", tmpdir_short / "no" / "r.md")
    assert r.returncode == 5 and "write report" in r.stderr
