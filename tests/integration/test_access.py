"""Access control on the unix socket, and gRPC health on both listeners.

Real daemons; callers run as another user through setpriv (the tests run
as root, like CI): the daemon reads their credentials from the socket
(SO_PEERCRED) and refuses or serves them.
"""
import json
import os
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import CLIENT, DETCTL, DETD, IS_ROOT, PROBE, Daemon, ServeClient, counter, requires

NOBODY = 65534
OTHER_GID = 4242  # a supplementary group of the test caller, no name needed

HOLDER = Path(__file__).resolve().parent / "conn_holder.py"

pytestmark = requires(IS_ROOT, "needs root to switch users")


def as_user(uid, gid, groups=None):
    """A command prefix running as uid/gid with exactly these groups."""
    p = ["setpriv", f"--reuid={uid}", f"--regid={gid}"]
    p += [f"--groups={','.join(map(str, groups))}"] if groups else ["--clear-groups"]
    return p


def open_dir(root):
    # TemporaryDirectory is 0700: let the other user reach the socket.
    os.chmod(root, 0o755)


def client_as(d, prefix, *args):
    r = subprocess.run([*prefix, sys.executable, str(CLIENT), "--socket", d.socket, *map(str, args)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def detctl_as(d, prefix, *args):
    return subprocess.run([*prefix, str(DETCTL), "--socket", d.socket, *args],
                          capture_output=True, text=True, timeout=30)


def test_socket_mode_and_group(tmpdir_short):
    d = Daemon(tmpdir_short, ["--socket-mode", "0640", "--socket-group", "nogroup"]).start()
    try:
        st = os.stat(d.socket)
        assert stat.S_ISSOCK(st.st_mode)
        assert stat.S_IMODE(st.st_mode) == 0o640
        assert st.st_gid == NOBODY
    finally:
        assert d.stop() == 0
    assert not os.path.exists(d.socket)  # our own socket is removed at exit


def test_socket_default_mode(daemon):
    st = os.stat(daemon.socket)
    assert stat.S_IMODE(st.st_mode) == 0o660
    assert st.st_gid == os.getegid()


def test_refused_uid_gets_permission_denied(tmpdir_short):
    open_dir(tmpdir_short)
    d = Daemon(tmpdir_short, ["--allow-uid", "0", "--socket-mode", "0666"]).start()
    try:
        out = client_as(d, as_user(NOBODY, NOBODY), "--keys", 2)
        assert out["keys"] == {}
        assert len(out["errors"]) == 2
        for key, rc, name, detail, what in out["errors"]:
            assert what == "decide"
            assert name == "permission denied", out["errors"]
            assert "uid 65534" in detail and "--allow-uid" in detail, detail
        # detctl as that user: refused too, naming the uid.
        r = detctl_as(d, as_user(NOBODY, NOBODY), "status")
        assert r.returncode != 0
        assert "uid 65534 (gid 65534) is not in --allow-uid/--allow-gid" in r.stderr
        # root is listed: served.
        st = d.status()
        assert counter(st, "refused_allow_list") >= 3
        assert counter(st, "refused_connections") >= 2
        assert counter(st, "decide_calls") == 0  # nothing reached the service
        log = d.read_log()
        assert "uid 65534: refusing its calls" in log
    finally:
        d.stop()


def test_allowed_uid_and_group_are_served(tmpdir_short):
    open_dir(tmpdir_short)
    d = Daemon(tmpdir_short, ["--allow-uid", "nobody", "--allow-uid", "0",
                              "--allow-gid", str(OTHER_GID), "--socket-mode", "0666"]).start()
    try:
        out = client_as(d, as_user(NOBODY, NOBODY), "--keys", 3, "--key-prefix", "a:")
        assert out["errors"] == []
        assert len(out["keys"]) == 3 and all("config" in e for e in out["keys"].values())
        # uid 1234 is not listed, but one of its supplementary groups is.
        out = client_as(d, as_user(1234, 1234, groups=[OTHER_GID]), "--keys", 3, "--key-prefix", "a:")
        assert out["errors"] == []
        assert all(e["outcome"] == 1 for e in out["keys"].values())  # decided
        # without that group: refused.
        out = client_as(d, as_user(1234, 1234), "--keys", 1, "--key-prefix", "a:")
        assert out["errors"] and "uid 1234 (gid 1234)" in out["errors"][0][3]
        st = d.status()
        assert counter(st, "decisions_timed") == 3
        assert counter(st, "refused_allow_list") == 1
    finally:
        d.stop()


def test_admin_calls_need_admin_list(tmpdir_short):
    open_dir(tmpdir_short)
    d = Daemon(tmpdir_short, ["--allow-uid", "0", "--allow-uid", str(NOBODY),
                              "--admin-uid", "0", "--socket-mode", "0666"]).start()
    try:
        nobody = as_user(NOBODY, NOBODY)
        out = client_as(d, nobody, "--keys", 2, "--key-prefix", "r:")
        assert out["errors"] == [] and len(out["keys"]) == 2
        r = detctl_as(d, nobody, "reset", "--all")
        assert r.returncode != 0
        assert "uid 65534 (gid 65534) is not in --admin-uid/--admin-gid" in r.stderr, r.stderr
        # Read-only admin calls are fine for an allowed caller.
        r = detctl_as(d, nobody, "status", "--json")
        assert r.returncode == 0, r.stderr
        st = json.loads(r.stdout)
        assert st["decisions"] == 2
        assert counter(st, "refused_admin_list") == 1
        # Decide still works for that caller after the refusal.
        out = client_as(d, nobody, "--keys", 2, "--key-prefix", "r:")
        assert out["errors"] == [] and all(e["outcome"] == 1 for e in out["keys"].values())
        # root is in --admin-uid: the reset goes through.
        r = d.detctl("reset", "--all")
        assert r.returncode == 0, r.stderr
        assert d.status()["decisions"] == 0
        assert "refused Reset from pid" in d.read_log()
    finally:
        d.stop()


def test_no_admin_list_keeps_reset_open(tmpdir_short):
    """The default: without --admin-uid/--admin-gid, every caller allowed
    to connect may reset (the socket's mode and group are the gate)."""
    open_dir(tmpdir_short)
    d = Daemon(tmpdir_short, ["--socket-mode", "0666"]).start()
    try:
        client_as(d, as_user(NOBODY, NOBODY), "--keys", 1)
        r = detctl_as(d, as_user(NOBODY, NOBODY), "reset", "--all")
        assert r.returncode == 0, r.stderr
        assert d.status()["decisions"] == 0
    finally:
        d.stop()


def test_socket_mode_keeps_others_out(tmpdir_short):
    open_dir(tmpdir_short)
    d = Daemon(tmpdir_short, ["--socket-mode", "0600"]).start()
    try:
        r = detctl_as(d, as_user(NOBODY, NOBODY), "health")
        assert r.returncode != 0  # connect(2) itself is refused by the mode
        assert counter(d.status(), "refused_connections") == 0
    finally:
        d.stop()


@pytest.mark.parametrize("args,needle", [
    (["--allow-uid", "no-such-user-x"], "--allow-uid: 'no-such-user-x': no such user"),
    (["--admin-gid", "no-such-group-x"], "--admin-gid: 'no-such-group-x': no such group"),
    (["--allow-uid", "12x"], "--allow-uid: '12x': not a user id"),
    (["--socket-mode", "0999"], "--socket-mode: '0999' is not an octal mode"),
    (["--socket-mode", "01777"], "--socket-mode: '01777' is not an octal mode"),
    (["--socket-group", "no-such-group-x"], "--socket-group: 'no-such-group-x': no such group"),
])
def test_bad_access_flags(tmpdir_short, args, needle):
    sock = tmpdir_short / "bad.sock"
    r = subprocess.run([str(DETD), "--socket", str(sock), "--state-dir", str(tmpdir_short / "st"), *args],
                       capture_output=True, text=True, timeout=10)
    assert r.returncode == 2
    assert needle in r.stderr, r.stderr
    assert not sock.exists()


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def probe(target, method, hexbytes):
    r = subprocess.run([str(PROBE), target, method, "--hex", hexbytes],
                       capture_output=True, text=True, timeout=30)
    code, _, msg = r.stdout.strip().partition(" message=")
    return int(code[len("status="):]), msg


def test_health_on_unix_socket_and_tcp_listener(tmpdir_short):
    port = free_port()
    d = Daemon(tmpdir_short, ["--listen", f"127.0.0.1:{port}"]).start()
    try:
        bad_service = "0a" + "04" + b"nope".hex()  # HealthCheckRequest{service:"nope"}
        for target in (d.socket, f"tcp:127.0.0.1:{port}"):
            assert probe(target, "/grpc.health.v1.Health/Check", "") == (0, "")
            # answered by the daemon's health method, not a stub:
            code, msg = probe(target, "/grpc.health.v1.Health/Check", bad_service)
            assert code == 5 and "unknown service 'nope'" in msg
        # Decider calls stay off TCP; on the socket they reach the service.
        code, msg = probe(f"tcp:127.0.0.1:{port}", "/detd.v1.Decider/Decide", "")
        assert code == 7 and "unix socket only" in msg
        code, msg = probe(d.socket, "/detd.v1.Decider/Decide", "")
        assert code == 3  # INVALID_ARGUMENT from validation, not a refusal
    finally:
        d.stop()


def test_one_uid_cannot_take_every_connection(tmpdir_short):
    open_dir(tmpdir_short)
    d = Daemon(tmpdir_short, ["--max-connections", "8", "--max-connections-per-uid", "3",
                              "--idle-timeout-ms", "0", "--socket-mode", "0666"]).start()
    holder = subprocess.Popen([*as_user(NOBODY, NOBODY), sys.executable, str(HOLDER), d.socket, "3"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        holder.stdin.write("\n")
        holder.stdin.flush()
        # Over its 3 slots: each new connection of uid 65534 is closed at
        # once (the 10 s bound only ends a failing test: with no idle
        # timeout a connection not refused stays open).
        assert json.loads(holder.stdout.readline()) == [True, True]
        # Another user still has slots: root's calls are served.
        out = d.client("--keys", 2, stdout=subprocess.PIPE, text=True)
        stdout, _ = out.communicate(timeout=60)
        assert out.returncode == 0 and json.loads(stdout)["errors"] == [], stdout
        st = d.status()
        assert counter(st, "connections_refused_uid") == 2, st
        assert counter(st, "connections_refused_max") == 0, st
        log = d.read_log()
        assert log.count("uid 65534 holds 3 local connections (--max-connections-per-uid)") == 1, log[-2000:]
    finally:
        holder.kill()
        holder.wait()
        assert d.stop() == 0


def timings(ms=(1.0,)):
    return [{"config": f"BLOCK={16 << i},num_warps=4", "ms": list(ms)} for i in range(4)]


def test_caps_per_session_and_per_uid(tmpdir_short):
    """Open claims, new keys per minute and store growth, per session and
    per uid (the kernel's): over a cap, RESOURCE_EXHAUSTED naming it,
    logged once per episode, counted; another user is not held back."""
    open_dir(tmpdir_short)
    d = Daemon(tmpdir_short, ["--socket-mode", "0666", "--max-claims-per-session", "2",
                              "--max-claims-per-uid", "3", "--max-new-keys-per-session", "4",
                              "--max-store-kib-per-session", "4"]).start()
    a = ServeClient(d, 0)
    b = ServeClient(d, 1)
    other = ServeClient(d, 0, prefix=as_user(NOBODY, NOBODY))
    try:
        def designated(c, key):
            r = c.call(op="decide", key=key)
            assert r["rc"] == 0 and r["outcome"] == 2, r  # DESIGNATED
            return r["claim_id"]

        def refused(c, key, text, op="decide", **kw):
            r = c.call(op=op, key=key, **kw)
            assert r["rc"] != 0 and text in r["error"], r
            return r

        claims = {k: designated(a, k) for k in ("k0", "k1")}
        # A third claim of session a, twice: refused, logged once.
        for _ in range(2):
            refused(a, "k2", "open claims per session: limit 2 reached (max-claims-per-session)")
        claims["k3"] = designated(b, "k3")
        refused(b, "k4", "open claims per uid: limit 3 reached (max-claims-per-uid)")
        # Another uid is not held back by root's claims.
        assert other.call(op="decide", key="n0")["outcome"] == 2
        # Claims end with their reports; session a's new keys per minute
        # are then the cap: k0, k1, k5, k6 started, k7 refused.
        for k in ("k0", "k1"):
            assert a.call(op="report", key=k, claim_id=claims[k], timings=timings())["rc"] == 0
        for k in ("k5", "k6"):
            c = designated(a, k)
            assert a.call(op="report", key=k, claim_id=c, timings=timings())["rc"] == 0
        refused(a, "k7", "new keys per minute per session: limit 4 reached (max-new-keys-per-session)")
        # A report of about 4 x 1024 samples of 8 bytes: over the 4 KiB
        # of store growth a minute of session b.
        refused(b, "k3", "store growth (KiB per minute) per session: limit 4 reached "
                "(max-store-kib-per-session)", op="report", claim_id=claims["k3"],
                timings=timings([1.0] * 1024))
        assert b.call(op="report", key="k3", claim_id=claims["k3"], timings=timings())["rc"] == 0

        st = d.status()
        assert counter(st, "refused_max_claims_per_session") == 2, st
        assert counter(st, "refused_max_claims_per_uid") == 1, st
        assert counter(st, "refused_max_new_keys_per_session") == 1, st
        assert counter(st, "refused_max_store_kib_per_session") == 1, st
        log = d.read_log()
        assert log.count("open claims per session: limit 2 reached") == 1, log[-3000:]
        assert log.count("uid 0: open claims per uid: limit 3 reached") == 1, log[-3000:]
    finally:
        for c in (a, b, other):
            c.close()
        assert d.stop() == 0
