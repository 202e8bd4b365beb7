"""Autotuner subclasses that choose through their own cache and never call
Autotuner.run (flag-gems' LibTuner; the stand-in under fake_flag_gems/,
whose run is LibTuner's): governed through that cache. On its own each
process picks its own winner and keeps it in an on-disk table that answers
the next run; under detd every process launches the one decided config,
one process times it, the on-disk table is neither read nor written, and
a rerun times nothing. Left ungoverned (DETD_CACHE_TUNERS without it), its
choices are observed and verify fails when the processes disagree. Real
Triton (CPU interpreter), the real daemon."""
import json
import os
import subprocess
import sys

import prestart
from conftest import HERE

KEYS = "64,96"


def start(daemon, tmp_path, tag, n=3, with_detd=True, env=None):
    procs = []
    for r in range(n):
        out = tmp_path / f"{tag}{r}.json"
        e = daemon.env(RANK=r, WORLD_SIZE=n, FAKE_FLAGGEMS_DB=str(tmp_path / f"{tag}-gems{r}.json"), **(env or {}))
        args = [sys.executable, os.path.join(HERE, "libtuner_worker.py"), str(out), KEYS]
        procs.append((prestart.popen(args + ([] if with_detd else ["--no-detd"]), env=e, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True), out))
    return procs


def results(daemon, procs):
    out = []
    for p, path in procs:
        text, _ = p.communicate(timeout=300)
        assert p.returncode == 0 and path.exists(), text[-3000:] + daemon.log()
        r = json.loads(path.read_text())
        assert "error" not in r, r["error"] + text[-3000:]
        out.append(r)
    return out


def configs(results, key):
    return [r["keys"][key]["config"] for r in results]


def test_libtuner_is_governed_through_its_cache(daemon, tmp_path):
    keys = KEYS.split(",")
    # flag-gems on its own: each rank times every candidate and keeps its
    # own winner in its on-disk table (rank r's timer prefers another BLOCK).
    # Beside it, two processes whose DETD_CACHE_TUNERS leaves LibTuner out:
    # it is listed as ungoverned, with the config each chose on its own,
    # and verify fails on their disagreement, naming the kernel and key.
    alone = start(daemon, tmp_path, "alone", with_detd=False)
    off = start(daemon, tmp_path, "off", n=2, env={"DETD_CACHE_TUNERS": "other.module.Tuner", "DETD_JOB": "off"})
    alone, offs = results(daemon, alone), results(daemon, off)
    for key in keys:
        assert len(set(configs(alone, key))) == 3, configs(alone, key)
        assert [r["keys"][key]["bench_calls"] for r in alone] == [4, 4, 4]
    for off in offs:
        (tuner,) = off["autotuners"]
        assert [(k["source"], k["governed"], k["config"].split(",")[0]) for k in tuner["keys"]] == \
            [("ungoverned", False, off["keys"][key]["config"]) for key in keys], tuner
        assert "LibTuner overrides run without calling Autotuner.run" in tuner["why"], tuner
    assert configs(offs, keys[0])[0] != configs(offs, keys[0])[1]
    v = daemon.detctl("verify", "--job", "off", "--json")
    assert v.returncode == 1, v.stdout + v.stderr
    div = json.loads(v.stdout)["divergences"]
    assert sorted(d["key"].split(",")[0] for d in div) == [f"[i:{k}" for k in keys], div
    assert all(d["kernel"].startswith("rowsum_kernels:row_sum_kernel@") and d["reason"] == "ranks disagree" for d in div)

    # Under detd, with the tables of the run above that would answer each
    # rank differently: set aside; one pass per key, one config, the same bits.
    for r in range(3):
        os.rename(tmp_path / f"alone-gems{r}.json", tmp_path / f"first-gems{r}.json")
    tables = {r: (tmp_path / f"first-gems{r}.json").read_bytes() for r in range(3)}
    first = results(daemon, start(daemon, tmp_path, "first", env={"DETD_JOB": "first"}))
    for key in keys:
        assert len(set(configs(first, key))) == 1, configs(first, key)
        assert len({r["keys"][key]["sha"] for r in first}) == 1
        assert sorted(r["keys"][key]["bench_calls"] for r in first) == [0, 0, 4]
    assert {r: (tmp_path / f"first-gems{r}.json").read_bytes() for r in range(3)} == tables
    for r in first:
        (tuner,) = r["autotuners"]
        assert tuner["kernel"].startswith("rowsum_kernels:row_sum_kernel@"), tuner
        assert all(k["governed"] and k["source"] in ("timed", "decided") for k in tuner["keys"]), tuner
    listed = json.loads(daemon.detctl("decisions", "--json").stdout)["decisions"]
    decided = {d["key"].split(",")[0]: d["config"].split(",")[0] for d in listed if "row_sum_kernel" in d["kernel"]}
    assert decided == {f"[i:{key}": configs(first, key)[0] for key in keys}, listed

    v = daemon.detctl("verify", "--job", "first")
    assert v.returncode == 0 and "0 divergences" in v.stdout, v.stdout + v.stderr

    # The rerun times nothing and launches the same configs.
    again = results(daemon, start(daemon, tmp_path, "again"))
    for key in keys:
        assert configs(again, key) == configs(first, key)
        assert [r["keys"][key]["bench_calls"] for r in again] == [0, 0, 0]
