"""Fixtures: a real detd daemon on a temporary unix socket and state dir,
and helpers that run worker processes against it.

The build directory holding ``daemon/detd``, ``client/detctl`` and
``client/libdetd.so`` is ``$DETD_BUILD_DIR``, default ``<repo>/build``.
Missing binaries fail the end-to-end tests (they are never skipped or
replaced by a stand-in).
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import pytest

import prestart

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
os.environ.setdefault("TRITON_INTERPRET", "1")
sys.path.insert(0, HERE)

BUILD = os.path.abspath(os.environ.get("DETD_BUILD_DIR") or os.path.join(REPO, "build"))
DETD_BIN = os.path.join(BUILD, "daemon", "detd")
DETCTL_BIN = os.path.join(BUILD, "client", "detctl")
LIBDETD = os.path.join(BUILD, "client", "libdetd.so")

# The installed package may carry its own libdetd/detctl; prefer the build
# tree's so that the tests exercise what was just built.
if os.path.exists(LIBDETD):
    os.environ.setdefault("DETD_LIBRARY", LIBDETD)
if os.path.exists(DETCTL_BIN):
    os.environ.setdefault("DETD_DETCTL", DETCTL_BIN)


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "triton_release: the outcome depends on how the hook meets Triton's Autotuner, Config or "
        "benchmark API, which changed between releases: run_matrix.sh runs it on every Triton "
        "release, the other tests on the primary release only (tests/README.md)")


# Seconds each module took on the primary release, its workers prestarted
# (prestart.py), in the suite's own conditions: two pytest runs at once on
# the 2-core machine (run_matrix.sh with --durations=0, summed per module,
# 2026-12-05: 794 s in all, 342 and 452 s in the two shards before this
# table).
# A module not listed counts half a second per test.
MODULE_SECONDS = {"test_inductor.py": 312, "test_e2e.py": 91, "test_conformance.py": 84, "test_coldstart.py": 73,
                  "test_helion.py": 54, "test_patterns.py": 28, "test_timing.py": 22, "test_verify_hook.py": 19,
                  "test_split.py": 15, "test_cache_tuner.py": 15, "test_final.py": 15, "test_e2e_committed.py": 14,
                  "test_record.py": 11, "test_nondet.py": 9, "test_timing_lock.py": 8, "test_hook_unit.py": 7,
                  "test_megatron_coexist.py": 4, "test_daemon_start.py": 4, "test_loop.py": 4, "test_prestart.py": 2,
                  "test_layers_py.py": 2}


def shard_of(items, shard: str):
    """The items of shard "i/n" (1-based): whole modules, each given to
    the lightest shard so far, heaviest first (by MODULE_SECONDS), so the
    n pytest runs of one release end close together and a module's
    fixtures are set up in one of them only."""
    try:
        i, n = (int(x) for x in shard.split("/"))
        assert 1 <= i <= n
    except (ValueError, AssertionError):
        raise pytest.UsageError(f"DETD_SHARD must be 'i/n' with 1 <= i <= n, not {shard!r}") from None
    mods = {}
    for it in items:
        mods.setdefault(it.nodeid.split("::")[0], []).append(it)
    weight = {m: MODULE_SECONDS.get(os.path.basename(m), 0.5 * len(v)) for m, v in mods.items()}
    load, mine = [0.0] * n, set()
    for m in sorted(mods, key=lambda m: (-weight[m], m)):
        k = load.index(min(load))
        load[k] += weight[m]
        if k == i - 1:
            mine.add(m)
    return [it for it in items if it.nodeid.split("::")[0] in mine]


def pytest_collection_modifyitems(config, items):
    shard = os.environ.get("DETD_SHARD")
    if shard:
        keep = shard_of(items, shard)
        kept = set(keep)
        gone = [it for it in items if it not in kept]
        if gone:
            config.hook.pytest_deselected(items=gone)
        items[:] = keep


def require_module(name):
    """Import a module a test needs; missing, the test fails when CI is set
    (CI must run every test) and is skipped otherwise."""
    try:
        return __import__(name)
    except ImportError as e:
        if os.environ.get("CI", "") != "":
            pytest.fail(f"{name} is not installed (CI is set: a missing requirement is a failure): {e}",
                        pytrace=False)
        pytest.skip(f"{name} is not installed")


def _require_build():
    missing = [p for p in (DETD_BIN, LIBDETD) if not os.path.exists(p)]
    if missing:
        pytest.fail("detd is not built (missing: " + ", ".join(missing) + "); build it with "
                    f"cmake -S {REPO} -B {BUILD} && cmake --build {BUILD} --target detd detd_daemon detctl, "
                    "or set DETD_BUILD_DIR")


class Daemon:
    def __init__(self, root, extra_args=()):
        self.root = root
        self.extra_args = list(extra_args)
        self.socket = os.path.join(root, "detd.sock")
        self.state = os.path.join(root, "state")
        os.makedirs(self.state, exist_ok=True)
        self.log_path = os.path.join(root, "detd.log")
        self.proc = None

    def start(self):
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen([DETD_BIN, "--socket", self.socket, "--state-dir", self.state,
                                      "--log-level", "info", *self.extra_args], stdout=log, stderr=log,
                                     stdin=subprocess.DEVNULL)
        deadline = time.time() + 20
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"detd exited with {self.proc.returncode}: {self.log()}")
            if os.path.exists(self.socket) and self._ping():
                return self
            time.sleep(0.1)
        raise RuntimeError("detd did not come up: " + self.log())

    def _ping(self):
        from detd import _native

        try:
            c = _native.Client(self.socket)
            try:
                c.connect(2000)
            finally:
                c.close()
            return True
        except _native.DetdError:
            return False

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def restart(self):
        self.stop()
        return self.start()

    def log(self):
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode("utf-8", "replace")[-4000:]
        except OSError:
            return ""

    def detctl(self, *args, timeout=30):
        if not os.path.exists(DETCTL_BIN):
            pytest.fail(f"detctl is not built ({DETCTL_BIN})")
        return subprocess.run([DETCTL_BIN, "--socket", self.socket, *args], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, timeout=timeout)

    def env(self, **extra):
        e = dict(os.environ)
        for k in list(e):
            if k.startswith("DETD_") and k not in ("DETD_LIBRARY", "DETD_DETCTL", "DETD_BUILD_DIR"):
                del e[k]
        for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE"):
            e.pop(k, None)
        e.update(TRITON_INTERPRET="1", DETD_SOCKET=self.socket, DETD_LIBRARY=LIBDETD, DETD_DETCTL=DETCTL_BIN)
        pp = e.get("PYTHONPATH", "")
        pkg = os.path.join(REPO, "client", "python")
        if os.environ.get("DETD_TEST_INSTALLED") != "1":
            e["PYTHONPATH"] = pkg + (os.pathsep + pp if pp else "")
        e.update({k: str(v) for k, v in extra.items()})
        return e


def status(daemon):
    """The daemon's ``detctl status --json``."""
    st = daemon.detctl("status", "--json")
    assert st.returncode == 0, st.stderr
    return json.loads(st.stdout)


def run_worker(daemon, worker, *args, **env):
    """Run ``worker`` (a script here) against ``daemon`` with ``env`` on
    top of its environment and this directory on the path; it must exit
    0. Returns (its last stdout line as JSON, its stderr)."""
    e = daemon.env(**env)
    e["PYTHONPATH"] = HERE + os.pathsep + e.get("PYTHONPATH", "")
    p = prestart.run([sys.executable, os.path.join(HERE, worker), *args], env=e, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr + daemon.log()
    return json.loads(p.stdout.strip().splitlines()[-1]), p.stderr


@pytest.fixture
def daemon():
    _require_build()
    root = tempfile.mkdtemp(prefix="detd-py-", dir="/tmp")  # short: unix socket paths are limited
    d = Daemon(root).start()
    try:
        yield d
    finally:
        d.stop()
        shutil.rmtree(root, ignore_errors=True)


def run_workers(daemon, n, tmp_path, args=(), env=None, per_rank_env=None, timeout=300, tag="w",
                script="worker.py"):
    """Start n worker processes (``script``, worker.py by default) at once
    (RANK=i, WORLD_SIZE=n); return their JSON results in rank order."""
    procs = []
    for i in range(n):
        out = tmp_path / f"{tag}{i}.json"
        e = daemon.env(RANK=i, LOCAL_RANK=i, WORLD_SIZE=n, DETD_TEST_COUNTS=str(tmp_path / f"{tag}{i}.counts"),
                       **(env or {}))
        if per_rank_env:
            e.update({k: str(v) for k, v in per_rank_env(i).items()})
        p = prestart.popen([sys.executable, os.path.join(HERE, script), str(out), *args], env=e,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        procs.append((p, out))
    results = []
    for p, out in procs:
        try:
            text, _ = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            text, _ = p.communicate()
            raise AssertionError(f"worker timed out: {text[-3000:]}\ndaemon: {daemon.log()}")
        if not out.exists():
            raise AssertionError(f"worker exited {p.returncode} without result: {text[-3000:]}\n"
                                 f"daemon: {daemon.log()}")
        r = json.loads(out.read_text())
        r["returncode"] = p.returncode
        r["output"] = text[-3000:]
        results.append(r)
    return results
