"""torch.compile's autotuners under detd: real Inductor (torch CPU build)
generating real Triton kernels, run by Triton's interpreter, against the
real daemon over its unix socket, several processes at once.

What stands in for the GPU is described in ``inductor_worker.py``: the
launchers (Triton cannot compile for a target here) and, for
max-autotune's Triton templates (which the interpreter cannot run), the
benchmark that ``AlgorithmSelectorCache.lookup`` is given. Inductor's own
``run``, ``autotune_to_one_config``, ``benchmark_all_configs``, ``bench``,
coordinate descent, ``AlgorithmSelectorCache.__call__``/``lookup`` and the
adapter's keys all run for real.
"""

import json
import os
import subprocess
import sys
import time

import pytest

import prestart
from conftest import HERE, require_module, status
from gates import GATE_BOUND_S
from detd import _canon

N = 3


def _start(daemon, tmp_path, model, n, tag, i, env=None, cache=None):
    """Worker i of n, started: (process, its JSON path)."""
    out = tmp_path / f"{tag}{i}.json"
    e = daemon.env(RANK=i, LOCAL_RANK=i, WORLD_SIZE=n, **(env or {}))
    e["TORCHINDUCTOR_CACHE_DIR"] = str(cache or tmp_path / f"inductor-{tag}{i}")
    p = prestart.popen([sys.executable, os.path.join(HERE, "inductor_worker.py"), str(out), model], env=e,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return p, out


def _workers(daemon, tmp_path, model, n, tag, env=None, cache=None, per=None):
    """n worker processes at once; each has its own Inductor cache folder
    unless ``cache`` names one for all; ``per``: rank -> more environment."""
    procs = [_start(daemon, tmp_path, model, n, tag, i, dict(env or {}, **((per or {}).get(i, {}))), cache)
             for i in range(n)]
    return _results(daemon, procs)


def _results(daemon, procs):
    """Each worker's JSON result (with its output), once it exited 0."""
    results = []
    for p, out in procs:
        try:
            text, _ = p.communicate(timeout=600)
        except subprocess.TimeoutExpired:
            p.kill()
            text, _ = p.communicate()
            raise AssertionError(f"worker timed out: {text[-3000:]}")
        assert p.returncode == 0 and out.exists(), f"worker exited {p.returncode}: {text[-3000:]}\n{daemon.log()}"
        r = json.loads(out.read_text())
        r["output"] = text
        results.append(r)
    return results


def _keys(result, governed=True):
    """(kernel, key) -> key entry of the Inductor autotuners reached."""
    out = {}
    for a in result["autotuners"]:
        if a["kind"] != "inductor" or a["kernel"] == "inductor::*":
            continue
        for k in a["keys"]:
            assert k["governed"] is governed, (a["kernel"], k)
            out[(a["kernel"], k["key"])] = k
    return out


def _agree(results):
    """The keys every process met, each with one config everywhere; and
    how many processes timed each."""
    keys = [_keys(r) for r in results]
    assert keys[0], "no Inductor autotuner was governed"
    for k in keys[1:]:
        assert set(k) == set(keys[0]), "processes met different keys"
    timed = {}
    for key in keys[0]:
        configs = {k[key]["config"] for k in keys}
        assert len(configs) == 1, f"{key}: processes launched different configs {configs}"
        timed[key] = sum(1 for k in keys if k[key]["timed_here"])
    return keys[0], timed


def _benchmarker_class():
    """Inductor's benchmarker on this machine, by class (torch 2.13: the
    InductorBenchmarker; 2.11 without CUDA: the TritonBenchmarker)."""
    from torch._inductor.runtime import benchmarking

    return f"torch._inductor.runtime.benchmarking:{type(benchmarking.benchmarker).__qualname__}"


@pytest.fixture
def torch_ok():
    require_module("torch")
    require_module("triton")


def test_fused_kernels_one_pass_per_key_then_none(daemon, tmp_path, torch_ok):
    first = _workers(daemon, tmp_path, "fused+wide", N, "a")
    for r in first:
        assert r["ran"], r.get("error")
        assert r["close"], "compiled outputs differ from eager"
        assert r["patched"]
        st = [a for a in r["autotuners"] if a["kernel"] == "inductor::*"]
        assert st and st[0]["status"] == "governed" and st[0]["graph_cache"] == "checked", st
        # Inductor's caches, which would bypass the decision, are off; its
        # local FX graph cache stays on, checked (the cache tests below).
        assert r["settings"] == {"autotune_local_cache": False, "autotune_remote_cache": False,
                                 "fx_graph_cache": True, "fx_graph_remote_cache": False,
                                 "benchmark_epilogue_fusion": False}
    keys, timed = _agree(first)
    stages = {k[1].split(",", 1)[0] for k in keys}
    assert stages == {'[s:"configs"', '[s:"coordesc"'}, stages
    searches = {}
    for (kernel, key), entry in keys.items():
        assert kernel.startswith("inductor::triton_") and "@" in kernel, kernel
        assert timed[(kernel, key)] == 1, f"{kernel} {key}: timed by {timed[(kernel, key)]} processes"
        assert entry["source"] == "timed"
        assert 'torch 2.' in key and 'triton ' in key and 't[s:"x",' in key, key
        if any(c.startswith("search:") for c in entry["candidates"]):
            searches[(kernel, key)] = entry
        else:
            assert entry["config"] in entry["candidates"]
    coordesc = {(n, k): e for (n, k), e in keys.items() if k.startswith('[s:"coordesc"')}
    assert all(len(e["candidates"]) > 2 for nk, e in coordesc.items() if nk not in searches)
    # The 3-D kernel's descent reaches more configs than a key lists: its
    # key names the search (the start config, the descriptor), one process
    # ran Inductor's descent (several configs timed), every process
    # launched the committed config, a config of the search; no process
    # gave the search up.
    (kernel, key), entry = _one_search(searches, coordesc)
    start, desc = entry["candidates"]
    assert desc.startswith("search:inductor.coordesc;tune=XBLOCK:1-32,YBLOCK:1-32,ZBLOCK:1-32,num_warps:1-32;"), desc
    assert _canon.search_values(desc, start, entry["config"]) is not None, (desc, start, entry["config"])
    [timer] = [r for r in first if _keys(r)[(kernel, key)]["timed_here"]]
    [descent] = [d for d in timer["descents"] if d["start"] == start]
    assert descent["timed"] > 4, descent
    # Every descent's report is its own result, which the daemon committed
    # (not another config it timed, inside the winner rule's tie band).
    assert list(_keys(timer)[(kernel, key)]["timings"]) == [entry["config"]], _keys(timer)[(kernel, key)]
    for r in first:
        for d in r["descents"]:
            [ck] = [k for k in coordesc if d["start"] in k[1]]
            assert keys[ck]["config"] == d["result"], (ck, d, keys[ck]["config"])
    assert all("not searched" not in r["output"] for r in first)
    # A process that timed nothing ran no benchmark; the results are bitwise equal.
    for r in first:
        if not any(e["timed_here"] for e in _keys(r).values()):
            assert r["bench_calls"] == 0, r["bench_calls"]
    assert sum(r["bench_calls"] for r in first) > 0
    assert len({r["digest"] for r in first}) == 1

    # The rerun times nothing and launches the same configs.
    again = _workers(daemon, tmp_path, "fused+wide", 2, "b")
    keys2, timed2 = _agree(again)
    assert set(keys2) == set(keys)
    for key in keys:
        assert keys2[key]["config"] == keys[key]["config"]
        assert timed2[key] == 0
    assert [r["bench_calls"] for r in again] == [0, 0]
    assert {r["digest"] for r in again} == {first[0]["digest"]}

    # Readable in detctl decisions; verify passes over every process.
    p = daemon.detctl("decisions", "--json")
    assert p.returncode == 0, p.stderr
    rows = json.loads(p.stdout)
    rows = rows.get("decisions", rows) if isinstance(rows, dict) else rows
    by = {(d["kernel"], d["key"]): d for d in rows}
    for key, entry in keys.items():
        assert by[key]["config"] == entry["config"]
    # How each was timed: Inductor's benchmarker by its class (the timing
    # lock is off on a CPU: DETD_TIMING_LOCK=auto).
    for d in (by[key] for key in keys if by[key]["source"] == "timed"):
        b = d["timing"]["benchmarker"]
        assert b["name"] == _benchmarker_class(), d
        assert b["timing_lock"] is False and "Inductor's own settings" in b["return_mode"], d
    v = daemon.detctl("verify")
    assert v.returncode == 0, v.stdout + v.stderr


def _one_search(searches, coordesc):
    assert len(searches) == 1 and set(searches) <= set(coordesc), (list(searches), list(coordesc))
    return next(iter(searches.items()))


def test_gemm_selection_one_pass_then_none(daemon, tmp_path, torch_ok):
    marks = tmp_path / "marks"
    marks.mkdir()
    first = _workers(daemon, tmp_path, "gemm", N, "g", env={"DETD_TEST_SHARE_MARKS": str(marks)},
                     cache=tmp_path / "inductor-g")
    keys, timed = _agree(first)
    sel = {k: e for k, e in keys.items() if k[0].startswith("inductor::mm@")}
    assert len(sel) == 1, keys
    (kernel, key), entry = next(iter(sel.items()))
    assert key.startswith('[s:"select",') and "torch.float32" in key
    assert len(entry["candidates"]) > 2
    assert any(c.startswith("extern:mm@") for c in entry["candidates"])
    assert any(c.startswith("triton_mm:") for c in entry["candidates"])
    assert timed[(kernel, key)] == 1
    # One process benchmarked: once, then RECHECK_ROUNDS more times when
    # two or more choices were within the re-measure band of the best.
    from detd import _measure

    timers = [r for r in first if _keys(r)[(kernel, key)]["timed_here"]]
    assert len(timers) == 1 and sum(r["select_passes"] for r in first) == timers[0]["select_passes"]
    tm = _keys(timers[0])[(kernel, key)]["timings"]
    again_n = sum(1 for v in tm.values() if isinstance(v, list))
    assert again_n != 1, tm  # never a lone candidate re-measured
    assert timers[0]["select_passes"] == 1 + (_measure.RECHECK_ROUNDS if again_n >= 2 else 0), tm
    for v in tm.values():
        assert not isinstance(v, list) or len(v) == 1 + _measure.RECHECK_ROUNDS, tm
    for r in first:  # each process's selection reached lookup() with a benchmark
        (st,) = [a for a in r["autotuners"] if a["kernel"] == "inductor::*"]
        assert st["selections"]["seen"] >= 1 and st["selections"]["timed"] >= 1, st
    # While one process timed it, the waiting processes precompiled shares
    # of the choices (the real TritonTemplateCaller.precompile): disjoint,
    # together every template choice but the first (the timing process's
    # own); counted in detd.stats() and in the compile phase.
    waiters = [r for r in first if r not in timers]
    assert "shared" not in _keys(timers[0])[(kernel, key)] and timers[0]["precompiles"] == 0
    assert timers[0]["stats"]["inductor_shares"] == 0
    shares = [_keys(r)[(kernel, key)].get("shared", []) for r in waiters]
    flat = [c for sh in shares for c in sh]
    templates = [c for c in entry["candidates"][1:] if not c.startswith("extern:")]
    assert templates and sorted(flat) == sorted(templates), (shares, entry["candidates"])
    # The timing process claimed the selection when Inductor was about to
    # precompile it (and precompiled); the others learnt then that it is
    # being timed and precompiled nothing of their own (or it was decided).
    assert timers[0]["precompile_fns"] == 1 and timers[0]["stats"]["early_claims"] == 1, timers[0]["stats"]
    # Its lookup asked again under that claim: the same pass, counted
    # once by the daemon (one per key timed, the early claim included).
    assert status(daemon)["counters"]["timing_passes"] == sum(timed.values()), (status(daemon)["counters"], timed)
    for r in waiters:
        st = r["stats"]
        assert r["precompile_fns"] == 0 and st["early_claims"] == 0 and st["early_passed_on"] == 0, st
        assert len(entry["candidates"]) in (st["inductor_precompiles_deferred"], st["inductor_precompiles_skipped"])
        assert st["inductor_deferred_compiled"] == 0, st
    for r, sh in zip(waiters, shares):
        assert r["precompiles"] == r["stats"]["inductor_shares"] == len(sh), (r["precompiles"], r["stats"], sh)
        assert r["stats"]["inductor_share_errors"] == 0
        assert not sh or r["stats"]["phases"]["compiles"] == len(sh), r["stats"]["phases"]
    # Same choice, so the same outcome everywhere (the interpreter cannot
    # run Triton's matmul templates: a template choice fails alike).
    assert len({(r["ran"], r.get("digest"), r.get("error")) for r in first}) == 1

    again = _workers(daemon, tmp_path, "gemm", 2, "h")
    keys2, timed2 = _agree(again)
    assert keys2[(kernel, key)]["config"] == entry["config"]
    assert timed2[(kernel, key)] == 0
    assert [r["select_passes"] for r in again] == [0, 0]


def test_a_choice_failed_in_one_process_keeps_the_selection_shared(daemon, tmp_path, torch_ok):
    """Inductor drops the choices that failed to compile in a process
    before ``lookup``. The selection stays keyed by the whole list, so a
    process that lost a choice meets the same key as the others: the
    timing process reports a choice it lost as failed, the others use the
    committed choice, even one they lost themselves (its precompile only
    served benchmarking). A selection already decided precompiles nothing."""
    env = {"DETD_TEST_EXTERN_WINS": "1"}
    first = _workers(daemon, tmp_path, "gemm", 2, "f", env=dict(env, DETD_JOB="first"),
                     per={1: {"DETD_TEST_FAIL_CHOICE": "template"}})
    keys, timed = _agree(first)  # one key for both, though their lists differ
    ((kernel, key), entry), = [(k, e) for k, e in keys.items() if k[0].startswith("inductor::mm@")]
    assert timed[(kernel, key)] == 1 and entry["config"].startswith("extern:mm@"), entry
    cands = entry["candidates"]
    templates = [c for c in cands if c.startswith("triton_mm:")]
    assert templates and all(_keys(r)[(kernel, key)]["candidates"] == cands for r in first)
    assert [r["stats"]["inductor_failed_here"] for r in first] == [0, 1]
    assert f"1 of {len(cands)} choices of {kernel} failed to compile" in first[1]["output"]
    assert templates[-1] in first[1]["output"]
    # The timing process reported what it had: a choice it lost as failed.
    (timer,) = [r for r in first if _keys(r)[(kernel, key)]["timed_here"]]
    tm = _keys(timer)[(kernel, key)]["timings"]
    assert set(tm) == set(cands) and (tm[templates[-1]] == float("inf")) == (timer is first[1]), tm
    for r in first:  # Inductor's own precompile, unless the other process timed it or had decided it
        st = r["stats"]
        skipped, deferred = st["inductor_precompiles_skipped"], st["inductor_precompiles_deferred"]
        assert (r["precompile_fns"], skipped, deferred) in ((1, 0, 0), (0, len(cands), 0), (0, 0, len(cands))), st
        assert r["precompile_fns"] == (r is timer), st
    v = daemon.detctl("verify", "--job", "first")
    assert v.returncode == 0 and "0 divergences" in v.stdout, v.stdout + v.stderr

    # The rerun: decided, so nothing precompiled and nothing timed; the
    # process that lost the committed choice (ATen's mm) uses it all the
    # same, with the same bytes out.
    again = _workers(daemon, tmp_path, "gemm", 2, "a", env=dict(env, DETD_JOB="again"),
                     per={1: {"DETD_TEST_FAIL_CHOICE": "extern"}})
    for r in again:
        assert r["precompile_fns"] == 0 and r["select_passes"] == 0, r
        assert r["stats"]["inductor_precompiles_skipped"] == len(cands), r["stats"]
        assert r["ran"] and _keys(r)[(kernel, key)]["config"] == entry["config"], r.get("error")
    ok, lost = again
    assert ok["digest"] == lost["digest"]
    assert (lost["stats"]["inductor_failed_here"], lost["stats"]["inductor_lost_used"]) == (1, 1), lost["stats"]
    assert ok["stats"]["inductor_lost_used"] == 0
    assert f"the committed choice {entry['config']} of {kernel} failed its precompile" in lost["output"]
    v = daemon.detctl("verify", "--job", "again")
    assert v.returncode == 0 and "0 divergences" in v.stdout, v.stdout + v.stderr


def test_a_selection_claimed_early_whose_pass_never_comes_is_passed_on(daemon, tmp_path, torch_ok):
    """The process that claimed a selection when Inductor was about to
    precompile it, and then never reached ``lookup`` (every choice failed
    to compile there), passes the claim on when Inductor's selection call
    ends: the waiting process is designated at once (not a takeover: the
    first process is still attached), precompiles then what it had
    skipped, and times it."""
    gate = str(tmp_path / "fail")
    cands_env = {"DETD_TEST_EXTERN_WINS": "1"}
    first = _start(daemon, tmp_path, "gemm", 2, "p", 0, dict(cands_env, DETD_TEST_FAIL_CHOICE="all",
                                                             DETD_TEST_FAIL_GATE=gate))
    procs = [first]
    try:
        end = time.monotonic() + GATE_BOUND_S
        while not os.path.exists(gate + ".waiting"):  # it precompiled: it holds the claim
            assert first[0].poll() is None and time.monotonic() < end, first[0].communicate()[0][-3000:]
            time.sleep(0.01)
        assert status(daemon)["counters"]["timing_passes"] == 1
        procs.append(_start(daemon, tmp_path, "gemm", 2, "p", 1, cands_env))
        while status(daemon)["waiters"] < 1:  # the second waits for the first's pass
            assert procs[1][0].poll() is None and time.monotonic() < end, procs[1][0].communicate()[0][-3000:]
            time.sleep(0.01)
        open(gate, "w").close()
        holder, other = _results(daemon, procs)
    finally:
        for p, _ in procs:
            if p.poll() is None:
                p.kill()
    c = status(daemon)["counters"]
    assert c["passes_passed_on"] == 1 and c["takeovers"] == 0, c
    assert holder["stats"]["early_claims"] == 1 and holder["stats"]["early_passed_on"] == 1, holder["stats"]
    assert holder["select_passes"] == 0, holder
    ((kernel, key), entry), = [(k, e) for k, e in _keys(other).items() if k[0].startswith("inductor::mm@")]
    assert entry["timed_here"] and entry["config"].startswith("extern:mm@"), entry
    st = other["stats"]
    n = len(entry["candidates"])
    assert st["inductor_precompiles_deferred"] == n and st["inductor_deferred_compiled"] == n, st
    assert other["precompile_fns"] == 1 and other["select_passes"] >= 1 and other["ran"], other


def test_against_a_daemon_that_cannot_pass_claims_on_nothing_is_claimed_early(daemon, tmp_path, torch_ok):
    """A daemon older than 0.9 cannot pass a claim on, so a claim taken
    ahead of its pass could stay with a process that no longer needs it:
    the ask before the precompile is then a look only. Each process
    precompiles as Inductor does (unless the selection is decided), and
    the selection is still timed once, at lookup."""
    res = _workers(daemon, tmp_path, "gemm", 2, "o", env={"DETD_TEST_NO_PASS_ON": "1", "DETD_TEST_EXTERN_WINS": "1"})
    keys, timed = _agree(res)
    ((kernel, key), entry), = [(k, e) for k, e in keys.items() if k[0].startswith("inductor::mm@")]
    assert timed[(kernel, key)] == 1, timed
    n = len(entry["candidates"])
    for r in res:
        st = r["stats"]
        assert st["early_claims"] == st["early_waits"] == st["inductor_precompiles_deferred"] == 0, st
        assert (r["precompile_fns"], st["inductor_precompiles_skipped"]) in ((1, 0), (0, n)), st
    assert sum(r["precompile_fns"] for r in res) >= 1


def test_auto_mode_lists_inductor_ungoverned(daemon, tmp_path, torch_ok):
    # Inductor imported before detd.install(): patched at install.
    (r,) = _workers(daemon, tmp_path, "fused", 1, "u", env={"DETD_MODE": "auto", "DETD_TEST_IMPORT_FIRST": "1"})
    assert r["ran"] and r["close"]
    keys = _keys(r, governed=False)
    assert keys and all(e["source"] == "local" for e in keys.values())
    st = [a for a in r["autotuners"] if a["kernel"] == "inductor::*"]
    assert st[0]["status"] == "ungoverned" and st[0]["why"] == "mode auto"
    assert r["bench_calls"] > 0  # Inductor timed on its own
    p = daemon.detctl("decisions", "--json")
    assert "inductor::" not in p.stdout


def _graph_files(cache):
    return sorted(p for p in (cache / "fxgraph").rglob("*") if p.is_file())


def test_inductor_caches_do_not_bypass_the_decision(daemon, tmp_path, torch_ok):
    """An ungoverned run fills Inductor's caches (its FX graph cache and
    the local autotune cache of the selection's timings); a governed
    process with the same cache folder passes that graph over and asks
    the daemon. The graph it compiles is saved with its choice, and a
    governed rerun reads it back (no compile, no lookup) only while that
    choice is the daemon's: not against another namespace's store, and
    a graph compiled with a fallback is not saved."""
    cache = tmp_path / "shared-cache"
    wins = {"DETD_TEST_EXTERN_WINS": "1"}
    # (Epilogue fusion by timing, off under detd, is off here too: its
    # benchmark module does not compile for the CPU in torch 2.13.)
    (warm,) = _workers(daemon, tmp_path, "gemm", 1, "w", cache=cache,
                       env=dict(wins, DETD_MODE="auto", TORCHINDUCTOR_BENCHMARK_EPILOGUE_FUSION="0"))
    assert warm["select_passes"] == 1 and warm["settings"]["fx_graph_cache"] is True
    assert warm["ran"] and warm["fxgraph"].get("fxgraph_cache_miss", 0) >= 1 and _graph_files(cache), warm
    (r,) = _workers(daemon, tmp_path, "gemm", 1, "x", env=wins, cache=cache)
    sel = {k: e for k, e in _keys(r).items() if k[0].startswith("inductor::mm@")}
    assert len(sel) == 1 and next(iter(sel.values()))["source"] == "timed"
    assert r["select_passes"] == 1 and r["ran"], r.get("error")
    assert r["stats"]["inductor_graph_cache_hits"] == 0 and r["fxgraph"].get("fxgraph_cache_hit", 0) == 0, r
    saved = _graph_files(cache)
    assert len(saved) == len(_graph_files(cache)) and len(saved) >= 1

    (again,) = _workers(daemon, tmp_path, "gemm", 1, "y", env=wins, cache=cache)
    (sk, entry), = sel.items()
    got = _keys(again)[sk]
    assert again["select_passes"] == 0 and again["ran"] and again["digest"] == r["digest"]
    assert got["config"] == entry["config"] and got["source"] == "timed", got
    assert got["note"] == "from Inductor's FX graph cache" and not got["timed_here"], got
    # The graph's Triton kernels still ask detd at their first launch.
    assert {k: e["config"] for k, e in _keys(again).items()} == {k: e["config"] for k, e in _keys(r).items()}
    assert any(k[0].startswith("inductor::triton_") for k in _keys(again)), list(_keys(again))
    assert again["stats"]["inductor_graph_cache_hits"] >= 1, again["stats"]
    assert again["fxgraph"].get("fxgraph_cache_hit", 0) >= 1, again["fxgraph"]
    (ind,) = [a for a in again["autotuners"] if a["kernel"] == "inductor::*"]
    assert ind["selections"]["seen"] == 0 and ind["graph_cache"] == "checked", ind  # no lookup ran
    assert _graph_files(cache) == saved
    v = daemon.detctl("verify")
    assert v.returncode == 0, v.stdout + v.stderr

    # A saved graph whose choice is not the daemon's (its record edited to
    # another candidate): passed over, compiled, saved anew.
    import pickle

    other_choice, edited = next(c for c in entry["candidates"] if c != entry["config"]), 0
    for path in saved:  # the ungoverned run's entry has no record
        g = pickle.loads(path.read_bytes())
        sels = getattr(g, "_detd_selections", None)
        if sels is not None:
            assert [x[4] for x in sels if x[0] == sk[0]] == [entry["config"]], sels
            g._detd_selections = tuple(x[:4] + (other_choice,) if x[0] == sk[0] else x for x in sels)
            path.write_bytes(pickle.dumps(g))
            edited += 1
    assert edited == 1, saved
    (t,) = _workers(daemon, tmp_path, "gemm", 1, "t", env=wins, cache=cache)
    assert t["stats"]["inductor_graph_cache_refused"] >= 1 and t["stats"]["inductor_graph_cache_hits"] == 0
    assert t["select_passes"] == 0 and _keys(t)[sk]["config"] == entry["config"] and t["digest"] == r["digest"]
    assert len(_graph_files(cache)) == len(saved) + 1

    # Another store's keys (a namespace with nothing decided): passed over.
    (other,) = _workers(daemon, tmp_path, "gemm", 1, "z", env=dict(wins, DETD_NAMESPACE="elsewhere"),
                        cache=cache)
    assert other["select_passes"] == 1 and _keys(other)[sk]["source"] == "timed", _keys(other)[sk]
    assert other["stats"]["inductor_graph_cache_refused"] >= 1 and other["stats"]["inductor_graph_cache_hits"] == 0
    # A fallback choice is compiled in but never saved.
    before = _graph_files(cache)
    (fb,) = _workers(daemon, tmp_path, "gemm", 1, "f", cache=cache,
                     env=dict(wins, DETD_MODE="pinned", DETD_NAMESPACE="nowhere", DETD_ON_MISS="first"))
    assert _keys(fb)[sk]["source"] == "fallback" and fb["select_passes"] == 0, _keys(fb)[sk]
    assert fb["stats"]["inductor_graph_cache_unsaved"] >= 1 and fb["stats"]["inductor_graph_cache_hits"] == 0
    assert _graph_files(cache) == before


def test_a_graph_cache_detd_cannot_check_is_off(daemon, tmp_path, torch_ok):
    """Where Inductor's FxGraphCache lacks what the check wraps, the FX
    graph cache is off while detd governs, and the entry says why."""
    (r,) = _workers(daemon, tmp_path, "fused", 1, "o", env={"DETD_TEST_OLD_GRAPH_CACHE": "1"})
    assert r["ran"] and r["settings"]["fx_graph_cache"] is False, r["settings"]
    (st,) = [a for a in r["autotuners"] if a["kernel"] == "inductor::*"]
    assert st["status"] == "governed" and st["graph_cache"] == "off: Inductor's FxGraphCache lacks _save_graph", st
    assert not any(p.is_file() for p in (tmp_path / "inductor-o0" / "fxgraph").rglob("*"))
    from detd import _graphcache

    assert _graphcache.verdict(None) == (None, "written without detd (no record of its choices)")
    assert _graphcache.verdict((("k", "n", "key", ("a",), 5),)) == (None, "its record of choices is unreadable")
    assert _graphcache.verdict([]) == (None, "its record of choices is unreadable")


# The order of events the check must handle, driven on a stand-in for
# Inductor's FxGraphCache with the same method shapes (two threads
# compiling one graph at once cannot be arranged with the real compile).
_SPANS = r"""
import json, os, threading
from detd import _graphcache as g

class Cache:
    saved = []
    @staticmethod
    def _lookup_graph(key, *a, **kw):
        return None, {}
    @staticmethod
    def _save_graph(key, graph, *a, **kw):
        Cache.saved.append((key, getattr(graph, g.ATTR, None)))
    @classmethod
    def iterate_over_candidates(cls, *a):
        yield from ()

class Graph:
    pass

class Mod:
    FxGraphCache = Cache

assert g.install(Mod, lambda n: True, lambda s, src: None, lambda: True) is None
sel = ("k", "n", "key", ("a", "b"), "a")
out = {}
Cache._lookup_graph("one"); g.met(sel); Cache._save_graph("one", Graph())       # a compile, saved
Cache._lookup_graph("two"); g.met(sel)                                          # raised before its save
Cache._lookup_graph("two"); g.met(sel[:4] + ("b",)); Cache._save_graph("two", Graph())  # begun again
Cache._lookup_graph("three")
t = threading.Thread(target=Cache._lookup_graph, args=("three",)); t.start(); t.join()  # another thread
Cache._save_graph("three", Graph()); Cache._save_graph("three", Graph())
Cache._lookup_graph("four"); g.met(None, "a fallback choice"); Cache._save_graph("four", Graph())
Cache._save_graph("five", Graph())                                              # no lookup seen
Cache._lookup_graph("six")                                                      # open at a fork
pid = os.fork()
if pid == 0:
    os._exit(0 if not g._open else 3)
out["child"] = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
g._known[("k", "key")] = ("a", 1)
from detd import _policy, _process
_process.configure(_policy.parse(environ={}, mode="auto"))                      # a new install()
out["known"] = len(g._known)
out["saved"] = Cache.saved
out["counts"] = g.counts()
print(json.dumps(out))
"""


def test_graph_cache_spans_save_only_a_whole_record(tmp_path):
    """A graph is saved with every selection met from its lookup to its
    save; a compile begun again on its thread starts a new list; one whose
    compile overlapped the same key's in another thread, one with a
    fallback and one whose lookup was not seen are not saved. A forked
    child starts with no compile open; a new install() asks again what
    was verified under the old settings."""
    p = subprocess.run([sys.executable, "-c", _SPANS], capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, PYTHONPATH=os.pathsep.join(
                           [os.path.join(os.path.dirname(os.path.dirname(HERE)), "client", "python"),
                            os.environ.get("PYTHONPATH", "")])))
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    sel = ["k", "n", "key", ["a", "b"], "a"]
    assert out["saved"] == [["one", [sel]], ["two", [sel[:4] + ["b"]]]], out
    assert out["counts"] == {"inductor_graph_cache_hits": 0, "inductor_graph_cache_refused": 0,
                             "inductor_graph_cache_unsaved": 4}, out
    assert out["child"] == 0 and out["known"] == 0, out


def test_unsupported_torch_is_refused(daemon, tmp_path, torch_ok):
    (r,) = _workers(daemon, tmp_path, "fused", 1, "r", env={"DETD_TEST_TORCH_VERSION": "2.9.1"})
    assert "detd: torch 2.9.1 is not supported (detd governs Inductor of torch 2.11 to 2.13)" in r["output"]
    assert r["ran"] and r["close"] and not r["patched"]
    st = [a for a in r["autotuners"] if a["kernel"] == "inductor::*"]
    assert st and st[0]["status"] == "refused" and not st[0]["governed"]
    assert "2.9.1" in st[0]["why"]
    assert not _keys(r)
    assert r["bench_calls"] > 0


def test_search_strings_follow_the_daemons_rule():
    """The client's side of a key that names a search (daemon/core/search.h):
    the descriptor it sends and the configs it accepts as the search's, the
    cases of tests/unit/test_search.c."""
    desc = _canon.search_descriptor("inductor.coordesc", [("XBLOCK", 1, 4096), ("R0_BLOCK", 1, 32768)],
                                    radius=1, all_directions=False)
    assert desc == "search:inductor.coordesc;tune=XBLOCK:1-4096,R0_BLOCK:1-32768;all_directions=False;radius=1"
    assert _canon.is_search(desc) and not _canon.is_search("XBLOCK=1")
    start = "R0_BLOCK=2048,XBLOCK=1,num_warps=16,num_stages=1,num_ctas=1"
    assert _canon.search_values(desc, start, start) == {"R0_BLOCK": 2048, "XBLOCK": 1}
    assert _canon.search_values(desc, start, "R0_BLOCK=4096,XBLOCK=8,num_warps=16,num_stages=1,num_ctas=1") == \
        {"R0_BLOCK": 4096, "XBLOCK": 8}
    for bad in ("R0_BLOCK=4096,XBLOCK=8,num_warps=8,num_stages=1,num_ctas=1",  # num_warps is not tuned here
                "R0_BLOCK=65536,XBLOCK=1,num_warps=16,num_stages=1,num_ctas=1",  # over its range
                "R0_BLOCK=02048,XBLOCK=1,num_warps=16,num_stages=1,num_ctas=1",  # not canonical
                "R0_BLOCK=\u00b2,XBLOCK=1,num_warps=16,num_stages=1,num_ctas=1",  # a digit, not ASCII
                "R0_BLOCK=2048,XBLOCK=1,num_warps=16,num_stages=1",  # a part fewer
                desc):
        assert _canon.search_values(desc, start, bad) is None, bad
    with pytest.raises(ValueError):
        _canon.search_descriptor("m", [("X", 1, 2)], note="a;b")


def test_refusal_and_strings():
    from detd import _inductor

    assert _inductor.refusal("2.13.0+cpu") is None
    assert _inductor.refusal("2.11.0+cu128") is None
    assert "not supported" in _inductor.refusal("2.10.0")
    assert "not supported" in _inductor.refusal("3.0.0")
    assert "not supported" in _inductor.refusal("nightly")

    class Extern:
        def __init__(self, h):
            self.h, self.choice = h, type("C", (), {"name": "mm"})()

        def hash_key(self):
            return self.h

    Extern.__name__ = "ExternKernelCaller"

    class TritonTemplateCaller:
        description = "BLOCK_K=16, BLOCK_M=32,\nnum_warps=4"

        def hash_key(self):
            return "triton_mm-abc"

    a, b = _inductor.choice_string(Extern("mm-1")), _inductor.choice_string(Extern("mm-2"))
    assert a.startswith("extern:mm@") and a != b
    t = _inductor.choice_string(TritonTemplateCaller())
    assert t == "triton_mm:BLOCK_K=16,BLOCK_M=32, num_warps=4"


def test_gpu_script_summary():
    """The GPU proof's table logic (tests/gpu/run_inductor.py) on made-up
    process results: disagreements, timing passes, identical losses."""
    sys.path.insert(0, os.path.join(os.path.dirname(HERE), "gpu"))
    import run_inductor

    def proc(choice, timed, losses):
        return dict(choices={"k1 key": choice, "k2 key": "B"}, timed=timed, losses=losses, grads=["g"],
                    step_ms=[1.0, 2.0, 3.0], compile_s=5.0)

    s = run_inductor.summarize([proc("A", ["k1 key"], ["1"]), proc("A", [], ["1"]), proc("C", ["k2 key"], ["2"])])
    assert s["keys"] == 2 and s["disagree"] == 1 and s["timing_passes"] == 2
    assert s["timed"]["k1 key"] == 1 and not s["losses_identical"] and s["grads_identical"]
    assert s["step_ms"] == 2.0


def test_gpu_step_script_summary():
    """The GPU step-time comparison (tests/gpu/run_inductor_step.py) on the
    five rounds docs/inductor.md quotes, with made-up choices and profiles: the
    ratios, the default's spread, the keys chosen differently, and a
    check that fails when a later detd process timed a key."""
    sys.path.insert(0, os.path.join(os.path.dirname(HERE), "gpu"))
    import run_inductor_step as ris

    sel = 'inductor::mm@1 [s:"select",s:"x"]'
    red = 'inductor::triton_red_1@2 [s:"coordesc",s:"y"]'

    def proc(red_cfg, us, losses=("1",)):
        return dict(choices={sel: "extern:mm@a", red: red_cfg}, losses=list(losses),
                    kernels_us={"gemm": [6, 9000.0], "triton_red_1": [1, us]})

    ms = [(10.121, 10.258), (10.177, 10.079), (10.109, 10.107), (10.015, 10.175), (10.179, 10.132)]
    rows = [(i + 1, "default/detd", d, x, 70.0, 30.0) for i, (d, x) in enumerate(ms)]
    default = [proc("R0_BLOCK=2048", 284.0) for _ in ms]
    detd = [proc("R0_BLOCK=1024", 320.0) for _ in ms]
    m = ris.summarize(rows, default, detd, [17, 0, 0, 0, 0])
    assert round(m["ratio"], 4) == 1.0011 and round(m["mean_ratio"], 4) == 1.0030
    assert round((m["default_spread"] - 1) * 100, 2) == 1.64
    assert m["selections"] == {sel: "extern:mm@a"} and m["same_selection"] == {sel: 5}
    assert m["other_keys"] == 1 and m["differ"] == {red: ["R0_BLOCK=2048"] * 5}
    assert m["kernels_detd"]["triton_red_1"] - m["kernels_default"]["triton_red_1"] == 36.0
    assert all(m["checks"].values()), m["checks"]

    bad = ris.summarize(rows, default, detd[:4] + [proc("R0_BLOCK=1024", 320.0, ("2",))], [17, 0, 3, 0, 0])
    assert not bad["checks"]["later detd processes timed nothing"]
    assert not bad["checks"]["detd losses bit-identical in every round"]
    slow = ris.summarize([(1, "default/detd", 10.0, 10.2, 70.0, 70.0)], default[:1], detd[:1], [17])
    assert not slow["checks"]["detd step time within 1% of default (median over rounds)"]


def test_gpu_coordesc_script_summary():
    """The GPU run of large searches (tests/gpu/run_coordesc.py) on made-up
    process results: the rows, the overrides that make "detd before", and
    checks that fail when the rerun timed or a process gave a search up."""
    sys.path.insert(0, os.path.join(os.path.dirname(HERE), "gpu"))
    import run_coordesc as rc

    ident = 'inductor::triton_red_fused__log_softmax_0@ab [s:"coordesc",s:"reduction"]'
    start, found = "R0_BLOCK=2048,XBLOCK=1,num_warps=16", "R0_BLOCK=4096,XBLOCK=1,num_warps=16"
    cands = [start, "search:inductor.coordesc;tune=XBLOCK:1-4096,R0_BLOCK:1-32768,num_warps:1-32;radius=1"]
    assert rc.kernel_name(ident) == "triton_red_fused__log_softmax_0"
    assert rc.overrides({ident: cands}) == {"inductor::triton_red_fused__log_softmax_0@ab": start}

    def proc(config, ms, us, timed=()):
        return dict(choices={ident: config}, searches={ident: cands}, timed=list(timed), losses=["1"],
                    step_ms=[ms] * 3, kernels_us={"triton_red_fused__log_softmax_0": [1, us], "gemm": [3, 900.0]})

    runs = {"default": proc(found, 10.0, 300.0), "detd before": proc(start, 10.2, 400.0),
            "detd run 1": proc(found, 10.0, 300.0, [ident]), "detd rerun": proc(found, 10.0, 300.0)}
    rows, checks = rc.summarize(runs, [1, 0], ["", "detd: pid 1 is timing ..."], 0)
    assert [r["variant"] for r in rows] == list(rc.VARIANTS)
    assert rows[1]["searched_us"] == 400.0 and round(rows[1]["vs_default"], 3) == 1.02
    assert rows[3]["configs"] == {ident: found}
    assert all(checks.values()), checks
    runs["detd rerun"]["timed"] = [ident]
    _, checks = rc.summarize(runs, [1, 1], ["detd: ...: not searched, the committed config ... is kept"], 0)
    failed = {k for k, ok in checks.items() if not ok}
    assert failed == {"the rerun timed nothing (daemon: 0 passes)", "no process said 'not searched'"}, failed


def test_gpu_step_script_runs_one_process_through_run_procs(tmp_path, monkeypatch):
    """run_inductor_step.run_one starts one rank-0 process through
    run_inductor.run_procs, with --dims, --profile-steps, its own Inductor
    cache folder and the extra environment; a failing process ends the
    script naming its tag. inductor_train.py needs CUDA: a stand-in that
    records its arguments and environment takes its place."""
    sys.path.insert(0, os.path.join(os.path.dirname(HERE), "gpu"))
    import run_inductor
    import run_inductor_step as ris

    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "inductor_train.py").write_text(
        "import json, os, sys\n"
        "a = sys.argv[1:]\n"
        "if os.environ.get('FAIL'): sys.exit(5)\n"
        "json.dump({'argv': a, 'rank': os.environ['RANK'], 'world': os.environ['WORLD_SIZE'],\n"
        "           'cache': os.environ['TORCHINDUCTOR_CACHE_DIR'], 'x': os.environ.get('X')},\n"
        "          open(a[a.index('--out') + 1], 'w'))\n")
    monkeypatch.setattr(run_inductor, "HERE", str(fake))
    r = ris.run_one("coordinated", str(tmp_path), "detd0", 40, "64,128,32,16", {"X": "1"}, 10)
    argv = r["argv"]
    assert argv[argv.index("--mode") + 1] == "coordinated" and argv[argv.index("--steps") + 1] == "40"
    assert argv[argv.index("--dims") + 1] == "64,128,32,16"
    assert argv[argv.index("--profile-steps") + 1] == "10"
    assert (r["rank"], r["world"], r["x"]) == ("0", "1", "1")
    assert r["cache"] == str(tmp_path / "inductor_detd0_r0")
    # without profiling, no --profile-steps at all (the 8-process proofs)
    rs = run_inductor.run_procs(2, "auto", str(tmp_path), "dflt", 5)
    assert [x["rank"] for x in rs] == ["0", "1"] and all("--profile-steps" not in x["argv"] for x in rs)
    with pytest.raises(SystemExit, match="bad: process exited 5"):
        ris.run_one("auto", str(tmp_path), "bad", 5, "", {"FAIL": "1"}, 0)


def test_noting_a_selections_choices_never_fails_inductors_precompile(monkeypatch):
    """detd's wrapper of ``make_precompile_fn`` (the whole list noted, a
    decided selection's precompile skipped): an error of its own is a
    warning, once, and Inductor's precompile runs as without detd."""
    from detd import _inductor

    calls = []
    monkeypatch.setitem(_inductor._orig, "precompile_fn",
                        lambda self, choices, name, key, *a, **kw: calls.append((name, key)) or "inductor's own")

    def broken(choice):
        raise ValueError("a choice detd cannot name")

    monkeypatch.setattr(_inductor, "choice_string", broken)
    with pytest.warns(RuntimeWarning, match=r"noting the choices of selection bmm before Inductor's precompile "
                                            r"failed \(ValueError: a choice detd cannot name\); it precompiles"):
        assert _inductor._patched_precompile_fn(object(), [object()], "bmm", "k1") == "inductor's own"
    assert _inductor._patched_precompile_fn(object(), [object()], "bmm", "k2") == "inductor's own"  # warned once
    assert calls == [("bmm", "k1"), ("bmm", "k2")]


def test_a_selection_share_that_fails_is_counted_and_logged_once(caplog):
    """A waiting process's share of a selection (``_SelectShare``, at the
    ``precompile()`` boundary of Inductor's choices; the test above runs
    the real one): an extern choice or one without ``precompile`` is
    skipped, a compiled one counted and listed, a failing one counted and
    logged once (a warning, then debug lines), never raised."""
    import logging

    from detd import _inductor

    class Template:
        description = "BLOCK_M=64, num_warps=4"

        def __init__(self, error=None):
            self.error = error

        def hash_key(self):
            return "triton_mm-0123"

        def precompile(self):
            if self.error:
                raise RuntimeError(self.error)

    class ExternKernelCaller(Template):
        pass

    class Subgraph:
        def hash_key(self):
            return "subgraph-0123"

    before = _inductor.counts()
    share = _inductor._SelectShare("inductor::mm@1")
    with caplog.at_level(logging.DEBUG, logger="detd"):
        assert share(ExternKernelCaller()) is False and share(Subgraph()) is False
        assert share(Template()) is True
        assert share(Template("out of resources: shared memory, required: 262144")) is True
        assert share(Template("second failure")) is True
    after = _inductor.counts()
    assert after["inductor_shares"] - before["inductor_shares"] == 1
    assert after["inductor_share_errors"] - before["inductor_share_errors"] == 2
    assert share.done == ["triton_mm:BLOCK_M=64,num_warps=4"]
    lines = [(r.levelno, r.getMessage()) for r in caplog.records if "for the timing process failed" in r.getMessage()]
    assert [lv for lv, _ in lines] == [logging.WARNING if before["inductor_share_errors"] == 0 else logging.DEBUG,
                                       logging.DEBUG], lines
    assert ("choice triton_mm:BLOCK_M=64,num_warps=4 of inductor::mm@1 for the timing process failed: "
            "RuntimeError: out of resources: shared memory, required: 262144") in lines[0][1], lines


def test_a_selection_names_each_choice_once(monkeypatch):
    """A selection's choices are named (``choice_string``) when
    ``make_precompile_fn`` notes the whole list; ``lookup`` then finds
    each live choice's string there by identity and names only a choice
    the precompile never saw. A choice Inductor dropped after a failed
    compile keeps the selection keyed by the whole list."""
    from detd import _inductor

    class Template:
        failed = False

        def __init__(self, block):
            self.description = f"BLOCK_M={block}, num_warps=4"

        def hash_key(self):
            return "triton_mm-0123"

    named = []
    real = _inductor.choice_string
    monkeypatch.setattr(_inductor, "choice_string", lambda c: named.append(c) or real(c))
    a, b, c = Template(32), Template(64), Template(128)
    assert _inductor._before_precompile(None, [a, b, c], "mm-once", "k", (), {}) is False  # detd not active: noted only
    assert named == [a, b, c]
    named.clear()
    c.failed = True  # Inductor dropped it: failed to compile here
    cands, live, lost = _inductor._full_list("mm-once", "k", [b, a])
    assert named == [] and cands == tuple(real(x) for x in (a, b, c)), (named, cands)
    assert live == {real(b): b, real(a): a} and lost == {real(c): c}
    d = Template(256)  # never noted (another subset): named here, and keyed by what is live
    cands, live, lost = _inductor._full_list("mm-once", "k", [a, d])
    assert named == [d] and cands == (real(a), real(d)) and lost == {}, (named, cands)
