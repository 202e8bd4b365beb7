"""What observations carry beyond the config, through a real detd and
detctl: the job label (verify --job), launches that raised (failed), the
client's determinism audit (warnings), the runtime findings (source
RUNTIME: listed beside the configs' agreement, refused when malformed),
ungoverned autotuners with why, autotuner kinds side by side, and
ListObservations in pages."""
import ctypes
import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import DETCTL, Daemon

sys.path.insert(0, str(Path(__file__).resolve().parent))
import detd_client as dc  # noqa: E402

CANDS = ["BLOCK=16,num_warps=4", "BLOCK=32,num_warps=4"]
GOVERNED, FAILED = 0x1, 0x4
SOURCE_TIMED, SOURCE_LOCAL, SOURCE_RUNTIME = 1, 6, 8
AUDIT_NONDETERMINISTIC, AUDIT_DETERMINISTIC = 2, 1


class Extra(ctypes.Structure):
    """struct detd_observe_extra (client.h)."""
    _fields_ = [("size", ctypes.c_size_t), ("error", ctypes.c_char_p), ("audit", ctypes.c_int),
                ("differing", ctypes.POINTER(ctypes.c_char_p)), ("n_differing", ctypes.c_size_t),
                ("why", ctypes.c_char_p)]


class Proc:
    """One client process's identity (host distinguishes the rows: the store
    keys an observation by id, host and the pid the daemon sees)."""

    def __init__(self, d, rank, job=b"job-a"):
        self.lib = dc.load()
        self.lib.detd_observe_ex.argtypes = [ctypes.c_void_p, ctypes.POINTER(dc.Key), ctypes.c_char_p, ctypes.c_int,
                                             ctypes.c_int, ctypes.POINTER(Extra), ctypes.c_int64]
        self.lib.detd_observe_ex.restype = ctypes.c_int
        self.ident = dc.Identity(f"node-{rank}-{job.decode()}".encode(), rank, rank, 4, b"Test GPU", b"sm90", 132,
                                 job)
        self.h = ctypes.c_void_p()
        assert self.lib.detd_client_open(d.socket.encode(), ctypes.byref(self.ident), ctypes.byref(self.h)) == 0
        self.arr = (ctypes.c_char_p * len(CANDS))(*[c.encode() for c in CANDS])

    def key(self, kernel, k):
        return dc.Key(None, b"sm90", kernel.encode(), k.encode(), self.arr, len(CANDS), None)

    def observe(self, kernel, k, config, flags=GOVERNED, source=SOURCE_TIMED, error=None, audit=0, differing=(),
                why=None):
        key = self.key(kernel, k)
        names = (ctypes.c_char_p * max(1, len(differing)))(*[n.encode() for n in differing])
        ex = Extra(ctypes.sizeof(Extra), error.encode() if error else None, audit,
                   ctypes.cast(names, ctypes.POINTER(ctypes.c_char_p)), len(differing),
                   why.encode() if why else None)
        return self.lib.detd_observe_ex(self.h, ctypes.byref(key), config.encode(), source, flags, ctypes.byref(ex),
                                        30000)

    def close(self):
        self.lib.detd_client_close(self.h)


def detctl(d, *args):
    env = dict(os.environ)
    env.pop("DETD_NAMESPACE", None)
    return subprocess.run([str(DETCTL), "--socket", d.socket, *map(str, args)], capture_output=True, text=True,
                          timeout=60, env=env)


def verify_json(d, *args):
    r = detctl(d, "verify", "--json", *args)
    assert r.stdout.strip(), r.stderr
    return r.returncode, json.loads(r.stdout)


@pytest.fixture
def d(tmpdir_short):
    dd = Daemon(tmpdir_short).start()
    yield dd
    dd.stop()


def test_verify_job_selects_the_job_and_an_unknown_job_checks_nothing(d):
    # job-a agrees; job-b diverges on the same key.
    for rank in (0, 1):
        p = Proc(d, rank, b"job-a")
        assert p.observe("m:k@1", "[i:1]", CANDS[0]) == 0
        p.close()
    for rank, cfg in ((0, CANDS[0]), (1, CANDS[1])):
        p = Proc(d, rank, b"job-b")
        assert p.observe("m:k@1", "[i:1]", cfg) == 0
        p.close()
    rc, doc = verify_json(d, "--job", "job-a")
    assert rc == 0 and doc["observations"] == 2 and doc["keys_checked"] == 1, doc
    assert {c["job"] for u in doc["keys"][0]["uses"] for c in u["clients"]} == {"job-a"}
    rc, doc = verify_json(d, "--job", "job-b")
    assert rc == 1 and [f["kind"] for f in doc["failures"]] == ["divergence"], doc["failures"]
    rc, doc = verify_json(d, "--job", "no-such-job")
    assert rc == 1 and doc["keys_checked"] == 0 and doc["failures"][0]["kind"] == "empty", doc
    assert "no-such-job" in doc["failures"][0]["message"]
    assert detctl(d, "verify", "--job", "no-such-job", "--allow-empty").returncode == 0
    # The daemon stored the label with each row.
    rows = sqlite3.connect(os.path.join(d.state, "detd.sqlite")).execute(
        "SELECT DISTINCT job FROM observations ORDER BY job").fetchall()
    assert rows == [("job-a",), ("job-b",)]


def test_a_failed_launch_fails_verify_and_is_listed_per_key(d):
    p0, p1 = Proc(d, 0), Proc(d, 1)
    assert p0.observe("m:k@1", "[i:1]", CANDS[0]) == 0
    assert p1.observe("m:k@1", "[i:1]", CANDS[0]) == 0
    assert detctl(d, "verify").returncode == 0
    # rank 1's launch raised; a later plain observation keeps it failed.
    assert p1.observe("m:k@1", "[i:1]", CANDS[0], flags=GOVERNED | FAILED,
                      error="OutOfResources: shared memory 232448 > 227328") == 0
    assert p1.observe("m:k@1", "[i:1]", CANDS[0]) == 0
    # rank 0 raised before any config was chosen on another key.
    assert p0.observe("m:k@1", "[i:2]", "", flags=GOVERNED | FAILED, error="MissError: no decision") == 0
    r = detctl(d, "verify")
    assert r.returncode == 1, r.stdout
    assert "FAILED m:k@1 [i:1] [sm90]" in r.stdout and "OutOfResources: shared memory" in r.stdout, r.stdout
    assert "FAILED m:k@1 [i:2] [sm90]" in r.stdout and "MissError: no decision" in r.stdout, r.stdout
    assert "2 failed launches" in r.stdout
    rc, doc = verify_json(d)
    assert rc == 1 and doc["failed_launches"] == 2
    by_key = {k["key"]: k for k in doc["keys"]}
    assert [f["kind"] for f in by_key["[i:1]"]["failures"]] == ["failed_launch"]
    assert "rank 1" in by_key["[i:1]"]["failures"][0]["message"]
    # A failure before a config was chosen is no divergence (no use of "").
    assert [u["config"] for u in by_key["[i:2]"]["uses"]] == []
    assert not doc["divergences"]
    # Without the flag, config stays required; the error text is capped.
    assert p0.observe("m:k@1", "[i:3]", "", flags=GOVERNED) != 0
    assert p0.observe("m:k@1", "[i:3]", "x", flags=GOVERNED | FAILED, error="e" * 1025) != 0
    p0.close()
    p1.close()


def test_audit_findings_are_listed_as_warnings_naming_kernel_and_arguments(d):
    p0, p1 = Proc(d, 0), Proc(d, 1)
    for p in (p0, p1):
        assert p.observe("mamba:bwd@1", "[i:64]", CANDS[0]) == 0
        assert p.observe("m:det@1", "[i:64]", CANDS[1]) == 0
    assert p0.observe("mamba:bwd@1", "[i:64]", CANDS[0], audit=AUDIT_NONDETERMINISTIC,
                      differing=("dA", "ddt_bias")) == 0
    assert p0.observe("m:det@1", "[i:64]", CANDS[1], audit=AUDIT_DETERMINISTIC) == 0
    # A later observation without an audit keeps the stored one.
    assert p0.observe("mamba:bwd@1", "[i:64]", CANDS[0]) == 0
    r = detctl(d, "verify")
    # Outputs the audit names are the allowed exception: a warning, exit 0.
    assert r.returncode == 0, r.stdout
    assert "WARN mamba:bwd@1 [i:64] [sm90]" in r.stdout and "arguments dA, ddt_bias differ" in r.stdout, r.stdout
    assert "1 warning" in r.stdout
    rc, doc = verify_json(d)
    assert rc == 0 and len(doc["warnings"]) == 1
    w = doc["warnings"][0]
    assert w["kind"] == "nondeterministic" and w["kernel"] == "mamba:bwd@1" and w["differing"] == ["dA", "ddt_bias"]
    by_kernel = {k["kernel"]: k for k in doc["keys"]}
    assert by_kernel["mamba:bwd@1"]["audit"]["status"] == "nondeterministic"
    assert by_kernel["m:det@1"]["audit"]["status"] == "deterministic"
    # Bad audits are refused, naming the field.
    assert p0.observe("m:det@1", "[i:64]", CANDS[1], audit=9) != 0
    assert p0.observe("m:det@1", "[i:64]", CANDS[1], audit=AUDIT_NONDETERMINISTIC, differing=("a\nb",)) != 0
    assert p0.observe("m:det@1", "[i:64]", CANDS[1], audit=AUDIT_NONDETERMINISTIC,
                      differing=tuple(f"x{i}" for i in range(65))) != 0
    p0.close()
    p1.close()


def test_runtime_findings_are_listed_beside_agreement_and_bad_ones_refused(d):
    p0, p1 = Proc(d, 0), Proc(d, 1)
    cudnn = "cuDNN attention's backward is nondeterministic"
    tf32 = "torch.backends.cuda.matmul.allow_tf32"
    for p in (p0, p1):
        assert p.observe("m:k@1", "[i:1]", CANDS[0]) == 0
        assert p.observe("runtime::sdpa", "cudnn", "cuda bfloat16 backward", flags=0, source=SOURCE_RUNTIME,
                         why=cudnn) == 0
        assert p.observe("runtime::setting", "CUBLAS_WORKSPACE_CONFIG", ":4096:8", flags=0,
                         source=SOURCE_RUNTIME) == 0
    assert p0.observe("runtime::setting", tf32, "True", flags=0, source=SOURCE_RUNTIME) == 0
    assert p1.observe("runtime::setting", tf32, "False", flags=0, source=SOURCE_RUNTIME) == 0
    r = detctl(d, "verify")
    assert r.returncode == 0, r.stdout  # warnings by default
    lines = r.stdout.splitlines()
    i = lines.index("configs agree (1 key); nondeterminism no config fixes, on some ranks:")
    assert lines[i + 1:i + 3] == [
        f"NONDET sdpa cudnn cuda bfloat16 backward (ranks 0-1): {cudnn}",
        f"NONDET setting {tf32} differs across ranks: True (rank 0), False (rank 1)"], r.stdout
    assert "2 nondeterministic (not failing" in lines[-1] and "2 observations" in lines[-1], r.stdout
    md = os.path.join(d.root, "r.md")
    assert detctl(d, "verify", "--report", md).returncode == 0
    text = open(md).read()
    assert f"## Nondeterminism no config fixes\n\n- sdpa cudnn cuda bfloat16 backward (ranks 0-1): {cudnn}\n" in text, text
    rc, doc = verify_json(d, "--strict-determinism")
    assert rc == 1 and doc["strict_determinism"] and doc["nondeterministic"] == 2, doc
    assert [f["kind"] for f in doc["failures"]] == ["nondeterminism"] * 2, doc["failures"]
    assert doc["keys_checked"] == 1 and not doc["divergences"] and len(doc["autotuners"]) == 1, doc
    ws = {e["name"]: e for e in doc["runtime"]}
    assert not ws["CUBLAS_WORKSPACE_CONFIG"]["nondeterministic"] and ws[tf32]["differs"], ws
    assert [(v["value"], v["ranks"]) for v in ws[tf32]["values"]] == [("True", [0]), ("False", [1])], ws[tf32]
    # The daemon refuses a malformed finding, naming the field; nothing is stored.
    bad = [
        (("runtime::bogus", "x", "v"), {}, "key.kernel 'runtime::bogus' is not a runtime finding's kind"),
        (("runtime::op", "x" * 257, "v"), {}, "key.key is 257 bytes, over the limit of 256 bytes"),
        (("runtime::op", "a\x1bb", "v"), {}, "key.key contains the control character 0x1b at byte 1"),
        (("runtime::setting", "s", "v" * 257), {}, "config is 257 bytes, over the limit of 256 bytes"),
        (("runtime::op", "put_", "v"), {"flags": GOVERNED}, "a runtime finding (source RUNTIME) is never governed"),
        (("runtime::op", "put_", CANDS[0]), {"source": SOURCE_TIMED},
         "key.kernel 'runtime::op' is a runtime finding's kind: it needs source RUNTIME"),
    ]
    for args, kw, text in bad:
        kw = {"flags": 0, "source": SOURCE_RUNTIME, **kw}
        assert p0.observe(*args, **kw) != 0, args
        err = p0.lib.detd_client_last_error().decode()
        assert text in err, (args, err)
    rc, doc = verify_json(d)
    assert len(doc["runtime"]) == 3 and rc == 0, doc["runtime"]
    p0.close()
    p1.close()


def test_autotuners_side_by_side_and_ungoverned_with_why(d):
    p = Proc(d, 0)
    assert p.observe("pkg.mod:rowsum@abc", "[i:1]", CANDS[0]) == 0
    assert p.observe("inductor::triton_red_fused_sum_0@f00d", "[i:1]", CANDS[0]) == 0
    assert p.observe("native::gemm_tiles@v1", "[i:1]", CANDS[1]) == 0
    assert p.observe("gemlite.core:GemLiteTuner.run@1", "[i:8]", "unknown (bypasses Autotuner.run)", flags=0,
                     source=SOURCE_LOCAL, why="GemLiteTuner overrides run without calling Autotuner.run") == 0
    r = detctl(d, "verify")
    assert r.returncode == 0, r.stdout
    assert "autotuners: triton 2 (1 governed), inductor 1 (1 governed), native 1 (1 governed)" in r.stdout, r.stdout
    assert ("UNGOVERNED triton gemlite.core:GemLiteTuner.run@1: GemLiteTuner overrides run without calling "
            "Autotuner.run") in r.stdout, r.stdout
    rc, doc = verify_json(d)
    kinds = {t["kernel"]: (t["kind"], t["governed"], t["ungoverned"]) for t in doc["autotuners"]}
    assert kinds == {"pkg.mod:rowsum@abc": ("triton", True, False),
                     "inductor::triton_red_fused_sum_0@f00d": ("inductor", True, False),
                     "native::gemm_tiles@v1": ("native", True, False),
                     "gemlite.core:GemLiteTuner.run@1": ("triton", False, True)}, kinds
    assert {k["kernel"]: k["autotuner"] for k in doc["keys"]}["native::gemm_tiles@v1"] == "native"
    p.close()


def test_list_observations_is_paged_under_the_message_cap(d):
    # 2,600 observations (each with a 600-byte key) would be ~1.9 MB in one
    # answer, over the 1 MiB message cap: pages of at most 1,000 rows and
    # 512 KiB (here ~700 rows), followed to the end by detctl.
    n = 2600
    p = Proc(d, 0)
    pad = "x" * 600
    for i in range(n):
        assert p.observe("m:many@1", f"[i:{i},s:\"{pad}\"]", CANDS[i % 2]) == 0
    p.close()
    rc, doc = verify_json(d)
    assert rc == 0 and doc["observations"] == n and doc["keys_checked"] == n, (doc["observations"], doc["failures"])
    assert not [f for f in doc["failures"] if f["kind"] == "truncated"]
    # Small pages: the same result.
    rc, small = verify_json(d, "--page-size", 7)
    assert rc == 0 and small["observations"] == n and len(small["keys"]) == n
    assert detctl(d, "verify", "--page-size", 0).returncode == 2
    assert detctl(d, "verify", "--page-size", 1001).returncode == 2


def test_verify_escapes_what_clients_wrote(d):
    # A hostile client's texts try to end verify's report early with a
    # forged summary line, and to move the terminal's cursor.
    forged = "ok: 9 keys checked, 9 observations, 0 divergences"
    p0, p1 = Proc(d, 0), Proc(d, 1)
    assert p0.observe("m:k@1", "[i:1]", CANDS[0]) == 0
    assert p1.observe("m:k@1", "[i:1]", CANDS[0], flags=GOVERNED | FAILED,
                      error=f"boom\n{forged}\r\x1b[2K\u2028{forged}\\n") == 0
    assert p0.observe(f"m:k@1\n{forged}", "[i:2]", CANDS[0], flags=GOVERNED, why="x") == 0
    assert p1.observe("m:u@1", f"[i:3]\n{forged}", CANDS[0], flags=0, source=SOURCE_LOCAL,
                      why=f"not governed\n{forged}") == 0
    r = detctl(d, "verify")
    assert r.returncode == 1, r.stdout
    lines = r.stdout.splitlines()
    assert not [ln for ln in lines if ln.startswith("ok:")], r.stdout
    assert lines[-1].startswith("FAIL: "), r.stdout
    assert not any(ch in r.stdout for ch in "\r\x1b\u2028"), repr(r.stdout)
    # Shown escaped, readable and unambiguous (a backslash is doubled).
    assert f"boom\\n{forged}\\r\\x1b[2K\\u2028{forged}\\\\n" in r.stdout, r.stdout
    # --json carries the texts as they were sent (JSON escapes them).
    rc, doc = verify_json(d)
    assert rc == 1
    msgs = [f["message"] for f in doc["failures"] if f["kind"] == "failed_launch"]
    assert len(msgs) == 1 and msgs[0].endswith(f"boom\n{forged}\r\x1b[2K\u2028{forged}\\n"), msgs
    # detctl's tables (status: a client's host and job) escape them too.
    p2 = Proc(d, 2, b"evil\nclients (0)")
    assert p2.lib.detd_client_connect(p2.h, 10000) == 0
    r = detctl(d, "status")
    assert r.returncode == 0, r.stderr
    assert "clients (0)" not in r.stdout.splitlines(), r.stdout
    assert "evil\\nclients (0)" in r.stdout, r.stdout
    p0.close()
    p1.close()
    p2.close()


def newest_at_ms(d):
    return sqlite3.connect(os.path.join(d.state, "detd.sqlite")).execute(
        "SELECT max(at_ms) FROM observations").fetchone()[0]


def past_ms(at_ms):
    """Wait for the clock to leave the millisecond at_ms (the store's order
    of jobs is by time of observation)."""
    while int(time.time() * 1000) <= at_ms:
        pass


def test_verify_checks_the_current_job_and_a_reset_forgets_what_it_reset(d):
    # An earlier broken run (job-a): a launch raised before a config was
    # chosen, on a key never decided.
    p = Proc(d, 0, b"job-a")
    assert p.observe("m:broken@1", "[i:1]", "", flags=GOVERNED | FAILED, error="ImportError: no numpy") == 0
    p.close()
    r = detctl(d, "verify")
    assert r.returncode == 1
    lines = r.stdout.splitlines()
    assert lines[0] == "job: job-a (the only job observed)", r.stdout
    assert any("'detctl verify --job J'" in ln for ln in lines) and lines[-1].startswith("FAIL: "), r.stdout
    assert any("detctl reset --kernel K' (or --all)" in ln for ln in lines), r.stdout
    past_ms(newest_at_ms(d))
    # The next run (job-b) is fine: verify checks it, the run observed last.
    for rank in (0, 1):
        p = Proc(d, rank, b"job-b")
        assert p.observe("m:k@1", "[i:1]", CANDS[0]) == 0
        p.close()
    r = detctl(d, "verify")
    assert r.returncode == 0, r.stdout
    assert r.stdout.splitlines()[0].startswith(
        "job: job-b (observed last by this user's processes, of 2 jobs; --job J"), r.stdout
    rc, doc = verify_json(d)
    assert rc == 0 and doc["job"] == "job-b" and doc["job_source"] == "latest-mine" and doc["observations"] == 2
    assert [(j["job"], j["observations"]) for j in doc["jobs"]] == [("job-b", 2), ("job-a", 1)], doc["jobs"]
    # Inside a launcher, its job: TORCHELASTIC_RUN_ID, DETD_JOB first.
    env = dict(os.environ, TORCHELASTIC_RUN_ID="job-a")
    env.pop("DETD_JOB", None)
    r = subprocess.run([str(DETCTL), "--socket", d.socket, "verify"], capture_output=True, text=True, env=env,
                       timeout=60)
    assert r.returncode == 1 and r.stdout.startswith(
        "job: job-a (the launcher's, $TORCHELASTIC_RUN_ID; --all-jobs"), r.stdout
    assert "hint: checked job job-a only; other jobs observed: job-b (2 observations)" in r.stdout, r.stdout
    env["DETD_JOB"] = "job-b"
    r = subprocess.run([str(DETCTL), "--socket", d.socket, "verify"], capture_output=True, text=True, env=env,
                       timeout=60)
    assert r.returncode == 0 and r.stdout.startswith("job: job-b (the launcher's, $DETD_JOB"), r.stdout
    # --all-jobs: every job, and the FAIL text names --job.
    r = detctl(d, "verify", "--all-jobs")
    assert r.returncode == 1 and r.stdout.startswith("job: every job (--all-jobs; 2 observed)"), r.stdout
    assert "these observations are of 2 jobs: job-b (2 observations), job-a (1 observations). " \
           "'detctl verify --job J' checks one job's" in r.stdout, r.stdout
    assert detctl(d, "verify", "--all-jobs", "--job", "x").returncode == 2
    # A reset of the broken kernel (named module:qualname, known only from
    # its observations) forgets its failed launch.
    r = detctl(d, "reset", "--kernel", "m:broken")
    assert r.returncode == 0 and "removed 0 decisions\nremoved 1 observation " in r.stdout, r.stdout
    assert detctl(d, "verify", "--all-jobs").returncode == 0
    # reset --all forgets every observation: verify then sees nothing.
    p = Proc(d, 0, b"job-a")
    assert p.observe("m:broken@1", "[i:1]", "", flags=GOVERNED | FAILED, error="ImportError: no numpy") == 0
    p.close()
    assert detctl(d, "verify", "--all-jobs").returncode == 1
    r = detctl(d, "reset", "--all", "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["removed_observations"] == 3, r.stdout
    r = detctl(d, "verify")
    assert r.returncode == 1 and "EMPTY nothing was checked" in r.stdout, r.stdout
    assert r.stdout.startswith("job: every job (nothing observed)"), r.stdout
