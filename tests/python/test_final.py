"""Decisions final before a process relies on them: detd.wait_final(),
detd.not_final() and the check detd puts before every CUDA graph capture
(detd/_capture.py, docs/python.md "CUDA graphs").

Real processes (final_worker.py) against a real daemon, the row-sum
kernel under the CPU interpreter. One holder times key N=96 and is held
in its pass while the others, all at once, meet the key: three fall back
(their DETD_TIMEOUT_MS runs out, on_miss=cheapest) and one resolves it on
a thread. Then the holder reports, and each shows what became of its
fallback. Rank 1's fastest is BLOCK=128 (rowsum_kernels' timer), the
cheapest fallback BLOCK=16: a process launching the decision is told
apart from one launching its fallback by config and output bytes.
"""

import json
import os
import subprocess
import sys

import pytest

from conftest import HERE
from gates import GATE_BOUND_S
from test_conformance import waiters

KEY = '[i:96,s:"torch.float32",s:"torch.float32"]'
SHORT_S = 1.0  # final_worker.SHORT_S
# The fallbacks' budget: each waits this long for the held holder, then
# launches on_miss=cheapest.
FALLBACK_MS = 1500
# Every phase is an event; a worker gives up on a gate after GATE_BOUND_S.
BOUND_S = GATE_BOUND_S


class Worker:
    def __init__(self, role, tmp, env):
        self.role, self.out, self.ready = role, tmp / f"{role}.json", str(tmp / f"{role}.ready")
        self.log = tmp / f"{role}.log"
        env = dict(env, FINAL_READY=self.ready)
        with open(self.log, "w") as log:
            # A real process, not a prestarted one (prestart.py): the worker
            # installs detd before it imports torch, so detd patches CUDA graph
            # captures when torch's import finishes, the path checked here.
            self.p = subprocess.Popen([sys.executable, os.path.join(HERE, "final_worker.py"), role, str(self.out)],
                                      env=env, stdout=log, stderr=subprocess.STDOUT)

    def result(self, daemon):
        try:
            self.p.wait(timeout=BOUND_S)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
        text = self.log.read_text(errors="replace")
        assert self.p.returncode == 0 and self.out.exists(), (self.role, self.p.returncode, text[-3000:],
                                                              daemon.log())
        r = json.loads(self.out.read_text())
        r["output"] = text
        return r


def until(what, cond, workers, daemon):
    import time

    end = time.monotonic() + BOUND_S
    while not cond():
        for w in workers:
            if w.p.poll() not in (None, 0):
                raise AssertionError(f"{what}: {w.role} exited {w.p.returncode}: "
                                     f"{w.log.read_text(errors='replace')[-3000:]}\n{daemon.log()}")
        if time.monotonic() >= end:
            logs = "\n".join(f"== {w.role} (ready: {os.path.exists(w.ready)}, rc {w.p.poll()}): "
                             f"{w.log.read_text(errors='replace')[-1500:]}" for w in workers)
            raise AssertionError(f"{what}: not within {BOUND_S} s (daemon waiters: {waiters(daemon)})\n{logs}\n"
                                 f"{daemon.log()}")
        time.sleep(0.02)


def block(cfg):
    return (cfg or "").split(",")[0]


def test_fallbacks_become_the_decision_before_a_capture(daemon, tmp_path):
    gate = str(tmp_path / "gate")

    def env(rank, **kw):
        return daemon.env(RANK=rank, LOCAL_RANK=rank, WORLD_SIZE=5, DETD_TEST_COUNTS=str(tmp_path / f"{rank}.counts"),
                          **kw)

    start = str(tmp_path / "start")
    holder = Worker("holder", tmp_path, env(1, DETD_TEST_BENCH_GATE=gate))
    fallback = dict(DETD_TIMEOUT_MS=FALLBACK_MS, DETD_ON_MISS="cheapest", FINAL_START=start)
    others = [Worker("waiter", tmp_path, env(0, **fallback)),
              Worker("warn", tmp_path, env(2, DETD_CAPTURE="warn", **fallback)),
              Worker("wait", tmp_path, env(3, DETD_CAPTURE="wait", DETD_CAPTURE_WAIT_S=BOUND_S, **fallback)),
              Worker("resolving", tmp_path, env(4, DETD_CAPTURE_WAIT_S=SHORT_S, DETD_WAIT_LOG_AFTER_S=0.2,
                                                FINAL_START=start))]
    # The others meet the key once the holder is in its pass.
    until("holder designated", lambda: os.path.exists(gate + ".waiting"), [holder] + others, daemon)
    open(start, "w").close()
    # Everything before the decision is done, and the waiter's
    # wait_final(), the capture that waits and the resolving thread are
    # held by the daemon (3 waiters).
    until("every process ready, three waiting", lambda: all(os.path.exists(w.ready) for w in others)
          and waiters(daemon) >= 3, [holder] + others, daemon)
    open(gate, "w").close()
    h = holder.result(daemon)
    r = {w.role: w.result(daemon) for w in others}

    decided = h["launches"][0]
    assert block(decided["config"]) == "BLOCK=128" and decided["bench_calls"] == 4, h
    # The captures its timing pass began were not checked (part of choosing).
    assert h["events"]["pass_capture"]["error"] == "AttributeError" and h["stats"]["capture_checks"] == 0, h

    # The waiter: its fallback, a short wait naming the key and its
    # holder, then the decision in place of the fallback.
    w = r["waiter"]
    assert block(w["launches"][0]["config"]) == "BLOCK=16" and w["launches"][0]["bench_calls"] == 0, w
    assert [(k["key"], k["state"]) for k in w["events"]["not_final"]] == [(KEY, "fallback")], w["events"]
    short = w["events"]["short"]
    assert not short["ok"] and short["error"] == "NotFinalError" and short["s"] >= SHORT_S, short
    assert [k["key"] for k in short["keys"]] == [KEY] and KEY in short["text"], short
    assert "rank 1 (pid" in short["keys"][0]["why"] and "has been timing it" in short["keys"][0]["why"], short
    final = w["events"]["final"]
    assert final["ok"], final
    assert [(block(e["fallback"]), block(e["config"])) for e in final["result"]["replaced"]] == \
        [("BLOCK=16", "BLOCK=128")], final
    again = w["launches"][1]
    assert again["config"] == decided["config"] and again["sha"] == decided["sha"] and again["bench_calls"] == 0, w
    entry = [k for t in w["autotuners"] for k in t["keys"] if k["key"] == KEY][0]
    assert entry["source"] == "fallback" and entry["replaced_by"] == decided["config"], entry
    # A key nobody times (pinned): named, and dropped so its next launch asks again.
    nobody = w["events"]["nobody"]
    assert not nobody["ok"] and nobody["error"] == "NotFinalError", nobody
    assert "no decision, and no process is timing it: its next launch asks again" in nobody["keys"][0]["why"], nobody
    assert w["events"]["after_nobody"] == dict(cached=False, not_final=[]), w["events"]
    st = w["stats"]
    assert (st["final_waits"], st["final_not_final"], st["final_replaced"], st["fallbacks"]) == (3, 2, 1, 2), st

    # DETD_CAPTURE=warn: no wait; a warning naming the key and its holder.
    c = r["warn"]
    assert c["events"]["capture"]["error"] == "AttributeError", c["events"]  # torch's own, on a CPU build
    warned = [m for m in c["warnings"] if "CUDA graph capture begins" in m]
    assert len(warned) == 1 and "DETD_CAPTURE=warn" in warned[0] and KEY in warned[0] and "rank 1 (pid" in warned[0], \
        c["warnings"]
    assert block(c["launches"][1]["config"]) == "BLOCK=16", c
    assert (c["stats"]["capture_checks"], c["stats"]["capture_warnings"]) == (1, 1), c["stats"]

    # DETD_CAPTURE=wait: the capture begins once the decision replaced the fallback.
    d = r["wait"]
    assert d["events"]["capture"]["error"] == "AttributeError", d["events"]
    assert d["events"]["after_capture"] == dict(not_final=[]), d["events"]
    assert d["launches"][1]["config"] == decided["config"] and d["launches"][1]["sha"] == decided["sha"], d
    assert not [m for m in d["warnings"] if "CUDA graph capture" in m], d["warnings"]
    assert (d["stats"]["capture_checks"], d["stats"]["capture_warnings"], d["stats"]["final_replaced"]) == (1, 0, 1)

    # on_miss=error and a thread still resolving at the bound: the capture is refused.
    e = r["resolving"]
    cap = e["events"]["capture"]
    assert cap["error"] == "NotFinalError" and cap["s"] >= SHORT_S, cap
    assert [(k["key"], k["state"]) for k in cap["keys"]] == [(KEY, "resolving")], cap
    assert "rank 1 (pid" in cap["keys"][0]["why"], cap
    assert e["launches"][0]["config"] == decided["config"], e
    assert e["stats"]["capture_refused"] == 1, e["stats"]


def test_capture_settings_are_checked():
    from detd import _capture

    assert _capture.options({}) == ("wait", None)
    assert _capture.options({"DETD_CAPTURE": "warn", "DETD_CAPTURE_WAIT_S": "30"}) == ("warn", 30.0)
    with pytest.raises(ValueError, match=r"DETD_CAPTURE='later': expected one of wait, warn, off"):
        _capture.options({"DETD_CAPTURE": "later"})
    with pytest.raises(ValueError, match=r"DETD_CAPTURE_WAIT_S='-1'"):
        _capture.options({"DETD_CAPTURE_WAIT_S": "-1"})
