"""What docs/operating.md promises, through the real daemon: the timing pass
deadline (--pass-timeout-ms) and takeover, a superseded report and `detctl verify` naming
the rank that used another config, `detctl reset --kernel`,
`--max-waiters`, and a drain that answers its waiters and ends /healthz.

Callers are libdetd client processes (detd_client.py), detctl, and raw
gRPC calls (detd_probe): a raw call carries no session (it is never
designated) and its peer is the probe process.
"""
import json
import os
import re
import signal
import socket
import struct
import subprocess
import time
import urllib.error
import urllib.request
from datetime import datetime, timezone

import pytest

from conftest import PROBE, Daemon, ServeClient, clients_up, counter

KERNEL = "tests.integration:row_sum@0123456789abcdef"  # detd_client.py's default
CANDS = [f"BLOCK={16 << i},num_warps=4" for i in range(4)]  # its 4 candidates
DESIGNATED = 2  # Outcome OUTCOME_DESIGNATED
DEADLINE = 60  # seconds: generous bound for any phase on a loaded machine
ESTALE = -1007  # DETD_ESTALE
ETIMEDOUT = -1003  # DETD_ETIMEDOUT


# ---- protobuf by hand (the fields of proto/detd.proto used here) ------------

def _varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _f(num, payload):
    if isinstance(payload, str):
        payload = payload.encode()
    if isinstance(payload, int):
        return _varint(num << 3) + _varint(payload)
    return _varint((num << 3) | 2) + _varint(len(payload)) + payload


def _decode(buf):
    """{field number: [values]}; length-delimited values stay bytes."""
    out, i = {}, 0
    while i < len(buf):
        tag, i = _read_varint(buf, i)
        num, wt = tag >> 3, tag & 7
        if wt == 0:
            v, i = _read_varint(buf, i)
        elif wt == 2:
            n, i = _read_varint(buf, i)
            v, i = buf[i:i + n], i + n
        elif wt == 1:
            v, i = buf[i:i + 8], i + 8
        elif wt == 5:
            v, i = buf[i:i + 4], i + 4
        else:
            raise AssertionError(f"wire type {wt} in {buf.hex()}")
        out.setdefault(num, []).append(v)
    return out


def _read_varint(buf, i):
    n = shift = 0
    while True:
        b = buf[i]
        i += 1
        n |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return n, i


def dkey(key="i:0", kernel=KERNEL, cands=CANDS):
    b = _f(2, "sm90") + _f(3, kernel) + _f(4, key)
    for c in cands:
        b += _f(5, c)
    return b


def identity(rank, host="raw-host"):
    # ClientIdentity: host=1, rank=3 (the daemon records the pid itself)
    return _f(1, host) + _f(3, rank)


def raw_call(d, method, body):
    """A raw gRPC call with no session: (status code, message, response fields)."""
    env = dict(os.environ, DETD_PROBE_RESPONSE="1")
    r = subprocess.run([str(PROBE), d.socket, method, "--hex", body.hex()], capture_output=True,
                       text=True, timeout=30, env=env)
    lines = r.stdout.strip().splitlines()
    assert len(lines) == 2 and lines[0].startswith("status=") and lines[1].startswith("response="), r
    code, _, msg = lines[0].partition(" message=")
    return int(code[len("status="):]), msg, _decode(bytes.fromhex(lines[1][len("response="):]))


def raw_decide(d, key="i:0", rank=9):
    return raw_call(d, "/detd.v1.Decider/Decide", _f(1, 1) + _f(2, identity(rank)) + _f(4, dkey(key)))


def raw_report(d, claim, fastest, key="i:0", rank=9):
    """Report timings in which `fastest` wins."""
    body = _f(1, 1) + _f(2, identity(rank)) + _f(4, claim) + _f(5, dkey(key))
    for c in CANDS:
        ms = 1.0 if c == fastest else 5.0
        samples = struct.pack("<3d", ms, ms, ms)
        body += _f(6, _f(1, c) + _f(2, samples))
    body += _f(7, "3.6.0")
    return raw_call(d, "/detd.v1.Decider/Report", body)


def raw_observe(d, config, key="i:0", rank=9):
    body = _f(1, 1) + _f(2, identity(rank)) + _f(3, dkey(key)) + _f(4, config) + _f(5, 1) + _f(6, 1)
    return raw_call(d, "/detd.v1.Decider/Observe", body)


def poll(what, pred, timeout=DEADLINE, every=0.05):
    """Wait until pred() returns a true value (returned); fail naming what."""
    end = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        assert time.monotonic() < end, f"timed out after {timeout}s waiting for {what}"
        time.sleep(every)


def result(path):
    return json.loads(path.read_text())


def log_ms(d, pattern):
    """When the daemon logged the first line matching the regex pattern, by
    its own clock: ms since the epoch, from the line's timestamp."""
    for line in d.read_log().splitlines():
        if re.search(pattern, line):
            t = datetime.strptime(line.split()[0], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=timezone.utc)
            return round(t.timestamp() * 1000)
    raise AssertionError(f"no line matching {pattern!r} in the log:\n{d.read_log()[-4000:]}")


def held_for_ms(d, holder_pid):
    """How long the claim of the attached rank holder_pid lasted before it
    passed to a waiter (takeover), by the daemon's log: from the rank's
    attach, which comes before its Decide, so never shorter than the claim
    really lasted."""
    d.wait_log("passes to a waiter (takeover)")
    return (log_ms(d, r"passes to a waiter \(takeover\)")
            - log_ms(d, rf"attach session \d+: .* pid {holder_pid} "))


def ready_waiter(d, tmp, name, *args):
    """A detd_client.py up and attached that asks once go() is called: its
    interpreter's start stays out of any deadline it then races. Returns
    (process, go)."""
    start = tmp / f"{name}.go"
    p = d.client(*args, "--wait-start", start, out=tmp / f"{name}.json")
    clients_up(start, [p], DEADLINE)
    return p, start.touch


# ---- --pass-timeout-ms: a timing rank that went silent loses its claim --------

def test_silent_timing_rank_loses_its_claim_to_the_next_waiter_and_its_late_report_is_superseded(
        tmpdir_short):
    """The timing rank is attached and then stopped (SIGSTOP: its heartbeats
    stop, its Attach stream stays open). Its claim ends at --pass-timeout-ms,
    the waiting rank is designated (takeover) and commits; the stopped rank's
    report, arriving late, is superseded by the committed config."""
    pass_ms = 1500
    d = Daemon(tmpdir_short, ["--pass-timeout-ms", str(pass_ms)]).start()
    holder = w = None
    try:
        # The other rank is up before the claim exists: within pass_ms it
        # only has to ask.
        w, go = ready_waiter(d, tmpdir_short, "w", "--keys", 1, "--rank", 1, "--observe")
        claim_file = tmpdir_short / "claim"
        holder = d.client("--keys", 1, "--hold", stdout=subprocess.PIPE, text=True,
                          env=dict(os.environ, DETD_CLIENT_CLAIM_FILE=str(claim_file)))
        assert holder.stdout.readline().strip() == "HOLD"
        claim = int(claim_file.read_text())
        assert claim > 0
        os.kill(holder.pid, signal.SIGSTOP)
        # Another rank asks while the claim is held: it waits until the
        # pass deadline, then it is designated (takeover), times, and
        # commits its own winner.
        go()
        assert w.wait(DEADLINE) == 0
        held = held_for_ms(d, holder.pid)
        assert held >= pass_ms * 0.9, held  # not before the pass deadline
        e = result(tmpdir_short / "w.json")["keys"]["i:0"]
        assert e["timed"] is True and e["takeover"] is True and e["superseded"] is False, e
        winner = e["config"]
        st = d.status()
        assert counter(st, "waits") == 1, st  # it waited on the held claim
        assert counter(st, "takeovers") == 1 and counter(st, "pass_timeouts") == 1, st
        assert st["decisions"] == 1 and st["open_claims"] == 0, st
        # The silent rank's report arrives late, favouring another config:
        # it is superseded and answered with the committed config.
        other = next(c for c in CANDS if c != winner)
        code, msg, rep = raw_report(d, claim, other)
        assert code == 0, msg
        assert rep.get(3) == [1], rep  # superseded
        dec = _decode(rep[2][0])
        assert dec[7] == [winner.encode()], dec
        assert counter(d.status(), "reports_stale") == 1
        rows = json.loads(d.detctl("decisions", "--json", check=True).stdout)["decisions"]
        assert [r["config"] for r in rows] == [winner]
    finally:
        if holder is not None:
            os.kill(holder.pid, signal.SIGCONT)
            holder.kill()
            holder.wait()
        if w is not None:
            w.kill()
            w.wait()
        d.stop()


def test_verify_fails_naming_a_rank_that_used_another_config(daemon, tmpdir_short):
    """A rank whose observation differs from the decision (it launched its
    own pick, not the committed config): verify exits 1 and names the key,
    the rank and the config; once the deciding rank's observation is in too,
    the ranks disagree and verify still fails."""
    w = daemon.client("--keys", 1, "--rank", 1, out=tmpdir_short / "w.json")
    assert w.wait(DEADLINE) == 0
    winner = result(tmpdir_short / "w.json")["keys"]["i:0"]["config"]
    # Nothing observed yet: verify refuses to pass on nothing unless told.
    assert daemon.detctl("verify").returncode == 1
    assert daemon.detctl("verify", "--allow-empty").returncode == 0
    other = next(c for c in CANDS if c != winner)
    code, msg, _ = raw_observe(daemon, other, rank=5)
    assert code == 0, msg
    v = daemon.detctl("verify")
    assert v.returncode == 1, v.stdout + v.stderr
    assert "differs from decision" in v.stdout, v.stdout
    assert other in v.stdout and winner in v.stdout, v.stdout
    assert "rank 5" in v.stdout or "rank=5" in v.stdout, v.stdout
    vj = json.loads(daemon.detctl("verify", "--json").stdout)
    assert vj["ok"] is False and len(vj["divergences"]) == 1, vj
    div = vj["divergences"][0]
    assert div["reason"] == "differs from decision" and div["decided"] == winner, div
    assert [u["config"] for u in div["uses"]] == [other], div
    # The deciding rank reports what it launched: two configs for one key
    # (the raw observation carries no job label, the client's is "it":
    # every job is checked).
    p = daemon.client("--keys", 1, "--rank", 1, "--observe", out=tmpdir_short / "w2.json")
    assert p.wait(DEADLINE) == 0
    vj = json.loads(daemon.detctl("verify", "--json", "--all-jobs").stdout)
    assert vj["ok"] is False and [d["reason"] for d in vj["divergences"]] == ["ranks disagree"], vj
    assert sorted(u["config"] for u in vj["divergences"][0]["uses"]) == sorted([winner, other])


# ---- detctl reset --kernel -----------------------------------------------------

def test_reset_kernel_forgets_only_that_kernel(daemon, tmpdir_short):
    ka, kb = "m.a:kern@aaaaaaaaaaaaaaaa", "m.b:kern@bbbbbbbbbbbbbbbb"

    def run(kernel, tag, keys=3):
        p = daemon.client("--keys", keys, "--kernel", kernel, out=tmpdir_short / f"{tag}.json")
        assert p.wait(DEADLINE) == 0
        r = result(tmpdir_short / f"{tag}.json")
        assert r["errors"] == [], r
        return r["keys"]

    a1, b1 = run(ka, "a1"), run(kb, "b1")
    assert all(e["timed"] for e in a1.values()) and all(e["timed"] for e in b1.values())
    assert daemon.status()["decisions"] == 6
    # Answered from the store (and the hot cache) before the reset.
    assert not any(e["timed"] for e in run(ka, "a2").values())
    r = daemon.detctl("reset", "--kernel", ka)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "3" in r.stdout, r.stdout  # how many it forgot
    rows = json.loads(daemon.detctl("decisions", "--json", check=True).stdout)["decisions"]
    assert sorted({x["kernel"] for x in rows}) == [kb] and len(rows) == 3
    # The reset kernel's keys are timed again; the other kernel's are not.
    a3, b3 = run(ka, "a3"), run(kb, "b3")
    assert all(e["timed"] for e in a3.values()), a3
    assert not any(e["timed"] for e in b3.values()), b3
    assert {k: e["config"] for k, e in b3.items()} == {k: e["config"] for k, e in b1.items()}
    assert daemon.status()["decisions"] == 6


# ---- --max-waiters -------------------------------------------------------------

def test_max_waiters_refuses_with_resource_exhausted(tmpdir_short):
    d = Daemon(tmpdir_short, ["--max-waiters", "2"]).start()
    try:
        holder = d.client("--keys", 1, "--hold", stdout=subprocess.PIPE, text=True)
        assert holder.stdout.readline().strip() == "HOLD"
        waiters = [d.client("--keys", 1, "--rank", r, out=tmpdir_short / f"w{r}.json") for r in (1, 2)]
        poll("2 waiters", lambda: d.status()["waiters"] == 2)
        # The third asker is refused at once, naming the limit.
        code, msg, _ = raw_decide(d)
        assert code == 8, (code, msg)  # RESOURCE_EXHAUSTED
        assert "waiters limit (2)" in msg, msg
        x = d.client("--keys", 1, "--rank", 3, "--timeout-ms", "20000", out=tmpdir_short / "x.json")
        assert x.wait(DEADLINE) == 0
        rx = result(tmpdir_short / "x.json")
        assert rx["keys"] == {} and len(rx["errors"]) == 1, rx
        assert "waiters limit (2)" in rx["errors"][0][3], rx
        st = d.status()
        assert counter(st, "busy") == 2 and st["waiters"] == 2, st
        # The two admitted waiters are still served: one takes the claim over.
        holder.kill()
        holder.wait()
        for w in waiters:
            assert w.wait(DEADLINE) == 0
        entries = [result(tmpdir_short / f"w{r}.json")["keys"]["i:0"] for r in (1, 2)]
        assert sum(e["timed"] for e in entries) == 1 and len({e["config"] for e in entries}) == 1
    finally:
        d.stop()


# ---- /healthz while draining ---------------------------------------------------

def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def healthz(port):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
    except (urllib.error.URLError, ConnectionError, socket.timeout, OSError):
        return None, b""


def test_drain_answers_waiters_and_ends_healthz(tmpdir_short):
    """SIGTERM with a held claim and a waiter: the waiter is answered (not
    left hanging), the daemon exits 0, and /healthz goes with it. The 503
    that /healthz answers while the daemon drains is tested on the endpoint
    itself (tests/unit/test_metrics_http.c): a drain with nothing left to
    flush lasts milliseconds, too short to probe from here without a race."""
    port = free_port()
    d = Daemon(tmpdir_short, ["--metrics", f"127.0.0.1:{port}"]).start()
    try:
        assert poll("/healthz 200", lambda: healthz(port)[0] == 200)
        assert healthz(port) == (200, b"ok\n")
        holder = d.client("--keys", 1, "--hold", stdout=subprocess.PIPE, text=True)
        assert holder.stdout.readline().strip() == "HOLD"
        # libdetd waits for a restarted daemon within its reconnect window;
        # none comes here, so a short window ends the wait.
        waiter = d.client("--keys", 1, "--rank", 1, out=tmpdir_short / "w.json",
                          env=dict(os.environ, DETD_RECONNECT_MS="500"))
        poll("a waiter", lambda: d.status()["waiters"] == 1)
        mark = d.log_size()
        d.proc.send_signal(signal.SIGTERM)
        assert d.proc.wait(DEADLINE) == 0
        log = d.read_log()
        assert log.find("SIGTERM: draining", mark) >= 0
        assert log.find("stopped", mark) >= 0
        # The held waiter was answered (UNAVAILABLE: the drain); its libdetd
        # then waited its reconnect window for a new daemon and gave up.
        assert waiter.wait(DEADLINE) == 0
        rw = result(tmpdir_short / "w.json")
        assert rw["keys"] == {} and len(rw["errors"]) == 1, rw
        assert "reconnect window of 500 ms" in rw["errors"][0][3], rw
        holder.kill()
        holder.wait()
        assert healthz(port)[0] is None  # gone with the daemon
    finally:
        d.stop()


# ---- Report's refusals ---------------------------------------------------------

def test_report_refusals_say_what_happened(daemon):
    """A report for a claim that is not the key's live one says whether
    another rank holds the key's pass or no pass is open at all."""
    timings = [{"config": c, "ms": [1.0 + i]} for i, c in enumerate(CANDS)]
    a, b = ServeClient(daemon, 0), ServeClient(daemon, 1)
    try:
        r = a.call(op="report", key="never", claim_id=12345, timings=timings)
        assert r["rc"] == ESTALE, r
        assert "claim 12345 is unknown for key" in r["error"], r
        assert "never handed out" in r["error"] and "another rank" not in r["error"], r
        held = a.call(op="decide", key="held")
        assert held["outcome"] == DESIGNATED, held
        r = b.call(op="report", key="held", claim_id=held["claim_id"] ^ 1, timings=timings)
        assert r["rc"] == ESTALE and "passed to another rank" in r["error"], r
        r = a.call(op="report", key="held", claim_id=held["claim_id"], timings=timings)
        assert r["rc"] == 0 and r["config"] == CANDS[0], r
        assert counter(daemon.status(), "reports_stale") >= 2
    finally:
        a.close()
        b.close()


# ---- a key that names a search --------------------------------------------------

SEARCH_START = "R0_BLOCK=2048,XBLOCK=1,num_warps=16,num_stages=1,num_ctas=1"
SEARCH = "search:inductor.coordesc;tune=XBLOCK:1-4096,R0_BLOCK:1-32768,num_warps:1-32;radius=1"
EINVAL = -1000  # DETD_EINVAL


def test_a_key_naming_a_search_commits_a_config_of_its_shape(daemon):
    """A key whose candidates are a start config and a search descriptor
    (daemon/core/search.h): its timing pass may report configs outside the
    list when they are the start with only tuned fields changed, within
    their ranges; the winner is committed and answered to every rank. A
    report with any other config is refused naming it, a malformed search
    key at Decide naming the candidate."""
    cands = ["--cands-json", json.dumps([SEARCH_START, SEARCH])]
    a, b = ServeClient(daemon, 0, cands), ServeClient(daemon, 1, cands)
    bad = ServeClient(daemon, 2, ["--cands-json", json.dumps([SEARCH_START, "search:m;radius=1"])])
    try:
        r = bad.call(op="decide", key="k")
        assert r["rc"] == EINVAL and "key.candidates[1] names a search but has no part tune=" in r["error"], r
        # An unusable report ends its claim: one key for each.
        refused = [
            ("R0_BLOCK=2048,XBLOCK=1,num_warps=16,num_stages=2,num_ctas=1",
             "part 3 'num_stages=2' differs from the start's 'num_stages=1', a field the search does not tune"),
            ("R0_BLOCK=65536,XBLOCK=1,num_warps=16,num_stages=1,num_ctas=1",
             "part 0 'R0_BLOCK=65536' is not R0_BLOCK=<integer in 1-32768>"),
            ("R0_BLOCK=2048,XBLOCK=1,num_warps=16,num_stages=1", "fewer parts than the start config"),
            (SEARCH, "is not a config of the key's search"),
        ]
        for i, (config, words) in enumerate(refused):
            d = a.call(op="decide", key=f"bad{i}")
            assert d["outcome"] == DESIGNATED, d
            r = a.call(op="report", key=f"bad{i}", claim_id=d["claim_id"],
                       timings=[{"config": SEARCH_START, "ms": [2.0]}, {"config": config, "ms": [1.0]}])
            assert r["rc"] == EINVAL and f"timings[1].config '{config[:40]}" in r["error"], r
            assert words in r["error"], (words, r)
        found = "R0_BLOCK=4096,XBLOCK=2,num_warps=8,num_stages=1,num_ctas=1"
        d = a.call(op="decide", key="good")
        r = a.call(op="report", key="good", claim_id=d["claim_id"],
                   timings=[{"config": SEARCH_START, "ms": [2.0]}, {"config": found, "ms": [1.0]}])
        assert r["rc"] == 0 and r["config"] == found, r
        r = b.call(op="decide", key="good")
        assert r["rc"] == 0 and r["outcome"] == 1 and r["config"] == found, r
    finally:
        for c in (a, b, bad):
            c.close()


# ---- a restart while a timing pass is open -------------------------------------

def test_open_pass_survives_a_restart_longer_than_its_deadline(tmpdir_short):
    """kill -9 while a pass is open, down for longer than the pass deadline:
    after the restart the key waits for its holder (another rank asking is
    not designated), the holder gets its pass back and its timings are
    committed; no other rank times the key."""
    # After the restart the holder has what was left of the pass (all of
    # it: nothing ran before the kill): two warm-up calls and one 1 s wait
    # of rank 1 fit in it with room to spare on a loaded machine.
    pass_ms = 5000
    d = Daemon(tmpdir_short, ["--pass-timeout-ms", str(pass_ms)]).start()
    timings = [{"config": c, "ms": [1.0 + i]} for i, c in enumerate(CANDS)]
    a, b = ServeClient(d, 0), ServeClient(d, 1)
    try:
        first = a.call(op="decide", key="span")
        assert first["outcome"] == DESIGNATED, first
        d.kill9()
        # The outage is the scenario: longer than the whole pass deadline.
        time.sleep(pass_ms / 1000 + 0.5)
        mark = d.log_size()
        d.start()
        d.wait_log(f"restored for pid {a.pid}")
        # Both handles attached to the new daemon (a MISS each).
        for c in (a, b):
            r = c.call(op="decide", key="other", flags=["no_claim"])
            assert r["rc"] == 0 and r["outcome"] == 3, r  # MISS
        # Another rank waits (TIMEOUT within its 1 s; or its own deadline
        # first on a busy machine), never designated.
        r = b.call(op="decide", key="span", timeout_ms=1000)
        assert (r["rc"] == 0 and r["outcome"] == 4) or r["rc"] == ETIMEDOUT, r
        # The holder asks again (its old claim died with the old daemon):
        # the pass is its own again, within pass_ms of the restart.
        again = a.call(op="decide", key="span")
        assert again["outcome"] == DESIGNATED, again
        r = a.call(op="report", key="span", claim_id=again["claim_id"], timings=timings)
        assert r["rc"] == 0 and r["config"] == CANDS[0], r
        r = b.call(op="decide", key="span")
        assert r["outcome"] == 1 and r["config"] == CANDS[0], r  # DECIDED
        # The pass went back to its holder (libdetd takes it again on
        # re-attach, or its Decide above did), never to another rank.
        log = d.read_log()[mark:]
        assert f"given back to pid {a.pid} " in log, log[-3000:]
        assert "passes to a waiter" not in log, log[-3000:]
        st = d.status()
        assert counter(st, "takeovers") == 0 and counter(st, "pass_timeouts") == 0, st
    finally:
        a.close()
        b.close()
        d.stop()
