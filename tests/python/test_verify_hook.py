"""The hook's reports that detctl verify shows, end to end: real Triton
(CPU interpreter), the real daemon, detctl: the job label from
TORCHELASTIC_RUN_ID, a launch that raised, the determinism audit's
findings, and an ungoverned Autotuner subclass with why."""
import json

import pytest

from conftest import run_worker

# Runs on every Triton release (run_matrix.sh): it drives the hook through Triton's own API.
pytestmark = pytest.mark.triton_release


def run(daemon, what, **env):
    return run_worker(daemon, "verify_worker.py", what, **env)[0]


def verify(daemon, *args):
    r = daemon.detctl("verify", *args)
    doc = json.loads(daemon.detctl("verify", "--json", *args).stdout)
    return r, doc


def test_job_label_from_the_launcher_selects_observations(daemon):
    for rank, job in ((0, "run-17"), (1, "run-17"), (0, "run-18")):
        assert run(daemon, "ok", RANK=rank, WORLD_SIZE=2, TORCHELASTIC_RUN_ID=job) == {"ok": "ok"}
    r, doc = verify(daemon, "--job", "run-17")
    assert r.returncode == 0 and doc["observations"] == 2, r.stdout
    assert {c["job"] for k in doc["keys"] for u in k["uses"] for c in u["clients"]} == {"run-17"}
    r, doc = verify(daemon, "--job", "run-18")
    assert r.returncode == 0 and doc["observations"] == 1
    r = daemon.detctl("verify", "--job", "run-19")
    assert r.returncode == 1 and "of job 'run-19'" in r.stdout, r.stdout


def test_a_launch_that_raised_fails_verify_listed_per_key(daemon):
    out = run(daemon, "ok,allfail", RANK=0, WORLD_SIZE=1)
    assert out["ok"] == "ok" and "no_such_api_in_any_triton" in out["allfail"], out
    r, doc = verify(daemon)
    assert r.returncode == 1, r.stdout
    (line,) = [ln for ln in r.stdout.splitlines() if ln.startswith("FAILED ")]
    assert ":scale_allfail@" in line and "rank 0" in line and "no_such_api_in_any_triton" in line, r.stdout
    assert doc["failed_launches"] == 1
    bad = [k for k in doc["keys"] if not k["ok"]]
    assert len(bad) == 1 and [f["kind"] for f in bad[0]["failures"]] == ["failed_launch"], bad


def test_audit_findings_reach_verify_as_warnings(daemon):
    out = run(daemon, "atomic,ok", RANK=0, WORLD_SIZE=1, DETD_AUDIT=1, DETD_AUDIT_REPLAYS=6)
    assert out == {"atomic": "ok", "ok": "ok"}, out
    r, doc = verify(daemon)
    assert r.returncode == 0, r.stdout  # the audit names the exception; it does not fail verify
    (w,) = doc["warnings"]
    assert ":atomic_sum@" in w["kernel"] and "out_ptr" in w["differing"] and "x_ptr" not in w["differing"], w
    assert "WARN " in r.stdout and "out_ptr" in r.stdout
    audits = {k["kernel"].split(":")[1].split("@")[0]: k.get("audit", {}).get("status") for k in doc["keys"]}
    assert audits["atomic_sum"] == "nondeterministic" and audits["det_sum"] == "deterministic", audits


def test_an_ungoverned_subclass_is_listed_with_why(daemon):
    assert run(daemon, "bypass,ok", RANK=0, WORLD_SIZE=1) == {"bypass": "ok", "ok": "ok"}
    r, doc = verify(daemon)
    assert r.returncode == 0, r.stdout
    (t,) = [t for t in doc["autotuners"] if t["ungoverned"]]
    assert ":scale_bypass@" in t["kernel"] and t["kind"] == "triton"
    assert "FirstConfigTuner overrides run without calling Autotuner.run" in t["why"], t
    assert "UNGOVERNED triton" in r.stdout and "FirstConfigTuner overrides run" in r.stdout, r.stdout
    assert "autotuners: triton 2 (1 governed)" in r.stdout, r.stdout
    # Ranks agree, yet detd could not govern it: --require-governed fails.
    r = daemon.detctl("verify", "--require-governed")
    assert r.returncode == 1 and "NOT-GOVERNED triton " in r.stdout, r.stdout
    assert ":scale_bypass@" in r.stdout and "FirstConfigTuner overrides run" in r.stdout, r.stdout
