"""Helion's autotuner governed (client/python/detd/_helion.py): real
Helion 1.5.1 kernels compiled to Triton and run by Triton's CPU
interpreter, two processes against a real daemon. The search itself is
the worker's CPU-timed one (helion_worker.py says why); Helion's default
search runs on the GPU in tests/gpu/run_helion.py."""

import json

import pytest

from conftest import require_module, run_workers

WORKER = "helion_worker.py"


def test_one_search_for_the_job_same_config_same_bytes_and_rerun_searches_nothing(daemon, tmp_path):
    require_module("helion")
    # Run 1: two processes meet the same kernel and specialization at once;
    # the daemon designates one to search, the other waits for its commit.
    run1 = run_workers(daemon, 2, tmp_path, script=WORKER, tag="a")
    for r in run1:
        assert r["returncode"] == 0, r["output"]
    assert sum(r["searches"] for r in run1) == 1, [(r["searches"], r["output"]) for r in run1]
    assert run1[0]["config"] == run1[1]["config"], [r["config"] for r in run1]
    assert run1[0]["digest"] == run1[1]["digest"]
    entries = [[a for a in r["autotuners"] if a["kind"] == "helion"] for r in run1]
    for e in entries:
        assert len(e) == 1 and e[0]["governed"] and e[0]["kernel"].startswith("helion::"), e
        (k,) = e[0]["keys"]
        assert k["source"] == "timed" and k["key"].startswith("spec="), k
        assert k["candidates"][1].startswith("search:helion.cpu_search;tune="), k
    assert sorted(e[0]["keys"][0]["timed_here"] for e in entries) == [False, True]
    assert entries[0][0]["keys"][0]["string"] == entries[1][0]["keys"][0]["string"]
    # How it was timed: the search that ran (the worker's), its effort
    # (the timing lock is off on a CPU: DETD_TIMING_LOCK=auto).
    (d,) = [d for d in json.loads(daemon.detctl("decisions", "--json").stdout)["decisions"]
            if d["kernel"].startswith("helion::")]
    b = d["timing"]["benchmarker"]
    assert b["name"] == "__main__:CpuSearch" and b["timing_lock"] is False, d
    assert b["return_mode"].startswith("the best config of Helion's search (autotune_effort="), d
    # Run 2 (a rerun, one process: each costs Helion's import, ~10 s of
    # CPU): the decision store answers; nothing is searched.
    run2 = run_workers(daemon, 1, tmp_path, script=WORKER, tag="b")
    for r in run2:
        assert r["returncode"] == 0, r["output"]
        assert r["searches"] == 0 and r["config"] == run1[0]["config"], (r["searches"], r["output"])
        assert r["digest"] == run1[0]["digest"]
        assert r["not_final"] == [], r["not_final"]
    # Pinned, in a namespace with no decision, on_miss=cheapest: Helion's
    # default config, searched by nobody; the key is not final, so
    # detd.wait_final() and the check before a CUDA graph capture see it.
    (pin,) = run_workers(daemon, 1, tmp_path, script=WORKER, tag="p",
                         env={"DETD_MODE": "pinned", "DETD_ON_MISS": "cheapest", "DETD_NAMESPACE": "unseen"})
    assert pin["returncode"] == 0 and pin["searches"] == 0, pin["output"]
    (e,) = [a for a in pin["autotuners"] if a["kind"] == "helion"]
    (k,) = e["keys"]
    assert k["source"] == "fallback" and k["string"] == k["candidates"][0], k
    assert [(x["kernel"], x["key"], x["state"], x["config"]) for x in pin["not_final"]] == \
        [(e["kernel"], k["key"], "fallback", k["string"])], pin["not_final"]


def test_helion_setting_is_checked():
    import detd

    with pytest.raises(ValueError, match="helion"):
        detd.install(mode="auto", helion="maybe")
    assert detd.settings().helion == "on"
