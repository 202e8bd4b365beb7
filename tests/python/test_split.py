"""The benchmarks of a timing pass split across GPUs (DETD_SPLIT_BENCH=1,
detd._split), with a real daemon, real Triton (CPU interpreter) and
several processes (coldstart_worker.py).

This machine has no GPU, so each process names its device with
DETD_BENCH_DEVICE and a slower GPU is a worker whose measurements are
scaled (CS_SCALE). What is checked is the protocol and the arithmetic:
who benchmarks which candidate, that every candidate is measured once,
that a helper's figures are put on the timing rank's scale through the
reference candidate, that a dead helper costs only its share, and that
every process launches the one committed config.
"""

import json

from test_coldstart import cfg, counter, finish, ok, start, status, wait_file, wait_until

BLOCKS = (16, 32, 64, 128, 256, 512)
ENV = dict(CS_BLOCKS=",".join(str(b) for b in BLOCKS), DETD_SPLIT_BENCH="1")


def decision(daemon):
    out = daemon.detctl("decisions", "--json")
    assert out.returncode == 0, out.stderr
    (row,) = json.loads(out.stdout)["decisions"]
    return row


def test_helpers_on_other_gpus_benchmark_a_share_on_their_scale(daemon, tmp_path):
    """Rank 0 (device d0) times the key; ranks 1 and 2 on devices d1 and
    d2, twice as slow (CS_SCALE=2), are given benchmark shares. Every
    candidate but the reference (BLOCK=16) is measured exactly once in the
    whole job, the reference by every process. BLOCK=512 is the fastest
    (0.5 ms on d0): a helper measures it at 1.0 and the reference at 2.0,
    so on d0's scale 0.5; read unscaled it would tie with the reference
    (1.0) and lose to the smaller string. The committed config is 512,
    with the scaled figure, in every process."""
    t = json.dumps({"512": [[0.5, 0.5, 0.5]]})
    gate = str(tmp_path / "go")
    marks = [str(tmp_path / f"in-pass-{i}") for i in range(3)]
    timer = start(daemon, tmp_path, "r0", 0, CS_BENCH_SLEEP="0.3", CS_IN_PASS=marks[0], CS_GATE=gate,
                  CS_TIMINGS=t, DETD_BENCH_DEVICE="d0", **ENV)
    wait_file(marks[0])  # designated, split open, held at its first measurement
    helpers = []
    for i in (1, 2):
        # Each helper starts once the split is open, and the timing rank
        # starts benchmarking once both helpers are (their reference).
        helpers.append(start(daemon, tmp_path, f"r{i}", i, CS_BENCH_SLEEP="0.3", CS_IN_PASS=marks[i],
                             CS_SCALE="2", CS_TIMINGS=t, DETD_BENCH_DEVICE=f"d{i}", **ENV))
    for m in marks[1:]:
        wait_file(m)
    open(gate, "w").close()
    r0 = ok(daemon, timer)
    rs = [ok(daemon, h) for h in helpers]

    for r in [r0] + rs:
        assert r["config"] == cfg(512), r
    # Measured: the reference by everyone, every other candidate once.
    counts = {}
    for r in [r0] + rs:
        for b, n in r["measured"].items():
            counts[b] = counts.get(b, 0) + n
        assert r["measured"].get("16") == 1, r
    assert counts == {"16": 3, **{str(b): 1 for b in BLOCKS[1:]}}, [r["measured"] for r in [r0] + rs]

    (k0,) = r0["keys"]
    split = k0["split"]
    taken = {i: set(r["keys"][0]["split"]["taken"]) for i, r in enumerate(rs, 1)}
    assert taken[1] and taken[2] and not taken[1] & taken[2], taken
    assert set(split["given"]) == taken[1] | taken[2], (split, taken)
    for i, r in enumerate(rs, 1):
        assert set(r["measured"]) - {"16"} == {c.split(",")[0].split("=")[1] for c in taken[i]}, r
        assert {split["given"][c] for c in taken[i]} == {f"d{i}"}, split
        assert r["keys"][0]["split"]["reference"] == cfg(16)
    assert sorted(split["scale"].values()) == [0.5, 0.5], split
    assert split["reclaimed"] == [], split
    # The holder's report: helpers' figures on its scale.
    for c in split["given"]:
        b = int(c.split(",")[0].split("=")[1])
        want = 0.5 if b == 512 else 1.0 + BLOCKS.index(b)
        assert k0["timings"][c] == [want] * 3, (c, k0["timings"])
    row = decision(daemon)
    assert row["config"] == cfg(512)
    st = status(daemon)
    assert counter(st, "timing_passes") == 1, st
    assert counter(st, "bench_helpers") == 2, st
    assert counter(st, "bench_given") == len(BLOCKS) - 1 - (len(r0["measured"]) - 1), st


def test_a_helper_on_the_timing_ranks_gpu_only_compiles(daemon, tmp_path):
    """A waiting rank on the timing rank's own device gets a compile
    share, not a benchmark share: benchmarks on one GPU at once would
    measure each other."""
    marker, gate = str(tmp_path / "in-pass"), str(tmp_path / "go")
    timer = start(daemon, tmp_path, "r0", 0, CS_BENCH_SLEEP="0.1", CS_IN_PASS=marker, CS_GATE=gate,
                  DETD_BENCH_DEVICE="d0", **ENV)
    wait_file(marker)
    helper = start(daemon, tmp_path, "r1", 1, DETD_BENCH_DEVICE="d0", **ENV)
    wait_until(lambda: counter(status(daemon), "pass_shares") >= 1)  # it is helping: go on
    open(gate, "w").close()
    r1, r0 = ok(daemon, helper), ok(daemon, timer)
    assert r1["config"] == r0["config"] and r1["measured"] == {}, r1
    assert "split" not in r1["keys"][0] and r1["keys"][0].get("shared"), r1["keys"]
    assert r0["measured"] == {str(b): 1 for b in BLOCKS}, r0
    assert r0["keys"][0]["split"]["given"] == {}, r0["keys"]
    assert counter(status(daemon), "bench_helpers") == 0


def test_split_is_off_by_default(daemon, tmp_path):
    """Without DETD_SPLIT_BENCH a rank on another device compiles only."""
    env = dict(ENV)
    del env["DETD_SPLIT_BENCH"]
    marker, gate = str(tmp_path / "in-pass"), str(tmp_path / "go")
    timer = start(daemon, tmp_path, "r0", 0, CS_BENCH_SLEEP="0.1", CS_IN_PASS=marker, CS_GATE=gate,
                  DETD_BENCH_DEVICE="d0", **env)
    wait_file(marker)
    helper = start(daemon, tmp_path, "r1", 1, DETD_BENCH_DEVICE="d1", **env)
    wait_until(lambda: counter(status(daemon), "pass_shares") >= 1)  # asked while the pass runs
    open(gate, "w").close()
    r1, r0 = ok(daemon, helper), ok(daemon, timer)
    assert r1["measured"] == {} and r0["measured"] == {str(b): 1 for b in BLOCKS}, (r0, r1)
    assert "split" not in r0["keys"][0] and "split" not in r1["keys"][0]
    assert counter(status(daemon), "bench_helpers") == 0


def test_a_dead_helper_costs_only_its_share(daemon, tmp_path):
    """A helper that dies benchmarking the candidate it took (BLOCK=512,
    the last): the timing rank finds it taken and not given, waits a
    bounded time, takes it back and benchmarks it itself; one pass decides
    and a later rank gets the decision."""
    gate, marker = str(tmp_path / "dying"), str(tmp_path / "in-pass")
    timer = start(daemon, tmp_path, "r0", 0, CS_BENCH_SLEEP="0.2", CS_GATE=gate, CS_IN_PASS=marker,
                  DETD_BENCH_DEVICE="d0", **ENV)
    wait_file(marker)
    rc, _, _ = finish(daemon, start(daemon, tmp_path, "r1", 1, CS_DIE_ON="512", CS_DYING=gate,
                                    DETD_BENCH_DEVICE="d1", **ENV))
    assert rc == 9
    r0 = ok(daemon, timer)
    (k0,) = r0["keys"]
    assert k0["split"]["reclaimed"] == [cfg(512)] and k0["split"]["given"] == {}, k0
    assert r0["measured"] == {str(b): 1 for b in BLOCKS}, r0
    # Waited for the dead helper within its budget (twice its own mean time
    # per candidate, each at least 0.2 s here), then one last look at the
    # split (a Share call, 10 s deadline).
    from detd import _split

    budget = k0["split"]["budget_s"]
    assert budget >= _split.WAIT_FACTOR * 0.2, k0["split"]
    assert k0["split"]["waited_s"] <= budget + _split.POLL_S + 10.0, k0["split"]
    r2 = ok(daemon, start(daemon, tmp_path, "r2", 2, DETD_BENCH_DEVICE="d2", **ENV))
    assert r2["config"] == r0["config"] and r2["measured"] == {}, r2
    st = status(daemon)
    assert counter(st, "timing_passes") == 1 and counter(st, "bench_reclaimed") == 1, st


def test_bad_split_setting_is_named():
    import pytest

    from detd import _split

    with pytest.raises(ValueError, match="DETD_SPLIT_BENCH='maybe'"):
        _split.parse({"DETD_SPLIT_BENCH": "maybe"})
    assert _split.parse({}) is False  # off until measured to help
    assert _split.parse({"DETD_SPLIT_BENCH": "1"}) is True
    assert _split.device({"DETD_BENCH_DEVICE": " gpu-x "}) == "gpu-x"
