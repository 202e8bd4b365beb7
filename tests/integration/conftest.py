"""Fixtures for integration tests: a real detd on a temporary unix socket.

The build directory comes from DETD_BUILD_DIR (default <repo>/build).
"""
import glob
import json
import os
import shutil
import signal
import sys
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("DETD_BUILD_DIR", REPO / "build"))
DETD = BUILD / "daemon" / "detd"
DETCTL = BUILD / "client" / "detctl"
PROBE = BUILD / "tests" / "detd_probe"
CLIENT = Path(__file__).resolve().parent / "detd_client.py"


# CI must run every suite: there (CI set, as CI runs with CI=true) a
# missing requirement fails the test; elsewhere it is skipped.
CI = os.environ.get("CI", "") != ""
HAVE_ETCD = shutil.which("etcd") is not None and shutil.which("etcdctl") is not None
IS_ROOT = os.geteuid() == 0


def triton_python():
    """An interpreter with Triton and torch: $DETD_TRITON_PYTHON, this one,
    or a venv of tests/python/run_matrix.sh ($DETD_VENV_ROOT, default
    ~/.cache/detd-venvs)."""
    cands = [os.environ.get("DETD_TRITON_PYTHON"), sys.executable]
    root = os.environ.get("DETD_VENV_ROOT") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "detd-venvs")
    cands += sorted(glob.glob(os.path.join(root, "triton-*", "bin", "python")), reverse=True)
    # Found, not imported (importing torch takes seconds).
    probe = "import importlib.util as u, sys; sys.exit(not (u.find_spec('triton') and u.find_spec('torch')))"
    for py in cands:
        if py and os.path.exists(py) and subprocess.run([py, "-c", probe], capture_output=True).returncode == 0:
            return py
    return None


def requires(ok, reason):
    """Mark a test (or, as pytestmark, a module) that needs something of
    the machine: `ok` says whether it is there. Missing, the test fails when
    CI is set and is skipped otherwise."""
    return pytest.mark.detd_requires(ok=bool(ok), reason=reason)


def pytest_configure(config):
    config.addinivalue_line("markers", "detd_requires(ok, reason): a requirement of the machine "
                                       "(fails under CI when missing, else skips)")


def pytest_runtest_setup(item):
    for m in item.iter_markers("detd_requires"):
        if not m.kwargs["ok"]:
            if CI:
                pytest.fail(f"{m.kwargs['reason']} (CI is set: a missing requirement is a failure)",
                            pytrace=False)
            pytest.skip(m.kwargs["reason"])


class ServeClient:
    """One detd_client.py --serve process: one libdetd handle, one session,
    answering one JSON command per line (detd_client.serve()). prefix: a
    command prefix (e.g. setpriv, to run as another user)."""

    def __init__(self, d, rank, extra=(), prefix=()):
        self.p = subprocess.Popen([*prefix, sys.executable, str(CLIENT), "--socket", d.socket, "--serve",
                                   "--rank", str(rank), *extra],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.pid = self.p.pid

    def call(self, **cmd):
        self.p.stdin.write(json.dumps(cmd) + "\n")
        self.p.stdin.flush()
        line = self.p.stdout.readline()
        assert line, f"client {self.pid} exited {self.p.poll()}"
        return json.loads(line)

    def close(self):
        self.p.stdin.close()
        self.p.wait(30)


class Daemon:
    """One detd process with its own socket and state directory."""

    def __init__(self, root, extra_args=(), name="detd"):
        self.root = Path(root)
        self.socket = str(self.root / f"{name}.sock")
        self.state = str(self.root / f"{name}-state")
        self.log_path = self.root / f"{name}.log"
        self.extra_args = list(extra_args)
        self.proc = None

    def start(self, wait=True):
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [str(DETD), "--socket", self.socket, "--state-dir", self.state,
             "--log-level", "debug", *self.extra_args],
            stdout=self.log, stderr=subprocess.STDOUT)
        if wait:
            self.wait_ready()
        return self

    def wait_ready(self, timeout=10.0):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise RuntimeError(f"detd exited {self.proc.returncode}:\n{self.read_log()}")
            if self.probe("/grpc.health.v1.Health/Check", "")[0] == 0:
                return
            time.sleep(0.05)
        raise RuntimeError(f"detd not ready:\n{self.read_log()}")

    def wait_log(self, text, timeout=10.0, after=0):
        """Wait until text appears in the log past byte offset `after`
        (readiness without detctl); returns the offset just past it."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"detd exited {self.proc.returncode}:\n{self.read_log()}")
            log = self.read_log()
            i = log.find(text, after)
            if i >= 0:
                return i + len(text)
            time.sleep(0.05)
        raise RuntimeError(f"'{text}' not in the log after {timeout}s:\n{self.read_log()[-4000:]}")

    def log_size(self):
        try:
            return self.log_path.stat().st_size
        except OSError:
            return 0

    def read_log(self):
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def stop(self, sig=signal.SIGTERM, timeout=15):
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else None
        self.proc.send_signal(sig)
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
        self.log.close()
        return rc

    def kill9(self):
        self.proc.kill()
        self.proc.wait()
        self.log.close()

    def detctl(self, *args, check=False, timeout=30):
        r = subprocess.run([str(DETCTL), "--socket", self.socket, *args],
                           capture_output=True, text=True, timeout=timeout)
        if check and r.returncode != 0:
            raise AssertionError(f"detctl {args} -> {r.returncode}\n{r.stdout}\n{r.stderr}")
        return r

    def probe(self, method, hexbytes=None, nbytes=None):
        """A raw gRPC call: returns (status code, message)."""
        if nbytes is not None:
            args = ["--bytes", str(nbytes)]
        elif len(hexbytes) > 60000:  # over what one argument may hold
            path = self.root / "probe-payload.bin"
            path.write_bytes(bytes.fromhex(hexbytes))
            args = ["--file", str(path)]
        else:
            args = ["--hex", hexbytes]
        r = subprocess.run([str(PROBE), self.socket, method, *args], capture_output=True, text=True, timeout=30)
        line = r.stdout.strip()
        if not line.startswith("status="):
            return (-1, r.stdout + r.stderr)
        code, _, msg = line.partition(" message=")
        return (int(code[len("status="):]), msg)

    def client(self, *args, out=None, **popen):
        """Start a detd_client.py process against this daemon."""
        cmd = [sys.executable, str(CLIENT), "--socket", self.socket, *map(str, args)]
        if out is not None:
            cmd += ["--out", str(out)]
        return subprocess.Popen(cmd, **popen)

    def status(self):
        return json.loads(self.detctl("status", "--json", check=True).stdout)


@pytest.fixture
def tmpdir_short():
    # unix socket paths must stay short: use /tmp, not pytest's deep tmp_path
    with tempfile.TemporaryDirectory(prefix="detd-it-", dir="/tmp") as d:
        yield Path(d)


@pytest.fixture
def daemon(tmpdir_short):
    d = Daemon(tmpdir_short).start()
    yield d
    d.stop()


def counter(status, name):
    return int(status.get("counters", {}).get(name, 0))


def release_clients(start, procs, timeout):
    """Touch the start line `start` once every detd_client.py --wait-start
    process of procs is up (clients_up()), so that they race from one
    moment however slowly each interpreter started."""
    clients_up(start, procs, timeout)
    Path(start).touch()


def clients_up(start, procs, timeout):
    """Wait until every detd_client.py --wait-start process of procs is up
    (it created START.ready.PID: library loaded, handle open). timeout: the
    bound the caller gives each client's whole run; a client that exits
    first fails the test."""
    end = time.monotonic() + timeout
    for p in procs:
        ready = Path(f"{start}.ready.{p.pid}")
        while not ready.exists():
            if p.poll() is not None:
                raise AssertionError(f"client {p.pid} exited {p.returncode} before the start line")
            if time.monotonic() > end:
                raise AssertionError(f"client {p.pid} not up after {timeout}s")
            time.sleep(0.01)
