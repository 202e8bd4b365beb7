"""systemd integration: the unit file, the sysusers file, and the
sd_notify protocol spoken by the real daemon.

The notify harness plays systemd's part: a unix datagram socket named by
NOTIFY_SOCKET, WATCHDOG_USEC set, and the messages detd sends are checked
against what the daemon has done at that moment. (systemd-run needs
systemd as PID 1, which this test environment does not have; the harness
is the test of the protocol.)
"""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from conftest import DETD, REPO, Daemon  # noqa: E402

UNIT = REPO / "deploy" / "systemd" / "detd.service"
SOCKET_UNIT = REPO / "deploy" / "systemd" / "detd.socket"
SYSUSERS = REPO / "deploy" / "systemd" / "detd.sysusers"


def analyze():
    exe = shutil.which("systemd-analyze")
    assert exe, "systemd-analyze is missing: scripts/setup-deps.sh installs systemd"
    return exe


def unit_copy(tmp, text=None):
    """The unit with ExecStart on the built binary and a config in tmp."""
    conf = tmp / "detd.conf"
    conf.write_text("# empty\n")
    text = (text or UNIT.read_text()).replace("/usr/bin/detd", str(DETD))
    text = text.replace("/etc/detd/detd.conf", str(conf))
    path = tmp / "detd.service"
    path.write_text(text)
    return path


def test_unit_verifies(tmpdir_short):
    text = UNIT.read_text()
    for line in ["Type=notify", "NotifyAccess=main", "WatchdogSec=30s",
                 "Restart=on-failure", "RuntimeDirectory=detd",
                 "StateDirectory=detd", "ConfigurationDirectory=detd",
                 "User=detd", "Group=detd", "ProtectSystem=strict",
                 "NoNewPrivileges=true", "MemoryDenyWriteExecute=true",
                 "SystemCallFilter=@system-service", "CapabilityBoundingSet=",
                 "ExecStart=/usr/bin/detd --config /etc/detd/detd.conf",
                 "ExecReload=/bin/kill -HUP $MAINPID"]:
        assert line in text.splitlines(), line
    service = unit_copy(tmpdir_short)
    sock = tmpdir_short / "detd.socket"
    sock.write_text(SOCKET_UNIT.read_text())
    r = subprocess.run([analyze(), "verify", str(service), str(sock)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stderr.strip() == "", r.stderr
    # The check can fail: a unit whose binary is missing does.
    bad_dir = tmpdir_short / "bad"
    bad_dir.mkdir()
    bad = unit_copy(bad_dir, text.replace("/usr/bin/detd", "/nonexistent/detd"))
    r = subprocess.run([analyze(), "verify", str(bad)], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode != 0
    assert "/nonexistent/detd" in r.stdout + r.stderr


def test_sysusers_creates_the_user(tmpdir_short):
    exe = shutil.which("systemd-sysusers")
    assert exe, "systemd-sysusers is missing: scripts/setup-deps.sh installs systemd"
    root = tmpdir_short / "root"
    (root / "etc").mkdir(parents=True)
    r = subprocess.run([exe, f"--root={root}", str(SYSUSERS)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    users = [ln.split(":") for ln in (root / "etc" / "passwd").read_text().splitlines()]
    groups = [ln.split(":") for ln in (root / "etc" / "group").read_text().splitlines()]
    detd = [u for u in users if u[0] == "detd"]
    assert len(detd) == 1
    gid = [g[2] for g in groups if g[0] == "detd"]
    assert gid == [detd[0][3]]
    assert detd[0][5] == "/var/lib/detd" and detd[0][6] == "/usr/sbin/nologin"


def stat_state(pid):
    """The process state letter of pid (/proc/PID/stat): "T" when stopped."""
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


class Notify:
    """The systemd side of sd_notify: a datagram socket, timestamped."""

    def __init__(self, path):
        self.path = str(path)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(self.path)
        self.msgs = []  # (monotonic time, {key: value})

    def recv(self, timeout):
        self.sock.settimeout(timeout)
        try:
            data = self.sock.recv(4096).decode()
        except socket.timeout:
            return None
        fields = dict(ln.split("=", 1) for ln in data.splitlines() if "=" in ln)
        self.msgs.append((time.monotonic(), fields))
        return fields

    def wait_for(self, key, timeout):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            m = self.recv(max(0.01, end - time.monotonic()))
            if m is not None and key in m:
                return m
        raise AssertionError(f"no {key} within {timeout}s: {self.msgs}")


def test_notify_ready_watchdog_stopping(tmpdir_short):
    n = Notify(tmpdir_short / "notify.sock")
    d = Daemon(tmpdir_short)
    store = Path(d.state) / "detd.sqlite"
    env = dict(os.environ, NOTIFY_SOCKET=n.path, WATCHDOG_USEC="400000")
    log = open(d.log_path, "ab")
    started = time.monotonic()  # every ping is sent after this
    proc = subprocess.Popen([str(DETD), "--socket", d.socket, "--state-dir",
                             d.state], stdout=log, stderr=subprocess.STDOUT,
                            env=env)
    d.proc, d.log = proc, log
    try:
        ready = n.wait_for("READY", 15)
        # At READY the socket exists, the store is open and a health check
        # is answered.
        assert ready["READY"] == "1"
        assert os.path.exists(d.socket) and store.exists()
        assert d.probe("/grpc.health.v1.Health/Check", "")[0] == 0
        assert "serving on " + d.socket in ready.get("STATUS", "")
        # No READY before it, and nothing but watchdog pings.
        assert [m for _, m in n.msgs[:-1] if "READY" in m] == []
        # Watchdog: pings at half of 400 ms, from the loop. Wait for 3 (a
        # loaded machine may delay them), and they cannot come faster than
        # the period: 3 pings after the start take at least 2 periods
        # (timed from before the start, so a slow reader cannot shorten it).
        pings = 0
        end = time.monotonic() + 30
        while pings < 3:
            assert time.monotonic() < end, n.msgs
            m = n.recv(max(0.01, end - time.monotonic()))
            if m is not None and m.get("WATCHDOG") == "1":
                pings += 1
        assert time.monotonic() - started >= 0.4, n.msgs
        # While the process is stopped no ping arrives; they resume with it.
        proc.send_signal(signal.SIGSTOP)
        end = time.monotonic() + 30
        while stat_state(proc.pid) != "T":  # stopped: it sends nothing more
            assert time.monotonic() < end, "SIGSTOP did not stop the daemon"
            time.sleep(0.01)
        while n.recv(0.05) is not None:
            pass
        # Absence over 3 periods (200 ms each) of a running daemon's pings.
        assert n.recv(0.6) is None
        proc.send_signal(signal.SIGCONT)
        assert n.wait_for("WATCHDOG", 30)["WATCHDOG"] == "1"
        # Drain.
        proc.send_signal(signal.SIGTERM)
        stopping = n.wait_for("STOPPING", 10)
        assert stopping["STOPPING"] == "1"
        assert "draining" in stopping.get("STATUS", "")
        assert proc.wait(15) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()
    assert "systemd watchdog: pinging every 200 ms" in d.read_log()


def test_no_notify_socket_is_a_no_op(tmpdir_short):
    env = {k: v for k, v in os.environ.items()
           if k not in ("NOTIFY_SOCKET", "WATCHDOG_USEC", "LISTEN_FDS")}
    d = Daemon(tmpdir_short)
    d.log = open(d.log_path, "ab")
    d.proc = subprocess.Popen([str(DETD), "--socket", d.socket, "--state-dir",
                               d.state, "--log-level", "debug"],
                              stdout=d.log, stderr=subprocess.STDOUT, env=env)
    d.wait_ready()
    assert d.stop() == 0
    assert "watchdog" not in d.read_log()


def test_socket_activation(tmpdir_short):
    """systemd-socket-activate holds the socket and execs detd (same pid)
    with LISTEN_FDS=1 on the first connection: that connection, and every
    later one, is served on the passed socket, Decider calls included."""
    exe = shutil.which("systemd-socket-activate")
    assert exe, "systemd-socket-activate is missing: setup-deps installs systemd"
    n = Notify(tmpdir_short / "notify.sock")
    d = Daemon(tmpdir_short)
    activated = str(tmpdir_short / "activated.sock")
    unused = tmpdir_short / "unused" / "detd.sock"
    env = dict(os.environ, NOTIFY_SOCKET=n.path)
    d.log = open(d.log_path, "ab")
    d.proc = subprocess.Popen(
        [exe, "-l", activated, "-E", "NOTIFY_SOCKET", str(DETD), "--socket", str(unused),
         "--state-dir", d.state], stdout=d.log, stderr=subprocess.STDOUT,
        env=env)
    try:
        end = time.monotonic() + 60
        while not os.path.exists(activated):
            assert time.monotonic() < end and d.proc.poll() is None, "no activation socket"
            time.sleep(0.02)
        d.socket = activated
        # The first call starts the daemon and is answered.
        assert d.probe("/grpc.health.v1.Health/Check", "")[0] == 0
        ready = n.wait_for("READY", 10)
        assert "serving on " + activated in ready["STATUS"]
        # Clients (Attach, Decide, Report, Observe) over the passed socket.
        outs = []
        ps = [d.client("--keys", 3, "--rank", r, "--observe",
                       out=tmpdir_short / f"c{r}.json") for r in range(2)]
        for p in ps:
            assert p.wait(60) == 0
        for r in range(2):
            outs.append(json.loads((tmpdir_short / f"c{r}.json").read_text()))
        assert outs[0]["keys"].keys() == outs[1]["keys"].keys()
        for k in outs[0]["keys"]:
            assert outs[0]["keys"][k]["config"] == outs[1]["keys"][k]["config"]
        st = d.status()
        assert st["decisions"] == 3
        assert d.detctl("verify").returncode == 0
        assert not unused.exists() and not unused.parent.exists()
        assert d.stop() == 0
    finally:
        if d.proc.poll() is None:
            d.proc.kill()
            d.proc.wait()
    # The socket belongs to systemd: detd leaves it in place.
    assert os.path.exists(activated)
    assert "socket activation: serving the socket passed by systemd" in d.read_log()
