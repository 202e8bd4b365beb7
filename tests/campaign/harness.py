"""Runs fault schedules (schedule.py) against real daemons, real client
processes and, for etcd schedules, a real 3-member etcd cluster reached
through proxies (proxy.py); hands the recorded history to checker.py.

    python3 tests/campaign/harness.py --seed 17 [--profile short|long]
                                      [--kind local|etcd] [--keep DIR] [-v]

replays schedule 17 and prints its verdict (exit 1 on a violation). The
build directory comes from DETD_BUILD_DIR (default <repo>/build).

Every wait is bounded; processes are ended only through their own pid.
"""

import argparse
import heapq
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO / "tests" / "integration"))

import checker  # noqa: E402
import schedule as schedmod  # noqa: E402
from proxy import Proxy  # noqa: E402
from etcd_cluster import EtcdCluster  # noqa: E402

BUILD = Path(os.environ.get("DETD_BUILD_DIR", REPO / "build"))
DETD = BUILD / "daemon" / "detd"
DETCTL = BUILD / "client" / "detctl"
CLIENT = BUILD / "tests" / "campaign_client"

TOLERANCE_MS = 250
# A timing pass may hold a key this long past the daemon's pass bound
# (--pass-timeout-ms, else the claim lease) before its waiters must be
# served: etcd leases are whole seconds and expire on the leader's clock.
TAKEOVER_SLACK_MS = 1000


def _detd_flags():
    try:
        return subprocess.run([str(DETD), "--help"], capture_output=True, text=True,
                              timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""


def _last_answer(path):
    """The last answer line of a client's history, or None."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 8192))
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        try:
            r = json.loads(line)
        except ValueError:
            continue
        if r.get("ev") == "answer":
            return r
        if r.get("ev") in ("exit", "died"):
            return None
    return None


def _designated(path):
    r = _last_answer(path)
    return r is not None and r.get("op") == "decide" and r.get("outcome") == "designated"


class DaemonProc:
    def __init__(self, root, name, args):
        self.name = name
        self.socket = str(root / f"{name}.sock")
        self.state = str(root / f"{name}-state")
        self.log_path = root / f"{name}.log"
        self.args = list(args)
        self.proc = None
        self.starts = 0

    def start(self):
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [str(DETD), "--socket", self.socket, "--state-dir", self.state, *self.args],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self.starts += 1

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def detctl(self, *args, timeout=10):
        return subprocess.run([str(DETCTL), "--socket", self.socket, "--timeout", "5000", *args],
                              capture_output=True, text=True, timeout=timeout)

    def wait_ready(self, timeout=10.0):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if not self.alive():
                return False
            try:
                if self.detctl("health", timeout=5).returncode == 0:
                    return True
            except subprocess.TimeoutExpired:
                pass
            time.sleep(0.05)
        return False

    def kill9(self):
        if self.alive():
            self.proc.kill()
            self.proc.wait(timeout=10)

    def term(self, timeout=10.0):
        if not self.alive():
            return None
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
            return "killed after SIGTERM timeout"

    def decisions(self):
        """{"<kernel>\\n<key>": config} from detctl decisions --json, or None."""
        try:
            r = self.detctl("decisions", "--json", timeout=15)
            if r.returncode != 0:
                return None
            return {f"{d['kernel']}\n{d['key']}": d["config"]
                    for d in json.loads(r.stdout)["decisions"]}
        except (subprocess.TimeoutExpired, ValueError, KeyError):
            return None


class Harness:
    """Runs schedules one after another; etcd schedules share one etcd
    cluster (started on first use, each schedule in its own namespace)."""

    def __init__(self, workdir=None, verbose=False, keep_failed=None):
        self.own_workdir = workdir is None
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="detd-camp-", dir="/tmp"))
        self.verbose = verbose
        self.keep_failed = keep_failed
        self.etcd = None
        self.count = 0
        help_text = _detd_flags()
        self.pass_flag = "--pass-timeout-ms" in help_text
        for p in (DETD, DETCTL, CLIENT):
            if not p.exists():
                raise RuntimeError(f"{p} is not built (cmake --build build)")

    def log(self, *a):
        if self.verbose:
            print(f"[{time.monotonic() - self.t0:7.3f}]", *a, flush=True)

    def close(self):
        if self.etcd is not None:
            self.etcd.stop()
            self.etcd = None
        if self.own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def _etcd(self):
        if self.etcd is None:
            self.etcd = EtcdCluster(self.workdir / "etcd", size=3)
            self.etcd.start(timeout=60)
        return self.etcd

    # ---- one schedule ---------------------------------------------------
    def run(self, sched):
        self.count += 1
        self.t0 = time.monotonic()
        root = self.workdir / f"s{sched['seed']}-{self.count}"
        if root.exists():
            shutil.rmtree(root)
        root.mkdir(parents=True)
        ns = f"c{sched['seed']}p{os.getpid()}n{self.count}"
        lease = sched["lease_ms"]
        pass_ms = lease
        base = ["--namespace", ns, "--lease-ms", str(lease), "--log-level", "info"]
        if self.pass_flag:
            base += ["--pass-timeout-ms", str(pass_ms)]
        cluster = self._etcd() if sched["kind"] == "etcd" else None
        proxies = {}
        daemons = []
        for i in range(sched["daemons"]):
            args = list(base)
            if cluster is not None:
                cluster.refresh()
                ps = [Proxy(m["client_port"]) for m in cluster.members]
                proxies[i] = ps
                args += ["--etcd", ",".join(f"http://127.0.0.1:{p.port}" for p in ps),
                         "--node-id", f"n{i}"]
            daemons.append(DaemonProc(root, f"d{i}", args))
        for d in daemons:
            d.start()
        for d in daemons:
            if not d.wait_ready(15):
                raise RuntimeError(f"{d.name} did not start:\n{d.log_path.read_text()[-3000:]}")

        procs = []      # every client process ever started
        live = {}       # client id -> its current proc entry
        faults = []
        stopped = {}    # pid -> proc entry (SIGSTOPped)
        counts = {}
        spec = {c["id"]: c for c in sched["clients"]}
        stopfile = root / "stop"
        t_start = time.monotonic()

        def spawn(cid, gen=0):
            c = spec[cid]
            d = daemons[c["daemon"]]
            hist = root / f"client{cid}-{gen}.jsonl"
            kernel = c.get("kernel", f"campaign:k{sched['seed']}@1")
            cmd = [str(CLIENT), "--socket", d.socket, "--history", str(hist),
                   "--kernel", kernel, "--keys", str(c["keys"]),
                   "--order-seed", str(c["order_seed"] + gen), "--pass-ms", str(c["pass_ms"]),
                   "--deadline-ms", str(sched["deadline_ms"]), "--on-miss", c["on_miss"],
                   "--daemon", d.name, "--rank", str(cid), "--until", str(stopfile),
                   "--max-rounds", "50"]
            with open(root / f"client{cid}-{gen}.log", "ab") as log:
                p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL)
            e = {"client": cid, "gen": gen, "pid": p.pid, "daemon": d.name, "rank": cid,
                 "history": str(hist), "popen": p, "killed": False, "hung": False}
            procs.append(e)
            live[cid] = e
            self.log("client", cid, "gen", gen, "pid", p.pid, "on", d.name)
            return e

        actions = []
        seq = [0]

        def at(t, fn, *args):
            seq[0] += 1
            heapq.heappush(actions, (t, seq[0], fn, args))

        def now():
            return time.monotonic() - t_start

        def running(e):
            return e is not None and e["popen"].poll() is None

        def fault(kind, **kw):
            f = {"fault": kind, "start": time.monotonic(), "end": None, **kw}
            faults.append(f)
            counts[kind] = counts.get(kind, 0) + 1
            self.log("fault", kind, kw)
            return f

        def end_fault(f):
            if f["end"] is None:
                f["end"] = time.monotonic()

        # ---- fault actions -------------------------------------------
        def do_client_kill(ev, limit=None):
            e = live.get(ev["client"])
            if not running(e) or e["pid"] in stopped:
                return
            limit = limit or now() + 0.6  # aim at a timing pass in flight
            if now() < limit and not _designated(e["history"]):
                at(now() + 0.01, do_client_kill, ev, limit)
                return
            mid = _designated(e["history"])
            e["killed"] = True
            e["popen"].kill()
            e["popen"].wait(timeout=10)
            f = fault("client_kill", pid=e["pid"], mid_pass=mid)
            end_fault(f)
            spawn(ev["client"], e["gen"] + 1)

        def do_daemon_down(ev, how):
            d = daemons[ev["daemon"]]
            if not d.alive():
                return
            f = fault(how, daemon=d.name, down=ev["down"])
            if how == "daemon_kill":
                d.kill9()
            else:
                f["term_rc"] = d.term()
            at(now() + ev["down"], do_daemon_up, d, f)

        def do_daemon_up(d, f):
            if not d.alive():
                d.start()
            end_fault(f)

        def do_hang(ev, limit=None):
            limit = limit or now() + 1.0  # aim at a designated rank
            cands = [e for e in live.values() if running(e) and e["pid"] not in stopped
                     and _designated(e["history"])]
            if not cands and now() < limit:
                at(now() + 0.01, do_hang, ev, limit)
                return
            designated = bool(cands)
            if not cands:
                cands = [e for e in live.values() if running(e) and e["pid"] not in stopped]
            if not cands:
                return
            e = sorted(cands, key=lambda x: x["pid"])[ev["pick"] % len(cands)]
            os.kill(e["pid"], signal.SIGSTOP)
            stopped[e["pid"]] = e
            f = fault("hang", pid=e["pid"], designated=designated, then=ev["then"])
            at(now() + ev["dur"], do_unhang, e, f, ev["then"])

        def do_unhang(e, f, then):
            if e["pid"] not in stopped:
                return
            del stopped[e["pid"]]
            if then == "kill" and running(e):
                e["killed"] = True
                e["popen"].kill()
            elif running(e):
                os.kill(e["pid"], signal.SIGCONT)
            end_fault(f)

        def do_etcd_kill(ev):
            cluster.refresh()
            if any(not cluster.alive(i) for i in range(cluster.size)):
                counts["etcd_kill_skipped"] = counts.get("etcd_kill_skipped", 0) + 1
                return  # keep quorum: one member down at a time
            # Whether the victim leads: a leader's death stops every write
            # until the others elect a new one (checker.fault_cost).
            try:
                lead = cluster.leader(timeout=1.0)
            except Exception:  # noqa: BLE001 - unknown counts as the leader
                lead = None
            f = fault("etcd_kill", member=ev["member"], down=ev["down"],
                      leader=lead is None or lead == ev["member"])
            cluster.kill(ev["member"])
            at(now() + ev["down"], do_etcd_up, ev["member"], f)

        def do_etcd_up(i, f):
            cluster.refresh()
            if not cluster.alive(i):
                cluster._spawn(i)
            end_fault(f)

        def do_partition(ev):
            ps = proxies[ev["daemon"]]
            if any(p.mode != "pass" for p in ps):
                return
            f = fault("partition", daemon=f"d{ev['daemon']}", mode=ev["mode"], dur=ev["dur"])
            for p in ps:
                p.set_mode(ev["mode"])
            at(now() + ev["dur"], do_heal, ps, f)

        def do_heal(ps, f):
            for p in ps:
                p.heal()
            end_fault(f)

        def do_owner_kill(ev, limit=None):
            # The daemon of a designated client holds the key's claim (the
            # key's rendezvous owner, unless the owner did not meet it).
            limit = limit or now() + 1.0
            cands = [e for e in live.values() if running(e) and e["pid"] not in stopped
                     and _designated(e["history"])]
            if not cands and now() < limit:
                at(now() + 0.01, do_owner_kill, ev, limit)
                return
            if not cands:
                return
            e = sorted(cands, key=lambda x: x["pid"])[ev["pick"] % len(cands)]
            d = next(x for x in daemons if x.name == e["daemon"])
            if not d.alive():
                return
            f = fault("owner_kill", daemon=d.name, down=ev["down"])
            d.kill9()
            at(now() + ev["down"], do_daemon_up, d, f)

        def do_partial(ev):
            # Clients on some daemons only, keys of their own kernel.
            f = fault("partial", daemons=[f"d{i}" for i in ev["daemons"]])
            end_fault(f)
            for j in range(ev["clients"]):
                cid = 100 + len([k for k in spec if k >= 100])
                spec[cid] = {"id": cid, "daemon": ev["daemons"][j % len(ev["daemons"])],
                             "keys": ev["keys"], "order_seed": ev["order_seed"] + j,
                             "on_miss": "error", "pass_ms": ev["pass_ms"],
                             "kernel": f"campaign:p{sched['seed']}@1"}
                spawn(cid)

        table = {"client_kill": do_client_kill,
                 "daemon_kill": lambda ev: do_daemon_down(ev, "daemon_kill"),
                 "daemon_term": lambda ev: do_daemon_down(ev, "daemon_term"),
                 "hang": do_hang, "etcd_kill": do_etcd_kill, "partition": do_partition,
                 "owner_kill": do_owner_kill, "partial": do_partial}
        for c in sched["clients"]:
            at(c["start"], spawn, c["id"])
        for ev in sched["events"]:
            at(ev["t"], table[ev["fault"]], ev)

        # ---- the timeline ----------------------------------------------
        hard_end = sched["duration"] + 30  # follow-ups are short; bounded anyway
        while actions and now() < hard_end:
            t, _, fn, args = actions[0]
            if t > sched["duration"] and fn in (do_client_kill, do_hang, do_etcd_kill,
                                                do_partition, do_daemon_down, do_owner_kill,
                                                do_partial):
                heapq.heappop(actions)
                continue
            wait = t - now()  # read the clock once: it moves between two reads
            if wait > 0:
                time.sleep(min(wait, 0.05))
                continue
            heapq.heappop(actions)
            fn(*args)
        while now() < sched["duration"]:
            time.sleep(0.05)
        stopfile.write_text("stop\n")

        # ---- heal everything -------------------------------------------
        while actions:  # follow-ups still due (restarts, heals, SIGCONT): now
            _, _, fn, args = heapq.heappop(actions)
            if fn in (do_daemon_up, do_unhang, do_etcd_up, do_heal, spawn):
                fn(*args)
        for d in daemons:
            if not d.alive():
                d.start()
        for ps in proxies.values():
            for p in ps:
                p.heal()
        if cluster is not None:
            cluster.refresh()
            for i in range(cluster.size):
                if not cluster.alive(i):
                    cluster._spawn(i)
        # clients finish: a healthy system answers each remaining key fast
        limit = time.monotonic() + 3 * sched["deadline_ms"] / 1000.0 + 2.0
        while time.monotonic() < limit and any(running(e) for e in procs):
            time.sleep(0.05)
        for e in procs:
            if running(e):
                e["hung"] = True
                e["popen"].kill()
            try:
                e["popen"].wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
            e["exit_code"] = e["popen"].returncode
        ready = {d.name: d.wait_ready(15) for d in daemons}
        if cluster is not None:
            try:
                cluster.wait_healthy(timeout=30)
            except Exception as ex:  # noqa: BLE001 - reported below
                self.log("etcd not healthy:", ex)

        records = []
        for e in procs:
            try:
                with open(e["history"]) as f:
                    for line in f:
                        try:
                            records.append(json.loads(line))
                        except ValueError:
                            pass  # a line cut by kill -9 (never an answer: one write)
            except FileNotFoundError:
                pass
        acked = {}
        for r in records:
            if checker.acknowledged(r):
                acked[checker.key_of(r)] = r["config"]
        # etcd: the daemons apply the watch; give them a bounded while. The
        # bound: a daemon whose node lease ran out while it was cut off
        # boots again after its watch's longest reconnect wait (2 s,
        # RECONNECT_MAX_MS): its calls (revoke, grant, put, the resync's
        # read, the watch) each within the 3 s budget (CLUSTER_BUDGET_MS).
        stores = {}
        limit = time.monotonic() + (2.0 + 5 * 3.0 if cluster is not None else 0.0)
        while True:
            stores = {d.name: (d.decisions() if ready[d.name] else None) for d in daemons}
            if all(st is not None and all(k in st for k in acked) for st in stores.values()):
                break
            if time.monotonic() >= limit:
                break
            time.sleep(0.2)
        for d in daemons:
            rc = d.term()
            if rc not in (0, None):
                self.log(d.name, "SIGTERM exit", rc)
        for ps in proxies.values():
            for p in ps:
                p.close()

        for e in procs:
            e.pop("popen", None)
        for f in faults:
            if f["end"] is None:
                f["end"] = time.monotonic()
        run = {"seed": sched["seed"], "kind": sched["kind"], "tolerance_ms": TOLERANCE_MS,
               "pass_bound_ms": pass_ms + TAKEOVER_SLACK_MS, "lease_ms": lease,
               "deadline_ms": sched["deadline_ms"], "records": records,
               "election_ms": EtcdCluster.ELECTION_TIMEOUT_MS,
               "procs": procs, "stores": stores, "faults": faults, "schedule": sched}
        res = checker.check(run)
        res["wall_s"] = round(time.monotonic() - self.t0, 2)
        res["faults"] = counts
        res["kind"] = sched["kind"]
        res["dir"] = str(root)
        with open(root / "run.json", "w") as f:
            json.dump(run | {"result": res}, f, indent=1, default=str)
        if res["violations"] and self.keep_failed:
            dst = Path(self.keep_failed) / root.name
            shutil.rmtree(dst, ignore_errors=True)
            shutil.copytree(root, dst, ignore=shutil.ignore_patterns("*.sock", "*-state"))
            res["dir"] = str(dst)
        shutil.rmtree(root, ignore_errors=True)
        return res


def main(argv=None):
    ap = argparse.ArgumentParser(description="replay one campaign schedule")
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--profile", default="short", choices=sorted(schedmod.PROFILES))
    ap.add_argument("--kind", choices=("local", "etcd"))
    ap.add_argument("--keep", help="copy the schedule's files here when it fails")
    ap.add_argument("--print-schedule", action="store_true")
    ap.add_argument("-v", "--verbose", action="store_true")
    a = ap.parse_args(argv)
    sched = schedmod.generate(a.seed, a.profile, a.kind)
    if a.print_schedule:
        print(json.dumps(sched, indent=1))
    h = Harness(verbose=a.verbose, keep_failed=a.keep)
    try:
        res = h.run(sched)
    finally:
        h.close()
    print(f"seed {a.seed} ({res['kind']}): {res['answers']} answers checked, "
          f"{len(res['violations'])} violations, faults {res['faults']}, {res['wall_s']} s")
    for v in res["violations"]:
        print(checker.format_violation(v))
    for o in res.get("over_budget", []):
        print(f"seed {a.seed}: over budget (not a violation): {o}")
    return 1 if res["violations"] else 0


if __name__ == "__main__":
    sys.exit(main())
