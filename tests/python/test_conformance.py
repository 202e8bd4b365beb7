"""The resolve contract (docs/resolve-contract.md), one table of cases run
against the three paths that resolve a key: the Triton hook, the Inductor
adapter and the native API (detd_autotune()). Every case runs real
processes (conformance_worker.py) against a real daemon on a unix socket;
the cases of one path run at once, each on its own key.

Every process times with the same deterministic CPU timer, rotated by
RANK, so each rank's own fastest differs: ranks agreeing is the daemon's
doing. Rank 0's fastest is BLOCK=16, rank 1's BLOCK=128, rank 2's
BLOCK=64, rank 3's BLOCK=32.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import pytest

import prestart
from conftest import HERE, Daemon, _require_build
from gates import GATE_BOUND_S

PATHS = ("triton", "inductor", "native")
FASTEST = {0: "BLOCK=16", 1: "BLOCK=128", 2: "BLOCK=64", 3: "BLOCK=32"}
N_CANDS = 4
BUDGET_MS = 3000  # the waiter's timeout_ms in the "budget" case
# A worker gives up waiting for a gate after GATE_BOUND_S; a phase of this
# test is bounded by that too.
WORKER_BOUND_S = GATE_BOUND_S

# The errors each path shows where the contract says "no config":
# the Python adapters raise (on_miss=error), the native API returns a code.
NO_CONFIG = {
    # the key's one pass failed for every candidate: the timing process
    # (Triton raises the candidates' own error, as plain Triton would)...
    "all_failed_holder": {"triton": "RuntimeError", "inductor": "PassFailedError", "native": "DETD_ENOCAND"},
    # ... and every process waiting for it
    "all_failed_waiter": {"triton": "PassFailedError", "inductor": "PassFailedError", "native": "DETD_ENOCAND"},
    # the pass could not run in the timing process's environment (a module
    # missing): the timing process raises the error itself...
    "env_holder": {"triton": "ModuleNotFoundError", "inductor": "ModuleNotFoundError", "native": "DETD_EENV"},
    # ... and every process waiting for it is told, whatever on_miss says
    "env_waiter": {"triton": "PassEnvError", "inductor": "PassEnvError", "native": "DETD_EENV"},
    # the budget ended while another process timed the key
    "budget": {"triton": "MissError", "inductor": "MissError", "native": "DETD_ETIMEDOUT"},
    # pinned (no claim) and nothing decided
    "pinned": {"triton": "MissError", "inductor": "MissError", "native": "DETD_ENOTFOUND"},
    # no daemon on the socket
    "no_daemon": {"triton": "MissError", "inductor": "MissError", "native": "DETD_ECONNECT"},
}
# What the error's text says (one of), per case; the native API's words
# where they differ.
REASON = {
    "all_failed_holder": ("fail",),
    "all_failed_waiter": ("no candidate has a valid timing",),
    "env_holder": ("pip install numpy",),
    "env_waiter": ("No module named 'numpy' (next step: pip install numpy)",),
    "budget": ("no decision within timeout_ms=3000", "timed out waiting for another rank's timing pass"),
    "pinned": ("no decision stored and none in the tables",),
    "no_daemon": ("daemon request failed",),
}
# The key as each Python path names it in its lines (the row length 96).
WAIT_KEY = {"triton": '[i:96,s:"torch.float32",s:"torch.float32"]', "inductor": "n=96"}
REASON_NATIVE = {
    "env_holder": ("the timer returned DETD_EENV for candidates[0]",),
    "env_waiter": ("the timer returned DETD_EENV for candidates[0]",),
    "budget": ("no decision within opts->timeout_ms=3000", "timed out waiting for another process's timing pass"),
    "pinned": ("none stored and none in the tables",),
    "no_daemon": ("connect",),
}


# The first error of an every-candidate-failed pass, as every later asker
# is told it (Inductor's time_pass gives no error per candidate).
FIRST_ERROR = {"triton": "RuntimeError: BLOCK=16 fails (DETD_TEST_BENCH_FAIL)", "inductor": "",
               "native": "candidate 'BLOCK=16': the timer failed"}


class Proc:
    def __init__(self, path, keys, tmp, name, env):
        self.name, self.out, self.keys = name, tmp / f"{name}.json", [keys] if isinstance(keys, int) else keys
        self.log = tmp / f"{name}.log"  # its stdout and stderr
        with open(self.log, "w") as log:
            self.p = prestart.popen([sys.executable, os.path.join(HERE, "conformance_worker.py"), path,
                                     ",".join(map(str, self.keys)), str(self.out)], env=env, stdout=log,
                                    stderr=subprocess.STDOUT, text=True)
        self.text = None

    def output(self):
        """What the process wrote so far."""
        return self.log.read_text(errors="replace")

    def result(self, daemon, want_rc=0, n=None):
        """The result of key n (the only key by default)."""
        if self.text is None:
            try:
                self.p.wait(timeout=WORKER_BOUND_S)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
            self.text = self.output()
        assert self.p.returncode == want_rc, (self.name, self.p.returncode, self.text[-3000:], daemon.log())
        if want_rc != 0:
            return None
        return json.loads(self.out.read_text())[str(n if n is not None else self.keys[0])]


def until(what, cond, procs, daemon):
    """Wait for cond(); fail at once when a process it waits on has exited,
    and after the workers' own bound."""
    end = time.monotonic() + WORKER_BOUND_S
    while not cond():
        for p in procs:
            if p.p.poll() is not None:
                text = p.output()
                raise AssertionError(f"{what}: {p.name} exited {p.p.returncode}: {text[-3000:]}\n{daemon.log()}")
        assert time.monotonic() < end, f"{what}: not within {WORKER_BOUND_S} s\n{daemon.log()}"
        time.sleep(0.02)


def waiters(daemon):
    r = daemon.detctl("status", "--json")
    return json.loads(r.stdout)["waiters"] if r.returncode == 0 else 0


def expect_config(res, config, timed, case):
    assert res.get("error") is None, (case, res)
    # Triton's config strings carry its launch options too.
    assert (res["config"] or "").split(",num_warps=")[0] == config, (case, res)
    assert res["timed_here"] is timed, (case, res)
    assert res["bench_calls"] == (N_CANDS if timed else 0), (case, res)


def expect_error(res, case, path):
    assert res["config"] is None and res["error"] == NO_CONFIG[case][path], (case, res)
    texts = REASON_NATIVE.get(case, REASON[case]) if path == "native" else REASON[case]
    assert any(t in res["reason"] for t in texts), (case, res["reason"])


@pytest.mark.parametrize("path", PATHS)
def test_the_contract_holds_on_every_path(daemon, tmp_path, path):
    def env(rank, **extra):
        # torchrun's variables (the run id names the job)
        return daemon.env(RANK=rank, LOCAL_RANK=rank, WORLD_SIZE=4, TORCHELASTIC_RUN_ID="conformance-run",
                          DETD_ON_MISS="error", **extra)

    gate = {c: str(tmp_path / f"gate-{c}") for c in ("wait", "all_failed", "takeover", "budget", "env")}
    keys = dict(fresh=64, wait=96, all_failed=128, takeover=160, budget=192, pinned=224, no_daemon=256, env=288)

    # Phase 1: the processes that take a claim (held in their pass by a
    # gate), and those that need nobody.
    fresh = Proc(path, keys["fresh"], tmp_path, "fresh", env(0))
    holder = dict(
        wait=Proc(path, keys["wait"], tmp_path, "wait-holder", env(1, DETD_TEST_BENCH_GATE=gate["wait"])),
        all_failed=Proc(path, keys["all_failed"], tmp_path, "all_failed-holder",
                        env(1, DETD_TEST_BENCH_GATE=gate["all_failed"], DETD_TEST_BENCH_FAIL="1")),
        takeover=Proc(path, keys["takeover"], tmp_path, "takeover-holder",
                      env(1, DETD_TEST_DIE_WHEN=gate["takeover"])),
        budget=Proc(path, keys["budget"], tmp_path, "budget-holder", env(1, DETD_TEST_BENCH_GATE=gate["budget"])),
        env=Proc(path, keys["env"], tmp_path, "env-holder",
                 env(1, DETD_TEST_BENCH_GATE=gate["env"], DETD_TEST_BENCH_ENV="1")))
    pinned = Proc(path, keys["pinned"], tmp_path, "pinned", env(0, DETD_MODE="pinned"))
    no_daemon = Proc(path, keys["no_daemon"], tmp_path, "no_daemon",
                     env(0, DETD_SOCKET=str(tmp_path / "nobody.sock"), DETD_TIMEOUT_MS=1000))
    until("holders designated", lambda: all(os.path.exists(g + ".waiting") for g in gate.values()),
          holder.values(), daemon)

    # Phase 2: a process waits on each held key.
    waiter = {c: Proc(path, keys[c], tmp_path, f"{c}-waiter", env(2))
              for c in ("wait", "all_failed", "takeover", "env")}
    until("four processes waiting", lambda: waiters(daemon) >= 4, waiter.values(), daemon)
    waiter["budget"] = Proc(path, keys["budget"], tmp_path, "budget-waiter", env(2, DETD_TIMEOUT_MS=BUDGET_MS))

    # Phase 3: the holders' passes end: all failed, died, environment; the
    # wait case's once its waiter said (by default after 5 s) who it waits
    # for (the Python paths; libdetd writes nothing).
    for c in ("all_failed", "takeover", "env"):
        open(gate[c], "w").close()

    expect_config(fresh.result(daemon), FASTEST[0], True, "fresh")
    res = holder["all_failed"].result(daemon)
    expect_error(res, "all_failed_holder", path)
    assert res["bench_calls"] == N_CANDS, res
    res = waiter["all_failed"].result(daemon)
    expect_error(res, "all_failed_waiter", path)
    assert FIRST_ERROR[path] in res["reason"] and "claim no longer held" not in res["reason"], res
    res = holder["env"].result(daemon)
    expect_error(res, "env_holder", path)
    assert res["bench_calls"] == 0, res
    expect_error(waiter["env"].result(daemon), "env_waiter", path)
    if path != "native":
        until("the waiter says who it waits for", lambda: "detd: waiting" in waiter["wait"].output(),
              [waiter["wait"]], daemon)
    open(gate["wait"], "w").close()
    expect_config(holder["wait"].result(daemon), FASTEST[1], True, "wait: holder")
    expect_config(waiter["wait"].result(daemon), FASTEST[1], False, "wait: waiter")
    if path != "native":
        # Once each: the holder what it times, the waiter whom it waits for.
        said = [ln for ln in holder["wait"].text.splitlines() if "is timing kernel" in ln]
        assert len(said) == 1 and f"key {WAIT_KEY[path]}" in said[0] and "4 candidates" in said[0], said
        said = [ln for ln in waiter["wait"].text.splitlines() if ln.startswith("detd: waiting")]
        assert len(said) == 1 and f"rank 1 (pid {holder['wait'].p.pid} on " in said[0], said
    holder["takeover"].result(daemon, want_rc=9)
    expect_config(waiter["takeover"].result(daemon), FASTEST[2], True, "takeover: the waiter times")
    res = waiter["budget"].result(daemon)
    expect_error(res, "budget", path)
    assert res["bench_calls"] == 0 and res["elapsed_s"] >= BUDGET_MS / 1000, res  # the whole budget was waited
    open(gate["budget"], "w").close()
    expect_config(holder["budget"].result(daemon), FASTEST[1], True, "budget: holder")
    res = pinned.result(daemon)
    expect_error(res, "pinned", path)
    assert res["bench_calls"] == 0, res
    res = no_daemon.result(daemon)
    expect_error(res, "no_daemon", path)
    assert res["bench_calls"] == 0, res

    # A rerun (a new process, rank 3, whose own fastest differs): the
    # decided keys answer at once, nothing is timed.
    # The key whose pass met an environment error was not stored: timed
    # again, by this process. The failed one is answered with its first
    # error, not a bare DETD_ESTALE.
    again = Proc(path, [keys[c] for c in ("fresh", "wait", "takeover", "env", "all_failed")], tmp_path, "rerun",
                 env(3))
    expect_config(again.result(daemon, n=keys["fresh"]), FASTEST[0], False, "rerun: fresh")
    expect_config(again.result(daemon, n=keys["wait"]), FASTEST[1], False, "rerun: wait")
    expect_config(again.result(daemon, n=keys["takeover"]), FASTEST[2], False, "rerun: takeover")
    expect_config(again.result(daemon, n=keys["env"]), FASTEST[3], True, "rerun: env, timed now")
    res = again.result(daemon, n=keys["all_failed"])
    expect_error(res, "all_failed_waiter", path)
    assert FIRST_ERROR[path] in res["reason"] and "DETD_ESTALE" not in res["reason"], res
    assert res["bench_calls"] == 0, res
    with open(daemon.log_path, errors="replace") as f:
        assert f.read().count("given back: its timing pass could not run in the environment") == 1
    st = json.loads(daemon.detctl("status", "--json").stdout)
    assert st["counters"]["passes_env_released"] == 1, st["counters"]
    # Every timed decision names the job and its size, as torchrun set them.
    r = daemon.detctl("decisions", "--json")
    timed = [x for x in json.loads(r.stdout)["decisions"] if x["source"] == "timed"]
    assert len(timed) == 5, timed  # fresh, wait, takeover, budget, env
    assert {(x["decided_by"]["world_size"], x["decided_by"]["job"]) for x in timed} == {(4, "conformance-run")}, timed


# The outage: the daemon killed (-9) while a process holds a pass and
# another waits, back on the same socket and store this much later; the
# socket file it leaves makes every client meet "connection refused".
OUTAGE_S = 3


def test_a_daemon_outage_is_a_wait_on_every_path(tmp_path):
    """docs/resolve-contract.md, "A daemon outage": on each path at once, a
    holder in its pass and a waiter (asking in 1 s slices where the path
    slices) across a kill -9 and a restart: the holder reports under the
    claim libdetd took again (timed once, no lost claim), the waiter gets
    its config without timing."""
    _require_build()
    root = tempfile.mkdtemp(prefix="detd-py-", dir="/tmp")
    d = Daemon(root).start()
    try:
        def env(rank, **extra):
            return d.env(RANK=rank, LOCAL_RANK=rank, WORLD_SIZE=4, DETD_ON_MISS="error", DETD_WAIT_LOG_AFTER_S=1,
                         DETD_WAIT_LOG_EVERY_S=1, **extra)

        gate = {p: str(tmp_path / f"gate-{p}") for p in PATHS}
        holder = {p: Proc(p, 288, tmp_path, f"{p}-holder", env(1, DETD_TEST_BENCH_GATE=gate[p])) for p in PATHS}
        until("holders designated", lambda: all(os.path.exists(g + ".waiting") for g in gate.values()),
              holder.values(), d)
        waiter = {p: Proc(p, 288, tmp_path, f"{p}-waiter", env(2)) for p in PATHS}
        until("three processes waiting", lambda: waiters(d) >= 3, waiter.values(), d)
        d.proc.kill()
        d.proc.wait()
        time.sleep(OUTAGE_S)  # the outage itself, not a wait for a state
        d.start()
        for g in gate.values():
            open(g, "w").close()
        for p in PATHS:
            res = holder[p].result(d)
            expect_config(res, FASTEST[1], True, f"outage: {p} holder")
            assert res["claims_lost"] == 0, (p, res)
            expect_config(waiter[p].result(d), FASTEST[1], False, f"outage: {p} waiter")
    finally:
        d.stop()
        shutil.rmtree(root, ignore_errors=True)
