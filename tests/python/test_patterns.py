"""Autotuners as packages write them, under every mode, with real Triton
(CPU interpreter) and the real daemon: pruners that build new configs,
perf_model + top_k, hooks, reset_to_zero/restore_value, stacked heuristics,
cache_results, tuners created after install(), subclasses, candidates that
fail to compile, every candidate failing; and the determinism audit.

The kernels are in pattern_kernels.py, the per-process driver in
patterns_worker.py."""

import json
import os
import subprocess
import sys
import time

import pytest

import detd
import prestart
from conftest import HERE
from detd import _audit, _hook, _native, _policy, _process

# Runs on every Triton release (run_matrix.sh): it drives the hook through Triton's own API.
pytestmark = pytest.mark.triton_release

PRUNED = [f"BLOCK={b},EVEN=True,NUM_STAGES=2,num_warps=2,num_stages=2,num_ctas=1" for b in (16, 32, 64)]


def cfg(b):
    return f"BLOCK={b},num_warps=4,num_stages=1,num_ctas=1"


def workers(daemon, tmp_path, n, mode, only="", env=None, per_rank=None, tag="p", timeout=300):
    procs = []
    for i in range(n):
        out = tmp_path / f"{tag}{i}.json"
        e = daemon.env(RANK=i, LOCAL_RANK=i, WORLD_SIZE=n, DETD_MODE=mode, **(env or {}))
        if per_rank:
            e.update({k: str(v) for k, v in per_rank(i).items()})
        e["PYTHONPATH"] = HERE + os.pathsep + e.get("PYTHONPATH", "")
        procs.append((prestart.popen([sys.executable, os.path.join(HERE, "patterns_worker.py"), str(out), only],
                                     env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True), out))
    res = []
    for p, out in procs:
        text, _ = p.communicate(timeout=timeout)
        assert p.returncode == 0 and out.exists(), f"worker exited {p.returncode}: {text[-3000:]}\n{daemon.log()}"
        r = json.loads(out.read_text())
        r["_output"] = text[-3000:]
        res.append(r)
    return res


def check_common(r, mode):
    """What holds in every mode."""
    governed = mode in ("coordinated", "pinned")
    for name in ("pruned", "perf", "reset_restore", "hooks", "heuristics", "cached", "late", "subclass_bypass",
                 "subclass_super"):
        assert r[name]["ok"] and r[name]["error"] is None, (name, r[name], r["_output"])
    for name in ("pruned", "perf", "reset_restore", "hooks", "heuristics", "cached", "late", "subclass_super"):
        # best_config after the launch is the very config object launched.
        assert r[name]["best_in_cache"] and r[name]["best_config"] == r[name]["config"], (name, r[name])
        assert r[name]["governed"] is governed, (name, r[name])
    # The pruner's own new Config objects are what is launched (the
    # originals lack EVEN/NUM_STAGES and could not run at all).
    assert r["pruned"]["config"] in PRUNED
    assert r["perf"]["config"] in (cfg(32), cfg(64))
    # A subclass whose run never reaches Autotuner.run is listed, ungoverned.
    assert r["subclass_bypass"]["governed"] is False
    assert "FirstConfigTuner overrides run without calling Autotuner.run" in r["subclass_bypass"]["why"]
    assert r["subclass_super"]["subclass_calls"] == 3
    # Every candidate failing fails the launch with the kernel's own error
    # (pinned mode times nothing: it gets the failure the daemon recorded
    # from the coordinated run, not a plain miss).
    assert r["allfail"]["ok"] is False, r["allfail"]
    if mode == "pinned":
        assert r["allfail"]["error"].startswith("PassFailedError") and r["allfail"]["bench"] == 0, r["allfail"]
        assert "not timed again" in r["allfail"]["error"], r["allfail"]
    else:
        assert "no_such_api_in_any_triton" in r["allfail"]["error"], r["allfail"]


def test_every_pattern_coordinated_then_pinned(daemon, tmp_path):
    (r,) = workers(daemon, tmp_path, 1, "coordinated", tag="c")
    check_common(r, "coordinated")
    # The candidates are the pruned set: what Triton would benchmark.
    assert sorted(r["pruned"]["candidates"]) == sorted(PRUNED)  # BLOCK=128 > N pruned, new objects
    assert sorted(r["perf"]["candidates"]) == sorted([cfg(32), cfg(64)])  # perf_model's top 2
    assert {k: r[k]["bench"] for k in ("pruned", "perf", "reset_restore", "hooks", "heuristics", "cached", "late",
                                       "subclass_super")} == \
        dict(pruned=3, perf=2, reset_restore=3, hooks=3, heuristics=3, cached=3, late=3, subclass_super=3)
    # The tuner's own hooks ran around every timed candidate, then the reset.
    assert r["hooks"]["hooks"] == ["pre", "post"] * 3 + ["pre_reset"]
    # A candidate that cannot compile counts as failed; the others decide.
    some = r["somefail"]
    assert some["ok"] and some["config"] in (cfg(16), cfg(32)) and some["bench"] == 2, some
    (failed_key,) = [k for k in some["keys"]]
    assert list(failed_key["failed"]) == [cfg(12)] and "power of 2" in failed_key["failed"][cfg(12)]
    all_key = r["allfail"]["keys"][-1]
    assert all_key["source"] == "failed" and len(all_key["failed"]) == 3

    listing = json.loads(daemon.detctl("decisions", "--json").stdout)
    kernels = {d["kernel"].split("@")[0].split(":")[1]: d for d in listing["decisions"]}
    assert kernels["scale_pruned"]["config"] == r["pruned"]["config"]
    assert "scale_allfail" not in kernels  # nothing committed for a failed pass
    v = daemon.detctl("verify", "--json")
    res = json.loads(v.stdout)
    # The one failure is the all-failed kernel's launch, which raised.
    assert v.returncode == 1 and not res["divergences"], v.stdout
    assert [(f["kind"], f["kernel"].split(":")[1].split("@")[0]) for f in res["failures"]] == \
        [("failed_launch", "scale_allfail")], res["failures"]
    assert res["ungoverned"] >= 1  # the subclass that bypasses Autotuner.run

    (p,) = workers(daemon, tmp_path, 1, "pinned", tag="pin")
    check_common(p, "pinned")
    for name in ("pruned", "perf", "reset_restore", "hooks", "heuristics", "cached", "late", "subclass_super",
                 "somefail"):
        assert p[name]["bench"] == 0 and p[name]["config"] == r[name]["config"], (name, p[name], r[name])
    assert p["hooks"]["hooks"] == []  # no timing: Triton runs tuner hooks only while benchmarking


@pytest.mark.parametrize("mode", ["auto", "record"])
def test_every_pattern_left_to_triton(daemon, tmp_path, mode):
    (r,) = workers(daemon, tmp_path, 1, mode, tag=mode)
    check_common(r, mode)
    assert r["hooks"]["hooks"] == ["pre", "post"] * 3 + ["pre_reset"]
    assert r["pruned"]["bench"] == 3 and r["perf"]["bench"] == 2
    # Plain Triton aborts on a candidate it cannot compile: so does detd
    # when it leaves the kernel to Triton.
    assert r["somefail"]["ok"] is False and "power of 2" in r["somefail"]["error"], r["somefail"]


def test_pruning_that_differs_between_ranks_is_a_divergence(daemon, tmp_path):
    same = workers(daemon, tmp_path, 2, "coordinated", only="pruned", env={"DETD_NAMESPACE": "same"}, tag="s")
    assert all(r["pruned"]["ok"] for r in same)
    v = daemon.detctl("verify", "--json", "--namespace", "same")
    assert v.returncode == 0 and json.loads(v.stdout)["ok"], v.stdout

    diff = workers(daemon, tmp_path, 2, "coordinated", only="pruned", env={"DETD_NAMESPACE": "diff"},
                   per_rank=lambda i: {"PATTERN_PRUNE_MAX": 32 if i else 100000}, tag="d")
    assert [sorted(r["pruned"]["candidates"]) for r in diff] == [sorted(PRUNED), sorted(PRUNED[:2])]
    v = daemon.detctl("verify", "--json", "--namespace", "diff")
    res = json.loads(v.stdout)
    assert v.returncode == 1 and not res["ok"], v.stdout
    pruning = [d for d in res["divergences"] if d["kernel"].endswith("#pruning")]
    assert len(pruning) == 1 and ":scale_pruned@" in pruning[0]["kernel"], res
    assert sorted(u["config"][:6] for u in pruning[0]["uses"]) == ["kept 2", "kept 3"]


def test_all_failed_pass_is_timed_once_for_everyone(daemon, tmp_path):
    t0 = time.monotonic()
    res = workers(daemon, tmp_path, 3, "coordinated", only="allfail", env={"DETD_TIMEOUT_MS": 60000}, tag="f")
    elapsed = time.monotonic() - t0
    timed = [r for r in res if r["allfail"]["keys"][-1].get("timed_here")]
    waited = [r for r in res if not r["allfail"]["keys"][-1].get("timed_here")]
    assert len(timed) == 1, [r["allfail"]["keys"] for r in res]
    assert "no_such_api_in_any_triton" in timed[0]["allfail"]["error"]
    for r in waited:
        assert r["allfail"]["error"].startswith("PassFailedError"), r["allfail"]
    assert elapsed < 45  # promptly, not after a waiter's timeout
    # The daemon kept the failure: a rerun of the same code times nothing
    # and every process gets the same error at once.
    res = workers(daemon, tmp_path, 3, "coordinated", only="allfail", env={"DETD_TIMEOUT_MS": 60000}, tag="g")
    assert not any(r["allfail"]["keys"][-1].get("timed_here") for r in res), [r["allfail"] for r in res]
    for r in res:
        assert r["allfail"]["error"].startswith("PassFailedError"), r["allfail"]
        assert "not timed again" in r["allfail"]["error"], r["allfail"]


# ---------------------------------------------------------------- in-process, scripted daemon

class Scripted:
    def __init__(self, decide, report=None):
        self._decide, self._report = decide, report
        self.decides, self.reports, self.observed = [], [], []
        self.failed, self.audits = [], []  # failed launches, audit results sent
        self.errors = []  # per report: the candidates' errors sent with it

    def decide(self, key, no_claim, timeout_ms, share=False):
        self.decides.append(key)
        return self._decide(key)

    def report(self, claim_id, key, rows, triton_version, timeout_ms, errors=None, timing=None):
        self.reports.append(rows)
        self.errors.append(errors)
        return self._report(key, rows)

    def observe(self, key, config, source, governed, chaos, timeout_ms=0, failed=None, audit=None, differing=(),
                why=None):
        if failed is not None:
            self.failed.append((key.kernel, key.key, config, failed))
        elif audit is not None:
            self.audits.append((key.kernel, config, audit, list(differing)))
        else:
            self.observed.append((key.kernel, config, source, governed))


def answer(outcome, config=None, claim=0):
    return _native.Answer(outcome, config, _native.SOURCE_TIMED, None, claim, 1000, False, False, None, -1, -1, 0)


def lowest(key, rows):
    ok = [r for r in rows if not r[2]]
    if not ok:
        raise _native.DetdError("detd_report", -1000, "EINVAL", "invalid argument",
                                "timings: no candidate has a valid timing (all failed, empty or not finite)")
    return answer(_native.OUTCOME_DECIDED, min(ok, key=lambda r: r[1][0])[0])


@pytest.fixture
def hooked(monkeypatch):
    import pattern_kernels as pk

    tuners = [pk.scale_allfail, pk.scale_pruned, pk.atomic_sum, pk.det_sum]

    def setup(scripted, **settings):
        _hook.patch()
        _process.configure(_policy.parse(environ={}, **settings))
        monkeypatch.setattr(_process, "client", lambda: scripted)
        for t in tuners:
            _hook._leave_direct(t)
            t.cache.clear()
        return pk

    yield setup
    _process._state.active = False
    _hook._state.records.clear()
    _process._state.settings = _policy.Settings()
    _audit.enable(False)
    _audit._results.clear()
    for t in tuners:
        _hook._leave_direct(t)
        t.cache.clear()


def test_waiter_told_every_candidate_failed_raises_at_once(hooked):
    """The daemon's reason for an all-failed pass reaches a waiter as an
    error: it raises PassFailedError without timing, whatever on_miss."""
    import torch

    def told(key):
        raise _native.DetdError("detd_decide", -1017, "ENOCAND", "no candidate has a valid timing",
                                "rank 0: every candidate failed: AttributeError")

    s = Scripted(told)
    pk = hooked(s, on_miss="cheapest")
    before = len(pk.CALLS)
    t0 = time.monotonic()
    with pytest.raises(detd.PassFailedError) as e:
        pk.run_allfail(torch.ones(100))
    assert time.monotonic() - t0 < 5
    # The daemon's reason as it is, not libdetd's code name for it.
    assert "scale_allfail" in str(e.value) and "rank 0: every candidate failed: AttributeError" in str(e.value)
    assert "claim no longer held" not in str(e.value)
    assert len(pk.CALLS) == before and s.reports == [] and s.observed == []
    assert detd.autotuners()[0]["keys"][0]["source"] == "failed"


def test_designated_rank_reports_every_candidate_failed_and_raises_its_error(hooked):
    import torch

    s = Scripted(lambda k: answer(_native.OUTCOME_DESIGNATED, claim=3), lowest)
    pk = hooked(s)
    with pytest.raises(Exception) as e:
        pk.run_allfail(torch.ones(100))
    assert "no_such_api_in_any_triton" in str(e.value) and not isinstance(e.value, detd.MissError)
    (rows,) = s.reports
    assert len(rows) == 3 and all(failed for _, _, failed in rows)
    # Each candidate's own error goes with the report (the daemon keeps the
    # first for every later asker).
    (errors,) = s.errors
    assert sorted(errors) == sorted(r[0] for r in rows), errors
    assert all("no_such_api_in_any_triton" in t for t in errors.values()), errors
    assert sorted(r[0] for r in rows) == sorted(s.decides[0].candidates)
    assert s.observed == []  # nothing launched
    # The launch that raised is observed as failed, with the kernel's error.
    (f,) = s.failed
    assert ":scale_allfail@" in f[0] and f[2] == "" and "no_such_api_in_any_triton" in f[3], f


def test_answer_maps_back_to_the_pruned_config_object(hooked):
    import torch

    committed = PRUNED[1]
    s = Scripted(lambda k: answer(_native.OUTCOME_DECIDED, committed))
    pk = hooked(s)
    x = torch.arange(64, dtype=torch.float32)
    assert torch.equal(pk.run_pruned(x), x * 2)
    assert sorted(s.decides[0].candidates) == sorted(PRUNED)
    live = dict.get(pk.scale_pruned.cache, (64, "torch.float32", "torch.float32"))
    assert live is pk.scale_pruned.best_config and live not in pk.scale_pruned.configs
    assert live.kwargs == {"BLOCK": 32, "EVEN": True, "NUM_STAGES": 2} and live.pre_hook is pk.note
    kernels = [k for k, *_ in s.observed]
    assert kernels == [kernels[0], kernels[0] + "#pruning"] and ":scale_pruned@" in kernels[0]


def test_audit_names_the_nondeterministic_kernel_and_passes_a_deterministic_one(hooked, caplog):
    import torch

    s = Scripted(lambda k: answer(_native.OUTCOME_DESIGNATED, claim=1), lowest)
    pk = hooked(s)
    x = pk.spread_values(64)
    # The kernel really is nondeterministic: two plain launches differ.
    outs = {pk.run_atomic(x).item() for _ in range(16)}
    assert len(outs) > 1, outs
    _process.configure(_policy.parse(environ={}))
    for t in (pk.atomic_sum, pk.det_sum):
        _hook._leave_direct(t)
        t.cache.clear()
    _audit._results.clear()

    assert detd.audit(replays=6) == []
    with caplog.at_level("INFO", logger="detd"):
        pk.run_atomic(x)
        pk.run_det(x)
    found = {r["name"].split(":")[1]: r for r in detd.audit()}
    assert found["atomic_sum"]["status"] == "nondeterministic"
    assert "out_ptr" in found["atomic_sum"]["differing"] and "x_ptr" not in found["atomic_sum"]["differing"]
    assert found["det_sum"]["status"] == "deterministic" and found["det_sum"]["differing"] == []
    assert found["atomic_sum"]["replays"] == 6
    by_name = {t["name"].split(":")[1]: t for t in detd.autotuners()}
    assert "out_ptr" in by_name["atomic_sum"]["nondeterministic"]
    assert by_name["det_sum"]["nondeterministic"] == []
    assert by_name["atomic_sum"]["keys"][0]["audit"]["status"] == "nondeterministic"
    warn = [r for r in caplog.records if r.levelname == "WARNING" and "atomic_sum" in r.getMessage()]
    assert len(warn) == 1 and "out_ptr" in warn[0].getMessage()
    assert not [r for r in caplog.records if r.levelname == "WARNING" and "det_sum" in r.getMessage()]
    # Both results went to the daemon with the key's observation.
    sent = {k.split(":")[1].split("@")[0]: (st, diff) for k, _, st, diff in s.audits}
    assert sent["atomic_sum"][0] == "nondeterministic" and "out_ptr" in sent["atomic_sum"][1], s.audits
    assert sent["det_sum"] == ("deterministic", []), s.audits


def test_audit_is_off_by_default(hooked):
    s = Scripted(lambda k: answer(_native.OUTCOME_DESIGNATED, claim=1), lowest)
    pk = hooked(s)
    assert not _audit.enabled()
    pk.run_det(pk.spread_values(64))
    assert detd.audit(enable=False) == []
    assert all("audit" not in k for t in detd.autotuners() for k in t["keys"])
