"""detd_autotune() end to end: real daemons on a unix socket, several
processes of native_driver (C) and native_cpp (the C++ header) calling it
on the same keys, each with a deterministic CPU timer (no GPU here).

Timing work is counted across processes: every timer call appends
"pid key index" to one log file.
"""
import collections
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from conftest import BUILD, Daemon, counter, requires  # noqa: E402

DRIVER = BUILD / "tests" / "native_driver"
CPP = BUILD / "tests" / "native_cpp"
KERNEL = "native::tests::rowsum@v1"
N_CANDS = 4  # native_driver's default --blocks 64,128,256,512
DEADLINE = 60

pytestmark = requires(DRIVER.exists(), f"{DRIVER} is not built (cmake --build ... --target native_driver)")


def start(d, *args, env=None):
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.Popen([str(DRIVER), "--socket", d.socket, "--kernel", KERNEL, *map(str, args)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=e)


def finish(p, want_rc=0):
    out, err = p.communicate(timeout=DEADLINE)
    assert p.returncode == want_rc, (p.returncode, out, err)
    return parse(out)


def parse(out):
    """{key: {field: value}} from RESULT / ERROR lines."""
    res = {}
    for line in out.splitlines():
        kind, _, rest = line.partition(" ")
        if kind not in ("RESULT", "ERROR"):
            continue
        fields = {"kind": kind}
        if kind == "ERROR":
            head, _, msg = rest.partition(" msg=")
            for f in head.split():
                k, _, v = f.partition("=")
                fields[k] = v
            fields["msg"] = msg
            fields["key"] = head.split()[0].partition("=")[2]
        else:
            for f in rest.split(" "):
                k, _, v = f.partition("=")
                fields[k] = v
        res[fields["key"]] = fields
    return res


def timer_log(path):
    """[(pid, key, index)] of every timer call."""
    if not path.exists():
        return []
    return [(int(p), k, int(i)) for p, k, i in (l.split() for l in path.read_text().splitlines())]


def decisions(d):
    return json.loads(d.detctl("decisions", "--json", check=True).stdout)["decisions"]


def poll(what, cond, timeout=DEADLINE):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def test_one_timing_pass_per_key_every_process_agrees_and_a_rerun_times_nothing(tmpdir_short):
    procs, keys = 6, 4
    log = tmpdir_short / "timer.log"
    d = Daemon(tmpdir_short).start()
    try:
        # --skew r: each process's own fastest candidate is r % 4, so only
        # the daemon's decision can make them agree.
        ps = [start(d, "--keys", keys, "--skew", r, "--log", log, "--sleep-ms", 40) for r in range(procs)]
        results = [finish(p) for p in ps]
        calls = timer_log(log)
        by_key = collections.defaultdict(list)
        for pid, key, idx in calls:
            by_key[key].append((pid, idx))
        assert sorted(by_key) == [f"n={k}" for k in range(keys)], calls
        for key, rows in by_key.items():
            assert len({pid for pid, _ in rows}) == 1, (key, rows)  # one process timed it
            assert sorted(idx for _, idx in rows) == list(range(N_CANDS)), (key, rows)  # each candidate once
        pid_of = {p.pid: r for r, p in enumerate(ps)}
        for k in range(keys):
            key = f"n={k}"
            got = [r[key] for r in results]
            assert all(g["kind"] == "RESULT" for g in got), got
            assert len({g["index"] for g in got}) == 1, got  # every process the same candidate
            assert len({g["digest"] for g in got}) == 1, got  # and the same output bits
            assert sum(g["timed_here"] == "1" for g in got) == 1, got
            # The winner rule: the timing process's fastest (its rank % 4).
            timer_rank = pid_of[by_key[key][0][0]]
            assert int(got[0]["index"]) == timer_rank % N_CANDS, (got, timer_rank)
            assert all(g["source"] == "timed" and g["observe_rc"] == "0" for g in got), got
        first = {key: results[0][key]["index"] for key in results[0]}
        # Each decision says how it was timed: the caller's timer, the
        # driver's warmup and reps (launch counts).
        dec = json.loads(d.detctl("decisions", "--json").stdout)["decisions"]
        assert len(dec) == keys, dec
        for row in dec:
            assert row["timing"]["benchmarker"] == {
                "name": "detd_autotune:timer", "warmup": 1.0, "rep": 5.0,
                "return_mode": "median of per-launch samples; warmup and rep count launches",
                "cuda_graphs": False, "timing_lock": False}, row
        st = d.status()
        assert counter(st, "timing_passes") == keys and counter(st, "reports") == keys, st
        assert st["decisions"] == keys and st["open_claims"] == 0, st
        # The launches were observed: verify sees every process agreeing.
        v = d.detctl("verify", "--json")
        assert v.returncode == 0, v.stdout + v.stderr
        doc = json.loads(v.stdout)
        assert "native" in v.stdout and KERNEL in v.stdout, doc
        assert d.stop() == 0

        # Rerun against the same state directory: nothing is timed.
        d = Daemon(tmpdir_short).start()
        before = len(calls)
        ps = [start(d, "--keys", keys, "--skew", r + 1, "--log", log) for r in range(procs)]
        for res in (finish(p) for p in ps):
            for key, g in res.items():
                assert g["index"] == first[key] and g["timed_here"] == "0" and g["source"] == "timed", g
        assert len(timer_log(log)) == before
        st = d.status()
        assert counter(st, "timing_passes") == 0 and counter(st, "decide_calls") == procs * keys, st
    finally:
        d.stop()


def test_a_failing_candidate_is_reported_failed_and_never_wins(tmpdir_short):
    d = Daemon(tmpdir_short).start()
    try:
        # Candidates 0 and 2 fail to launch; 0 would be the fastest.
        res = finish(start(d, "--ms", "1,5,2,3", "--fail", "0,2"))["n=0"]
        assert res["kind"] == "RESULT" and res["index"] == "3" and res["n_failed"] == "2", res
        (dec,) = decisions(d)
        assert dec["kernel"] == KERNEL and dec["config"] == "BLOCK=512", dec
        t = {row["config"]: row for row in dec["timings"]}
        assert t["BLOCK=64"]["failed"] and t["BLOCK=64"]["ms"] == [], t
        assert t["BLOCK=256"]["failed"] and t["BLOCK=256"]["ms"] == [], t
        assert not t["BLOCK=128"]["failed"] and len(t["BLOCK=128"]["ms"]) == 5, t
    finally:
        d.stop()


def test_every_candidate_failing_gives_every_process_enocand(tmpdir_short):
    log = tmpdir_short / "timer.log"
    d = Daemon(tmpdir_short).start()
    try:
        ps = [start(d, "--fail", "0,1,2,3", "--log", log, "--sleep-ms", 150) for _ in range(4)]
        poll("the timing pass and 3 waiters", lambda: log.exists() and d.status()["waiters"] == 3)
        results = [finish(p, want_rc=3)["n=0"] for p in ps]
        assert all(r["kind"] == "ERROR" and r["rc"] == "DETD_ENOCAND" for r in results), results
        timers = [r for r in results if "failed in this timing pass" in r["msg"]]
        assert len(timers) == 1, results  # the timing process names its own failure
        assert "candidates[0] 'BLOCK=64': the timer failed" in timers[0]["msg"], timers
        others = [r for r in results if r is not timers[0]]
        assert all("no candidate has a valid timing" in r["msg"] for r in others), others
        assert len({pid for pid, _, _ in timer_log(log)}) == 1
        # A later process gets the same error, and times nothing.
        n = len(timer_log(log))
        late = finish(start(d, "--fail", "0,1,2,3", "--log", log), want_rc=3)["n=0"]
        assert late["rc"] == "DETD_ENOCAND" and "no candidate has a valid timing" in late["msg"], late
        assert len(timer_log(log)) == n
        st = d.status()
        assert counter(st, "timing_passes") == 1 and st["decisions"] == 0, st
    finally:
        d.stop()


def test_no_gpu_and_no_timer_is_a_clear_error_before_asking(tmpdir_short):
    d = Daemon(tmpdir_short).start()
    try:
        res = finish(start(d, "--timer", "cuda", env={"DETD_CUDA_LIBRARY": "/nonexistent/libcuda.so.1"}),
                     want_rc=3)["n=0"]
        assert res["rc"] == "ENODEV", res
        assert "cannot load $DETD_CUDA_LIBRARY '/nonexistent/libcuda.so.1'" in res["msg"], res
        assert "options.timer" in res["msg"], res
        if not os.path.exists("/dev/nvidiactl"):  # this machine: no driver, no GPU
            env = {k: v for k, v in os.environ.items() if k != "DETD_CUDA_LIBRARY"}
            p = subprocess.Popen([str(DRIVER), "--socket", d.socket, "--kernel", KERNEL, "--timer", "cuda"],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
            res = finish(p, want_rc=3)["n=0"]
            assert res["rc"] == "ENODEV" and "no CUDA" in res["msg"], res
        st = d.status()
        assert counter(st, "decide_calls") == 0 and st["open_claims"] == 0, st  # nothing was asked
    finally:
        d.stop()


def test_no_claim_on_an_undecided_key_is_a_miss(tmpdir_short):
    log = tmpdir_short / "timer.log"
    d = Daemon(tmpdir_short).start()
    try:
        res = finish(start(d, "--no-claim", "--log", log), want_rc=3)["n=0"]
        assert res["rc"] == "DETD_ENOTFOUND" and "none stored and none in the tables" in res["msg"], res
        assert timer_log(log) == []
        # Once decided, a pinned process gets the decision.
        assert finish(start(d, "--ms", "4,3,2,1"))["n=0"]["index"] == "3"
        assert finish(start(d, "--no-claim", "--log", log))["n=0"]["index"] == "3"
    finally:
        d.stop()


def test_a_dead_timing_process_is_taken_over(tmpdir_short):
    log = tmpdir_short / "timer.log"
    d = Daemon(tmpdir_short).start()
    try:
        hung = start(d, "--log", log, "--sleep-ms", 60000)
        poll("the first timer call", lambda: len(timer_log(log)) == 1)
        waiter = start(d, "--log", log, "--ms", "3,1,2,4")
        poll("a waiter", lambda: d.status()["waiters"] == 1)
        hung.send_signal(signal.SIGKILL)
        hung.communicate(timeout=DEADLINE)
        res = finish(waiter)["n=0"]
        assert res["timed_here"] == "1" and res["takeover"] == "1" and res["index"] == "1", res
        assert counter(d.status(), "takeovers") == 1
    finally:
        d.stop()


def test_a_pass_outlasting_the_deadline_loses_its_claim_and_uses_the_decision(tmpdir_short):
    log = tmpdir_short / "timer.log"
    d = Daemon(tmpdir_short, ["--pass-timeout-ms", "1500"]).start()
    try:
        slow = start(d, "--log", log, "--sleep-ms", 800, "--ms", "1,2,3,4")  # 4 x 0.8 s > 1.5 s
        poll("the first timer call", lambda: len(timer_log(log)) >= 1)
        fast = start(d, "--log", log, "--ms", "4,3,2,1")
        r_fast = finish(fast)["n=0"]
        r_slow = finish(slow)["n=0"]
        # The waiter took over and decided; the slow process's report is
        # refused (or superseded) and it uses the committed candidate.
        assert r_fast["timed_here"] == "1" and r_fast["index"] == "3", r_fast
        assert r_slow["index"] == "3" and r_slow["timed_here"] == "1", r_slow
        assert r_slow["claims_lost"] == "1" or r_slow.get("superseded") == "1", r_slow
        (dec,) = decisions(d)
        assert dec["config"] == "BLOCK=512"
    finally:
        d.stop()


def test_a_daemon_restart_mid_pass_reports_the_same_timings_again(tmpdir_short):
    log = tmpdir_short / "timer.log"
    d = Daemon(tmpdir_short).start()
    try:
        p = start(d, "--log", log, "--sleep-ms", 500, "--ms", "2,1,3,4")
        poll("the first timer call", lambda: len(timer_log(log)) == 1)
        assert d.stop() == 0
        d = Daemon(tmpdir_short).start()
        res = finish(p)["n=0"]
        # The claim died with the daemon; libdetd took it again on the new
        # daemon as soon as it re-attached, and the timings measured were
        # reported under it (timed once, no claim lost).
        assert res["index"] == "1" and res["timed_here"] == "1" and res["claims_lost"] == "0", res
        assert len(timer_log(log)) == N_CANDS
        assert [x["config"] for x in decisions(d)] == ["BLOCK=128"]
    finally:
        d.stop()


@requires(CPP.exists(), f"{CPP} is not built (a C++ compiler is needed)")
def test_cpp_header_autotuner(tmpdir_short):
    log = tmpdir_short / "timer.log"
    d = Daemon(tmpdir_short).start()
    try:
        def cpp(mode, kernel, keys=2):
            return subprocess.Popen([str(CPP), d.socket, kernel, str(keys), mode, str(log)],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

        ps = [cpp("ok", "native::tests::cpp@v1") for _ in range(3)]
        outs = [p.communicate(timeout=DEADLINE)[0] for p in ps]
        for out in outs:
            lines = out.splitlines()
            assert lines == [l for l in lines if l.startswith(("RESULT", "AGAIN"))] and len(lines) == 4, out
            for k in range(2):
                # BLOCK=128 threw (failed); BLOCK=256 is the fastest.
                assert f"RESULT key=n={k} index=2 config=BLOCK=256" in out, out
                assert f"AGAIN key=n={k} index=2" in out, out
        assert sum(out.count("timed_here=1 n_failed=1") for out in outs) == 2, outs  # one pass per key
        # The second choose() of a key is the Autotuner's memory: one Decide
        # per key per process.
        assert counter(d.status(), "decide_calls") == 3 * 2
        assert len(timer_log(log)) == 2 * 3

        ps = [cpp("allthrow", "native::tests::cpp_fail@v1", keys=1) for _ in range(3)]
        outs = [p.communicate(timeout=DEADLINE)[0].strip() for p in ps]
        threw = [o for o in outs if o.startswith("THREW")]
        assert threw == ["THREW launch of BLOCK=64: too many resources requested"], outs
        assert all(o.startswith("ERROR DETD_ENOCAND") for o in outs if o not in threw), outs
    finally:
        d.stop()
