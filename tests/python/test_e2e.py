"""End-to-end: real Triton (CPU interpreter), a real detd daemon, several
processes. Every test asserts outcomes: configs, timing-pass counts, bytes.

A timing pass of the test kernel is 4 do_bench calls (one per BLOCK).
The kernel's do_bench ranks the candidates differently on each rank (see
rowsum_kernels.py), so ranks left alone disagree: the auto-mode control test
shows it, which is what makes the agreement tests able to fail.
"""

import json
import os
import subprocess
import sys

import pytest

import prestart
from conftest import HERE, run_workers, status

# The tests marked triton_release run on every Triton release
# (run_matrix.sh): their outcome depends on Triton's own Autotuner, do_bench
# and cache as the hook meets them (a run without detd, a timing pass, a
# fork, threads, record mode). The others test detd's policies (pinned,
# overrides, scope, chaos, verify, detd-run, takeover, tables), which do
# not change with the release: the primary release runs them.

N_CANDIDATES = 4
SHAPES = "256,512"


def expected_winner(rank):
    # rowsum_kernels.fake_do_bench: ms = 1 + (idx + rank) % 4, lowest wins.
    idx = (-rank) % N_CANDIDATES
    return f"BLOCK={(16, 32, 64, 128)[idx]},num_warps=4,num_stages=1,num_ctas=1"


def assert_ok(results):
    for r in results:
        assert r["returncode"] == 0 and r["error"] is None, r["output"]
        for shape, v in r["shapes"].items():
            assert "error" not in v, (shape, v, r["output"])


def by_shape(results, shape):
    return [r["shapes"][shape] for r in results]


@pytest.mark.triton_release
def test_control_auto_mode_ranks_disagree(daemon, tmp_path):
    """Without governance the ranks pick different winners and produce
    different bits (the problem detd exists for)."""
    res = run_workers(daemon, 4, tmp_path, args=["--shapes", "256"], env={"DETD_MODE": "auto"})
    assert_ok(res)
    rows = by_shape(res, "256")
    assert [r["config"] for r in rows] == [expected_winner(i) for i in range(4)]
    assert len({r["sha"] for r in rows}) == 4
    assert all(r["bench_calls"] == N_CANDIDATES for r in rows)  # everyone timed
    # Ungoverned observations never fail verify.
    v = daemon.detctl("verify")
    assert v.returncode == 0, v.stdout + v.stderr
    listing = res[0]["autotuners"]
    assert listing[0]["name"] == "rowsum_kernels:row_sum_kernel" and listing[0]["governed"] is False
    assert listing[0]["keys"][0]["source"] == "local" and listing[0]["keys"][0]["timed_here"] is True


@pytest.mark.triton_release
def test_coordinated_one_pass_identical_bytes_and_rerun(daemon, tmp_path):
    res = run_workers(daemon, 6, tmp_path, args=["--shapes", SHAPES])
    assert_ok(res)
    for shape in SHAPES.split(","):
        rows = by_shape(res, shape)
        calls = [r["bench_calls"] for r in rows]
        # Exactly one timing pass per key across all processes.
        assert sum(calls) == N_CANDIDATES, calls
        assert sorted(calls) == [0] * 5 + [N_CANDIDATES], calls
        timer = calls.index(N_CANDIDATES)
        # Everyone uses the config the daemon committed from that pass: the
        # timer's own fastest (lowest median).
        assert {r["config"] for r in rows} == {expected_winner(timer)}
        assert len({r["sha"] for r in rows}) == 1
        srcs = {k["source"] for r in res for t in r["autotuners"] for k in t["keys"] if k["key"].startswith(
            f"[i:{shape},")}
        assert srcs == {"timed"}, srcs
    first = {s: res[0]["shapes"][s] for s in SHAPES.split(",")}
    counters = status(daemon)["counters"]
    assert counters["timing_passes"] == 2 and counters["decisions_timed"] == 2, counters
    v = daemon.detctl("verify")
    assert v.returncode == 0, v.stdout + v.stderr
    dec = daemon.detctl("decisions", "--json")
    assert dec.returncode == 0, dec.stderr
    assert "rowsum_kernels:row_sum_kernel@" in dec.stdout

    # A second run against the same store (daemon restarted): no timing at
    # all, the same bytes.
    daemon.restart()
    res2 = run_workers(daemon, 6, tmp_path, args=["--shapes", SHAPES], tag="second")
    assert_ok(res2)
    for shape in SHAPES.split(","):
        rows = by_shape(res2, shape)
        assert [r["bench_calls"] for r in rows] == [0] * 6
        assert {r["config"] for r in rows} == {first[shape]["config"]}
        assert {r["sha"] for r in rows} == {first[shape]["sha"]}


def test_pinned_never_times(daemon, tmp_path):
    # Nothing decided yet: pinned + on_miss=error raises, naming kernel and key.
    res = run_workers(daemon, 2, tmp_path, args=["--shapes", "256"], env={"DETD_MODE": "pinned"}, tag="p")
    for r in res:
        err = r["shapes"]["256"]["error"]
        assert err.startswith("MissError"), err
        assert "rowsum_kernels:row_sum_kernel@" in err and '[i:256,s:"torch.float32",s:"torch.float32"]' in err
    assert all(r["bench_calls_total"] == 0 for r in res)
    # on_miss=first: the first config, observed as a fallback, no timing.
    res = run_workers(daemon, 2, tmp_path, args=["--shapes", "256"],
                      env={"DETD_MODE": "pinned", "DETD_ON_MISS": "first"}, tag="f")
    assert_ok(res)
    assert {r["shapes"]["256"]["config"] for r in res} == {"BLOCK=16,num_warps=4,num_stages=1,num_ctas=1"}
    assert all(r["bench_calls_total"] == 0 for r in res)
    assert res[0]["autotuners"][0]["keys"][0]["source"] == "fallback"
    # on_miss=cheapest: smallest tile.
    res = run_workers(daemon, 1, tmp_path, args=["--shapes", "256"],
                      env={"DETD_MODE": "pinned", "DETD_ON_MISS": "cheapest"}, tag="c")
    assert_ok(res)
    assert res[0]["shapes"]["256"]["config"] == "BLOCK=16,num_warps=4,num_stages=1,num_ctas=1"
    # Once decided by a coordinated run, pinned uses the decision, untimed.
    co = run_workers(daemon, 1, tmp_path, args=["--shapes", "256"], per_rank_env=lambda i: {"RANK": 2}, tag="co")
    assert_ok(co)
    assert co[0]["shapes"]["256"]["bench_calls"] == N_CANDIDATES
    decided = co[0]["shapes"]["256"]["config"]
    assert decided == expected_winner(2)
    res = run_workers(daemon, 3, tmp_path, args=["--shapes", "256"], env={"DETD_MODE": "pinned"}, tag="p2")
    assert_ok(res)
    assert all(r["bench_calls_total"] == 0 for r in res)
    assert {r["shapes"]["256"]["config"] for r in res} == {decided}
    assert {r["shapes"]["256"]["sha"] for r in res} == {co[0]["shapes"]["256"]["sha"]}


def test_unreachable_daemon_is_a_miss(daemon, tmp_path):
    res = run_workers(daemon, 1, tmp_path, args=["--shapes", "256"],
                      env={"DETD_SOCKET": str(tmp_path / "nobody.sock")})
    err = res[0]["shapes"]["256"]["error"]
    assert err.startswith("MissError") and "rowsum_kernels:row_sum_kernel@" in err and "[i:256," in err, err
    assert res[0]["bench_calls_total"] == 0


def test_overrides(daemon, tmp_path):
    live = "BLOCK=64,num_warps=4,num_stages=1,num_ctas=1"
    res = run_workers(daemon, 2, tmp_path, args=["--shapes", "256"],
                      env={"DETD_OVERRIDES": json.dumps({"rowsum_kernels:row_sum_kernel": live})}, tag="o")
    assert_ok(res)
    assert {r["shapes"]["256"]["config"] for r in res} == {live}
    assert all(r["bench_calls_total"] == 0 for r in res)
    assert res[0]["autotuners"][0]["keys"][0]["source"] == "override"
    # An override naming no live candidate is a miss, never an invalid launch.
    dead = "BLOCK=48,num_warps=4,num_stages=1,num_ctas=1"
    res = run_workers(daemon, 1, tmp_path, args=["--shapes", "256"],
                      env={"DETD_OVERRIDES": json.dumps({"rowsum_kernels:row_sum_kernel": dead})}, tag="d")
    err = res[0]["shapes"]["256"]["error"]
    assert err.startswith("MissError") and "matches no live candidate" in err, err
    res = run_workers(daemon, 1, tmp_path, args=["--shapes", "256"],
                      env={"DETD_OVERRIDES": json.dumps({"rowsum_kernels:row_sum_kernel": dead}),
                           "DETD_ON_MISS": "first"}, tag="d2")
    assert_ok(res)
    assert res[0]["shapes"]["256"]["config"] == "BLOCK=16,num_warps=4,num_stages=1,num_ctas=1"


def test_scope_and_exempt_leave_kernels_to_triton(daemon, tmp_path):
    for env in ({"DETD_SCOPE": "some.other.package"}, {"DETD_EXEMPT": "rowsum_kernels:row_sum_*"}):
        res = run_workers(daemon, 2, tmp_path, args=["--shapes", "256"], env=env, tag="s")
        assert_ok(res)
        assert [r["shapes"]["256"]["bench_calls"] for r in res] == [N_CANDIDATES] * 2
        assert [r["shapes"]["256"]["config"] for r in res] == [expected_winner(0), expected_winner(1)]
        t = res[0]["autotuners"][0]
        assert t["governed"] is False and t["keys"][0]["source"] == "local"


@pytest.mark.triton_release
def test_record_mode_every_rank_times(daemon, tmp_path):
    res = run_workers(daemon, 2, tmp_path, args=["--shapes", "256"], env={"DETD_MODE": "record"}, tag="r")
    assert_ok(res)
    assert [r["shapes"]["256"]["bench_calls"] for r in res] == [N_CANDIDATES] * 2
    k = res[1]["autotuners"][0]["keys"][0]
    assert k["timed_here"] and len(k["timings"]) == N_CANDIDATES and k["config"] == expected_winner(1)


def test_chaos_makes_verify_fail(daemon, tmp_path):
    res = run_workers(daemon, 3, tmp_path, args=["--shapes", "256"], env={"DETD_CHAOS": "1"})
    assert_ok(res)
    configs = [r["shapes"]["256"]["config"] for r in res]
    assert len(set(configs)) == 3, configs
    assert all(r["autotuners"][0]["keys"][0]["chaos"] for r in res)
    v = daemon.detctl("verify")
    assert v.returncode == 1, (v.returncode, v.stdout, v.stderr)
    # detd.verify(strict=True) raises; non-strict returns the divergences.
    code = ("import detd, sys\n"
            "r = detd.verify()\n"
            "assert r['ok'] is False and r['divergences'], r\n"
            "try:\n"
            "    detd.verify(strict=True)\n"
            "except detd.DivergenceError as e:\n"
            "    print('raised:', e); sys.exit(0)\n"
            "sys.exit(1)\n")
    p = subprocess.run([sys.executable, "-c", code], env=daemon.env(), stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=120)
    assert p.returncode == 0, p.stdout
    assert "rowsum_kernels:row_sum_kernel" in p.stdout


def test_verify_passes_without_chaos(daemon, tmp_path):
    res = run_workers(daemon, 3, tmp_path, args=["--shapes", "256"])
    assert_ok(res)
    code = "import detd\nr = detd.verify(strict=True)\nassert r['ok'] is True, r\nprint('ok')\n"
    p = subprocess.run([sys.executable, "-c", code], env=daemon.env(), stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=120)
    assert p.returncode == 0 and "ok" in p.stdout, p.stdout


def test_verify_before_any_launch(daemon):
    # Nothing observed yet (step 0 of a job): detd.verify() passes by
    # default; asked to require keys, it fails as detctl verify does.
    code = ("import detd\n"
            "r = detd.verify(strict=True)\n"
            "assert r['ok'] is True and r.get('keys_checked', 0) == 0, r\n"
            "try:\n"
            "    detd.verify(strict=True, allow_empty=False)\n"
            "except detd.DivergenceError:\n"
            "    print('empty refused')\n")
    p = subprocess.run([sys.executable, "-c", code], env=daemon.env(), stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=120)
    assert p.returncode == 0 and "empty refused" in p.stdout, p.stdout


@pytest.mark.triton_release
def test_fork_child_gets_same_decisions(daemon, tmp_path):
    res = run_workers(daemon, 1, tmp_path, args=["--fork", "--shapes", "256,512"], tag="fk")
    assert_ok(res)
    r = res[0]
    child = r["child"]
    assert child["pid"] != r["pid"]
    # The key the parent decided: the child reuses it, no timing.
    assert child["256/child"]["config"] == r["shapes"]["256"]["config"]
    assert child["256/child"]["sha"] == r["shapes"]["256"]["sha"]
    assert child["256/child"]["bench_calls"] == 0
    # A new key met first in the child: the child (own connection) times it
    # once; the parent then gets the same decision without timing.
    assert child["512/child"]["bench_calls"] == N_CANDIDATES
    assert r["shapes"]["512"]["bench_calls"] == 0
    assert r["shapes"]["512"]["config"] == child["512/child"]["config"]
    assert r["shapes"]["512"]["sha"] == child["512/child"]["sha"]
    # Another process agrees with both.
    other = run_workers(daemon, 1, tmp_path, args=["--shapes", "256,512"], tag="fo")
    assert_ok(other)
    for s in ("256", "512"):
        assert other[0]["shapes"][s]["sha"] == r["shapes"][s]["sha"]
        assert other[0]["shapes"][s]["bench_calls"] == 0


@pytest.mark.triton_release
def test_threads_one_timing_pass(daemon, tmp_path):
    res = run_workers(daemon, 1, tmp_path, args=["--threads", "8", "--shapes", "256"], tag="th")
    assert_ok(res)
    rows = list(res[0]["shapes"].values())
    assert len(rows) == 8
    assert res[0]["bench_calls_total"] == N_CANDIDATES
    assert len({v["sha"] for v in rows}) == 1 and len({v["config"] for v in rows}) == 1


def test_detd_run_unmodified_script(daemon, tmp_path):
    script = tmp_path / "train.py"
    script.write_text(
        "import sys, hashlib, os\n"
        f"sys.path.insert(0, {HERE!r})\n"
        "import rowsum_kernels as rk, detd\n"
        "assert detd.installed() and detd.settings().mode == 'coordinated'\n"
        "out = rk.row_sum(rk.make_input(rows=4, n=256, seed=256))\n"
        "print('argv', sys.argv[1:], 'sha', hashlib.sha256(out.numpy().tobytes()).hexdigest())\n")
    p = subprocess.run([sys.executable, "-m", "detd.run", str(script), "--lr", "3"], env=daemon.env(RANK=0),
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
    assert p.returncode == 0, p.stdout
    assert "argv ['--lr', '3']" in p.stdout
    # An invalid setting stops the run before the script, naming the setting.
    p = subprocess.run([sys.executable, "-m", "detd.run", str(script)], env=daemon.env(DETD_ON_MISS="sometimes"),
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
    assert p.returncode == 2 and "on_miss" in p.stdout and "DETD_ON_MISS" in p.stdout, p.stdout


def test_designated_rank_dies_next_waiter_times(daemon, tmp_path):
    """The designated process dies during its timing pass while another
    waits for that key: the waiter is designated in its place (takeover),
    times once, and the decision is its own fastest. The death comes once
    the daemon shows the waiter queued, never after a fixed time."""
    import time

    die = tmp_path / "die"
    dying = prestart.popen([sys.executable, os.path.join(HERE, "worker.py"), str(tmp_path / "dead.json"),
                            "--shapes", "256"], env=daemon.env(RANK=0, DETD_TEST_DIE_WHEN=str(die)),
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    survivor = None
    try:
        deadline = time.time() + 120
        while not (os.path.exists(str(die) + ".waiting") and status(daemon)["open_claims"] == 1):
            assert time.time() < deadline and dying.poll() is None, "the first process was never designated"
            time.sleep(0.05)
        out = tmp_path / "survivor.json"
        survivor = prestart.popen([sys.executable, os.path.join(HERE, "worker.py"), str(out), "--shapes", "256"],
                                  env=daemon.env(RANK=3), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  text=True)
        while status(daemon)["waiters"] != 1:
            assert time.time() < deadline and survivor.poll() is None, "the second process never waited"
            time.sleep(0.05)
        die.touch()
        assert dying.wait(120) == 9, dying.stdout.read()
        text, _ = survivor.communicate(timeout=300)
        assert out.exists(), text
        res = [json.loads(out.read_text())]
        res[0]["returncode"], res[0]["output"] = survivor.returncode, text
    finally:
        die.touch()
        for p in (dying, survivor):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()
    assert_ok(res)
    row = res[0]["shapes"]["256"]
    assert row["bench_calls"] == N_CANDIDATES
    assert row["config"] == expected_winner(3)
    counters = status(daemon)["counters"]
    assert counters["takeovers"] == 1 and counters["decisions_timed"] == 1, counters


def test_preloaded_table_answers_every_key_without_timing(tmp_path):
    """A --tables directory answers every key: shape 256 through the
    Megatron-form key the hook sends (bare function name, N=256|dtypes),
    shape 512 through detd's canonical key. No timing pass anywhere, every
    process launches the table's config, and the decisions say table."""
    import shutil
    import tempfile

    from conftest import Daemon, _require_build

    _require_build()
    root = tempfile.mkdtemp(prefix="detd-py-", dir="/tmp")
    tdir = os.path.join(root, "tables")
    os.makedirs(tdir)
    entry = {"kwargs": {"BLOCK": 64}, "num_warps": 4, "num_stages": 1, "num_ctas": 1, "maxnreg": None}
    entry512 = dict(entry, kwargs={"BLOCK": 32})
    with open(os.path.join(tdir, "sm90.json"), "w") as f:
        json.dump({"arch": "sm90", "kernels": {
            "row_sum_kernel": {"N=256|torch.float32|torch.float32": entry},
            "rowsum_kernels:row_sum_kernel": {'[i:512,s:"torch.float32",s:"torch.float32"]': entry512},
        }}, f)
    d = Daemon(root, ["--tables", tdir]).start()
    try:
        res = run_workers(d, 4, tmp_path, args=["--shapes", SHAPES], env={"DETD_ARCH": "sm90"})
        assert_ok(res)
        want = {"256": "BLOCK=64,num_warps=4,num_stages=1,num_ctas=1",
                "512": "BLOCK=32,num_warps=4,num_stages=1,num_ctas=1"}
        for shape in SHAPES.split(","):
            rows = by_shape(res, shape)
            assert [r["bench_calls"] for r in rows] == [0] * 4
            assert {r["config"] for r in rows} == {want[shape]}
            assert len({r["sha"] for r in rows}) == 1
        srcs = {k["source"] for r in res for t in r["autotuners"] for k in t["keys"]}
        assert srcs == {"table"}, srcs
        counters = status(d)["counters"]
        assert counters["timing_passes"] == 0 and counters["decisions_table"] == 2, counters
        assert counters["table_hits"] == 2, counters
        dec = json.loads(d.detctl("decisions", "--json").stdout)["decisions"]
        assert {x["source"] for x in dec} == {"table"}
        assert {x["table_file"] for x in dec} == {os.path.join(tdir, "sm90.json")}
    finally:
        d.stop()
        shutil.rmtree(root, ignore_errors=True)
