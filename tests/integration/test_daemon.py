"""Integration tests of the standalone daemon: a real detd on a temporary
unix socket and state dir, driven by client processes (libdetd through
ctypes), detctl and raw gRPC calls."""

import json
import os
import random
import socket
import stat
import subprocess
import time

import pytest

from conftest import Daemon, counter, release_clients


def wait_for(what, pred, timeout=60.0):
    """Poll until pred() is true, with a generous deadline (a loaded
    machine may be slow to get there, never fast to a wrong state)."""
    end = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < end, f"timed out after {timeout}s waiting for {what}"
        time.sleep(0.05)


def run_clients(daemon, tmp, n, keys, extra=(), tag="c"):
    """n client processes race on the same keys; returns their results."""
    start = tmp / f"{tag}-go"
    procs = []
    for r in range(n):
        out = tmp / f"{tag}{r}.json"
        procs.append((daemon.client("--keys", keys, "--rank", r, "--wait-start", start, *extra, out=out), out))
    release_clients(start, [p for p, _ in procs], 120)
    results = []
    for p, out in procs:
        assert p.wait(120) == 0
        results.append(json.loads(out.read_text()))
    return results


def configs_by_key(results):
    by = {}
    for r in results:
        for k, e in r["keys"].items():
            by.setdefault(k, set()).add(e["config"])
    return by


def test_storm_one_timing_pass_per_key(daemon, tmpdir_short):
    results = run_clients(daemon, tmpdir_short, 16, 50, extra=("--observe", "--sleep-ms", "5"))
    for r in results:
        assert r["errors"] == []
        assert len(r["keys"]) == 50
    timed = sum(1 for r in results for e in r["keys"].values() if e["timed"])
    assert timed == 50
    by = configs_by_key(results)
    assert len(by) == 50
    assert all(len(v) == 1 for v in by.values()), by
    st = daemon.status()
    assert counter(st, "timing_passes") == 50
    assert st["decisions"] == 50
    v = daemon.detctl("verify")
    assert v.returncode == 0, v.stdout + v.stderr


def test_second_run_times_nothing(daemon, tmpdir_short):
    first = run_clients(daemon, tmpdir_short, 4, 20, tag="a")
    assert daemon.stop() == 0
    daemon.start()
    second = run_clients(daemon, tmpdir_short, 4, 20, tag="b")
    assert sum(1 for r in second for e in r["keys"].values() if e["timed"]) == 0
    assert configs_by_key(first) == configs_by_key(second)
    assert counter(daemon.status(), "timing_passes") == 0


def test_kill_designated_process_mid_pass(daemon, tmpdir_short):
    holder = daemon.client("--keys", 1, "--rank", 0, "--hold", stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "HOLD"
    waiters = [daemon.client("--keys", 1, "--rank", r, out=tmpdir_short / f"w{r}.json") for r in (1, 2, 3)]
    wait_for("3 waiters", lambda: daemon.status()["waiters"] == 3)
    st = daemon.status()
    assert st["open_claims"] == 1 and st["waiters"] == 3
    t0 = time.monotonic()
    holder.kill()
    holder.wait()
    for w in waiters:
        assert w.wait(30) == 0
    elapsed = time.monotonic() - t0
    # The claim moves when the holder's Attach stream ends, not after the
    # 30 s lease (the bound leaves room for a loaded machine).
    assert elapsed < 15, elapsed
    res = [json.loads((tmpdir_short / f"w{r}.json").read_text()) for r in (1, 2, 3)]
    entries = [r["keys"]["i:0"] for r in res]
    assert sum(e["timed"] for e in entries) == 1
    assert [e["takeover"] for e in entries if e["timed"]] == [True]
    assert len({e["config"] for e in entries}) == 1
    st = daemon.status()
    assert st["decisions"] == 1 and counter(st, "takeovers") == 1


def test_kill9_daemon_during_storm_keeps_acknowledged(tmpdir_short):
    d = Daemon(tmpdir_short).start()
    # libdetd would wait for a restarted daemon within its reconnect window
    # (60 s by default; test_restart.py); none comes while the clients run,
    # so a short window ends each client's run soon after the kill.
    procs = [d.client("--keys", 300, "--rank", r, "--sleep-ms", "0", "--timeout-ms", "3000",
                      out=tmpdir_short / f"s{r}.json", env=dict(os.environ, DETD_RECONNECT_MS="500"))
             for r in range(8)]
    # Mid-storm: some decisions acknowledged, most keys still to come.
    wait_for("20 decisions", lambda: d.status()["decisions"] >= 20)
    d.kill9()
    for p in procs:
        p.wait(120)
    acked = {}
    for r in range(8):
        res = json.loads((tmpdir_short / f"s{r}.json").read_text())
        for k, e in res["keys"].items():
            if "config" in e:
                assert acked.setdefault(k, e["config"]) == e["config"]
    assert len(acked) > 0
    d.start()
    rows = json.loads(d.detctl("decisions", "--json", check=True).stdout)
    stored = {r["key"]: r["config"] for r in rows["decisions"]}
    for k, cfg in acked.items():
        assert stored.get(k) == cfg, (k, cfg, stored.get(k))
    assert d.stop() == 0


def _varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field(num, payload):
    if isinstance(payload, int):
        return _varint(num << 3) + _varint(payload)
    return _varint((num << 3) | 2) + _varint(len(payload)) + payload


def decide_request(key=b"i:1", candidates=(b"A=1",), kernel=b"m:k@0"):
    dk = _field(2, b"sm90") + _field(3, kernel) + _field(4, key)
    for c in candidates:
        dk += _field(5, c)
    return _field(1, 1) + _field(4, dk)


def test_bad_input_clear_errors_and_still_serving(daemon, tmpdir_short):
    code, msg = daemon.probe("/detd.v1.Decider/Decide", decide_request(key=b"k" * 4097).hex())
    assert code == 3 and "key.key" in msg and "4096" in msg, msg
    code, msg = daemon.probe("/detd.v1.Decider/Decide",
                             decide_request(candidates=[b"B=%d" % i for i in range(1025)]).hex())
    assert code == 3 and "key.candidates" in msg and "1024" in msg, msg
    code, msg = daemon.probe("/detd.v1.Decider/Decide", decide_request(kernel=b"").hex())
    assert code == 3 and "key.kernel" in msg, msg
    code, msg = daemon.probe("/detd.v1.Decider/Decide", "ffffffff0f0a02")
    assert code == 3 and "cannot decode" in msg, msg
    code, msg = daemon.probe("/detd.v1.Decider/Decide", nbytes=2 * 1024 * 1024)
    assert code == 8 and "1048576" in msg, msg
    code, msg = daemon.probe("/detd.v1.Nothing/Here", "00")
    assert code == 12 and "/detd.v1.Nothing/Here" in msg, msg
    # Garbage bytes straight onto the socket (not even HTTP/2).
    rng = random.Random(7)
    for _ in range(20):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(daemon.socket)
        s.sendall(bytes(rng.randrange(256) for _ in range(rng.randrange(1, 4096))))
        s.close()
    # Nothing stored, and everyone else is still served.
    # A valid raw Decide is answered (an unattached caller is never
    # designated: FAILED_PRECONDITION saying so) ...
    code, msg = daemon.probe("/detd.v1.Decider/Decide", decide_request().hex())
    assert code == 9 and "not attached" in msg, msg
    # ... and attached clients are served.
    res = run_clients(daemon, tmpdir_short, 2, 3)
    assert all(r["errors"] == [] for r in res)
    st = daemon.status()
    assert st["decisions"] == 3
    assert counter(st, "rejected") >= 3


def test_verify_names_diverging_ranks(daemon, tmpdir_short):
    run_clients(daemon, tmpdir_short, 2, 3, extra=("--observe",), tag="ok")
    assert daemon.detctl("verify").returncode == 0
    # A rank that launched another config than the decision.
    p = daemon.client("--keys", 3, "--rank", 7, "--observe", "--use", "other", out=tmpdir_short / "bad.json")
    assert p.wait(60) == 0
    bad = json.loads((tmpdir_short / "bad.json").read_text())
    v = daemon.detctl("verify")
    assert v.returncode == 1, v.stdout + v.stderr
    for e in bad["keys"].values():
        assert e["config"] in v.stdout
    assert "rank 7" in v.stdout or "rank=7" in v.stdout
    vj = json.loads(daemon.detctl("verify", "--json").stdout)
    assert vj["ok"] is False
    assert len(vj["divergences"]) == 3
    ranks = {c.get("rank") for d in vj["divergences"] for u in d["uses"] for c in u["clients"]}
    assert {0, 1, 7} <= ranks


def test_verify_cannot_check_exit_3(tmpdir_short):
    d = Daemon(tmpdir_short)
    r = d.detctl("verify")
    assert r.returncode == 3  # unreachable, apart from 2 (usage)
    assert d.socket in r.stderr


def test_socket_mode_and_sigterm_drains_waiters(daemon, tmpdir_short):
    assert stat.S_IMODE(os.stat(daemon.socket).st_mode) == 0o660
    holder = daemon.client("--keys", 1, "--hold", stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "HOLD"
    # libdetd waits for a restarted daemon within its reconnect window
    # (test_restart.py); none comes here, so a short window ends the wait.
    waiter = daemon.client("--keys", 1, "--rank", 1, out=tmpdir_short / "w.json",
                           env=dict(os.environ, DETD_RECONNECT_MS="500"))
    wait_for("the waiter", lambda: daemon.status()["waiters"] == 1)
    assert daemon.status()["waiters"] == 1
    assert daemon.stop() == 0
    assert waiter.wait(30) == 0
    res = json.loads((tmpdir_short / "w.json").read_text())
    assert res["keys"] == {} and len(res["errors"]) == 1
    assert "reconnect window of 500 ms" in res["errors"][0][3], res
    holder.kill()
    holder.wait()
    assert not os.path.exists(daemon.socket)


def test_client_limit_names_the_limit(tmpdir_short):
    d = Daemon(tmpdir_short, extra_args=["--max-clients", "2"]).start()
    try:
        holders = [d.client("--keys", 1, "--key-prefix", f"h{i}:", "--hold", stdout=subprocess.PIPE, text=True)
                   for i in range(2)]
        for h in holders:
            assert h.stdout.readline().strip() == "HOLD"
        p = d.client("--keys", 1, "--key-prefix", "x:", "--timeout-ms", "3000", out=tmpdir_short / "x.json")
        assert p.wait(30) == 0
        res = json.loads((tmpdir_short / "x.json").read_text())
        assert res["keys"] == {} and res["errors"], res
        assert "attached clients limit (2)" in res["errors"][0][3], res
        st = d.status()
        assert counter(st, "busy") >= 1
        assert len(st["clients"]) == 2
        for h in holders:
            h.kill()
            h.wait()
    finally:
        d.stop()


def test_second_daemon_on_a_live_socket_refuses(daemon, tmpdir_short):
    r = subprocess.run([str(daemon_binary()), "--socket", daemon.socket, "--state-dir",
                        str(tmpdir_short / "other")], capture_output=True, text=True, timeout=30)
    assert r.returncode == 1
    assert f"socket '{daemon.socket}' is in use by a running daemon" in r.stderr
    # The first daemon keeps its socket and keeps serving.
    assert os.path.exists(daemon.socket)
    assert daemon.probe("/grpc.health.v1.Health/Check", "")[0] == 0


def daemon_binary():
    from conftest import DETD
    return DETD


def test_waiter_that_dies_is_forgotten(daemon, tmpdir_short):
    holder = daemon.client("--keys", 1, "--hold", stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "HOLD"
    waiter = daemon.client("--keys", 1, "--rank", 1, "--timeout-ms", 120000)
    # Both waits within half the waiter's deadline: a waiter found gone was
    # forgotten for its death, never for its deadline.
    end = time.monotonic() + 60
    wait_for("the waiter queued", lambda: daemon.status()["waiters"] == 1, end - time.monotonic())
    waiter.kill()
    waiter.wait()
    wait_for("the dead waiter forgotten", lambda: daemon.status()["waiters"] == 0, end - time.monotonic())
    holder.kill()
    holder.wait()


def test_hot_answers_count_and_reset_forgets_them(daemon, tmpdir_short):
    """Decided keys are answered from the hot cache (on the rpc thread),
    counted in decide_calls/decide_hits like any other answer, and a reset
    forgets them at once: the next ask is designated again, never answered
    with the forgotten config."""
    first = run_clients(daemon, tmpdir_short, 2, 10, tag="h1")
    assert sum(1 for r in first for e in r["keys"].values() if e["timed"]) == 10
    st0 = daemon.status()
    again = run_clients(daemon, tmpdir_short, 3, 10, tag="h2")
    assert sum(1 for r in again for e in r["keys"].values() if e["timed"]) == 0
    assert configs_by_key(again) == configs_by_key(first)
    st1 = daemon.status()
    assert counter(st1, "decide_calls") - counter(st0, "decide_calls") == 30
    assert counter(st1, "decide_hits") - counter(st0, "decide_hits") == 30
    r = daemon.detctl("reset", "--all")
    assert r.returncode == 0, r.stdout + r.stderr
    after = run_clients(daemon, tmpdir_short, 2, 10, tag="h3")
    assert sum(1 for r in after for e in r["keys"].values() if e["timed"]) == 10
    assert counter(daemon.status(), "timing_passes") == counter(st1, "timing_passes") + 10
