"""Clients outlive a daemon that crashes and comes back late: `kill -9`
of detd while ranks wait for a timing pass and while ranks report, and a
new daemon on the same socket and store 5, 20 and 45 s later (the three
gaps run at once, each with its own daemon, socket and store).

Four ranks per gap (gap_worker.py: the package's resolve loop, shared by
the Triton and Inductor adapters, over the real libdetd, asking in 1 s
slices as a waiting rank logs). Rank 0 times key A and holds its pass
until the new daemon serves (it reports after the restart); rank 1 times
key B and reports while the daemon is down; ranks 2 and 3 wait for A
across the outage. Each gap shows the clients another outage: at 5 s the
socket file the killed daemon left ("connection refused"); at 20 s first
a socket that accepts connections and never answers (a daemon starting,
or systemd holding the socket), then the file left behind; at 45 s no
socket file at all. Checked: every rank
finishes with a decision for both keys and no error, all ranks agree and
it is the stored decision, each key was timed exactly once, and each
rank counted the outage once (detd.stats()); the waiting ranks warned
about it once.
"""
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from conftest import BUILD, Daemon

HERE = Path(__file__).resolve().parent
GAPS_S = {5: "refused", 20: "silent", 45: "missing"}
# The reconnect backoff's longest wait (the rest of the run is a few
# calls).
SETTLE_S = 1
SLACK_S = 60  # start-up of four Python processes and a daemon, busy machine


def wait_for(what, cond, timeout):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def outage(d, how, gap_s):
    """The daemon is gone for gap_s; what its clients meet meanwhile."""
    if how == "missing":
        os.unlink(d.socket)
        time.sleep(gap_s)
    elif how == "silent":
        # Connections are queued by the kernel and never answered.
        os.unlink(d.socket)
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(d.socket)
        s.listen(128)
        time.sleep(gap_s / 2)
        s.close()  # the file stays: "connection refused" from now on
        time.sleep(gap_s / 2)
    else:
        time.sleep(gap_s)  # the outage itself (the scenario), not a wait for a state


def run_gap(root, gap_s, how, results):
    root.mkdir()
    d = Daemon(root).start()
    env = dict(os.environ, DETD_LIBRARY=str(Path(os.environ.get("DETD_CLIENT_BUILD_DIR") or BUILD)
                                             / "client" / "libdetd.so"),
               DETD_WAIT_LOG_AFTER_S="1", DETD_WAIT_LOG_EVERY_S="1", DETD_TIMEOUT_MS="180000")
    env.pop("DETD_RECONNECT_MS", None)  # the default window (60 s)
    procs = []

    def rank(r, keys, hold=None):
        cmd = [sys.executable, str(HERE / "gap_worker.py"), "--socket", d.socket, "--rank", str(r),
               "--keys", keys, "--out", str(root / f"r{r}.json")]
        procs.append(subprocess.Popen(cmd + (["--hold", str(hold)] if hold else []), env=env))

    try:
        rank(0, "A,B", root / "release-A")
        wait_for("rank 0 timing A", lambda: (root / "release-A.held").exists(), SLACK_S)
        rank(1, "B,A", root / "release-B")
        wait_for("rank 1 timing B", lambda: (root / "release-B.held").exists(), SLACK_S)
        rank(2, "A,B")
        rank(3, "A,B")
        wait_for("ranks 2 and 3 waiting for A", lambda: d.status()["waiters"] == 2, SLACK_S)
        d.kill9()
        assert Path(d.socket).exists()  # left behind: clients get ECONNREFUSED
        (root / "release-B").touch()  # rank 1 reports into the outage
        outage(d, how, gap_s)
        d.start()
        (root / "release-A").touch()  # rank 0 reports to the new daemon
        for p in procs:
            p.wait(timeout=SETTLE_S + SLACK_S)
        results[gap_s] = {"codes": [p.returncode for p in procs], "daemon": d,
                          "out": [json.loads((root / f"r{r}.json").read_text()) for r in range(4)],
                          "decisions": json.loads(d.detctl("decisions", "--json", check=True).stdout)}
    except BaseException as e:  # reported by the test thread
        results[gap_s] = e
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        d.stop()


def test_restart_gaps(tmpdir_short):
    results = {}
    threads = [threading.Thread(target=run_gap, args=(tmpdir_short / f"gap{g}", g, how, results))
               for g, how in GAPS_S.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for g in GAPS_S:
        res = results[g]
        if isinstance(res, BaseException):
            raise AssertionError(f"gap {g} s") from res
        assert res["codes"] == [0, 0, 0, 0], (g, res["codes"])
        outs = res["out"]
        stored = {row["key"]: row["config"] for row in res["decisions"]["decisions"]}
        for key in ("A", "B"):
            configs = {o["keys"][key]["config"] for o in outs}
            reasons = [o["keys"][key]["reason"] for o in outs if o["keys"][key]["reason"]]
            assert not reasons, (g, key, reasons)
            assert configs == {stored[key]}, (g, key, configs, stored)
            assert sum(o["keys"][key]["passes"] for o in outs) == 1, (g, key, [o["keys"] for o in outs])
        for o in outs:
            assert o["stats"]["outages"] == 1, (g, o["rank"], o["stats"])
            assert o["stats"]["fallbacks"] == 0, (g, o["rank"], o["stats"])
        # The two holders took their claims again on the new daemon.
        assert [o["stats"]["claims_renewed"] for o in outs] == [1, 1, 0, 0], (g, [o["stats"] for o in outs])
        for o in outs[2:]:
            assert len(o["outage_warnings"]) == 1, (g, o["rank"], o["outage_warnings"])
