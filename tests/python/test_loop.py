"""The one resolve loop (detd._loop.resolve), in one process, against a
scripted daemon: the cases on which the Triton and Inductor paths once
differed (docs/client-layers.md, "Where the paths differed"), run through
the loop itself and through the Inductor adapter's decide(). The Triton
adapter's path through the loop is covered by test_hook_unit.py."""

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
def daemon(monkeypatch):
    def setup(scripted, **settings):
        _process.configure(_policy.parse(environ={}, **settings))
        monkeypatch.setattr(_process, "client", lambda: scripted)
        return scripted

    yield setup
    _process.stand_down()
    with _inductor._st.lock:
        _inductor._st.records.clear()  # the keys decide() recorded: later tests list autotuners


def dkey():
    return _native.Key("default", "cpu", "m:k@0", "[i:1]", CANDS)


def rows():
    return [(c, [1.0 + i], False) for i, c in enumerate(CANDS)]


def test_early_timeout_asks_again(daemon):
    """libdetd answers TIMEOUT a tenth before the time asked for: within the
    budget, the loop asks again for the rest (Inductor used to give up)."""
    def script():
        return Scripted(lambda n: answer(_native.OUTCOME_TIMEOUT) if n == 0 else
                        answer(_native.OUTCOME_DECIDED, "BLOCK=32"))

    s = daemon(script(), timeout_ms=60_000)
    res = _loop.resolve(dkey(), "m:k@0", "[i:1]", "3.x", lambda a: rows())
    assert res.answer.outcome == _native.OUTCOME_DECIDED and res.answer.config == "BLOCK=32"
    assert len(s.decides) == 2 and res.rows is None and res.lost == 0
    s = daemon(script(), timeout_ms=60_000)
    out = _inductor.decide("inductor::k@0", "k", "key-timeout", CANDS, rows, lambda c: c[0])
    assert out.config == "BLOCK=32" and out.source == _native.SOURCE_TIMED and len(s.decides) == 2


def test_an_away_answer_to_the_last_ask_ends_the_budget(daemon, monkeypatch):
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
    s = daemon(script(answer(_native.OUTCOME_TIMEOUT)), timeout_ms=60_000)
    res = _loop.resolve(dkey(), "m:k@0", "[i:1]", "3.x", lambda a: rows())
    assert len(s.decides) == 2 and all(0 < ms <= 60_000 for ms, _ in s.decides), s.decides
    assert res.answer.outcome == _native.OUTCOME_TIMEOUT and not res.answer.daemon_away, res
    assert _loop.no_decision(res.answer) == "timed out waiting for another rank's timing pass"
    # Away from the first ask: the absent daemon.
    s = daemon(script(away), timeout_ms=60_000)
    res = _loop.resolve(dkey(), "m:k@0", "[i:1]", "3.x", lambda a: rows())
    assert len(s.decides) == 1 and res.answer.daemon_away, res
    assert _loop.no_decision(res.answer) == "the daemon was unreachable (or had just restarted) until the deadline"


def test_lost_claims_are_asked_again_and_noted(daemon):
    """A report refused as stale asks again; the pass is measured once; the
    count comes back, and the Inductor adapter notes it on the key."""
    def script():
        return Scripted(lambda n: answer(_native.OUTCOME_DESIGNATED, claim=n + 1),
                        lambda n: (_ for _ in ()).throw(stale()) if n == 0 else
                        answer(_native.OUTCOME_DECIDED, "BLOCK=16"))

    s = daemon(script())
    passes = []
    res = _loop.resolve(dkey(), "m:k@0", "[i:1]", "3.x", lambda a: passes.append(a.claim_id) or rows())
    assert passes == [1] and len(s.reports) == 2 and s.reports[0] == s.reports[1]
    assert res.lost == 1 and res.answer.config == "BLOCK=16" and res.answer.outcome == _native.OUTCOME_DECIDED
    s = daemon(script())
    measured = []
    out = _inductor.decide("inductor::k@0", "k", "key-lost", CANDS, lambda: measured.append(1) or rows(),
                           lambda c: c[0])
    assert out.config == "BLOCK=16" and out.timed_here and "claim lost 1x" in out.note
    assert measured == [1] and len(s.reports) == 2


def test_rounds_count_designations_and_keep_the_last_reason(daemon):
    """At most MAX_ASKS designations; the reason says the claim was lost
    that often and gives the last report's error (Inductor used to say
    nothing; the native loop said only the count)."""
    def script():
        return Scripted(lambda n: answer(_native.OUTCOME_DESIGNATED, claim=n + 1),
                        lambda n: (_ for _ in ()).throw(stale()))

    s = daemon(script(), timeout_ms=60_000)
    res = _loop.resolve(dkey(), "m:k@0", "[i:1]", "3.x", lambda a: rows())
    assert len(s.decides) == _loop.MAX_ASKS and res.lost == _loop.MAX_ASKS
    assert res.answer is None and "claim 7" in res.reason
    assert res.reason.startswith(f"the claim was lost {_loop.MAX_ASKS} times: no decision (last report failed:")
    s = daemon(script(), timeout_ms=60_000)
    with pytest.raises(_loop.MissError, match="report failed"):
        _inductor.decide("inductor::k@0", "k", "key-rounds", CANDS, rows, lambda c: c[0])
    assert len(s.decides) == _loop.MAX_ASKS


def test_pass_failed_everywhere_raises(daemon):
    """The daemon's verdict that every candidate failed ends the key, on
    the reporter (its report's error) and on a waiter (its Decide's)."""
    nocand = _native.DetdError("detd_report", -1017, "DETD_ENOCAND", _loop.NOCAND_TEXT, _loop.NOCAND_TEXT)
    daemon(Scripted(lambda n: answer(_native.OUTCOME_DESIGNATED, claim=1), lambda n: (_ for _ in ()).throw(nocand)))
    res = _loop.resolve(dkey(), "m:k@0", "[i:1]", "3.x", lambda a: rows())
    assert res.report_error is nocand and _loop.NOCAND_TEXT in res.reason
    with pytest.raises(_loop.PassFailedError):
        _inductor.decide("inductor::k@0", "k", "key-nocand", CANDS, rows, lambda c: c[0])
    waiter = _native.DetdError("detd_decide", _native.ESTALE, "DETD_ESTALE", _loop.NOCAND_TEXT)
    daemon(Scripted(lambda n: (_ for _ in ()).throw(waiter)))
    res = _loop.resolve(dkey(), "m:k@0", "[i:1]", "3.x", lambda a: rows())
    assert res.answer is None and res.rows is None and _loop.NOCAND_TEXT in res.reason
    with pytest.raises(_loop.PassFailedError):
        _inductor.decide("inductor::k@0", "k", "key-nocand-waiter", CANDS, rows, lambda c: c[0])


def test_no_decision_falls_back_loudly(daemon):
    """A miss with on_miss=first: the first candidate, warned once and
    observed as a fallback, in both adapters alike."""
    s = daemon(Scripted(lambda n: answer(_native.OUTCOME_MISS)), on_miss="first", mode="pinned")
    res = _loop.resolve(dkey(), "m:k@0", "[i:1]", "3.x", lambda a: rows())
    assert res.answer.outcome == _native.OUTCOME_MISS and len(s.decides) == 1
    assert _loop.no_decision(res.answer) == "no decision stored and none in the tables"
    with pytest.warns(RuntimeWarning, match="on_miss=first"):
        out = _inductor.decide("inductor::k@0", "k", "key-miss", CANDS, rows, lambda c: c[-1])
    assert out.config == CANDS[0] and out.source == _native.SOURCE_FALLBACK
    assert s.observed[-1] == (CANDS[0], _native.SOURCE_FALLBACK)
