"""Which daemon this process talks to, and one started on demand.

The socket, in order (the rule of ``detd_client_default_socket()`` in
``detd/client.h``, which detctl and native callers follow too):

1. the one configured: ``install(socket=)`` or ``DETD_SOCKET``. It is
   never replaced: a daemon restarting there is waited for (libdetd's
   reconnect window), never stood in for;
2. the node's, ``/run/detd/detd.sock``, when that socket exists (systemd,
   the Kubernetes sidecar);
3. this user's: ``$XDG_RUNTIME_DIR/detd/detd.sock``, or
   ``/tmp/detd-<uid>/detd.sock`` without ``XDG_RUNTIME_DIR``. When no
   daemon answers there, the first process that asks starts one: the
   daemon this package bundles (``detd/_lib/detd``), detached, with its
   store in ``$XDG_STATE_HOME/detd`` (else ``~/.local/state/detd``) and
   its log beside the store. A lock file in the socket's directory makes
   it exactly one per node and user when every rank starts at once; the
   others wait for it and use it. It keeps its store for the next run and
   exits after ``DETD_DAEMON_IDLE_S`` seconds (default 600) with no
   client (``detd --exit-when-idle-s``). ``DETD_START_DAEMON=never``
   turns this off.

Whoever starts the daemon says so in one line on stderr; when none answers
and none may be started, :func:`check` says in one line what to do.
"""

from __future__ import annotations

import fcntl
import os
import stat
import subprocess
import sys
import threading
import time
from typing import Optional, Tuple

from . import _native

NODE_SOCKET = "/run/detd/detd.sock"  # DETD_DEFAULT_SOCKET in detd/client.h
IDLE_S_DEFAULT = 600
# How long a starting daemon may take to answer: its start-up checks the
# store (a large one takes seconds) before it listens.
START_BOUND_S = 60.0

_lock = threading.Lock()
_resolved: dict = {}  # pid -> (socket or None, why not)
_lock_given: dict = {}  # pid -> the lockfile this process gave a daemon it started


def lock_requirements() -> list:
    """What a lock entry must match to be used by this environment
    (docs/lockfile.md, "Which provenance must match"): the installed
    Triton and torch versions, as ``FIELD=VALUE`` (read from the
    distributions' metadata: nothing is imported)."""
    import importlib.metadata

    out = []
    for field, dist in (("triton_version", "triton"), ("torch_version", "torch")):
        try:
            out.append(f"{field}={importlib.metadata.version(dist)}")
        except importlib.metadata.PackageNotFoundError:
            pass
    return out


def lock_given() -> Optional[str]:
    """The lockfile (``DETD_LOCK``) this process gave the daemon it
    started (``detd --lock``), or None."""
    return _lock_given.get(os.getpid())


def _is_socket(path: str) -> bool:
    try:
        return stat.S_ISSOCK(os.stat(path).st_mode)
    except OSError:
        return False


def user_socket() -> str:
    """This user's on-demand daemon's socket (see the module's text)."""
    run = os.environ.get("XDG_RUNTIME_DIR", "")
    if run.startswith("/"):
        return os.path.join(run, "detd", "detd.sock")
    return f"/tmp/detd-{os.getuid()}/detd.sock"


def state_dir() -> str:
    base = os.environ.get("XDG_STATE_HOME", "")
    if not base.startswith("/"):
        base = os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(base, "detd")


def daemon_binary() -> Optional[str]:
    """The bundled daemon, or ``$DETD_DAEMON`` (a detd built elsewhere)."""
    for path in (os.environ.get("DETD_DAEMON"), os.path.join(os.path.dirname(__file__), "_lib", "detd")):
        if path and os.access(path, os.X_OK):
            return path
    return None


def idle_s() -> int:
    raw = os.environ.get("DETD_DAEMON_IDLE_S", "")
    if raw == "":
        return IDLE_S_DEFAULT
    try:
        v = int(raw)
    except ValueError:
        v = -1
    if not 1 <= v <= 604800:
        raise ValueError(f"DETD_DAEMON_IDLE_S={raw!r}: expected whole seconds from 1 to 604800")
    return v


def may_start() -> bool:
    raw = os.environ.get("DETD_START_DAEMON", "auto")
    if raw not in ("auto", "never"):
        raise ValueError(f"DETD_START_DAEMON={raw!r}: expected auto or never")
    return raw == "auto"


def answers(path: str, timeout_ms: int = 2000) -> Tuple[bool, str]:
    """Whether a daemon answers at path, and why not."""
    try:
        c = _native.Client(path)
        try:
            c.connect(timeout_ms)
        finally:
            c.close()
        return True, ""
    except _native.DetdError as e:
        return False, e.detail or str(e)


def listening(path: str) -> Tuple[bool, str]:
    """Whether something listens on the unix socket at path (a connect,
    no call: no session is made), and why not."""
    import socket as _socket

    s = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    s.settimeout(2.0)
    try:
        s.connect(path)
        return True, ""
    except OSError as e:
        return False, e.strerror or str(e)
    finally:
        s.close()


def _private_dir(path: str) -> None:
    """Make path (mode 0700) or check that this user owns it and nobody
    else may write in it: the socket and the lock live there."""
    os.makedirs(path, mode=0o700, exist_ok=True)
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o022:
        raise RuntimeError(f"{path} is not a directory of this user's that only it can write: "
                           "not starting a daemon there (set DETD_SOCKET, or XDG_RUNTIME_DIR)")


def start(sock: str) -> str:
    """Start this user's daemon at sock unless one answers there (under
    the lock: exactly one per node and user). Returns the line to print,
    or "" when another process started it."""
    binary = daemon_binary()
    if binary is None:
        raise RuntimeError("this detd package has no daemon bundled (built without one: see its install "
                           "log), so none can be started; run detd yourself and set DETD_SOCKET")
    sock_dir, state = os.path.dirname(sock), state_dir()
    _private_dir(sock_dir)
    os.makedirs(state, mode=0o700, exist_ok=True)
    idle = idle_s()
    with open(os.path.join(sock_dir, "start.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        ok, _ = listening(sock)
        if ok:
            return ""  # another rank started it while this one waited
        log_path = os.path.join(state, "detd.log")
        lock_path = os.environ.get("DETD_LOCK") or None
        cmd = [binary, "--socket", sock, "--state-dir", state, "--exit-when-idle-s", str(idle)]
        if lock_path:
            cmd += ["--lock", os.path.abspath(lock_path)]
            cmd += [a for r in lock_requirements() for a in ("--lock-require", r)]
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                    start_new_session=True, close_fds=True)
        deadline = time.monotonic() + START_BOUND_S
        while True:
            ok, why = answers(sock, 1000)
            if ok:
                break
            rc = proc.poll()
            if rc is not None or time.monotonic() > deadline:
                if rc is None:
                    proc.kill()
                raise RuntimeError(f"the daemon started at {sock} " +
                                   (f"exited with status {rc}" if rc is not None else
                                    f"did not answer within {START_BOUND_S:.0f} s") +
                                   f" ({why}); its log: {log_path}: {_tail(log_path)}")
            time.sleep(0.05)
        proc.returncode = 0  # detached: it outlives this process, never waited for
    if lock_path:
        _lock_given[os.getpid()] = os.path.abspath(lock_path)
    return (f"detd: started a daemon for this user at {sock} (store {state}, log {log_path}"
            + (f", lock {os.path.abspath(lock_path)}" if lock_path else "") + "); "
            f"it exits after {idle} s without a client (DETD_START_DAEMON=never: do not start one)")


def _tail(path: str) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.path.getsize(path) - 400))
            return " / ".join(f.read().decode("utf-8", "replace").strip().splitlines()[-2:])
    except OSError as e:
        return str(e)


def socket(configured: Optional[str]) -> Tuple[Optional[str], str]:
    """The socket to use (None: libdetd's default, which then fails) and,
    when no daemon answers, why and what to do, in one line. Starts this
    user's daemon when the rule says so; resolved once per process."""
    if configured:
        return configured, ""
    pid = os.getpid()
    with _lock:
        got = _resolved.get(pid)
        if got is None:
            got = _resolve()
            _resolved.clear()
            _resolved[pid] = got
    return got


def _resolve() -> Tuple[Optional[str], str]:
    if _is_socket(NODE_SOCKET):
        return NODE_SOCKET, ""
    sock = user_socket()
    if _is_socket(sock) and listening(sock)[0]:
        return sock, ""
    try:
        if not may_start():
            return None, (f"detd: no daemon at {NODE_SOCKET} or {sock}, and DETD_START_DAEMON=never: start "
                          f"one (detd --socket {sock} --state-dir DIR) or set DETD_SOCKET")
        line = start(sock)
    except (OSError, RuntimeError, ValueError) as e:
        return None, f"detd: no daemon at {NODE_SOCKET} or {sock}, and none could be started: {e}"
    if line:
        print(line, file=sys.stderr, flush=True)
    return sock, ""


def check(configured: Optional[str]) -> Tuple[Optional[str], str]:
    """Before the first kernel: the socket to use (see :func:`socket`) and,
    when no daemon answers there, a line saying what to do ("" when one
    answers)."""
    sock, why = socket(configured)
    if sock is None:
        return None, why
    ok, err = listening(sock)
    if ok:
        return sock, ""
    return sock, (f"detd: no daemon answers at {sock} ({err}); start one there, point DETD_SOCKET at one, "
                  "or unset DETD_SOCKET to let detd start one for this user")
