"""Worker processes started from a prestarted interpreter.

Most of a worker's CPU time in this suite is ``import torch`` (about 3 s of
CPU on the 2-core machine, against well under a second of Triton
interpreter work for a typical worker), and the suite starts hundreds of
workers. :func:`popen` starts a worker script as :class:`subprocess.Popen`
would, but forks it from a server that has imported torch and numpy once
(``python prestart.py SOCKET``), so each worker pays only for what it
does itself.

A forked worker is a process of its own, as under Popen: its own pid (what
the daemon's peer credentials see and what ``.pid`` returns), its
environment, argv, working directory, ``sys.path`` (the script's folder,
then its ``PYTHONPATH``), stdin, stdout and stderr, and the interpreter's
normal exit (threads joined, ``atexit`` run, the exit status returned).
What it shares with the server is what a fresh interpreter would have made
the same way: the modules imported before the fork. So a request falls
back to a real ``subprocess.Popen`` wherever the interpreter or those
modules would have started differently: a command that is not
``python SCRIPT.py``, an environment whose interpreter, loader or torch
variables (``PYTHON*``, ``LD_*``, ``TORCH*``, ``OMP_*``, ...) differ from
the server's, or ``DETD_TEST_PRESTART=0`` in the test process (every
worker a real process, as before). A server that does not start (no
pidfds, say) says why on stderr, and its workers are real processes.
String hashing is the one thing a fork cannot renew: two servers take turns (consecutive workers, the ranks of
one ``run_workers`` call, come from different ones), so ranks still meet
different hash seeds. And torch is imported before the worker's first
line: a worker that installs detd before it imports torch meets torch
already imported, and detd patches torch's modules at install, not when
their import finishes; a test of that path starts a real process
(test_final.py).

Protocol (a unix SOCK_SEQPACKET socket, one connection per worker): the
client sends one message, JSON ``{"argv": [script, args...], "env": {...},
"cwd": ...}`` (at most ``MAX_REQUEST`` bytes) with three descriptors
(stdin, stdout, stderr); the server answers the worker's pid, then its
exit status (Popen's ``returncode``: negative for a signal) when it ends,
then closes the connection.
"""

from __future__ import annotations

import atexit
import json
import os
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

MAX_REQUEST = 1 << 20
# Variables read when the interpreter, the dynamic loader or torch start:
# a worker whose value differs from the server's would not start as the
# server did, so it gets a real process.
STARTUP_PREFIXES = ("PYTHON", "LD_", "TORCH", "PYTORCH", "OMP_", "MKL_", "KMP_", "OPENBLAS", "GOMP_", "MALLOC_",
                    "GLIBC_", "CUDA_", "NVIDIA_")
# Inductor reads its own variables when it is imported, in the worker (the
# server imports torch, not torch._inductor); a worker's sys.path is made
# from its own PYTHONPATH (_become).
NOT_STARTUP_PREFIXES = ("TORCHINDUCTOR_", "PYTHONPATH")
SERVERS = 2
# How long a server may take to import torch before the first worker gives
# up on it: the import takes 3 s of CPU, and the suite runs two pytest
# processes at once, each starting eight workers that import it too.
START_BOUND_S = 120.0

HERE = os.path.dirname(os.path.abspath(__file__))


# ------------------------------------------------------------------ server

def _startup_env(env):
    return {k: v for k, v in env.items() if k.startswith(STARTUP_PREFIXES) and not k.startswith(NOT_STARTUP_PREFIXES)}


def _serve(path, log):
    """Accept requests on ``path`` and fork a worker for each; returns only
    in a forked worker, with its request. Ends when its control pipe
    (stdin) reaches its end: the test process closed it, or ended. Says
    "ready" on stdout once it listens, then writes to ``log``."""
    import numpy  # noqa: F401  (the preloaded modules)
    import torch  # noqa: F401

    os.close(os.pidfd_open(os.getpid()))  # no pidfds (Linux before 5.3): never ready
    lsock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    lsock.bind(path)
    lsock.listen(64)
    sel = selectors.DefaultSelector()
    sel.register(lsock, selectors.EVENT_READ, ("accept", None))
    sel.register(sys.stdin, selectors.EVENT_READ, ("control", None))
    print("ready", flush=True)
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    while True:
        for key, _ in sel.select():
            kind, data = key.data
            if kind == "control":
                if not os.read(sys.stdin.fileno(), 64):
                    return None  # the test process is gone or done
            elif kind == "accept":
                try:
                    conn, _ = lsock.accept()
                except OSError:
                    continue
                job = _fork_one(conn, sel, lsock)
                if job is not None:
                    return job
            else:  # a worker ended
                conn, pid = data
                _, status = os.waitpid(pid, 0)
                sel.unregister(key.fileobj)
                os.close(key.fd)
                try:
                    conn.send(b"%d" % os.waitstatus_to_exitcode(status))
                except OSError:
                    pass  # the client went away: nobody to tell
                conn.close()


def _fork_one(conn, sel, lsock):
    """Read one request from ``conn`` and fork its worker. In the worker:
    every descriptor of the server closed, the request returned; in the
    server: None."""
    conn.settimeout(10.0)  # a client sends its request as soon as it connects
    fds = []
    try:
        msg, fds, flags, _ = socket.recv_fds(conn, MAX_REQUEST + 1, 3)
        if len(msg) > MAX_REQUEST or flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC) or len(fds) != 3:
            raise ValueError(f"request of {len(msg)} bytes with {len(fds)} descriptors (flags {flags:#x})")
        job = json.loads(msg)
        argv, env, cwd = job["argv"], job["env"], job["cwd"]
        if not (isinstance(argv, list) and argv and all(isinstance(a, str) for a in argv) and isinstance(env, dict)
                and isinstance(cwd, str)):
            raise ValueError("request needs argv (strings), env and cwd")
    except (OSError, ValueError) as e:
        try:
            conn.send(b"error: " + str(e).encode()[:1000])
        except OSError:
            pass
        conn.close()
        for fd in fds:
            os.close(fd)
        return None
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        for key in list(sel.get_map().values()):
            if key.data[0] == "exit":
                key.data[1][0].close()
                os.close(key.fd)
        sel.close()
        lsock.close()
        conn.close()
        for i, fd in enumerate(fds):
            os.dup2(fd, i)
        for fd in set(fds):
            if fd > 2:
                os.close(fd)
        return job
    for fd in fds:
        os.close(fd)
    conn.settimeout(None)
    pidfd = os.pidfd_open(pid)
    sel.register(pidfd, selectors.EVENT_READ, ("exit", (conn, pid)))
    try:
        conn.send(b"%d" % pid)
    except OSError as e:  # the worker runs on; its client will not hear of it
        print(f"prestart: worker {pid}: its client went away: {e}", file=sys.stderr, flush=True)
    return None


def _pythonpath():
    """This process's PYTHONPATH entries, in order."""
    return [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]


def _become(job, server_path_entries):
    """Turn this forked process into the requested worker, as a fresh
    interpreter would have started it."""
    script = job["argv"][0]
    os.chdir(job["cwd"])
    os.environ.clear()
    os.environ.update(job["env"])
    sys.argv = list(job["argv"])
    sys.path[:] = [os.path.dirname(os.path.abspath(script))] + _pythonpath() + server_path_entries
    sys.path_importer_cache.clear()


def main():
    path, log = sys.argv[1], sys.argv[2]
    pp = _pythonpath()
    base = [p for p in sys.path[1:] if p not in pp]  # the interpreter's own: stdlib, site-packages
    job = _serve(path, log)
    if job is None:
        return
    _become(job, base)
    import runpy

    runpy.run_path(job["argv"][0], run_name="__main__")


# ------------------------------------------------------------------ client

def run(args, env=None, timeout=None):
    """``subprocess.run(args, env=env, capture_output=True, text=True,
    timeout=timeout)`` through :func:`popen`."""
    p = popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        p.communicate()
        raise
    return subprocess.CompletedProcess(args, p.returncode, out, err)


class _Server:
    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="detd-prestart-")
        if len(self.dir) > 90:  # a unix socket's path has at most 107 bytes
            os.rmdir(self.dir)
            self.dir = tempfile.mkdtemp(prefix="detd-prestart-", dir="/tmp")
        self.path = os.path.join(self.dir, "s")
        self.log = os.path.join(self.dir, "log")
        self.startup = _startup_env(os.environ)  # what a worker's environment must match
        self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), self.path, self.log],
                                     stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=HERE)
        self.ready = None  # None: not yet known; then True, or why not

    def wait_ready(self):
        """Whether the server serves, waiting for it the first time (up
        to START_BOUND_S)."""
        if self.ready is None:
            sel = selectors.DefaultSelector()
            sel.register(self.proc.stdout, selectors.EVENT_READ)
            deadline = time.monotonic() + START_BOUND_S
            said, ended = b"", False  # anything before "ready" (warnings) is kept for the message

            def said_ready():
                return said == b"ready\n" or said.endswith(b"\nready\n")

            while not said_ready() and time.monotonic() < deadline:
                if sel.select(max(0.0, deadline - time.monotonic())):
                    chunk = os.read(self.proc.stdout.fileno(), 4096)
                    if not chunk:
                        ended = True
                        break
                    said += chunk
            sel.close()
            if said_ready():
                self.ready = True
            else:
                why = "ended" if ended else f"did not say it was ready within {START_BOUND_S:.0f} s"
                self.ready = f"the prestart server {why}: {said[-3000:].decode('utf-8', 'replace')}"
            if self.ready is not True:
                print(f"prestart: {self.ready}; workers run as real processes", file=sys.stderr, flush=True)
        return self.ready is True

    def stop(self):
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


_servers = []
_turn = [0]
_lock = threading.Lock()


def _server():
    """The next server in turn, or None where it could not start (said
    once on stderr: the workers then run as real processes, slower)."""
    with _lock:
        if not _servers:
            _servers.extend(_Server() for _ in range(SERVERS))
            atexit.register(lambda: [s.stop() for s in _servers])
        s = _servers[_turn[0] % len(_servers)]
        _turn[0] += 1
    return s if s.wait_ready() else None


def enabled():
    return os.environ.get("DETD_TEST_PRESTART", "1") != "0"


def _tail(path):
    try:
        with open(path, "rb") as f:
            return f.read()[-3000:].decode("utf-8", "replace")
    except OSError as e:
        return str(e)


class Prestarted:
    """The part of :class:`subprocess.Popen` the suite uses, for a worker
    forked by a prestart server: ``pid``, ``args``, ``stdout``/``stderr``
    (pipes when asked for), ``returncode``, ``poll``, ``wait``,
    ``communicate``, ``send_signal``, ``terminate``, ``kill``."""

    def __init__(self, args, conn, pid, stdout, stderr, text, log):
        self.args, self.pid, self._conn, self._log = args, pid, conn, log
        self.stdin, self.stdout, self.stderr, self._text = None, stdout, stderr, text
        self.returncode = None
        self._out = {}  # what communicate() read so far, per pipe

    def _status(self, timeout):
        if self.returncode is None:
            sel = selectors.DefaultSelector()
            sel.register(self._conn, selectors.EVENT_READ)
            ready = sel.select(timeout)
            sel.close()
            if not ready:
                return None
            msg = self._conn.recv(64)
            self._conn.close()
            if not msg:
                raise RuntimeError(f"the prestart server ended before worker {self.pid} did; its log: "
                                   f"{_tail(self._log)}")
            self.returncode = int(msg)
        return self.returncode

    def poll(self):
        return self._status(0)

    def wait(self, timeout=None):
        if self._status(timeout) is None:
            raise subprocess.TimeoutExpired(self.args, timeout)
        return self.returncode

    def communicate(self, input=None, timeout=None):
        if input is not None:
            raise ValueError("a prestarted worker has no stdin pipe")
        deadline = None if timeout is None else time.monotonic() + timeout
        pipes = [p for p in (self.stdout, self.stderr) if p is not None and not p.closed]
        sel = selectors.DefaultSelector()
        for p in pipes:
            sel.register(p.fileno(), selectors.EVENT_READ, p)
            self._out.setdefault(p.fileno(), [])
        while sel.get_map():
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                sel.close()
                raise subprocess.TimeoutExpired(self.args, timeout)
            for key, _ in sel.select(left):
                chunk = os.read(key.fd, 65536)
                if chunk:
                    self._out[key.fd].append(chunk)
                else:
                    sel.unregister(key.fd)
        sel.close()
        outs = []
        for p in (self.stdout, self.stderr):
            if p is None:
                outs.append(None)
                continue
            data = b"".join(self._out.get(p.fileno(), [])) if not p.closed else b""
            p.close()
            outs.append(data.decode("utf-8", "replace") if self._text else data)
        self.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return tuple(outs)

    def send_signal(self, sig):
        if self.poll() is None:
            os.kill(self.pid, sig)

    def terminate(self):
        self.send_signal(signal.SIGTERM)

    def kill(self):
        self.send_signal(signal.SIGKILL)


def popen(args, env=None, stdout=None, stderr=None, text=False, cwd=None):
    """Start ``args`` as ``subprocess.Popen(args, env=env, stdout=stdout,
    stderr=stderr, text=text, cwd=cwd)`` would: forked from a prestart
    server when ``args`` is ``[sys.executable, SCRIPT.py, ...]`` and the
    environment starts the interpreter as the server's did (module
    docstring), else as a real ``subprocess.Popen``. ``stdout`` and
    ``stderr``: None (this process's), ``subprocess.PIPE``,
    ``subprocess.STDOUT`` (stderr only) or a file object."""
    env = dict(os.environ if env is None else env)
    cwd = os.getcwd() if cwd is None else str(cwd)
    args = [str(a) for a in args]
    plain = (not enabled() or len(args) < 2 or args[0] != sys.executable or not args[1].endswith(".py")
             or args[1].startswith("-"))
    server = None
    if not plain:
        server = _server()
        plain = server is None or _startup_env(env) != server.startup
    if plain:
        return subprocess.Popen(args, env=env, stdout=stdout, stderr=stderr, text=text, cwd=cwd)
    closers, parent_ends, conn, msg = [], {}, None, b""
    try:
        null = os.open(os.devnull, os.O_RDONLY)
        closers.append(null)
        fds = [null]
        for which, spec in (("stdout", stdout), ("stderr", stderr)):
            if spec is None:
                fds.append(1 if which == "stdout" else 2)
            elif spec == subprocess.PIPE:
                r, w = os.pipe()
                closers.append(w)
                parent_ends[which] = os.fdopen(r, "r" if text else "rb")
                fds.append(w)
            elif spec == subprocess.STDOUT and which == "stderr":
                fds.append(fds[1])
            elif spec == subprocess.DEVNULL:
                null_w = os.open(os.devnull, os.O_WRONLY)
                closers.append(null_w)
                fds.append(null_w)
            else:
                fds.append(spec if isinstance(spec, int) else spec.fileno())
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        conn.connect(server.path)
        socket.send_fds(conn, [json.dumps({"argv": args[1:], "env": env, "cwd": cwd}).encode()], fds)
        msg = conn.recv(64 + 1000)
    finally:
        for fd in closers:
            os.close(fd)
        if not msg.isdigit():  # no worker: nothing of this request stays open
            for f in parent_ends.values():
                f.close()
            if conn is not None:
                conn.close()
    if not msg.isdigit():
        raise RuntimeError(f"the prestart server refused {args[1:]}: {msg!r}; its log: {_tail(server.log)}")
    return Prestarted(args, conn, int(msg), parent_ends.get("stdout"), parent_ends.get("stderr"), text,
                      server.log)


if __name__ == "__main__":
    main()
