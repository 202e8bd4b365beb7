"""End-to-end, real Triton (CPU interpreter) and a real detd: every rank,
the timing rank included, launches the committed config, never its own
fastest; verify fails on a rank that launched another config; a decided
key skips Triton's timing, its autotune disk-cache lookup and its print.

A phase that depends on another process is driven by an event (a file the
test creates, the daemon's status), never by a fixed sleep.
"""

import json
import os
import subprocess
import sys
import time

import pytest
import triton.runtime.autotuner  # noqa: F401 (which Triton this is)

import prestart
from conftest import HERE, run_workers
from test_e2e import N_CANDIDATES, assert_ok, expected_winner, status

# Runs on every Triton release (run_matrix.sh): it drives the hook through Triton's own API.
pytestmark = pytest.mark.triton_release

KERNEL = "rowsum_kernels:row_sum_kernel"
KEY_256 = '[i:256,s:"torch.float32",s:"torch.float32"]'
DEADLINE = 120  # seconds, for any one phase on a loaded machine


def poll(what, pred, timeout=DEADLINE, every=0.05):
    end = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        assert time.monotonic() < end, f"timed out after {timeout}s waiting for {what}"
        time.sleep(every)


def cfg(block):
    return f"BLOCK={block},num_warps=4,num_stages=1,num_ctas=1"


def entry(block):
    return {"kwargs": {"BLOCK": block}, "num_warps": 4, "num_stages": 1, "num_ctas": 1, "maxnreg": None}


def start_worker(daemon, tmp_path, tag, rank, extra_env=None, args=("--shapes", "256")):
    out = tmp_path / f"{tag}.json"
    env = daemon.env(RANK=rank, LOCAL_RANK=rank, WORLD_SIZE=4, DETD_ARCH="sm90",
                     DETD_TEST_COUNTS=str(tmp_path / f"{tag}.counts"), **(extra_env or {}))
    p = prestart.popen([sys.executable, os.path.join(HERE, "worker.py"), str(out), *args], env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return p, out


def finish(p, out):
    text, _ = p.communicate(timeout=DEADLINE * 2)
    assert out.exists(), f"worker exited {p.returncode} without result: {text[-3000:]}"
    r = json.loads(out.read_text())
    r["returncode"], r["output"] = p.returncode, text
    return r


def test_timing_rank_launches_the_committed_config_not_its_own_fastest(daemon, tmp_path):
    """Rank 0 is designated and held in its timing pass; meanwhile another
    config (not rank 0's fastest) is committed for the key (an imported
    table answers ranks 1-3). Rank 0 then finishes timing and reports: its
    report comes back superseded, and it launches the committed config like
    everyone else, with the same bytes."""
    own_fastest = expected_winner(0)
    committed = cfg(64)
    assert committed != own_fastest
    gate = tmp_path / "gate"
    p0, out0 = start_worker(daemon, tmp_path, "r0", 0,
                            {"DETD_TEST_BENCH_GATE": str(gate), "DETD_TEST_RECORD_REPORTS": "1"})
    try:
        poll("rank 0 designated and in its timing pass",
             lambda: p0.poll() is not None or (os.path.exists(str(gate) + ".waiting")
                                               and status(daemon)["open_claims"] == 1))
        assert p0.poll() is None, p0.stdout.read()
        table = tmp_path / "commit.json"
        table.write_text(json.dumps({"arch": "sm90", "kernels": {KERNEL: {KEY_256: entry(64)}}}))
        r = daemon.detctl("table", "import", str(table))
        assert r.returncode == 0, r.stdout + r.stderr
        others = run_workers(daemon, 3, tmp_path, args=["--shapes", "256"], env={"DETD_ARCH": "sm90"},
                             per_rank_env=lambda i: {"RANK": i + 1, "LOCAL_RANK": i + 1, "WORLD_SIZE": 4},
                             tag="o")
        assert_ok(others)
        for o in others:
            row = o["shapes"]["256"]
            assert row["bench_calls"] == 0 and row["config"] == committed, row
        gate.touch()
        r0 = finish(p0, out0)
    finally:
        gate.touch()
        if p0.poll() is None:
            p0.kill()
            p0.wait()
    assert_ok([r0])
    row0 = r0["shapes"]["256"]
    # Rank 0 really timed (it would have picked its own fastest) ...
    assert row0["bench_calls"] == N_CANDIDATES, row0
    assert r0["autotuners"][0]["keys"][0]["timed_here"] is True
    timings = r0["autotuners"][0]["keys"][0]["timings"]
    assert min(timings, key=timings.get) == own_fastest, timings
    # ... its report was superseded by the committed config ...
    assert r0["reports"] == [{"config": committed, "superseded": True, "source": 4}], r0["reports"]
    # ... and it launched the committed config, the same bytes as everyone.
    rows = [row0] + [o["shapes"]["256"] for o in others]
    assert [x["config"] for x in rows] == [committed] * 4
    assert [x["best_config"] for x in rows] == [committed] * 4
    assert len({x["sha"] for x in rows}) == 1
    # The daemon saw every rank launch it, and verify agrees.
    dec = json.loads(daemon.detctl("decisions", "--json").stdout)["decisions"]
    assert [(d["config"], d["source"]) for d in dec] == [(committed, "import")], dec
    v = daemon.detctl("verify", "--json")
    assert v.returncode == 0, v.stdout + v.stderr
    vj = json.loads(v.stdout)
    assert vj["ok"] is True and vj["divergences"] == [], vj
    assert vj["observations"] == 4, vj
    c = status(daemon)["counters"]
    assert c["timing_passes"] == 1 and c["decisions_timed"] == 0, c


def test_verify_fails_on_a_rank_that_launched_another_config(daemon, tmp_path):
    """Ranks governed by the hook agree; one process (chaos) launches a
    config of its own: verify exits 1 naming the kernel and that config."""
    res = run_workers(daemon, 2, tmp_path, args=["--shapes", "256"], tag="ok", env={"DETD_ARCH": "sm90"})
    assert_ok(res)
    decided = res[0]["shapes"]["256"]["config"]
    assert daemon.detctl("verify").returncode == 0
    bad, out = start_worker(daemon, tmp_path, "chaos", 1, {"DETD_CHAOS": "1"})
    rb = finish(bad, out)
    assert_ok([rb])
    used = rb["shapes"]["256"]["config"]
    assert used != decided and rb["shapes"]["256"]["bench_calls"] == 0
    v = daemon.detctl("verify")
    assert v.returncode == 1, v.stdout + v.stderr
    assert KERNEL in v.stdout and used in v.stdout and decided in v.stdout, v.stdout
    assert "ranks disagree" in v.stdout, v.stdout


def test_decided_key_skips_timing_disk_cache_and_print(daemon, tmp_path):
    """docs/python.md: "A decided key skips timing, the disk cache and the print".
    Control first: Triton on its own (auto mode) times, looks the key up in
    its autotune disk cache and prints its autotune line; then, with the key
    decided, governed processes do none of it and launch the decision."""
    env = {"TRITON_PRINT_AUTOTUNING": "1", "DETD_TEST_DISK_CACHE_PROBE": "1"}
    ctl = run_workers(daemon, 1, tmp_path, args=["--shapes", "256"], tag="ctl", env={"DETD_MODE": "auto", **env})
    assert_ok(ctl)
    # Triton 3.3 has no autotune disk cache (no check_disk_cache): nothing to skip there.
    has_disk_cache = ctl[0]["disk_cache_probe"]
    assert has_disk_cache == hasattr(triton.runtime.autotuner.Autotuner, "check_disk_cache")
    assert ctl[0]["shapes"]["256"]["bench_calls"] == N_CANDIDATES
    assert len(ctl[0]["disk_cache_calls"]) == (1 if has_disk_cache else 0), ctl[0]["disk_cache_calls"]
    assert "finished after" in ctl[0]["output"], ctl[0]["output"]

    first = run_workers(daemon, 1, tmp_path, args=["--shapes", "256"], tag="dec")
    assert_ok(first)
    decided = first[0]["shapes"]["256"]["config"]
    res = run_workers(daemon, 2, tmp_path, args=["--shapes", "256"], tag="gov", env=env)
    assert_ok(res)
    for r in res:
        row = r["shapes"]["256"]
        assert row["bench_calls"] == 0 and row["config"] == decided, row
        assert r["disk_cache_probe"] is has_disk_cache and r["disk_cache_calls"] == [], r
        assert "finished after" not in r["output"] and "best config selected" not in r["output"], r["output"]
