"""The one resolve loop (detd._loop.resolve), in one process, against a
scripted daemon: the cases on which the Triton and Inductor paths once
differed (docs/client-layers.md, "Where the paths differed"), run through
the loop itself and through the Inductor adapter's decide(); and, against
a real daemon, a budget that ends on its late answer and a log time
passed without an answer. The Triton adapter's
path through the loop is covered by test_hook_unit.py."""

import math
import os
import signal
import time

import pytest

from detd import _inductor, _loop, _native, _policy, _process

CANDS = ("BLOCK=16", "BLOCK=32", "BLOCK=64")


def answer(outcome, config=None, claim=0, source=_native.SOURCE_TIMED):
    return _native.Answer(outcome, config, source, None, claim, 1000, False, False, None, -1, -1, 0)


def stale():
    return _native.DetdError("detd_report", _native.ESTALE, "DETD_ESTALE", "claim no longer held",
                             "report: claim 7 was given to a session that has ended")


class Scripted:
    """A libdetd handle whose answers are scripted: ``decide(n)`` and
    ``report(n)`` give the n-th answer (0-based) or raise."""

    def __init__(self, decide, report=None):
        self._decide, self._report = decide, report
        self.decides, self.reports, self.observed = [], [], []

    def decide(self, key, no_claim, timeout_ms, share=False, bench=False):
        self.decides.append((timeout_ms, share))
        return self._decide(len(self.decides) - 1)

    def report(self, claim_id, key, rows, triton_version, timeout_ms, errors=None, timing=None):
        self.reports.append(rows)
        return self._report(len(self.reports) - 1)

    def observe(self, key, config, source, governed, chaos, *a, **kw):
        self.observed.append((config, source))


@pytest.fixture
def scripted(monkeypatch):
    def setup(handle, **settings):
        _process.configure(_policy.parse(environ={}, **settings))
        monkeypatch.setattr(_process, "client", lambda: handle)
        return handle

    yield setup
    _process.stand_down()
    with _inductor._st.lock:
        _inductor._st.records.clear()  # the keys decide() recorded: later tests list autotuners


def dkey():
    return _native.Key("default", "cpu", "m:k@0", "[i:1]", CANDS)


def rows():
    return [(c, [1.0 + i], False) for i, c in enumerate(CANDS)]


def test_early_timeout_asks_again(scripted):
    """libdetd answers TIMEOUT a tenth before the time asked for: within the
    budget, the loop asks again for the rest (Inductor used to give up)."""
    def script():
        return Scripted(lambda n: answer(_native.OUTCOME_TIMEOUT) if n == 0 else
                        answer(_native.OUTCOME_DECIDED, "BLOCK=32"))

    s = scripted(script(), timeout_ms=60_000)
    res = _loop.resolve(dkey(), "m:k@0", "[i:1]", "3.x", lambda a: rows())
    assert res.answer.outcome == _native.OUTCOME_DECIDED and res.answer.config == "BLOCK=32"
    assert len(s.decides) == 2 and res.rows is None and res.lost == 0
    s = scripted(script(), timeout_ms=60_000)
    out = _inductor.decide("inductor::k@0", "k", "key-timeout", CANDS, rows, lambda c: c[0])
    assert out.config == "BLOCK=32" and out.source == _native.SOURCE_TIMED and len(s.decides) == 2


def test_an_away_answer_to_the_last_ask_ends_the_budget(scripted, monkeypatch):
    """libdetd answers TIMEOUT with daemon_away once the Decide's own
    deadline has passed, and that deadline, counted in whole ms, can come a
    hair before the loop's: a Decide given all that was left ends the
    budget, and its answer gives the reason (the wait for the other
    process's pass when the daemon had answered the wait, else the absent
    daemon), not "no decision within timeout_ms" after one more ask for the
    last fraction of a ms. Here the away answers come at once, the extreme
    of such a deadline."""
    monkeypatch.setenv("DETD_WAIT_LOG_AFTER_S", "0")  # no slices: each Decide asks for all that is left
    away = answer(_native.OUTCOME_TIMEOUT)._replace(daemon_away=True)

    def script(first):
        def decide(n):
            assert n < 2, "asked again after an away answer to a Decide given the whole budget"
            return first if n == 0 else away
        return Scripted(decide)

    # The daemon answered the wait (another process times the key), then
    # not the Decide that ended the budget.
    s = scripted(script(answer(_native.OUTCOME_TIMEOUT)), timeout_ms=60_000)
    res = _loop.resolve(dkey(), "m:k@0", "[i:1]", "3.x", lambda a: rows())
    assert len(s.decides) == 2 and all(0 < ms <= 60_000 for ms, _ in s.decides), s.decides
    assert res.answer.outcome == _native.OUTCOME_TIMEOUT and not res.answer.daemon_away, res
    assert _loop.no_decision(res.answer) == "timed out waiting for another rank's timing pass"
    # Away from the first ask: the absent daemon.
    s = scripted(script(away), timeout_ms=60_000)
    res = _loop.resolve(dkey(), "m:k@0", "[i:1]", "3.x", lambda a: rows())
    assert len(s.decides) == 1 and res.answer.daemon_away, res
    assert _loop.no_decision(res.answer) == "the daemon was unreachable (or had just restarted) until the deadline"


def test_lost_claims_are_asked_again_and_noted(scripted):
    """A report refused as stale asks again; the pass is measured once; the
    count comes back, and the Inductor adapter notes it on the key."""
    def script():
        return Scripted(lambda n: answer(_native.OUTCOME_DESIGNATED, claim=n + 1),
                        lambda n: (_ for _ in ()).throw(stale()) if n == 0 else
                        answer(_native.OUTCOME_DECIDED, "BLOCK=16"))

    s = scripted(script())
    passes = []
    res = _loop.resolve(dkey(), "m:k@0", "[i:1]", "3.x", lambda a: passes.append(a.claim_id) or rows())
    assert passes == [1] and len(s.reports) == 2 and s.reports[0] == s.reports[1]
    assert res.lost == 1 and res.answer.config == "BLOCK=16" and res.answer.outcome == _native.OUTCOME_DECIDED
    s = scripted(script())
    measured = []
    out = _inductor.decide("inductor::k@0", "k", "key-lost", CANDS, lambda: measured.append(1) or rows(),
                           lambda c: c[0])
    assert out.config == "BLOCK=16" and out.timed_here and "claim lost 1x" in out.note
    assert measured == [1] and len(s.reports) == 2


def test_rounds_count_designations_and_keep_the_last_reason(scripted):
    """At most MAX_ASKS designations; the reason says the claim was lost
    that often and gives the last report's error (Inductor used to say
    nothing; the native loop said only the count)."""
    def script():
        return Scripted(lambda n: answer(_native.OUTCOME_DESIGNATED, claim=n + 1),
                        lambda n: (_ for _ in ()).throw(stale()))

    s = scripted(script(), timeout_ms=60_000)
    res = _loop.resolve(dkey(), "m:k@0", "[i:1]", "3.x", lambda a: rows())
    assert len(s.decides) == _loop.MAX_ASKS and res.lost == _loop.MAX_ASKS
    assert res.answer is None and "claim 7" in res.reason
    assert res.reason.startswith(f"the claim was lost {_loop.MAX_ASKS} times: no decision (last report failed:")
    s = scripted(script(), timeout_ms=60_000)
    with pytest.raises(_loop.MissError, match="report failed"):
        _inductor.decide("inductor::k@0", "k", "key-rounds", CANDS, rows, lambda c: c[0])
    assert len(s.decides) == _loop.MAX_ASKS


def test_pass_failed_everywhere_raises(scripted):
    """The daemon's verdict that every candidate failed ends the key, on
    the reporter (its report's error) and on a waiter (its Decide's)."""
    nocand = _native.DetdError("detd_report", -1017, "DETD_ENOCAND", _loop.NOCAND_TEXT, _loop.NOCAND_TEXT)
    scripted(Scripted(lambda n: answer(_native.OUTCOME_DESIGNATED, claim=1), lambda n: (_ for _ in ()).throw(nocand)))
    res = _loop.resolve(dkey(), "m:k@0", "[i:1]", "3.x", lambda a: rows())
    assert res.report_error is nocand and _loop.NOCAND_TEXT in res.reason
    with pytest.raises(_loop.PassFailedError):
        _inductor.decide("inductor::k@0", "k", "key-nocand", CANDS, rows, lambda c: c[0])
    waiter = _native.DetdError("detd_decide", _native.ESTALE, "DETD_ESTALE", _loop.NOCAND_TEXT)
    scripted(Scripted(lambda n: (_ for _ in ()).throw(waiter)))
    res = _loop.resolve(dkey(), "m:k@0", "[i:1]", "3.x", lambda a: rows())
    assert res.answer is None and res.rows is None and _loop.NOCAND_TEXT in res.reason
    with pytest.raises(_loop.PassFailedError):
        _inductor.decide("inductor::k@0", "k", "key-nocand-waiter", CANDS, rows, lambda c: c[0])


def test_no_decision_falls_back_loudly(scripted):
    """A miss with on_miss=first: the first candidate, warned once and
    observed as a fallback, in both adapters alike."""
    s = scripted(Scripted(lambda n: answer(_native.OUTCOME_MISS)), on_miss="first", mode="pinned")
    res = _loop.resolve(dkey(), "m:k@0", "[i:1]", "3.x", lambda a: rows())
    assert res.answer.outcome == _native.OUTCOME_MISS and len(s.decides) == 1
    assert _loop.no_decision(res.answer) == "no decision stored and none in the tables"
    with pytest.warns(RuntimeWarning, match="on_miss=first"):
        out = _inductor.decide("inductor::k@0", "k", "key-miss", CANDS, rows, lambda c: c[-1])
    assert out.config == CANDS[0] and out.source == _native.SOURCE_FALLBACK
    assert s.observed[-1] == (CANDS[0], _native.SOURCE_FALLBACK)


# ---------------------------------------------------------------- a real daemon

def _stopped(pid: int) -> bool:
    """Whether the process is stopped (SIGSTOP): state T in /proc."""
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] in ("T", "t")


def _stop(pid: int) -> None:
    """Stop the daemon (SIGSTOP) and wait until it is stopped."""
    os.kill(pid, signal.SIGSTOP)
    end = time.monotonic() + LATE_BUDGET_MS / 1000
    while not _stopped(pid):
        assert time.monotonic() < end, "SIGSTOP did not stop the daemon"
        time.sleep(0.005)


# The waiter's budget in the tests below: long enough for its first slice
# (LATE_FIRST_S) to be answered on a loaded machine, short for the test.
LATE_BUDGET_MS = 2000
LATE_FIRST_S = 0.2


def _wait_on_a_stopped_daemon(daemon, monkeypatch, every_s: str):
    """Resolve a key rank 1 of the real daemon holds, with a first slice
    of LATE_FIRST_S, wait log lines every ``every_s`` after it and a
    budget of LATE_BUDGET_MS; the daemon stopped (SIGSTOP) once its first
    answer came. Returns (the Resolution, the TIMEOUT answers heard, the
    slices asked in ms, its wall seconds, this process's libdetd stats)."""
    monkeypatch.setenv("DETD_WAIT_LOG_AFTER_S", str(LATE_FIRST_S))
    monkeypatch.setenv("DETD_WAIT_LOG_EVERY_S", every_s)
    monkeypatch.setenv("DETD_SHARE_PASS", "0")
    _process.configure(_policy.parse(environ={}, socket=daemon.socket, timeout_ms=LATE_BUDGET_MS))
    pid = daemon.proc.pid
    holder = _native.Client(daemon.socket, rank=1)
    try:
        assert holder.decide(dkey(), False, 5000).outcome == _native.OUTCOME_DESIGNATED
        heard, asked = [], []
        waiting, ask = _loop.Wait.waiting, _loop.ask

        def stop_after_the_first_answer(self, a):
            heard.append(a)
            if len(heard) == 1:
                _stop(pid)
            waiting(self, a)

        def counted(request, *a, **kw):
            asked.append(request[2])
            return ask(request, *a, **kw)

        monkeypatch.setattr(_loop.Wait, "waiting", stop_after_the_first_answer)
        monkeypatch.setattr(_loop, "ask", counted)
        t0 = time.monotonic()
        res = _loop.resolve(dkey(), "m:k@0", "[i:1]", "3.x", lambda a: pytest.fail("designated: nothing to time"))
        took = time.monotonic() - t0
        stats = _process.client_stats()
    finally:
        os.kill(pid, signal.SIGCONT)
        holder.close()
        _process.configure(_policy.parse(environ={}))  # closes this process's handle to the daemon
        _process.stand_down()
    return res, heard, asked, took, stats


def test_budget_ending_on_a_late_answer_is_the_wait(daemon, monkeypatch):
    """The budget ends on a Decide the daemon did not answer in time, after
    it had answered this wait (another process times the key) and with no
    outage since: the reason is the wait for that pass, not an absent
    daemon (docs/resolve-contract.md, WAIT). The real daemon, stopped
    (SIGSTOP) once its first answer came: a stopped daemon is a daemon
    whose answer comes late, deterministically, with its socket and this
    process's session left as they were (no outage); a loaded machine
    makes a running one late only by chance."""
    # A short first slice, then one ask for the rest.
    res, heard, _, took, stats = _wait_on_a_stopped_daemon(daemon, monkeypatch, "600")
    # One answer (the first slice's TIMEOUT), then nothing until the budget ended.
    assert len(heard) == 1 and heard[0].outcome == _native.OUTCOME_TIMEOUT and not heard[0].daemon_away
    assert took >= (LATE_BUDGET_MS - 1) / 1000, took  # it ends with less than 1 ms left
    assert stats["outages"] == 0 and stats["down_ms"] == 0, stats
    # The reason the adapters give (MissError, the on_miss warning).
    why = _loop.no_decision(res.answer) if res.answer is not None else res.reason
    assert why == "timed out waiting for another rank's timing pass", why
    assert res.answer.outcome == _native.OUTCOME_TIMEOUT and not res.answer.daemon_away, res
    assert res.rows is None and res.lost == 0
    # Who timed it, for detd.wait_final(): the holder, from the daemon's answer.
    assert res.wait.fell_back(None).startswith(f"rank 1 (pid {os.getpid()} on ")


def test_a_missed_log_time_asks_in_slices_of_at_least_the_floor(daemon, monkeypatch):
    """A log time that passes without an answer from the daemon (stopped,
    or away: its Decide ends at its deadline, past the log time) no longer
    makes the loop ask in Decides of 2 ms back to back until the daemon
    answers or the budget ends (hundreds of calls in this budget): after
    it, a slice is at least WAIT_MIN_SLICE_MS. The real daemon, stopped
    (SIGSTOP) once its first answer came, with a log line due every
    LATE_FIRST_S."""
    res, heard, asked, took, _ = _wait_on_a_stopped_daemon(daemon, monkeypatch, str(LATE_FIRST_S))
    # The first slice's answer (its log line), then nothing until the budget ended.
    assert len(heard) == 1 and heard[0].outcome == _native.OUTCOME_TIMEOUT and not heard[0].daemon_away
    assert res.wait.logged and res.answer is not None and res.answer.outcome == _native.OUTCOME_TIMEOUT, res
    assert took >= (LATE_BUDGET_MS - 1) / 1000, took
    # The first slice, the one to the next log time, then slices of at
    # least the floor until the budget ends (and one for a last sliver of
    # it, a Decide's deadline counted in whole ms).
    most = 2 + math.ceil(LATE_BUDGET_MS / _loop.WAIT_MIN_SLICE_MS) + 1
    assert len(asked) <= most, (len(asked), asked[:20])
