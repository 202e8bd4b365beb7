"""Which daemon a process uses, and the one started on demand
(detd._daemon): the rule's order, exactly one daemon per user when every
rank starts at once, detctl finding it as typed, and the refusals, each
naming what to do. Real daemons (the build's detd) on real sockets."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import BUILD, DETCTL_BIN, DETD_BIN, REPO

from detd import _daemon

RANKS = 4
STARTED = "detd: started a daemon for this user at "


@pytest.fixture
def user(tmp_path, monkeypatch):
    """A user with its own runtime and state directories and nothing of
    detd's set."""
    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    for k in [k for k in os.environ if k.startswith("DETD_") and k != "DETD_LIBRARY"]:
        monkeypatch.delenv(k)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(run))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("DETD_DAEMON", DETD_BIN)
    monkeypatch.setattr(_daemon, "NODE_SOCKET", str(tmp_path / "node.sock"))  # no node daemon here
    _daemon._resolved.clear()
    yield tmp_path
    _daemon._resolved.clear()
    stop(run / "detd" / "detd.sock")


def stop(sock, bound_s=30):
    """Stop the daemon at sock (its pid from detctl status), waiting for it
    to exit within bound_s."""
    st = subprocess.run([DETCTL_BIN, "--socket", str(sock), "status", "--json"], capture_output=True, text=True)
    if st.returncode != 0:
        return
    pid = json.loads(st.stdout)["pid"]
    os.kill(pid, signal.SIGTERM)
    end = time.monotonic() + bound_s
    while os.path.exists(f"/proc/{pid}") and open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] != "Z":
        assert time.monotonic() < end, f"detd {pid} did not exit within {bound_s} s"
        time.sleep(0.05)


RESOLVE = ("import sys; sys.path.insert(0, %r); from detd import _daemon; "
           "_daemon.NODE_SOCKET = sys.argv[1]; print('SOCKET', _daemon.socket(None))"
           % os.path.join(REPO, "client", "python"))


def test_the_configured_socket_is_never_replaced(user):
    assert _daemon.socket("/nowhere/d.sock") == ("/nowhere/d.sock", "")
    sock, line = _daemon.check("/nowhere/d.sock")
    assert sock == "/nowhere/d.sock"
    assert line.startswith("detd: no daemon answers at /nowhere/d.sock (No such file or directory); ")
    assert not (user / "run" / "detd").exists()  # nothing started


def test_the_user_paths(user, monkeypatch):
    assert _daemon.user_socket() == str(user / "run" / "detd" / "detd.sock")
    assert _daemon.state_dir() == str(user / "state" / "detd")
    monkeypatch.delenv("XDG_RUNTIME_DIR")
    monkeypatch.delenv("XDG_STATE_HOME")
    assert _daemon.user_socket() == f"/tmp/detd-{os.getuid()}/detd.sock"
    assert _daemon.state_dir() == os.path.join(os.path.expanduser("~"), ".local", "state", "detd")


def test_ranks_starting_at_once_start_exactly_one_daemon_that_detctl_finds(user):
    env = dict(os.environ)
    procs = [subprocess.Popen([sys.executable, "-c", RESOLVE, str(user / "node.sock")], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(RANKS)]
    outs = [p.communicate(timeout=_daemon.START_BOUND_S + 30) for p in procs]
    sock = str(user / "run" / "detd" / "detd.sock")
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err
        assert out.strip() == f"SOCKET ('{sock}', '')", (out, err)
    lines = [ln for _, err in outs for ln in err.splitlines() if ln.startswith(STARTED)]
    assert len(lines) == 1, outs
    assert lines[0] == (f"{STARTED}{sock} (store {user / 'state' / 'detd'}, log {user / 'state' / 'detd' / 'detd.log'}"
                        f"); it exits after 600 s without a client (DETD_START_DAEMON=never: do not start one)")
    # detctl as typed (no --socket, no DETD_SOCKET): this user's daemon.
    st = subprocess.run([DETCTL_BIN, "status", "--json"], capture_output=True, text=True,
                        env={k: v for k, v in env.items() if k != "DETD_SOCKET"})
    assert st.returncode == 0, st.stderr
    doc = json.loads(st.stdout)
    assert doc["store_path"] == str(user / "state" / "detd" / "detd.sqlite")
    # A later process uses it and starts nothing.
    p = subprocess.run([sys.executable, "-c", RESOLVE, str(user / "node.sock")], env=env, capture_output=True,
                       text=True, timeout=60)
    assert p.stdout.strip() == f"SOCKET ('{sock}', '')" and STARTED not in p.stderr, (p.stdout, p.stderr)
    log = open(user / "state" / "detd" / "detd.log").read()
    assert "exiting after 600 s without a client (--exit-when-idle-s)" in log, log


def test_never_and_bad_settings_name_what_to_do(user, monkeypatch):
    monkeypatch.setenv("DETD_START_DAEMON", "never")
    sock, line = _daemon.socket(None)
    assert sock is None and "DETD_START_DAEMON=never" in line and "set DETD_SOCKET" in line
    for var, value, text in (("DETD_START_DAEMON", "sometimes", "DETD_START_DAEMON='sometimes': expected auto or never"),
                             ("DETD_DAEMON_IDLE_S", "0", "DETD_DAEMON_IDLE_S='0': expected whole seconds")):
        _daemon._resolved.clear()
        monkeypatch.setenv("DETD_START_DAEMON", "auto")
        monkeypatch.setenv(var, value)
        sock, line = _daemon.socket(None)
        assert sock is None and text in line, line
        monkeypatch.delenv(var)


def test_a_shared_socket_directory_is_refused(user):
    (user / "run" / "detd").mkdir(mode=0o777)
    os.chmod(user / "run" / "detd", 0o777)
    sock, line = _daemon.socket(None)
    assert sock is None and "is not a directory of this user's that only it can write" in line, line


def test_a_daemon_that_cannot_start_is_named_with_its_log(user, monkeypatch):
    monkeypatch.setenv("DETD_DAEMON", "/bin/false")  # exits 1 at once
    sock, line = _daemon.socket(None)
    assert sock is None and "none could be started: the daemon started at " in line, line
    assert "exited with status 1" in line and f"its log: {user / 'state' / 'detd' / 'detd.log'}" in line, line
    # Nothing half made stays usable: a working daemon starts next time.
    monkeypatch.setenv("DETD_DAEMON", DETD_BIN)
    _daemon._resolved.clear()
    assert _daemon.socket(None) == (str(user / "run" / "detd" / "detd.sock"), "")


def test_detd_run_without_a_daemon_says_one_line_before_the_script(user, tmp_path):
    """detd-run with no daemon answering at the configured socket (none may
    be started there) and on_miss=error: one line saying what to do, exit
    2, and the script never starts (its first governed kernel would fail
    with a traceback)."""
    script = tmp_path / "train.py"
    ran = tmp_path / "ran"
    script.write_text(f"open({str(ran)!r}, 'w').close()\n")
    env = dict(os.environ, DETD_SOCKET="/nowhere/d.sock",
               PYTHONPATH=os.path.join(REPO, "client", "python"))
    p = subprocess.run([sys.executable, "-m", "detd.run", str(script)], env=env, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 2, (p.stdout, p.stderr)
    lines = p.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("detd: no daemon answers at /nowhere/d.sock "), p.stderr
    assert "detd-run stops before the script" in lines[0], lines
    assert not ran.exists()
    # With a fallback allowed the script runs (the line is said once).
    p = subprocess.run([sys.executable, "-m", "detd.run", str(script)], env=dict(env, DETD_ON_MISS="first"),
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and ran.exists(), (p.stdout, p.stderr)
    assert p.stderr.count("detd: no daemon answers at /nowhere/d.sock") == 1, p.stderr
