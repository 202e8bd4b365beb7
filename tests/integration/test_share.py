"""A timing pass's benchmarks split across the node's GPUs (Share): the real
daemon on a unix socket, driven by libdetd in separate processes (each one
handle, one session: detd_client.py --serve), a raw gRPC probe for what
libdetd never sends.

The holder (designated for the key) opens the split taking the reference;
waiters asking with share+bench on a device of their own become helpers,
take candidates from the end, give their timings with their reference
samples; the holder takes from the front, takes back, collects, reports.
"""
import math
import struct

import pytest

from conftest import Daemon, ServeClient, counter
from test_promises import KERNEL, _f, dkey, identity, poll, raw_call
from test_metrics import mdaemon, scrape, val  # noqa: F401 (mdaemon: a daemon with --metrics)
from test_trust_claims import session_of

CANDS = [f"BLOCK={16 << i},num_warps=4" for i in range(6)]
DECIDED, DESIGNATED, TIMEOUT = 1, 2, 4
EINVAL, ESTALE, EDENIED = -1000, -1007, -1010
PERMISSION_DENIED, FAILED_PRECONDITION = 7, 9


class Actor(ServeClient):
    """A serve-mode client with the share tests' candidates (and device)."""

    def __init__(self, d, rank, device=None):
        super().__init__(d, rank, ["--cands", ";".join(CANDS)])
        if device is not None:
            assert self.call(op="device", device=device)["rc"] == 0

    def decide(self, *flags, key="i:0"):
        r = self.call(op="decide", key=key, flags=list(flags))
        assert r["rc"] == 0, r
        return r

    def share(self, **kw):
        return self.call(op="share", key="i:0", **kw)


def timing(config, ms, failed=False):
    return {"config": config, "ms": ms, "failed": failed}


def ok(r):
    assert r["rc"] == 0, r
    return r


def fails(r, rc, *words):
    assert r["rc"] == rc, r
    for w in words:
        assert w in r["error"], (w, r)
    return r


def share_body(session, claim=0, take=None, key="i:0"):
    """A raw ShareRequest: api_version, client, session_id, key, claim_id, take."""
    body = _f(1, 1) + _f(2, identity(5)) + (_f(3, session) if session else b"")
    body += _f(4, dkey(key, kernel=KERNEL, cands=CANDS)) + (_f(5, claim) if claim else b"")
    return body + (_f(7, take) if take else b"")


@pytest.fixture
def actors():
    made = []
    yield made
    for a in made:
        try:
            a.close()
        except Exception:
            a.p.kill()


def test_split_take_give_collect_reclaim_report(daemon, actors):
    def actor(rank, device=None):
        a = Actor(daemon, rank, device)
        actors.append(a)
        return a

    holder = actor(0, "gpu-A")
    d = holder.decide()
    assert d["outcome"] == DESIGNATED, d
    claim = d["claim_id"]

    # Before the split opens, a bench offer is a compile share.
    h1 = actor(1, "gpu-B")
    early = h1.decide("share", "bench")
    assert early["outcome"] == TIMEOUT and early["share_index"] == 1 and not early["bench"], early
    # A helper call before the split opened: no live split, so open=false.
    r = ok(h1.share(take=CANDS[5]))
    assert not r["open"] and not r["granted"], r

    # The holder opens the split: its first take is the reference.
    r = ok(holder.share(claim_id=claim, take=CANDS[0]))
    assert r["open"] and r["granted"] and r["reference"] == CANDS[0], r
    assert r["given"] == [] and r["pending"] == [], r

    # Share without bench: a compile share; with bench on gpu-B: a helper.
    plain = h1.decide("share")
    assert plain["share_index"] == 2 and not plain["bench"], plain
    b1 = h1.decide("share", "bench")
    assert b1["outcome"] == TIMEOUT and b1["share_index"] == 3 and b1["bench"], b1
    h1_index = b1["share_index"]
    # Asked again, it stays the same helper.
    again = h1.decide("share", "bench")
    assert again["bench"] and again["share_index"] == h1_index, again
    # Another process on gpu-B, one on the holder's gpu-A, one without a
    # device: compile shares. One on gpu-C: the second helper.
    same = actor(2, "gpu-B").decide("share", "bench")
    assert same["share_index"] > 0 and not same["bench"], same
    holders_gpu = actor(3, "gpu-A").decide("share", "bench")
    assert holders_gpu["share_index"] > 0 and not holders_gpu["bench"], holders_gpu
    no_dev = actor(4)
    r = no_dev.decide("share", "bench")
    assert r["share_index"] > 0 and not r["bench"], r
    h2 = actor(5, "gpu-C")
    b2 = h2.decide("share", "bench")
    assert b2["bench"] and b2["share_index"] not in (0, h1_index), b2

    # Helpers take from the end, the holder from the front; a taken
    # candidate (or the reference) is refused to everyone else.
    r = ok(h1.share(take=CANDS[5]))
    assert r["open"] and r["granted"] and r["reference"] == CANDS[0], r
    assert not ok(holder.share(claim_id=claim, take=CANDS[5]))["granted"]
    assert ok(holder.share(claim_id=claim, take=CANDS[1]))["granted"]
    assert not ok(h1.share(take=CANDS[1]))["granted"]
    assert not ok(h2.share(take=CANDS[0]))["granted"]  # the reference
    assert not ok(h2.share(take=CANDS[5]))["granted"]
    assert ok(h2.share(take=CANDS[4]))["granted"]

    # Give and take in one call.
    r = ok(h1.share(timings=[timing(CANDS[5], [2.0, 2.2])], reference_ms=[1.0, 1.1], take=CANDS[3]))
    assert r["open"] and r["granted"], r

    # Collect: the given result with its device, reference samples and
    # helper index; pending: taken by helpers, not given.
    r = ok(holder.share(claim_id=claim, collect=True))
    assert r["given"] == [{"config": CANDS[5], "ms": [2.0, 2.2], "failed": False, "device": "gpu-B",
                           "reference_ms": [1.0, 1.1], "helper": h1_index}], r
    assert sorted(r["pending"]) == sorted([CANDS[3], CANDS[4]]), r

    # Reclaim: the holder takes CANDS[4] back from h2; h2's late give is
    # refused naming the config.
    r = ok(holder.share(claim_id=claim, take=CANDS[4], reclaim=True, collect=True))
    assert r["granted"] and r["pending"] == [CANDS[3]], r
    fails(h2.share(timings=[timing(CANDS[4], [3.0])], reference_ms=[1.5]), EINVAL, "timings[0].config",
          CANDS[4], "not taken")
    # Without reclaim a taken candidate stays with its helper.
    assert not ok(holder.share(claim_id=claim, take=CANDS[3]))["granted"]

    # Errors name the field; nothing changes.
    fails(h1.share(take="BLOCK=7,num_warps=1"), EINVAL, "take", "not one of the key's candidates")
    fails(h1.share(timings=[timing("BLOCK=7,num_warps=1", [1.0])], reference_ms=[1.0]), EINVAL,
          "timings[0].config", "not one of the key's candidates")
    fails(h1.share(timings=[timing(CANDS[2], [1.0])], reference_ms=[1.0]), EINVAL, "timings[0].config",
          "not taken")
    fails(h1.share(timings=[timing(CANDS[5], [1.0])], reference_ms=[1.0]), EINVAL, "timings[0].config",
          "given already")
    fails(h1.share(timings=[timing(CANDS[3], [1.0, math.nan])], reference_ms=[1.0]), EINVAL, "timings[0].ms[1]")
    fails(h1.share(timings=[timing(CANDS[3], [])], reference_ms=[1.0]), EINVAL, "timings[0].ms")
    fails(h1.share(timings=[timing(CANDS[3], [1.0])]), EINVAL, "reference_ms")
    fails(h1.share(timings=[timing(CANDS[3], [1.0])], reference_ms=[0.0]), EINVAL, "reference_ms[0]")
    fails(h1.share(timings=[timing(CANDS[3], [1.0]), timing(CANDS[3], [1.0])], reference_ms=[1.0]), EINVAL,
          "timings[1].config", "twice")
    # The holder gives nothing (libdetd refuses before sending).
    fails(holder.share(claim_id=claim, timings=[timing(CANDS[1], [1.0])]), EINVAL, "timings")
    # A helper neither collects nor reclaims.
    fails(h1.share(collect=True), EINVAL, "collect")
    # A stale claim id: the holder's call is refused ESTALE.
    fails(holder.share(claim_id=claim ^ 1, take=CANDS[2]), ESTALE, "not the live claim")
    # A process given only a compile share is no helper.
    same_gpu = actors[2]
    fails(same_gpu.share(take=CANDS[2]), ESTALE, "not given a benchmark share")
    # A session named by another process (the probe): PERMISSION_DENIED
    # (DETD_EDENIED in libdetd); none at all: FAILED_PRECONDITION.
    code, msg, _ = raw_call(daemon, "/detd.v1.Decider/Share", share_body(session_of(daemon, h1.pid), take=CANDS[2]))
    assert code == PERMISSION_DENIED and "belongs to the process that attached it" in msg, (code, msg)
    code, msg, _ = raw_call(daemon, "/detd.v1.Decider/Share", share_body(0, take=CANDS[2]))
    assert code == FAILED_PRECONDITION and "session_id 0" in msg, (code, msg)

    # The state is as before the bad calls: h1's give of CANDS[3] is taken.
    r = ok(h1.share(timings=[timing(CANDS[3], [4.0, 4.4])], reference_ms=[1.0, 1.2]))
    assert r["open"] and not r["granted"], r
    r = ok(holder.share(claim_id=claim, collect=True))
    assert [g["config"] for g in r["given"]] == [CANDS[3], CANDS[5]], r
    assert all(g["reference_ms"] == [1.0, 1.2] for g in r["given"]), r  # the helper's latest
    assert r["pending"] == [], r
    # A failed candidate may carry no samples.
    assert ok(h1.share(take=CANDS[2]))["granted"]
    ok(h1.share(timings=[timing(CANDS[2], [], failed=True)], reference_ms=[1.0, 1.2]))
    r = ok(holder.share(claim_id=claim, collect=True))
    failed = [g for g in r["given"] if g["config"] == CANDS[2]]
    assert failed and failed[0]["failed"] and failed[0]["ms"] == [], r

    # The holder reports every candidate; the pass is over for helpers.
    timings = [timing(c, [1.0 + i]) for i, c in enumerate(CANDS) if c != CANDS[2]]
    timings.append(timing(CANDS[2], [], failed=True))
    rep = holder.call(op="report", key="i:0", claim_id=claim, timings=timings)
    assert rep["rc"] == 0 and rep["config"] == CANDS[0], rep
    r = ok(h1.share(take=CANDS[1]))
    assert not r["open"] and not r["granted"], r
    r = ok(h2.share(timings=[timing(CANDS[4], [3.0])], reference_ms=[1.5]))
    assert not r["open"], r
    fails(holder.share(claim_id=claim, collect=True), ESTALE, "not the live claim")

    st = daemon.status()
    assert counter(st, "bench_splits") == 1, st["counters"]
    assert counter(st, "bench_helpers") == 2, st["counters"]
    assert counter(st, "bench_given") == 3, st["counters"]
    assert counter(st, "bench_reclaimed") == 1, st["counters"]
    assert counter(st, "calls_refused_session") == 1, st["counters"]
    assert st["open_claims"] == 0, st
    # The log names the split's opening and each helper, with the devices.
    log = daemon.read_log()
    opened = [l for l in log.splitlines() if "opened the benchmark split" in l]
    assert len(opened) == 1 and "'gpu-A'" in opened[0] and CANDS[0] in opened[0], opened
    helpers = [l for l in log.splitlines() if "benchmarks a share of key" in l]
    assert len(helpers) == 2 and "'gpu-B'" in helpers[0] and "'gpu-C'" in helpers[1], helpers
    # The daemon still serves Decide normally: the decision, and a new key.
    late = actor(9)
    assert late.decide()["config"] == CANDS[0]
    fresh = late.decide(key="i:1")
    assert fresh["outcome"] == DESIGNATED, fresh


def test_holder_calls_and_devices(mdaemon, actors):
    daemon = mdaemon
    holder = Actor(daemon, 0, "gpu-A")
    actors.append(holder)
    claim = holder.decide()["claim_id"]
    # The opening call must take the reference.
    fails(holder.share(claim_id=claim), EINVAL, "take is required")
    fails(holder.share(claim_id=claim, take="nope"), EINVAL, "take")
    assert ok(holder.share(claim_id=claim, take=CANDS[2]))["reference"] == CANDS[2]
    # Reclaim needs take (libdetd), collect from a helper is refused.
    fails(holder.share(claim_id=claim, reclaim=True), EINVAL, "reclaim")
    # A device over 256 bytes or not UTF-8 is refused by libdetd; "" clears.
    assert holder.call(op="device", device="x" * 257)["rc"] == EINVAL
    assert holder.call(op="device", device="")["rc"] == 0
    # A helper on the same device as the holder: no; then set its own.
    h = Actor(daemon, 1, "gpu-A")
    actors.append(h)
    assert not h.decide("share", "bench")["bench"]
    assert h.call(op="device", device="gpu-Z")["rc"] == 0
    assert h.decide("share", "bench")["bench"]
    # The exporter counts the split and its helper.
    samples, _ = scrape(daemon.port)
    assert val(samples, "detd_bench_splits_total") == 1
    assert val(samples, "detd_bench_helpers_total") == 1
    assert val(samples, "detd_bench_given_total") == 0
    assert val(samples, "detd_bench_reclaimed_total") == 0
    # DETD_DECIDE_BENCH needs DETD_DECIDE_SHARE.
    r = h.call(op="decide", key="i:0", flags=["bench"])
    assert r["rc"] == EINVAL and "DETD_DECIDE_SHARE" in r["error"], r
    # The holder's session ends: the split goes with its claim.
    holder.close()
    actors.remove(holder)
    poll("the claim ended", lambda: daemon.status()["open_claims"] == 0)
    r = ok(h.share(take=CANDS[0]))
    assert not r["open"], r


def test_a_device_over_the_limit_is_refused_naming_the_field(tmpdir_short):
    d = Daemon(tmpdir_short).start()
    try:
        dev = "d" * 300
        body = _f(1, 1) + _f(2, identity(5)) + _f(4, dkey("i:0", kernel=KERNEL, cands=CANDS)) + _f(6, dev)
        code, msg, _ = raw_call(d, "/detd.v1.Decider/Share", body)
        assert code == 3 and "device" in msg and "300 bytes" in msg, (code, msg)
        body = _f(1, 1) + _f(2, identity(5)) + _f(4, dkey("i:0", kernel=KERNEL, cands=CANDS)) + _f(8, dev)
        code, msg, _ = raw_call(d, "/detd.v1.Decider/Decide", body)
        assert code == 3 and "device" in msg, (code, msg)
        assert counter(d.status(), "rejected") == 2
    finally:
        d.stop()


def test_a_wait_only_ask_waits_for_the_decision_and_never_times(daemon, actors):
    """DETD_DECIDE_WAIT_ONLY (detd.wait_final()): MISS with nothing to
    wait for, TIMEOUT at its deadline while a pass runs, MISS when the
    pass ends with only it waiting, passed over by a takeover, and the
    decision once the pass reports."""
    import threading

    MISS = 3

    def actor(rank):
        a = Actor(daemon, rank)
        actors.append(a)
        return a

    def in_thread(a, *flags):
        out = {}
        t = threading.Thread(target=lambda: out.update(a.call(op="decide", key="i:1", flags=list(flags))))
        t.start()
        return t, out

    def waiting(n):
        poll(f"{n} waiter(s)", lambda: daemon.status()["waiters"] == n)

    a, b, c, e = actor(0), actor(1), actor(2), actor(3)
    # Nothing decided, no pass: MISS at once, and nobody is designated.
    assert b.decide("wait_only", key="i:1")["outcome"] == MISS
    assert daemon.status()["open_claims"] == 0
    # A pass in progress: it waits, and its own deadline ends the wait.
    assert a.decide(key="i:1")["outcome"] == DESIGNATED
    r = b.call(op="decide", key="i:1", flags=["wait_only"], timeout_ms=300)
    assert r["rc"] == 0 and r["outcome"] == TIMEOUT, r
    # The holder goes away with only the wait_only caller waiting: MISS.
    t, out = in_thread(b, "wait_only")
    waiting(1)
    a.close()
    actors.remove(a)
    t.join(60)
    assert out.get("rc") == 0 and out.get("outcome") == MISS, out
    assert daemon.status()["open_claims"] == 0
    # With a caller that may time waiting too, the takeover goes to it;
    # its report decides for the wait_only caller.
    assert c.decide(key="i:1")["outcome"] == DESIGNATED
    tb, ob = in_thread(b, "wait_only")
    te, oe = in_thread(e)
    waiting(2)
    c.close()
    actors.remove(c)
    te.join(60)
    assert oe.get("outcome") == DESIGNATED, oe
    rep = ok(e.call(op="report", key="i:1", claim_id=oe["claim_id"],
                    timings=[timing(x, [1.0 + i]) for i, x in enumerate(CANDS)]))
    tb.join(60)
    assert ob.get("rc") == 0 and ob.get("outcome") == DECIDED and ob.get("config") == rep["config"] == CANDS[0], ob
