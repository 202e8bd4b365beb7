"""Timing outside detd, named (detd._timing): a package's own tuner that
times candidates with ``triton.testing.do_bench`` is listed by
``detd.autotuners()`` and by ``detctl verify``; detd's own timing passes,
which go through the same function, are not. Real Triton (CPU
interpreter; its benchmarker's driver is a CPU stand-in, timing_worker.py),
the real daemon, detctl."""
import json

import pytest

from conftest import run_worker

# Runs on every Triton release (run_matrix.sh): it meets Triton's benchmark API.
pytestmark = pytest.mark.triton_release

SITE = "timing_kernels:get_best_config"


def run(daemon, cases, **env):
    return run_worker(daemon, "timing_worker.py", cases, **env)


def test_a_package_timing_candidates_itself_is_named_in_every_process_and_by_verify(daemon):
    for rank in (0, 1):
        out, err = run(daemon, "outside", RANK=rank, WORLD_SIZE=2)
        assert out["outside"]["timed"] == 3 and out["bench_runs"] == 3, out  # Triton's do_bench ran each time
        (t,) = out["timing"]
        assert t["kernel"] == "timing::" + SITE and not t["governed"] and t["calls"] == 3, t
        assert t["benchmarkers"] == ["do_bench"] and "not seen by detd" in t["why"], t
        assert out["stats"] == {"timing_outside": 3, "timing_sites": 1, "timing_send_errors": 0}, out
        assert err.count(f"detd: {SITE} times candidates with triton.testing.do_bench") == 1, err  # said once
    r = daemon.detctl("verify")
    doc = json.loads(daemon.detctl("verify", "--json").stdout)
    assert r.returncode == 0, r.stdout  # its choice is not seen: named, not a failure
    assert f"UNGOVERNED timing timing::{SITE}: times candidates with triton.testing.do_bench" in r.stdout, r.stdout
    assert "autotuners: timing 1 (0 governed)" in r.stdout, r.stdout
    (t,) = [t for t in doc["autotuners"] if t["kind"] == "timing"]
    assert t["kernel"] == "timing::" + SITE and t["ungoverned"] and not t["governed"], t
    (k,) = [k for k in doc["keys"] if k["kernel"] == "timing::" + SITE]
    assert k["key"] == "triton.testing.do_bench" and k["ok"], k
    ranks = sorted(c["rank"] for u in k["uses"] for c in u["clients"])
    assert ranks == [0, 1] and doc["ungoverned"] == 2, (k, doc["ungoverned"])
    # A job may require every tuner it reached to be governed.
    r = daemon.detctl("verify", "--require-governed")
    assert r.returncode == 1, r.stdout
    assert f"NOT-GOVERNED timing timing::{SITE}: not governed: times candidates with triton.testing" in r.stdout, \
        r.stdout
    doc = json.loads(daemon.detctl("verify", "--require-governed", "--json").stdout)
    assert doc["require_governed"] and [f["kind"] for f in doc["failures"]] == ["not_governed"], doc["failures"]


def test_detd_own_timing_pass_through_triton_s_benchmarker_is_not_named(daemon):
    from detd._measure import RECHECK_ROUNDS

    out, err = run(daemon, "governed", RANK=0, WORLD_SIZE=1)
    # The pass timed the 3 configs with triton.testing.do_bench, then the
    # ones within the noise band of the best again, RECHECK_ROUNDS times
    # each (how many depends on the timings: this machine's load).
    assert out["bench_runs"] == 3 + RECHECK_ROUNDS * out["remeasured"], out
    assert out["remeasured"] in (0, 2, 3), out  # the band needs two at least
    assert out["governed_kernels"] and out["timing"] == [], out
    assert out["stats"]["timing_outside"] == 0 and "outside every autotuner" not in err, (out, err)
    st = json.loads(daemon.detctl("status", "--json").stdout)
    assert st["counters"]["timing_passes"] == 1, st["counters"]
    r = daemon.detctl("verify", "--require-governed")
    assert r.returncode == 0 and "UNGOVERNED" not in r.stdout, r.stdout


def test_an_exempt_kernel_timed_by_triton_s_own_autotuner_is_not_named(daemon):
    """Left to Triton's own timing (DETD_EXEMPT): no detd pass runs, and
    Triton's Autotuner is on the stack; the kernel is listed as detd's
    (source local), not as timing outside."""
    out, err = run(daemon, "governed", RANK=0, WORLD_SIZE=1, DETD_EXEMPT="timing_kernels:governed_scale")
    assert out["bench_runs"] == 3 and out["governed_kernels"] == [], out  # Triton timed it, ungoverned
    assert out["timing"] == [] and out["stats"]["timing_outside"] == 0, (out, err)
    st = json.loads(daemon.detctl("status", "--json").stdout)
    assert st["counters"]["timing_passes"] == 0, st["counters"]
    r = daemon.detctl("verify", "--require-governed")  # left out on purpose: passes
    assert r.returncode == 0 and "NOT-GOVERNED" not in r.stdout, r.stdout


def test_a_script_timing_with_both_benchmarkers_is_one_call_site(daemon):
    out, err = run(daemon, "script", RANK=0, WORLD_SIZE=1)
    assert out["script"] == "ok" and out["cudagraph"] == "RuntimeError", out  # the script's own failure
    (t,) = out["timing"]
    assert t["name"] == "__main__:<module>" and t["calls"] == 2, t
    assert t["benchmarkers"] == ["do_bench", "do_bench_cudagraph"], t
    doc = json.loads(daemon.detctl("verify", "--json").stdout)
    keys = sorted(k["key"] for k in doc["keys"] if k["kernel"] == "timing::__main__:<module>")
    assert keys == ["triton.testing.do_bench", "triton.testing.do_bench_cudagraph"], doc["keys"]


def test_nothing_is_named_when_detd_does_not_govern(daemon):
    out, err = run(daemon, "outside", RANK=0, WORLD_SIZE=1, DETD_MODE="auto")
    assert out["outside"]["timed"] == 3 and out["bench_runs"] == 3, out
    assert out["timing"] == [] and out["stats"]["timing_outside"] == 0, out


def test_past_the_most_call_sites_calls_are_counted_not_listed(daemon):
    out, err = run(daemon, "many", RANK=0, WORLD_SIZE=1)
    assert out["many"] == "ok" and out["bench_runs"] == 70, out  # every call still ran
    assert out["stats"] == {"timing_outside": 70, "timing_sites": 64, "timing_send_errors": 0}, out
    assert len(out["timing"]) == 64 and {t["calls"] for t in out["timing"]} == {1}, out["timing"]
    assert [t["name"] for t in out["timing"]] == [f"timing_sites:site_{i:02d}" for i in range(64)], out["timing"]
    assert err.count("more than 64 call sites time with triton.testing outside detd") == 1, err
    doc = json.loads(daemon.detctl("verify", "--json").stdout)
    assert len([t for t in doc["autotuners"] if t["kind"] == "timing"]) == 64, doc["autotuners"]
