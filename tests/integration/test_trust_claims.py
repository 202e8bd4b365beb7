"""A claim belongs to the session that got it, observations carry who the
daemon saw, and nothing waits without a bound: through the real socket and
the real daemon.

Callers: detd_client.py processes (libdetd through ctypes, attached),
small inline libdetd scripts, and raw gRPC calls (detd_probe), some of them
run as uid 65534 through setpriv (root only, as in test_access.py).
"""
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import CLIENT, IS_ROOT, PROBE, Daemon, counter, requires
from test_promises import (CANDS, DEADLINE, KERNEL, _decode, _f, dkey, held_for_ms, identity, poll,
                           raw_call, raw_decide, ready_waiter, result)

NOBODY = 65534
INVALID_ARGUMENT, PERMISSION_DENIED, FAILED_PRECONDITION = 3, 7, 9
TIMEOUT = 4  # Outcome OUTCOME_TIMEOUT


def as_nobody():
    return ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]


def probe_start(d, method, body, prefix=(), deadline_ms=None):
    """A raw call started, optionally as another user; probe_end() reads it."""
    env = dict(os.environ, DETD_PROBE_RESPONSE="1")
    if deadline_ms is not None:
        env["DETD_PROBE_DEADLINE_MS"] = str(deadline_ms)
    return subprocess.Popen([*prefix, str(PROBE), d.socket, method, "--hex", body.hex()],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def probe_end(p):
    """(code, message, fields) of a call started by probe_start()."""
    try:
        out, err = p.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
        raise
    lines = out.strip().splitlines()
    assert len(lines) == 2 and lines[0].startswith("status="), (p.returncode, out, err)
    code, _, msg = lines[0].partition(" message=")
    return int(code[len("status="):]), msg, _decode(bytes.fromhex(lines[1][len("response="):]))


def probe(d, method, body, prefix=(), deadline_ms=None):
    """A raw call, optionally as another user: (code, message, fields)."""
    return probe_end(probe_start(d, method, body, prefix, deadline_ms))


def report_body(claim, fastest, session=0, key="i:0", rank=0, kernel=KERNEL):
    body = _f(1, 1) + _f(2, identity(rank)) + (_f(3, session) if session else b"") + _f(4, claim)
    body += _f(5, dkey(key, kernel=kernel))
    import struct
    for c in CANDS:
        ms = 1.0 if c == fastest else 5.0
        body += _f(6, _f(1, c) + _f(2, struct.pack("<3d", ms, ms, ms)))
    return body + _f(7, "3.6.0")


def observe_body(config, rank, host="node-a", pid=0, key="i:0"):
    ident = _f(1, host) + (_f(2, pid) if pid else b"") + _f(3, rank)
    return _f(1, 1) + _f(2, ident) + _f(3, dkey(key)) + _f(4, config) + _f(5, 1) + _f(6, 1)


def holder(d, tmp, name, *args):
    """An attached client designated for key i:0 that stops before timing;
    returns (process, claim id)."""
    f = tmp / f"{name}.claim"
    p = d.client("--keys", 1, "--hold", *args, stdout=subprocess.PIPE, text=True,
                 env=dict(os.environ, DETD_CLIENT_CLAIM_FILE=str(f)))
    assert p.stdout.readline().strip() == "HOLD"
    return p, int(f.read_text())


def stop(p):
    try:
        os.kill(p.pid, signal.SIGCONT)
    except ProcessLookupError:
        pass
    p.kill()
    p.wait()


def session_of(d, pid):
    st = d.status()
    ids = [c["session_id"] for c in st["clients"] if c["client"]["pid"] == pid]
    assert len(ids) == 1, st["clients"]
    return ids[0]


# ---- claims ---------------------------------------------------------------------

@requires(IS_ROOT, "needs root to switch users")
def test_claim_ids_are_not_guessable_and_another_user_cannot_commit_a_claim(tmpdir_short):
    os.chmod(tmpdir_short, 0o755)
    d = Daemon(tmpdir_short, ["--socket-mode", "0666"]).start()
    hs = []
    try:
        h1, c1 = holder(d, tmpdir_short, "a", "--kernel", "m.a:k@aaaaaaaaaaaaaaaa")
        h2, c2 = holder(d, tmpdir_short, "b", "--kernel", "m.b:k@bbbbbbbbbbbbbbbb")
        hs = [h1, h2]
        # 63 random bits: neither small nor consecutive.
        assert c1 > 1 << 32 and c2 > 1 << 32 and abs(c1 - c2) > 1000, (c1, c2)
        # uid 65534 tries the ids a counter would have given, then the real
        # one (learned some other way) without the session, then with it.
        codes = set()
        for guess in (1, 2, 3, c1):
            code, msg, _ = probe(d, "/detd.v1.Decider/Report",
                                 report_body(guess, CANDS[0], kernel="m.a:k@aaaaaaaaaaaaaaaa"),
                                 prefix=as_nobody())
            codes.add(code)
            assert code != 0, (guess, msg)
        code, msg, _ = probe(d, "/detd.v1.Decider/Report",
                             report_body(c1, CANDS[0], session=session_of(d, h1.pid),
                                         kernel="m.a:k@aaaaaaaaaaaaaaaa"),
                             prefix=as_nobody())
        assert code == PERMISSION_DENIED, (code, msg)
        assert "attached by pid %d" % h1.pid in msg and "uid 65534" in msg, msg
        st = d.status()
        assert st["decisions"] == 0 and st["open_claims"] == 2, st
        assert counter(st, "reports_refused") == 2, st  # the real id, twice
        assert PERMISSION_DENIED in codes and FAILED_PRECONDITION in codes, codes
    finally:
        for h in hs:
            stop(h)
        d.stop()


def test_report_from_another_session_is_refused_and_the_claim_stays(tmpdir_short):
    d = Daemon(tmpdir_short).start()
    h = None
    try:
        h, claim = holder(d, tmpdir_short, "h")
        # Another process (the probe) names the holder's claim: not its session.
        code, msg, _ = raw_call(d, "/detd.v1.Decider/Report", report_body(claim, CANDS[1]))
        assert code == PERMISSION_DENIED, (code, msg)
        assert "belongs to another session" in msg, msg
        # ... nor may it borrow the holder's session id.
        code, msg, _ = raw_call(d, "/detd.v1.Decider/Report",
                                report_body(claim, CANDS[1], session=session_of(d, h.pid)))
        assert code == PERMISSION_DENIED and "not by this caller" in msg, (code, msg)
        st = d.status()
        assert st["open_claims"] == 1 and st["decisions"] == 0, st
        assert counter(st, "reports_refused") == 2, st
        # The claim is intact: a waiter still waits on it, and takes it over
        # only when the holder goes away.
        w = d.client("--keys", 1, "--rank", 1, out=tmpdir_short / "w.json")
        poll("a waiter", lambda: d.status()["waiters"] == 1)
        stop(h)
        h = None
        assert w.wait(DEADLINE) == 0
        e = result(tmpdir_short / "w.json")["keys"]["i:0"]
        assert e["timed"] and e["takeover"], e
    finally:
        if h is not None:
            stop(h)
        d.stop()


def test_unattached_decide_is_never_designated(daemon, tmpdir_short):
    code, msg, _ = raw_decide(daemon)
    assert code == FAILED_PRECONDITION, (code, msg)
    assert "not attached" in msg, msg
    st = daemon.status()
    assert st["open_claims"] == 0 and counter(st, "timing_passes") == 0, st
    assert counter(st, "unattached_refused") == 1, st
    # An attached rank is designated as usual.
    p = daemon.client("--keys", 1, out=tmpdir_short / "a.json")
    assert p.wait(DEADLINE) == 0
    assert result(tmpdir_short / "a.json")["keys"]["i:0"]["timed"] is True


def test_a_decision_records_who_the_daemon_saw_report_it(tmpdir_short):
    d = Daemon(tmpdir_short, ["--node-id", "peer-node-7"]).start()
    try:
        p = d.client("--keys", 1, "--rank", 2, out=tmpdir_short / "r.json")
        assert p.wait(DEADLINE) == 0
        r = result(tmpdir_short / "r.json")
        assert r["keys"]["i:0"]["timed"] is True, r
        out = d.detctl("decisions", "--json", check=True).stdout
        (dec,) = json.loads(out)["decisions"]
        assert dec["source"] == "timed" and dec["config"] == r["keys"]["i:0"]["config"], dec
        # What the client claimed (libdetd writes its own pid) ...
        assert dec["decided_by"]["pid"] == r["pid"] and dec["decided_by"]["rank"] == 2, dec
        # ... and what the kernel said about the socket's other end.
        assert dec["decided_peer"] == {"pid": p.pid, "uid": os.getuid(),
                                       "node": "peer-node-7", "claimed_pid": r["pid"]}, dec
        assert p.pid == r["pid"]
        # The same from the store, across a restart.
        d.stop()
        d.start()
        again = json.loads(d.detctl("decisions", "--json", check=True).stdout)["decisions"]
        assert again[0]["decided_peer"] == dec["decided_peer"], again
    finally:
        d.stop()


# ---- observations ---------------------------------------------------------------

@requires(IS_ROOT, "needs root to switch users")
def test_observation_cannot_be_overwritten_and_verify_shows_who_the_daemon_saw(tmpdir_short):
    os.chmod(tmpdir_short, 0o755)
    d = Daemon(tmpdir_short, ["--socket-mode", "0666"]).start()
    try:
        # Rank 1 decides and launches another config: a real divergence.
        p = d.client("--keys", 1, "--rank", 1, "--observe", "--use", "other",
                     out=tmpdir_short / "r1.json")
        assert p.wait(DEADLINE) == 0
        r1 = result(tmpdir_short / "r1.json")
        winner = r1["keys"]["i:0"]["config"]
        assert d.detctl("verify").returncode == 1
        # uid 65534 writes rank 1's identity (host, pid, rank) with the
        # decided config, to turn the divergence into "ok".
        code, msg, _ = probe(d, "/detd.v1.Decider/Observe",
                             observe_body(winner, rank=1, pid=r1["pid"]), prefix=as_nobody())
        assert code == 0, msg
        # verify's default job is the one this user's processes observed
        # last ("it"), not the forger's later row (another uid, no label).
        v = d.detctl("verify")
        assert v.returncode == 1, v.stdout
        assert v.stdout.startswith("job: it (observed last by this user's processes"), v.stdout
        v = d.detctl("verify", "--all-jobs")
        assert v.returncode == 1, v.stdout
        vj = json.loads(d.detctl("verify", "--json", "--all-jobs").stdout)
        assert vj["ok"] is False and len(vj["divergences"]) == 1, vj
        uses = {u["config"]: u for u in vj["divergences"][0]["uses"]}
        assert len(uses) == 2 and winner in uses, uses
        real = next(u for c, u in uses.items() if c != winner)
        forged = uses[winner]
        # Both rows claim pid r1["pid"]; the daemon saw two processes.
        assert [c["pid"] for c in real["clients"]] == [r1["pid"]], real
        assert [c["pid"] for c in forged["clients"]] == [r1["pid"]], forged
        assert real["peers"][0]["pid"] == r1["pid"] and real["peers"][0]["uid"] == os.getuid(), real
        assert forged["peers"][0]["pid"] != r1["pid"] and forged["peers"][0]["uid"] == NOBODY, forged
        assert forged["peers"][0]["node"] != "" and forged["peers"][0]["node"] == real["peers"][0]["node"]
        assert "uid 65534" in v.stdout and "claimed pid differs" in v.stdout, v.stdout
    finally:
        d.stop()


# ---- nothing waits without a bound ----------------------------------------------

# An attached process designated for KEY of KERNEL: says so with whether
# its daemon passes claims on and the claim id, then waits for GO.
#   python -c DESIGNATED_RANK+tail CLIENT SOCKET KERNEL KEY GO [more]
DESIGNATED_RANK = r"""
import ctypes, os, sys, time
sys.path.insert(0, os.path.dirname(sys.argv[1]))
import detd_client as dc
sock, kernel, keystr, go = sys.argv[2:6]
lib = dc.load()
lib.detd_claim_pass_on.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.POINTER(dc.Key), ctypes.c_int64]
lib.detd_client_can_pass_on.argtypes = [ctypes.c_void_p]
ident = dc.Identity(b"node-a", 0, 0, 16, b"Test GPU", b"sm90", 132, b"it")
cl = ctypes.c_void_p()
assert lib.detd_client_open(sock.encode(), ctypes.byref(ident), ctypes.byref(cl)) == 0
cands = [f"BLOCK={16 << i},num_warps=4".encode() for i in range(4)]
arr = (ctypes.c_char_p * 4)(*cands)
key = dc.Key(None, b"sm90", kernel.encode(), keystr.encode(), arr, 4, None)
ans = ctypes.POINTER(dc.Answer)()
assert lib.detd_decide(cl, ctypes.byref(key), 0, 60000, ctypes.byref(ans)) == 0
assert ans.contents.outcome == dc.DESIGNATED
print("DESIGNATED", lib.detd_client_can_pass_on(cl), ans.contents.claim_id, flush=True)
while not os.path.exists(go):
    time.sleep(0.005)
"""

# ... then reports every candidate failed: the daemon cannot pick a winner.
REJECTING_RANK = DESIGNATED_RANK + r"""
tms = [dc.Timing(c, None, 0, 1) for c in cands]
tarr = (dc.Timing * 4)(*tms)
rep = ctypes.POINTER(dc.Answer)()
t = time.monotonic()
rc = lib.detd_report(cl, ans.contents.claim_id, ctypes.byref(key), tarr, 4, b"3.6.0", 60000, ctypes.byref(rep))
print("REPORTED", rc, repr(time.time()), flush=True)
lib.detd_client_close(cl)
"""


# ... then asks again under the claim it holds (as an early claim's holder
# does at lookup), prints whether that is the same claim, and reports
# timings in which BLOCK=16 is fastest.
ASKING_AGAIN_RANK = DESIGNATED_RANK + r"""
again = ctypes.POINTER(dc.Answer)()
assert lib.detd_decide(cl, ctypes.byref(key), 0, 60000, ctypes.byref(again)) == 0
print("AGAIN", int(again.contents.outcome == dc.DESIGNATED),
      int(again.contents.claim_id == ans.contents.claim_id), flush=True)
ms = [(ctypes.c_double * 1)(1.0 + i) for i in range(4)]
tarr = (dc.Timing * 4)(*[dc.Timing(c, m, 1, 0) for c, m in zip(cands, ms)])
rep = ctypes.POINTER(dc.Answer)()
rc = lib.detd_report(cl, ans.contents.claim_id, ctypes.byref(key), tarr, 4, b"3.6.0", 60000, ctypes.byref(rep))
print("REPORTED", rc, rep.contents.config.decode() if rc == 0 else "-", flush=True)
lib.detd_client_close(cl)
"""


def ask_again_and_report(sock, key, tmp):
    """Run ASKING_AGAIN_RANK on sock for key; its output lines, split."""
    go = tmp / f"go-again-{key.replace(':', '_')}"
    go.write_text("")
    p = subprocess.run([sys.executable, "-c", ASKING_AGAIN_RANK, str(CLIENT), sock, KERNEL, key, str(go)],
                       capture_output=True, text=True, timeout=DEADLINE)
    assert p.returncode == 0, p.stderr
    return [ln.split() for ln in p.stdout.splitlines()]


def test_asking_again_under_a_held_claim_is_the_same_pass(tmpdir_short):
    """A holder that asks again for its key under the claim it holds is
    designated under the same claim, and the daemon counts one timing
    pass, not two; its report commits as usual."""
    d = Daemon(tmpdir_short).start()
    try:
        lines = ask_again_and_report(d.socket, "i:0", tmpdir_short)
        assert lines[0][0] == "DESIGNATED" and lines[1] == ["AGAIN", "1", "1"], lines
        assert lines[2][:2] == ["REPORTED", "0"] and lines[2][2].startswith("BLOCK=16"), lines
        st = d.status()
        assert counter(st, "timing_passes") == 1 and st["decisions"] == 1, st["counters"]
        # A second key, a second pass: the counter still counts passes.
        assert ask_again_and_report(d.socket, "i:1", tmpdir_short)[1] == ["AGAIN", "1", "1"]
        assert counter(d.status(), "timing_passes") == 2
    finally:
        d.stop()


def test_rejected_report_ends_the_claim_and_every_waiter_gets_the_reason_at_once(tmpdir_short):
    d = Daemon(tmpdir_short).start()
    n = 5
    timeout_ms = 30000  # each waiter's bound
    try:
        go = tmpdir_short / "go"
        h = subprocess.Popen([sys.executable, "-c", REJECTING_RANK, str(CLIENT), d.socket, KERNEL, "i:0", str(go)],
                             stdout=subprocess.PIPE, text=True)
        assert h.stdout.readline().split()[0] == "DESIGNATED"
        ws = [d.client("--keys", 1, "--rank", r, "--timeout-ms", timeout_ms, out=tmpdir_short / f"w{r}.json")
              for r in range(1, n + 1)]
        poll(f"{n} waiters", lambda: d.status()["waiters"] == n)
        go.write_text("")
        line = h.stdout.readline().split()
        assert line[0] == "REPORTED" and int(line[1]) != 0, line  # the report itself is refused
        t_reject = float(line[2])
        assert h.wait(DEADLINE) == 0
        for w in ws:
            assert w.wait(DEADLINE) == 0
        done = time.time()
        for r in range(1, n + 1):
            res = result(tmpdir_short / f"w{r}.json")
            assert res["keys"] == {} and len(res["errors"]) == 1, res
            assert "was rejected by the daemon" in res["errors"][0][3], res
            assert "no candidate has a valid timing" in res["errors"][0][3], res
        # All answered right after the rejection, not at their own bound:
        # half of it leaves room for 6 Python processes' exits on a busy
        # machine.
        assert done - t_reject < timeout_ms / 1000 / 2, done - t_reject
        st = d.status()
        assert counter(st, "timing_passes") == 1, st  # nobody timed it again
        assert counter(st, "reports_rejected") == 1 and counter(st, "takeovers") == 0, st
        assert st["open_claims"] == 0 and st["waiters"] == 0 and st["decisions"] == 0, st
    finally:
        d.stop()


# ... then passes its claim on, twice, and stays attached until DONE (the
# argument after GO) exists.
PASSING_RANK = DESIGNATED_RANK + r"""
done = sys.argv[6]
claim = ans.contents.claim_id
rc = lib.detd_claim_pass_on(cl, claim, ctypes.byref(key), 60000)
again = lib.detd_claim_pass_on(cl, claim, ctypes.byref(key), 60000)  # no longer held
print("PASSED", rc, again, flush=True)
while not os.path.exists(done):  # stays attached: no session end explains a designation
    time.sleep(0.005)
lib.detd_client_close(cl)
"""


def test_a_claim_passed_on_designates_the_oldest_waiter_and_tells_nobody_else(tmpdir_short):
    """``detd_claim_pass_on``: the holder, still attached, gives its claim
    up untimed. The oldest waiter is designated (not a takeover) and times
    the key; the others get its decision; nobody is failed. Passed on
    with no waiter, the claim is dropped and the next asker times. Another
    process cannot pass a claim on that is not its own."""
    d = Daemon(tmpdir_short).start()
    n = 3
    procs = []
    try:
        go, done = tmpdir_short / "go", tmpdir_short / "done"
        h = subprocess.Popen([sys.executable, "-c", PASSING_RANK, str(CLIENT), d.socket, KERNEL, "i:0", str(go),
                              str(done)], stdout=subprocess.PIPE, text=True)
        procs.append(h)
        line = h.stdout.readline().split()
        assert line[:2] == ["DESIGNATED", "1"], line  # the daemon names the feature
        # Another process naming the holder's claim: refused, the claim stays.
        body = _f(1, 1) + _f(2, identity(5)) + _f(4, int(line[2])) + _f(5, dkey("i:0")) + _f(10, 1)
        code, msg, _ = raw_call(d, "/detd.v1.Decider/Report", body)
        assert code == PERMISSION_DENIED and "belongs to another session" in msg, (code, msg)
        assert d.status()["open_claims"] == 1
        ws = []
        for r in range(1, n + 1):
            ws.append(d.client("--keys", 1, "--rank", r, "--sleep-ms", 1, out=tmpdir_short / f"w{r}.json"))
            poll(f"waiter {r}", lambda r=r: d.status()["waiters"] == r)  # in this order: rank 1 is the oldest
        procs += ws
        go.write_text("")
        line = h.stdout.readline().split()
        assert line[:2] == ["PASSED", "0"] and int(line[2]) == -1007, line  # then DETD_ESTALE
        for w in ws:
            assert w.wait(DEADLINE) == 0
        res = [result(tmpdir_short / f"w{r}.json")["keys"]["i:0"] for r in range(1, n + 1)]
        assert [e["timed"] for e in res] == [True, False, False], res
        assert not res[0]["takeover"] and len({e["config"] for e in res}) == 1, res
        assert h.poll() is None  # the holder is still attached
        st = d.status()
        assert counter(st, "passes_passed_on") == 1 and counter(st, "takeovers") == 0, st
        assert counter(st, "reports_rejected") == 0 and st["decisions"] == 1, st
        assert "passed on before timing by pid %d (rank 0)" % h.pid in d.read_log()
        assert "the oldest waiter holds it now" in d.read_log()
        done.write_text("")
        assert h.wait(DEADLINE) == 0

        # No waiter: dropped; the next asker is designated and times.
        go2, done2 = tmpdir_short / "go2", tmpdir_short / "done2"
        h2 = subprocess.Popen([sys.executable, "-c", PASSING_RANK, str(CLIENT), d.socket, KERNEL, "i:1", str(go2),
                               str(done2)], stdout=subprocess.PIPE, text=True)
        procs.append(h2)
        assert h2.stdout.readline().split()[:2] == ["DESIGNATED", "1"]
        assert d.status()["open_claims"] == 1
        go2.write_text("")
        assert h2.stdout.readline().split()[:2] == ["PASSED", "0"]
        assert d.status()["open_claims"] == 0
        assert "no waiter: dropped" in d.read_log()
        w = d.client("--keys", 2, "--rank", 4, "--sleep-ms", 1, out=tmpdir_short / "late.json")
        procs.append(w)
        assert w.wait(DEADLINE) == 0
        e = result(tmpdir_short / "late.json")["keys"]["i:1"]
        assert e["timed"] and not e["takeover"], e
        assert counter(d.status(), "passes_passed_on") == 2
        done2.write_text("")
        assert h2.wait(DEADLINE) == 0
    finally:
        for p in procs:
            stop(p)
        d.stop()


# ... then sends the raw Reports of BODIES (hex, a line each) from its own
# process (libdetd_probe: the daemon sees this session's pid), prints each
# status, and once THEN exists passes its claim on as libdetd does.
#   python -c RAW_PASSING_RANK CLIENT SOCKET KERNEL KEY GO BODIES THEN
RAW_PASSING_RANK = DESIGNATED_RANK + r"""
bodies, then = sys.argv[6:8]
probe = ctypes.CDLL(str(dc.BUILD / "tests" / "libdetd_probe.so"))
probe.detd_probe_call.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t,
                                  ctypes.c_long, ctypes.POINTER(ctypes.c_int), ctypes.c_char_p, ctypes.c_size_t,
                                  ctypes.c_void_p, ctypes.c_void_p]
for hx in open(bodies).read().split():
    body = bytes.fromhex(hx)
    code, msg = ctypes.c_int(-1), ctypes.create_string_buffer(4096)
    assert probe.detd_probe_call(sock.encode(), b"/detd.v1.Decider/Report", body, len(body), 10000,
                                 ctypes.byref(code), msg, len(msg), None, None) == 0
    print("RAW", code.value, msg.value.decode(), flush=True)
while not os.path.exists(then):
    time.sleep(0.005)
print("PASSED", lib.detd_claim_pass_on(cl, ans.contents.claim_id, ctypes.byref(key), 60000), flush=True)
lib.detd_client_close(cl)
"""


def test_a_pass_on_carrying_timings_or_an_env_error_is_refused_and_the_claim_stays(tmpdir_short):
    """A pass-on says the key was not timed: the claim's own session
    sending one with timings, or with an environment error, gets
    INVALID_ARGUMENT naming what came with it, and nothing happens to the
    claim: nothing is stored, the waiter still waits, and the plain
    pass-on that follows designates it."""
    d = Daemon(tmpdir_short).start()
    procs = []
    try:
        go, bodies, then = tmpdir_short / "go", tmpdir_short / "bodies", tmpdir_short / "then"
        h = subprocess.Popen([sys.executable, "-c", RAW_PASSING_RANK, str(CLIENT), d.socket, KERNEL, "i:0", str(go),
                              str(bodies), str(then)], stdout=subprocess.PIPE, text=True)
        procs.append(h)
        line = h.stdout.readline().split()
        assert line[:2] == ["DESIGNATED", "1"], line
        claim, session = int(line[2]), session_of(d, h.pid)
        head = _f(1, 1) + _f(2, identity(0)) + _f(3, session) + _f(4, claim) + _f(5, dkey("i:0"))
        with_timings = report_body(claim, CANDS[0], session=session) + _f(10, 1)
        with_env_error = head + _f(8, "no device") + _f(10, 1)
        bodies.write_text(with_timings.hex() + "\n" + with_env_error.hex() + "\n")
        w = d.client("--keys", 1, "--rank", 1, "--sleep-ms", 1, out=tmpdir_short / "w.json")
        procs.append(w)
        poll("the waiter", lambda: d.status()["waiters"] == 1)
        go.write_text("")
        for what in ("timings", "env_error"):
            tag, code, msg = h.stdout.readline().rstrip("\n").split(" ", 2)
            assert tag == "RAW" and int(code) == INVALID_ARGUMENT, (what, code, msg)
            assert msg.startswith("pass_on: a claim passed on carries no %s " % what), msg
            assert "the claim is still held" in msg, msg
        st = d.status()
        assert st["open_claims"] == 1 and st["waiters"] == 1 and st["decisions"] == 0, st
        assert counter(st, "rejected") == 2 and counter(st, "reports_refused") == 0, st
        assert counter(st, "passes_passed_on") == 0 and counter(st, "reports_rejected") == 0, st
        assert counter(st, "passes_env_released") == 0 and counter(st, "timing_passes") == 1, st
        assert w.poll() is None
        # The claim is whole: the holder's plain pass-on designates the waiter.
        then.write_text("")
        assert h.stdout.readline().split() == ["PASSED", "0"]
        assert w.wait(DEADLINE) == 0
        e = result(tmpdir_short / "w.json")["keys"]["i:0"]
        assert e["timed"] and not e["takeover"], e
        st = d.status()
        assert counter(st, "passes_passed_on") == 1 and st["decisions"] == 1, st
        assert h.wait(DEADLINE) == 0
    finally:
        for p in procs:
            stop(p)
        d.stop()


def test_a_failed_pass_records_who_the_daemon_saw_report_it(tmpdir_short):
    d = Daemon(tmpdir_short, ["--node-id", "fail-node-3"]).start()
    try:
        go = tmpdir_short / "go"
        go.write_text("")
        h = subprocess.Popen([sys.executable, "-c", REJECTING_RANK, str(CLIENT), d.socket, KERNEL, "i:0", str(go)],
                             stdout=subprocess.PIPE, text=True)
        assert h.stdout.readline().split()[0] == "DESIGNATED"
        line = h.stdout.readline().split()
        assert line[0] == "REPORTED" and int(line[1]) != 0, line
        assert h.wait(DEADLINE) == 0
        d.wait_log(f"reported by pid {h.pid} uid {os.getuid()} on fail-node-3")
        # A rerun gets the failure at once, naming the reporting process.
        w = d.client("--keys", 1, "--rank", 1, "--timeout-ms", 30000, out=tmpdir_short / "w.json")
        assert w.wait(DEADLINE) == 0
        res = result(tmpdir_short / "w.json")
        assert res["keys"] == {} and len(res["errors"]) == 1, res
        assert f"pid {h.pid} " in res["errors"][0][3], res
        assert counter(d.status(), "timing_passes") == 1
    finally:
        d.stop()
    store = Path(d.state) / "detd.sqlite"
    with sqlite3.connect(f"file:{store}?mode=ro", uri=True) as ro:
        rows = ro.execute("SELECT by_pid, claimed_pid, by_uid, by_node, by_rank, reason"
                          " FROM failures").fetchall()
    # The pid and uid the kernel saw, the daemon's node; libdetd writes
    # its own pid, so the claim agrees here.
    assert len(rows) == 1, rows
    assert rows[0][:5] == (h.pid, h.pid, os.getuid(), "fail-node-3", 0), rows
    assert "no candidate has a valid timing" in rows[0][5], rows


def test_hung_timing_rank_loses_its_claim_at_the_pass_deadline(tmpdir_short):
    pass_ms = 1000
    d = Daemon(tmpdir_short, ["--pass-timeout-ms", str(pass_ms)]).start()
    h = w = None
    try:
        # Up before the claim exists: within pass_ms it only has to ask.
        w, go = ready_waiter(d, tmpdir_short, "w", "--keys", 1, "--rank", 1)
        h, _ = holder(d, tmpdir_short, "h")
        os.kill(h.pid, signal.SIGSTOP)  # hung: stream open, nothing sent
        go()
        assert w.wait(DEADLINE) == 0
        e = result(tmpdir_short / "w.json")["keys"]["i:0"]
        assert e["timed"] and e["takeover"], e
        held = held_for_ms(d, h.pid)
        assert held >= pass_ms * 0.9, f"designated before the pass deadline: {held} ms"
        st = d.status()
        assert counter(st, "waits") == 1, st  # the other rank waited on the hung rank's claim
        assert counter(st, "pass_timeouts") == 1 and st["decisions"] == 1, st
        assert any(c["client"]["pid"] == h.pid for c in st["clients"]), "the hung rank stays attached"
    finally:
        if h is not None:
            stop(h)
        if w is not None:
            w.kill()
            w.wait()
        d.stop()


# decide_answer_by (daemon/app/decide.c): a held Decide is answered this
# long before the caller's deadline, for the room the answer needs to travel.
def answer_margin_ms(deadline_ms):
    return min(max(deadline_ms // 20, 50), 2000)


DEADLINE_EXCEEDED = 4  # grpc status


def test_answers_leave_before_the_callers_deadline(tmpdir_short):
    """Raw Decides with no wait_ms, waiting on a held claim: each one is
    answered OUTCOME_TIMEOUT by the daemon, answer_margin_ms() before its
    deadline, and not cut off by it.

    Short deadlines (60-180 ms, a 50 ms margin) run 200 calls through the
    daemon's answering; a probe that stalls 50 ms on a busy machine can miss
    its own deadline there, so whether the answer arrives in time is asked of
    long deadlines, whose margin is hundreds of ms. Both check when the
    daemon answered (waited_ms), which a margin too thin fails every time."""
    d = Daemon(tmpdir_short).start()
    h = None
    longs = []
    try:
        h, _ = holder(d, tmpdir_short, "h")
        body = _f(1, 1) + _f(2, identity(9)) + _f(4, dkey())
        # Asked alongside the short calls, which take longer in all
        # (200 waits of 10-130 ms plus a process each).
        for deadline in (6000, 8000, 10000):
            longs.append((deadline, probe_start(d, "/detd.v1.Decider/Decide", body,
                                                deadline_ms=deadline)))
        wrong, cut, early = [], 0, 0
        n = 200
        for i in range(n):
            deadline = 60 + (i % 5) * 30
            code, msg, r = probe(d, "/detd.v1.Decider/Decide", body, deadline_ms=deadline)
            if code == DEADLINE_EXCEEDED:
                cut += 1  # the probe itself missed it: no answer to check
            elif code != 0 or r.get(2) != [TIMEOUT]:
                wrong.append((deadline, code, msg, r))
            elif r.get(7, [0])[0] <= deadline - answer_margin_ms(deadline) // 2:
                early += 1
        assert wrong == [], wrong[:5]
        # Answered at the margin, give or take the daemon's own wake-up
        # (late on a busy machine): a tenth of them at least within half of
        # it; a daemon answering at the deadline (the margin lost, or a few
        # ms of it left) none of them.
        assert early >= n // 10, (early, cut)
        for deadline, p in longs:
            code, msg, r = probe_end(p)
            assert code == 0 and r.get(2) == [TIMEOUT], (deadline, code, msg, r)
            assert r.get(7, [0])[0] <= deadline - answer_margin_ms(deadline) // 2, (deadline, r)
        longs = []
        # Every answer was the daemon's wait deadline, counted once; a call
        # the probe gave up on is counted only if its cancel came too late.
        assert n - cut + 3 <= counter(d.status(), "wait_timeouts") <= n + 3, cut
    finally:
        for _, p in longs:
            p.kill()
            p.wait()
        if h is not None:
            stop(h)
        d.stop()
