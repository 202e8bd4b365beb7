"""Unit tests of the hook's matching and launch layer, in one process with
real Triton (interpreter). The daemon is replaced here by a scripted
answerer so that answers a correct daemon never gives (a config that is no
live candidate, a committed winner other than this rank's fastest) can be
produced; the end-to-end behaviour against the real daemon is in
test_e2e.py."""

import copy
import hashlib
import importlib.metadata
import pickle

import pytest
import triton

import detd
from detd import _hook, _loop, _native, _policy, _process, _triton

import rowsum_kernels as rk

# Runs on every Triton release (run_matrix.sh): it drives the hook through Triton's own API.
pytestmark = pytest.mark.triton_release

KEY = (256, "torch.float32", "torch.float32")


class Scripted:
    def __init__(self, decide, report=None):
        self._decide, self._report = decide, report
        self.decides, self.reports, self.observed, self.timing = [], [], [], []

    def decide(self, key, no_claim, timeout_ms, share=False):
        self.decides.append((key, no_claim))
        return self._decide(key)

    def report(self, claim_id, key, rows, triton_version, timeout_ms, errors=None, timing=None):
        self.reports.append(rows)
        self.timing.append(timing)
        return self._report(key, rows)

    def observe(self, key, config, source, governed, chaos, timeout_ms=0, failed=None, audit=None, differing=(),
                why=None):
        if failed is None and audit is None:
            self.observed.append((config, source, governed, chaos))


def answer(outcome, config=None, source=_native.SOURCE_TIMED, claim=0):
    return _native.Answer(outcome, config, source, None, claim, 1000, False, False, None, -1, -1, 0)


@pytest.fixture
def hooked(monkeypatch):
    def setup(scripted, **settings):
        _hook.patch()
        _process.configure(_policy.parse(environ={}, **settings))
        monkeypatch.setattr(_process, "client", lambda: scripted)
        rk.row_sum_kernel.cache.clear()
        return scripted

    yield setup
    _process._state.active = False
    _hook._state.records.clear()
    _process._state.settings = _policy.Settings()
    rk.row_sum_kernel.cache.clear()


def sha_for_block(block):
    x = rk.make_input(rows=4, n=256, seed=256)
    live = [c for c in rk.row_sum_kernel.configs if c.kwargs["BLOCK"] == block][0]
    rk.row_sum_kernel.cache.clear()
    dict.__setitem__(rk.row_sum_kernel.cache, KEY, live)
    was = _process.active()
    _process._state.active = False
    try:
        out = rk.row_sum(x)
    finally:
        _process._state.active = was
    rk.row_sum_kernel.cache.clear()
    return hashlib.sha256(out.numpy().tobytes()).hexdigest()


def run_once():
    x = rk.make_input(rows=4, n=256, seed=256)
    before = len(rk.CALLS)
    out = rk.row_sum(x)
    return hashlib.sha256(out.numpy().tobytes()).hexdigest(), len(rk.CALLS) - before


def test_decided_answer_maps_to_live_config(hooked):
    expected = sha_for_block(64)
    s = hooked(Scripted(lambda k: answer(_native.OUTCOME_DECIDED, "BLOCK=64,num_warps=4,num_stages=1,num_ctas=1")))
    sha, calls = run_once()
    assert (sha, calls) == (expected, 0)
    live = dict.get(rk.row_sum_kernel.cache, KEY)
    assert live in rk.row_sum_kernel.configs  # the live object, pre_hook kept
    assert live.pre_hook is rk._note_block
    key = s.decides[0][0]
    assert key.kernel.startswith("rowsum_kernels:row_sum_kernel@") and key.arch == "cpu"
    assert key.key == '[i:256,s:"torch.float32",s:"torch.float32"]'
    assert sorted(key.candidates) == sorted(
        f"BLOCK={b},num_warps=4,num_stages=1,num_ctas=1" for b in (16, 32, 64, 128))
    assert s.observed == [("BLOCK=64,num_warps=4,num_stages=1,num_ctas=1", _native.SOURCE_TIMED, True, False)]
    # Second call: resolved in-process, no new request.
    run_once()
    assert len(s.decides) == 1


def test_answer_matching_no_live_candidate_is_a_miss(hooked):
    s = hooked(Scripted(lambda k: answer(_native.OUTCOME_DECIDED, "BLOCK=48,num_warps=4,num_stages=1,num_ctas=1")))
    before = len(rk.CALLS)
    with pytest.raises(detd.MissError) as e:
        run_once()
    assert len(rk.CALLS) == before  # nothing timed, nothing launched
    assert "rowsum_kernels:row_sum_kernel@" in str(e.value) and "[i:256," in str(e.value)
    assert "matches no live candidate" in str(e.value)
    assert dict.get(rk.row_sum_kernel.cache, KEY) is None
    assert detd.autotuners()[0]["keys"][0]["source"] == "miss"


def test_answer_matching_no_live_candidate_falls_back(hooked):
    expected = sha_for_block(16)
    s = hooked(Scripted(lambda k: answer(_native.OUTCOME_DECIDED, "BLOCK=48,num_warps=4,num_stages=1,num_ctas=1")),
               on_miss="first")
    sha, calls = run_once()
    assert (sha, calls) == (expected, 0)
    assert s.observed[0][1] == _native.SOURCE_FALLBACK


def test_designated_launch_uses_committed_config_not_local_fastest(hooked, monkeypatch):
    """This rank's fastest is BLOCK=16 (RANK=0); the daemon commits BLOCK=128
    (another rank's report won): the very first launch must use 128, and
    exactly one timing pass is made."""
    monkeypatch.setenv("RANK", "0")
    expected = sha_for_block(128)
    committed = "BLOCK=128,num_warps=4,num_stages=1,num_ctas=1"
    s = hooked(Scripted(lambda k: answer(_native.OUTCOME_DESIGNATED, claim=7),
                        lambda k, rows: answer(_native.OUTCOME_DECIDED, committed)))
    sha, calls = run_once()
    assert calls == 4
    assert sha == expected
    rows = s.reports[0]
    assert sorted(r[0] for r in rows) == sorted(rk_cfg for rk_cfg in s.decides[0][0].candidates)
    fastest = min(rows, key=lambda r: r[1][0])[0]
    assert fastest == "BLOCK=16,num_warps=4,num_stages=1,num_ctas=1" != committed
    assert s.observed == [(committed, _native.SOURCE_TIMED, True, False)]
    rec = detd.autotuners()[0]["keys"][0]
    assert rec["timed_here"] and rec["config"] == committed and len(rec["timings"]) == 4
    # How it was timed goes with the report: the kernel's do_bench=, as
    # Autotuner._bench asks it, on the CPU (no driver).
    t = s.timing[0]
    assert t["benchmarker"] == "rowsum_kernels:fake_do_bench" and t["return_mode"] == "quantiles=0.5,0.2,0.8", t
    assert t["cuda_graphs"] == 0 and t["warmup"] == t["rep"] == 0.0 and t["driver"] == "none", t
    assert t["torch_version"] == importlib.metadata.version("torch") and t["package"] == "", t


def test_designated_on_the_direct_path_times_once_and_uses_committed(hooked, monkeypatch):
    """A tuner already direct meets a new key the daemon designates this
    rank to time: exactly one pass over the 4 candidates (through the
    patched prune_configs), the committed config (not this rank's fastest)
    launched, and the placeholder measurement never launches anything."""
    monkeypatch.setenv("RANK", "0")
    committed = "BLOCK=128,num_warps=4,num_stages=1,num_ctas=1"
    decided = "BLOCK=64,num_warps=4,num_stages=1,num_ctas=1"
    s = hooked(Scripted(lambda k: answer(_native.OUTCOME_DECIDED, decided) if "256" in k.key
                        else answer(_native.OUTCOME_DESIGNATED, claim=9),
                        lambda k, rows: answer(_native.OUTCOME_DECIDED, committed)))
    run_once()
    tuner = rk.row_sum_kernel
    assert type(tuner.cache) is dict and tuner in _hook._direct_tuners
    x = rk.make_input(rows=4, n=1024, seed=3)
    before = len(rk.CALLS)
    out = rk.row_sum(x)
    assert len(rk.CALLS) - before == 4  # one timing pass, nothing more
    assert len(s.reports) == 1 and len(s.reports[0]) == 4
    new_key = (1024, "torch.float32", "torch.float32")
    assert _triton.config_string(dict.get(tuner.cache, new_key)) == committed
    assert s.observed[-1] == (committed, _native.SOURCE_TIMED, True, False)
    # Bits of the committed config, launched by plain Triton.
    live = [c for c in tuner.configs if c.kwargs["BLOCK"] == 128][0]
    plain = dict(tuner.cache)
    was = _process.active()
    _process._state.active = False
    try:
        tuner.__dict__["cache"] = {new_key: live}
        ref = rk.row_sum(x)
    finally:
        _process._state.active = was
        tuner.__dict__["cache"] = plain
    assert out.numpy().tobytes() == ref.numpy().tobytes()
    assert _triton._tls.__dict__.get("skip") is None


def test_direct_path_resolves_through_a_wrapped_prune_configs(hooked, monkeypatch):
    """Profilers and counting harnesses wrap Autotuner.prune_configs after
    detd installed: a new key on the direct path must still be resolved
    through the daemon (nothing timed here), not timed by Triton."""
    from triton.runtime import autotuner as at

    s = hooked(Scripted(lambda k: answer(_native.OUTCOME_DECIDED, "BLOCK=32,num_warps=4,num_stages=1,num_ctas=1")))
    run_once()
    assert rk.row_sum_kernel in _hook._direct_tuners
    inner = at.Autotuner.prune_configs
    seen = []

    def wrapper(self, *a, **k):
        seen.append(1)
        return inner(self, *a, **k)

    monkeypatch.setattr(at.Autotuner, "prune_configs", wrapper)
    before = len(rk.CALLS)
    rk.row_sum(rk.make_input(rows=4, n=2048, seed=9))
    assert seen and len(rk.CALLS) == before and len(s.decides) == 2
    got = dict.get(rk.row_sum_kernel.cache, (2048, "torch.float32", "torch.float32"))
    assert got.kwargs["BLOCK"] == 32


def test_pinned_asks_without_claim_and_never_times(hooked):
    s = hooked(Scripted(lambda k: answer(_native.OUTCOME_MISS)), mode="pinned", on_miss="cheapest")
    sha, calls = run_once()
    assert calls == 0 and s.decides[0][1] is True
    assert dict.get(rk.row_sum_kernel.cache, KEY).kwargs["BLOCK"] == 16


def test_cheapest_rule_is_deterministic():
    cs = [triton.Config({"BM": 64, "BN": 64}, num_warps=8), triton.Config({"BM": 32, "BN": 128}, num_warps=4),
          triton.Config({"BM": 16, "BN": 256}, num_warps=4, num_stages=2),
          triton.Config({"BM": 128, "BN": 16}, num_warps=2)]
    # volumes: 4096, 4096, 4096, 2048 -> the last; then warps, stages, string.
    assert _hook._cheapest(cs) is cs[3]
    assert _hook._cheapest(cs[:3]) is cs[2] or _hook._cheapest(cs[:3]) is cs[1]
    assert _hook._cheapest(cs[:3]) is _hook._cheapest(list(reversed(cs[:3])))


def test_chaos_picks_per_rank_different(hooked, monkeypatch):
    got = []
    for rank in range(3):
        monkeypatch.setenv("RANK", str(rank))
        hooked(Scripted(lambda k: answer(_native.OUTCOME_DECIDED, "BLOCK=32,num_warps=4,num_stages=1,num_ctas=1")),
               chaos=True)
        run_once()
        got.append(dict.get(rk.row_sum_kernel.cache, KEY).kwargs["BLOCK"])
    assert len(set(got)) == 3 and 32 not in got


def test_cache_pickles_as_plain_dict(hooked):
    hooked(Scripted(lambda k: answer(_native.OUTCOME_DECIDED, "BLOCK=64,num_warps=4,num_stages=1,num_ctas=1")))
    run_once()
    cache = rk.row_sum_kernel.cache
    assert type(cache) is dict and rk.row_sum_kernel in _hook._direct_tuners  # resolved one key: direct
    full = _hook.DetdCache(dict(cache))
    for c in (cache, full):
        for clone in (pickle.loads(pickle.dumps(dict(c))), pickle.loads(pickle.dumps(c))):
            assert type(clone) is dict and list(clone) == [KEY]
        # In-process copies stay governed: a copied tuner may launch directly.
        for clone in (copy.copy(c), copy.deepcopy(c)):
            assert type(clone) is type(c) and list(clone) == [KEY]
    # Nothing else of detd's lives on the autotuner but the direct launch
    # path: Triton's own run, bound.
    assert not [k for k, v in vars(rk.row_sum_kernel).items()
                if type(v).__module__.startswith("detd") and k != "cache"]
    assert rk.row_sum_kernel.run.__func__ is _triton._original_run


def test_direct_launches_resolve_new_keys_and_skip_known_ones(hooked):
    s = hooked(Scripted(lambda k: answer(_native.OUTCOME_DECIDED, "BLOCK=64,num_warps=4,num_stages=1,num_ctas=1")))
    run_once()  # first call: the patched run, then the tuner goes direct
    tuner = rk.row_sum_kernel
    # The direct path is Triton's own, on Triton's own data types.
    assert "run" in vars(tuner) and type(tuner.cache) is dict and tuner in _hook._direct_tuners
    assert len(s.decides) == 1 and len(s.observed) == 1
    run_once()  # a known key: no daemon call, no observation
    assert len(s.decides) == 1 and len(s.observed) == 1
    # A new key on the direct path: the miss reaches the patched
    # prune_configs, which takes the arguments from Triton's run frame and
    # resolves through the daemon like any other; nothing is timed.
    from triton.runtime import autotuner as at

    benched = []
    orig_bench = _triton._original_bench
    _triton._original_bench = lambda *a, **k: benched.append(k["config"]) or orig_bench(*a, **k)
    try:
        x = rk.make_input(rows=4, n=512, seed=512)
        out = rk.row_sum(x)
    finally:
        _triton._original_bench = orig_bench
    assert benched == [] and at.Autotuner._bench is _triton._patched_bench
    assert len(s.decides) == 2 and len(s.observed) == 2
    assert dict.get(tuner.cache, (512, "torch.float32", "torch.float32")).kwargs["BLOCK"] == 64
    assert out.shape == (4,)
    # A new install() takes every tuner back to the full path.
    hooked(s)
    assert "run" not in vars(tuner) and type(tuner.cache) is _hook.DetdCache


def test_install_idempotent_patches_once(monkeypatch):
    from triton.runtime import autotuner as at

    monkeypatch.delenv("DETD_MODE", raising=False)
    try:
        detd.install(mode="auto")
        first = at.Autotuner.run
        detd.install(mode="auto")
        assert at.Autotuner.run is first
        assert first.__detd_original__.__module__ == "triton.runtime.autotuner"
        with pytest.raises(ValueError, match="invalid setting on_miss"):
            detd.install(on_miss="never")
        assert detd.settings().mode == "auto"
    finally:
        _process._state.active = False
        _process._state.settings = _policy.Settings()


def test_autotuning_listener_sees_the_pass(hooked, monkeypatch):
    knobs = pytest.importorskip("triton.knobs") if hasattr(triton, "knobs") else None
    if knobs is None or not hasattr(knobs.autotuning, "listener"):
        pytest.skip("this Triton has no autotuning listener (added in 3.9)")
    seen = []
    monkeypatch.setattr(knobs.autotuning, "listener", lambda **kw: seen.append(kw))
    committed = "BLOCK=32,num_warps=4,num_stages=1,num_ctas=1"
    hooked(Scripted(lambda k: answer(_native.OUTCOME_DESIGNATED, claim=1),
                    lambda k, rows: answer(_native.OUTCOME_DECIDED, committed)))
    run_once()
    assert len(seen) == 1 and seen[0]["key"] == KEY and seen[0]["cache_hit"] is False
    assert seen[0]["best_config"].kwargs["BLOCK"] == 32 and len(seen[0]["configs_timings"]) == 4


def _stale():
    return _native.DetdError("detd_report", _native.ESTALE, "DETD_ESTALE", "claim no longer held",
                             "report: claim 7 was given to a session that has ended")


def test_claim_lost_to_a_restart_is_asked_again_and_timings_reused(hooked, monkeypatch):
    """The daemon restarts during this rank's timing pass: the report is
    refused as stale (libdetd sends nothing to the new daemon). The hook
    asks again; designated again, it reports the timings it measured (one
    pass, not two) and launches the committed config; a decision made
    meanwhile by another rank is taken as it is."""
    monkeypatch.setenv("RANK", "0")
    committed = "BLOCK=32,num_warps=4,num_stages=1,num_ctas=1"
    claims = iter([7, 8])
    reports = []

    def report(k, rows):
        reports.append(rows)
        if len(reports) == 1:
            raise _stale()
        return answer(_native.OUTCOME_DECIDED, committed)

    s = hooked(Scripted(lambda k: answer(_native.OUTCOME_DESIGNATED, claim=next(claims)), report))
    sha, calls = run_once()
    assert calls == 4  # one timing pass
    assert sha == sha_for_block(32)
    assert len(s.decides) == 2 and len(reports) == 2 and reports[0] == reports[1]
    rec = detd.autotuners()[0]["keys"][0]
    assert rec["config"] == committed and rec["source"] == "timed" and "claim lost 1x" in rec["note"]
    assert _hook._state.claims_lost >= 1

    # Asked again, another rank's decision is there: no second report.
    rk.row_sum_kernel.cache.clear()
    _process.configure(_policy.parse(environ={}))
    answers = iter([answer(_native.OUTCOME_DESIGNATED, claim=9),
                    answer(_native.OUTCOME_DECIDED, committed)])
    reports.clear()
    s2 = Scripted(lambda k: next(answers), lambda k, rows: (_ for _ in ()).throw(_stale()))
    monkeypatch.setattr(_process, "client", lambda: s2)
    sha, calls = run_once()
    assert calls == 4 and sha == sha_for_block(32)
    assert len(s2.decides) == 2 and len(s2.reports) == 1


def test_asks_share_one_timeout(hooked):
    """Every Decide after a lost claim gets what is left of timeout_ms, not
    a fresh timeout_ms (the budget is the setting, across a restart)."""
    timeouts = []

    class Timed(Scripted):
        def decide(self, key, no_claim, timeout_ms, share=False):
            timeouts.append(timeout_ms)
            return super().decide(key, no_claim, timeout_ms)

    s = hooked(Timed(lambda k: answer(_native.OUTCOME_DESIGNATED, claim=len(timeouts)),
                     lambda k, rows: (_ for _ in ()).throw(_stale())), timeout_ms=5000)
    with pytest.raises(detd.MissError) as e:
        run_once()
    assert "report failed" in str(e.value)
    assert len(timeouts) == _loop.MAX_ASKS
    assert all(0 < t <= 5000 for t in timeouts) and timeouts == sorted(timeouts, reverse=True)


def test_fallback_is_warned_and_counted(hooked):
    s = hooked(Scripted(lambda k: answer(_native.OUTCOME_MISS)), on_miss="cheapest")
    n = _hook._state.fallbacks
    _process._state.warned.clear()  # warned once per kernel and key, per process
    with pytest.warns(RuntimeWarning, match="on_miss=cheapest"):
        run_once()
    assert _hook._state.fallbacks == n + 1
    assert s.observed[0][1] == _native.SOURCE_FALLBACK


LAUNCHER_ENV = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS",
                "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_SIZE", "PMIX_RANK",
                "PMIX_LOCAL_RANK", "PMIX_SIZE", "PMI_RANK", "MPI_LOCALRANKID", "PMI_SIZE")


@pytest.mark.parametrize("env,want", [
    ({}, (-1, -1, 0)),
    ({"RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "8"}, (3, 1, 8)),
    ({"SLURM_PROCID": "5", "SLURM_LOCALID": "1", "SLURM_NTASKS": "16"}, (5, 1, 16)),
    ({"OMPI_COMM_WORLD_RANK": "7", "OMPI_COMM_WORLD_LOCAL_RANK": "3", "OMPI_COMM_WORLD_SIZE": "8"}, (7, 3, 8)),
    ({"PMIX_RANK": "2", "PMIX_SIZE": "4"}, (2, -1, 4)),
    ({"PMI_RANK": "1", "MPI_LOCALRANKID": "1", "PMI_SIZE": "2"}, (1, 1, 2)),
    # torchrun under Slurm: torchrun's RANK is the process's, not the task's.
    ({"RANK": "9", "LOCAL_RANK": "1", "WORLD_SIZE": "16", "SLURM_PROCID": "4", "SLURM_NTASKS": "8"}, (9, 1, 16)),
])
def test_rank_from_the_launcher(monkeypatch, env, want):
    for v in LAUNCHER_ENV:
        monkeypatch.delenv(v, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert _process.rank_identity() == want


def test_bad_launcher_rank_is_an_error(monkeypatch):
    for v in LAUNCHER_ENV:
        monkeypatch.delenv(v, raising=False)
    monkeypatch.setenv("SLURM_PROCID", "x")
    with pytest.raises(ValueError, match="SLURM_PROCID"):
        _process.rank_identity()


@pytest.mark.parametrize("env,want", [
    ({}, None),
    ({"TORCHELASTIC_RUN_ID": "run-42"}, "run-42"),
    ({"SLURM_JOB_ID": "1234"}, "1234"),
    ({"PMIX_NAMESPACE": "prterun-x-1@1"}, "prterun-x-1@1"),
    ({"DETD_JOB": "mine", "SLURM_JOB_ID": "1234"}, "mine"),
    ({"TORCHELASTIC_RUN_ID": "run-42", "SLURM_JOB_ID": "1234"}, "run-42"),
])
def test_job_label_from_the_launcher(env, want):
    assert _policy.parse(environ=env).job == want


@pytest.mark.parametrize("env,field,want", [
    ({"MCORE_AUTOTUNE_MODE": "pinned"}, "mode", "pinned"),
    ({"MCORE_AUTOTUNE_MODE": "record"}, "mode", "record"),
    ({"MCORE_AUTOTUNE_RECORD": "/tmp/rec"}, "mode", "record"),
    ({"MCORE_DET_TUNE_RECORD": "/tmp/rec"}, "mode", "record"),
    ({"DETD_MODE": "coordinated", "MCORE_AUTOTUNE_MODE": "pinned"}, "mode", "coordinated"),
    ({"MCORE_AUTOTUNE_MODULES": "mamba_ssm,transformer_engine"}, "scope", ("mamba_ssm", "transformer_engine")),
    ({"DET_AUTOTUNE_PIN_MODULES": "fla"}, "scope", ("fla",)),
    ({"MCORE_AUTOTUNE_ON_MISS": "min_cost"}, "on_miss", "cheapest"),
    ({"DET_AUTOTUNE_ON_MISS": "error"}, "on_miss", "error"),
    ({"MCORE_AUTOTUNE_VERIFY_STRICT": "1"}, "strict", True),
    ({"DET_AUTOTUNE_CHAOS": "1"}, "chaos", True),
    ({}, "mode", "coordinated"),
])
def test_megatron_variables_drive_detd(env, field, want):
    assert getattr(_policy.parse(environ=env), field) == want


def test_bad_megatron_value_names_its_variable():
    with pytest.raises(ValueError, match="MCORE_AUTOTUNE_ON_MISS"):
        _policy.parse(environ={"MCORE_AUTOTUNE_ON_MISS": "fastest"})


def test_compile_only_takes_the_call_as_autotuner_run_got_it(monkeypatch):
    """Autotuner.run receives grid= and warmup= among its kwargs
    (``fn[grid](...)``): compiling a candidate ahead (a waiting rank's
    share, the timing pass's compile step) passes the kernel's own
    arguments and the config's, with warmup on, to the function's real
    ``warmup`` (KernelInterface's signature on this release), and
    launches nothing."""
    from triton.runtime.jit import JITFunction, KernelInterface

    got = {}

    class Autotuned(KernelInterface):  # how the autotuner is called
        def run(self, *args, **kwargs):
            got["run_kwargs"] = kwargs

    class Jit(KernelInterface):  # the function under the autotuner
        # The release's own warmup: KernelInterface's (3.6, 3.9) or, where
        # KernelInterface has none, JITFunction's (3.3).
        warmup = getattr(KernelInterface, "warmup", None) or JITFunction.warmup

        def run(self, *args, grid, warmup, **kwargs):
            got["warm"] = (args, warmup, kwargs)

    Autotuned()[(4,)](1, 2, X=3)
    kwargs = got["run_kwargs"]
    assert {"grid", "warmup"} <= set(kwargs), kwargs  # what made the old call raise

    class Tuner:
        fn = Jit()

    monkeypatch.setenv("TRITON_INTERPRET", "0")
    assert _triton.compile_only(Tuner(), (1, 2), kwargs, triton.Config({"BLOCK": 8}, num_warps=2)) is True
    args, warmup, kw = got["warm"]
    assert args == (1, 2) and warmup is True and kw["X"] == 3 and kw["BLOCK"] == 8 and kw["num_warps"] == 2, got
