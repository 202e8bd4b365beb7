"""The figures tests/gpu/run_coldstart.py derives from what its processes
wrote: the compile chain of compiles made alone (``--quiet-chain``), and
the run-1 samples printed under a kernel-time row over 1.01x."""

import json
import os
import sys

from conftest import HERE

sys.path.insert(0, os.path.join(HERE, "..", "gpu"))

import run_coldstart  # noqa: E402


def test_quiet_chain_sums_each_passes_slowest_compile():
    got = run_coldstart.quiet_chain([
        ["k1", [0.5, 2.5, 1.0]],
        ["k2", []],  # its binaries came from an earlier pass: nothing compiled
        ["k1", [0.25]],
    ])
    assert got["passes"] == 3
    assert got["compiles"] == 4
    assert got["work"] == 4.25
    assert got["chain"] == 2.75
    assert got["per_pass"] == [["k1", 2.5, 3], ["k2", 0.0, 0], ["k1", 0.25, 1]]


def test_run1_samples_of_both_configs_of_a_miss():
    doc = json.dumps({"decisions": [
        {"kernel": "pkg.mod:kern@ab12", "config": "B=64", "timings": [
            {"config": "B=64", "ms": [0.0627, 0.0620]}, {"config": "B=32", "ms": [0.0700]}]},
        {"kernel": "pkg.mod:kern@ab12", "config": "B=32", "timings": [
            {"config": "B=64", "ms": [0.9]}, {"config": "B=32", "ms": [0.8]}]},  # chose another config
        {"kernel": "pkg.mod:other@cd34", "config": "B=64", "timings": [{"config": "B=64", "ms": [1.0]}]},
    ]})
    row = {"entry": "pkg.mod:kern|(256,)", "detd": "B=64", "fresh": "B=128"}
    assert run_coldstart.run1_samples(doc, row) == ["run 1, detd: 0.0627 0.0620", "run 1, fresh: not measured"]
    row["fresh"] = "B=32"
    assert run_coldstart.run1_samples(doc, row) == ["run 1, detd: 0.0627 0.0620", "run 1, fresh: 0.0700"]
    assert run_coldstart.run1_samples(doc, dict(row, detd="B=16")) == [
        "run-1 samples: no decision of this kernel chose that config"]
    assert run_coldstart.run1_samples("not json", row) == ["run-1 samples: detctl decisions gave no list"]
