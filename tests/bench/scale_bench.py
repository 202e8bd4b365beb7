"""Scale benchmark of the etcd backend: N daemons as separate hosts.

    python3 tests/bench/scale_bench.py [--nodes 16,32,64] [--members 3,5]
        [--keys 30] [--burst 60] [--idle-s 10] [--json FILE]
        [--grpc-proxy K] [--model-nodes 1000,10000] [--daemon-arg ARG ...]
    python3 tests/bench/scale_bench.py --model FILE   (the model only)

Run as root (it creates network namespaces). For each etcd size M (a
real M-member cluster of Debian's etcd, listening on a bridge address) and
each N, N detd daemons, each in its own network namespace with its own
address on that bridge (a veth pair each), are measured in phases:

  storm    all N started at once: time until each serves its socket and is
           registered in etcd (its node key, with its pid) and has read the
           decisions; the boot retries they counted
           (detd_etcd_boot_retries_total), their CPU time and the etcd
           requests and bytes of the storm, per daemon.
  restart  all N stopped (SIGTERM) and started again at once, same measures.
  idle     --idle-s seconds of nothing: the background etcd load (node-lease
           keep-alives, the status monitor), per daemon and second.
  seq      --keys new keys, one at a time; for each, one client on every
           node asks at once (threads, libdetd through ctypes). The node that
           gets DESIGNATED reports after --pass-ms (default 0: at once; a
           timing pass's length shows what the waiting nodes cost etcd
           while it runs): miss latency
           (to DESIGNATED), commit latency (Report), cluster-wide latency
           (until the last node's answer) and propagation (the committing
           daemon's log line to the slowest other daemon's, ms timestamps).
  burst    --burst new keys, every node asks all of them in its own order
           at the same time: keys decided per second cluster-wide.
  late     (last, as it stops etcd) all N started while etcd is stopped;
           etcd started --late-s seconds later: time from etcd serving
           until all are up again.

The key phases run on the daemons that came up (all of them, normally).
etcd figures come from every member's /metrics before and after a phase
(grpc_server_started_total by method, the gRPC byte counters, WAL bytes,
Raft proposals, watch messages sent); per decided key they are the phase's
increase less the idle rate times its duration (Raft proposals: the
increase itself, see net_of()). RSS is read from /proc.
Every phase has a time bound; what did not complete is printed as such.
With --grpc-proxy K the daemons reach etcd through K `etcd grpc-proxy`
processes (the etcd figures are still the members': what the proxies pass
on). Then a model fitted to the figures predicts larger clusters (see
model(); --model-nodes).
Processes are ended by pid; namespaces and the bridge are deleted on exit.
"""
import argparse
import atexit
import ctypes
import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("DETD_BUILD_DIR", REPO / "build"))
DAEMON_ARGS = []  # --daemon-arg: given to every daemon
sys.path.insert(0, str(REPO / "tests" / "integration"))
from etcd_cluster import EtcdCluster  # noqa: E402
from detd_client import (  # noqa: E402
    DECIDED, DESIGNATED, Answer, Identity, Key, Timing, load)

IP = shutil.which("ip") or "/usr/sbin/ip"
TS = re.compile(r"^(\S+Z) ")
METRICS_PORT = 9464
CANDS = [f"BLOCK={16 << i},num_warps=4".encode() for i in range(4)]


def pct(v, p):
    v = sorted(v)
    if not v:
        return float("nan")
    k = min(len(v) - 1, max(0, int(round(p / 100.0 * (len(v) - 1)))))
    return v[k]


def ts_ms(line):
    m = TS.match(line)
    if not m:
        return None
    t = datetime.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S.%fZ")
    return t.timestamp() * 1000.0


def sh(*args, check=True):
    r = subprocess.run([IP, *args], capture_output=True, text=True, timeout=30)
    if check and r.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {r.stderr.strip()}")
    return r


# ---- network: a bridge in the root namespace, one namespace per node ------

class Net:
    """Bridge BR with 10.X.0.1/16; namespace i has 10.X.(1+i//200).(1+i%200)
    on its end of a veth pair. Names carry this process's pid."""

    def __init__(self, subnet):
        self.subnet = subnet
        tag = os.getpid() % 100000
        self.br = f"dsb{tag}"
        self.prefix = f"dsn{tag}-"
        self.made = []
        self.bridge = False

    @property
    def host(self):
        return f"{self.subnet}.0.1"

    def addr(self, i):
        return f"{self.subnet}.{1 + i // 200}.{1 + i % 200}"

    def ns(self, i):
        return f"{self.prefix}{i}"

    def up(self, n):
        if not self.bridge:
            sh("link", "add", self.br, "type", "bridge")
            self.bridge = True
            sh("addr", "add", f"{self.host}/16", "dev", self.br)
            sh("link", "set", self.br, "up")
        for i in range(len(self.made), n):
            ns, veth = self.ns(i), f"dsv{os.getpid() % 100000}-{i}"[:15]
            sh("netns", "add", ns)
            self.made.append((ns, veth))
            sh("link", "add", veth, "type", "veth", "peer", "name", "eth0",
               "netns", ns)
            sh("link", "set", veth, "master", self.br, "up")
            sh("-n", ns, "addr", "add", f"{self.addr(i)}/16", "dev", "eth0")
            sh("-n", ns, "link", "set", "eth0", "up")
            sh("-n", ns, "link", "set", "lo", "up")

    def down(self):
        # The veth first: deleting a namespace frees its devices later,
        # in the kernel's own time; deleting one end of a pair is at once.
        for ns, veth in reversed(self.made):
            sh("link", "del", veth, check=False)
            sh("netns", "del", ns, check=False)
        self.made = []
        if self.bridge:
            sh("link", "del", self.br, check=False)
            self.bridge = False


# ---- etcd and process figures -------------------------------------------------

LINE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)$')


def scrape(url, timeout=10):
    """{(name, labels): value} of one /metrics page."""
    with urllib.request.urlopen(url, timeout=timeout) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        m = LINE.match(line)
        if m:
            try:
                out[(m.group(1), m.group(2) or "")] = float(m.group(3))
            except ValueError:
                pass
    return out


def lab(labels, name):
    m = re.search(name + r'="([^"]*)"', labels)
    return m.group(1) if m else ""


def etcd_snapshot(etcd):
    """Totals over the members of what a phase costs etcd."""
    s = {"req": {}, "sent": 0.0, "recv": 0.0, "wal": [], "proposals": 0.0,
         "watch_msgs": 0.0, "ka_msgs": 0.0, "t": time.monotonic()}
    for i in range(etcd.size):
        try:
            m = scrape(etcd.endpoint(i) + "/metrics")
        except OSError:
            continue
        prop = 0.0
        for (name, labels), v in m.items():
            if name == "grpc_server_started_total":
                meth = lab(labels, "grpc_method")
                s["req"][meth] = s["req"].get(meth, 0.0) + v
            elif name == "grpc_server_msg_sent_total" and \
                    lab(labels, "grpc_method") == "Watch":
                s["watch_msgs"] += v
            elif name == "grpc_server_msg_received_total" and \
                    lab(labels, "grpc_method") == "LeaseKeepAlive":
                s["ka_msgs"] += v
            elif name == "etcd_network_client_grpc_sent_bytes_total":
                s["sent"] += v
            elif name == "etcd_network_client_grpc_received_bytes_total":
                s["recv"] += v
            elif name == "etcd_disk_wal_write_bytes_total":
                s["wal"].append(v)
            elif name == "etcd_server_proposals_committed_total":
                prop = max(prop, v)
        s["proposals"] = max(s["proposals"], prop)
    return s


WRITES = ("Txn", "Put", "DeleteRange", "LeaseGrant", "LeaseRevoke")


def delta(a, b):
    """Increase from snapshot a to b: requests by method, bytes, etc."""
    req = {k: b["req"].get(k, 0.0) - a["req"].get(k, 0.0)
           for k in set(a["req"]) | set(b["req"])}
    wal = (sum(b["wal"]) - sum(a["wal"])) / max(1, len(b["wal"]))
    return {"req": {k: v for k, v in req.items() if v > 0},
            "sent": b["sent"] - a["sent"], "recv": b["recv"] - a["recv"],
            "wal": wal, "proposals": b["proposals"] - a["proposals"],
            "watch_msgs": b["watch_msgs"] - a["watch_msgs"],
            "ka_msgs": b["ka_msgs"] - a["ka_msgs"], "s": b["t"] - a["t"]}


def net_of(d, idle, per):
    """Phase delta d less idle's rate over d's duration, divided by per."""
    f = d["s"] / idle["s"] if idle else 0.0

    def sub(x, y):
        return max(0.0, x - f * y) / per
    req = {k: sub(v, idle["req"].get(k, 0.0) if idle else 0.0)
           for k, v in d["req"].items()}
    g = (lambda k: idle[k]) if idle else (lambda k: 0.0)
    return {"req": req, "writes": sum(req.get(k, 0.0) for k in WRITES),
            "reads": req.get("Range", 0.0),
            "sent": sub(d["sent"], g("sent")), "recv": sub(d["recv"], g("recv")),
            "wal": sub(d["wal"], g("wal")),
            # Not less the idle rate: an idle etcd commits no proposal but
            # the expiry of a lease a stopped daemon could not revoke,
            # which is no rate (13 in one 3 s idle window at 128 daemons
            # took a whole phase's proposals to 0).
            "proposals": sub(d["proposals"], 0.0),
            "watch_msgs": sub(d["watch_msgs"], g("watch_msgs"))}


def rss_kb(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def cpu_s(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            st = f.read().rsplit(")", 1)[1].split()
        return (int(st[11]) + int(st[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


# ---- daemons ---------------------------------------------------------------

class GrpcProxies:
    """K `etcd grpc-proxy start` processes on the bridge address (as one per
    rack would run), each in front of every member; daemon i talks to
    proxy i % K only. etcd's own figures then count what reaches the
    members: one watch stream per proxy, not per daemon."""

    def __init__(self, root, host, etcd, k):
        self.procs, self.endpoints = [], []
        members = ",".join(f"{host}:{m['client_port']}" for m in etcd.members)
        for j in range(k):
            with socket.socket() as sk:  # a free port on the bridge address
                sk.bind((host, 0))
                port = sk.getsockname()[1]
            log = open(root / f"grpc-proxy-{j}.log", "ab")
            self.procs.append(subprocess.Popen(
                [shutil.which("etcd") or "etcd", "grpc-proxy", "start",
                 "--endpoints", members, "--listen-addr", f"{host}:{port}"],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT))
            self.endpoints.append(f"http://{host}:{port}")
        end = time.monotonic() + 10
        for ep in self.endpoints:
            host_, port = ep[7:].rsplit(":", 1)
            while True:
                try:
                    socket.create_connection((host_, int(port)), timeout=1).close()
                    break
                except OSError:
                    if time.monotonic() > end:
                        raise RuntimeError(f"etcd grpc-proxy on {ep} did not listen")
                    time.sleep(0.05)

    def stop(self):
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()


class Fleet:
    """N detd processes, daemon i in namespace i, registered as node n<i>."""

    def __init__(self, root, net, etcd, n, ns_name, proxies=None):
        self.root, self.net, self.etcd, self.n = root, net, etcd, n
        self.proxies = proxies
        self.ns_name = ns_name
        self.procs = [None] * n
        self.logs = [root / f"{ns_name}-d{i}.log" for i in range(n)]
        self.socks = [str(root / f"{ns_name}-{i}.sock") for i in range(n)]
        self.marks = [0] * n
        self.live = list(range(n))  # the daemons up after the last storm

    def argv(self, i):
        return [IP, "netns", "exec", self.net.ns(i), str(BUILD / "daemon" / "detd"),
                "--socket", self.socks[i],
                "--state-dir", str(self.root / f"{self.ns_name}-s{i}"),
                "--namespace", self.ns_name, "--etcd",
                (self.proxies.endpoints[i % len(self.proxies.endpoints)]
                 if self.proxies else self.etcd.endpoints),
                "--node-id", f"n{i}", "--lease-ms", "5000",
                "--log-level", "debug",
                "--metrics", f"{self.net.addr(i)}:{METRICS_PORT}", *DAEMON_ARGS]

    def start_all(self):
        for i in range(self.n):
            self.marks[i] = self.logs[i].stat().st_size if self.logs[i].exists() else 0
        t0 = time.monotonic()
        for i in range(self.n):
            self.procs[i] = subprocess.Popen(
                self.argv(i), stdin=subprocess.DEVNULL,
                stdout=open(self.logs[i], "ab"), stderr=subprocess.STDOUT)
        return t0

    def stop_all(self, timeout=30):
        for p in self.procs:
            if p is not None and p.poll() is None:
                p.send_signal(signal.SIGTERM)
        end = time.monotonic() + timeout
        for p in self.procs:
            if p is None:
                continue
            try:
                p.wait(timeout=max(0.1, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=10)

    def log_since(self, i):
        with open(self.logs[i], "rb") as f:
            f.seek(self.marks[i])
            return f.read().decode(errors="replace")

    def registered_pids(self):
        """{node id: pid} from etcd's nodes/ keys (the JSON gateway)."""
        import base64
        key = f"/detd/v1/{self.ns_name}/nodes/".encode()
        end = key[:-1] + bytes([key[-1] + 1])
        body = json.dumps({"key": base64.b64encode(key).decode(),
                           "range_end": base64.b64encode(end).decode(),
                           "serializable": True}).encode()
        for i in range(self.etcd.size):
            try:
                req = urllib.request.Request(self.etcd.endpoint(i) + "/v3/kv/range",
                                             data=body, method="POST")
                with urllib.request.urlopen(req, timeout=5) as r:
                    kvs = json.loads(r.read()).get("kvs", [])
                out = {}
                for kv in kvs:
                    v = json.loads(base64.b64decode(kv["value"]))
                    out[v.get("node")] = v.get("pid")
                return out
            except (OSError, ValueError):
                continue
        return {}

    def wait_up(self, t0, timeout, need_resync):
        """Seconds from t0 until each daemon serves its socket, is
        registered with its own pid and (need_resync) has read the
        decisions; None for those that did not within timeout."""
        sock = [None] * self.n
        reg = [None] * self.n
        res = [None] * self.n if need_resync else [0.0] * self.n
        end = t0 + timeout
        while time.monotonic() < end:
            now = time.monotonic() - t0
            for i in range(self.n):
                if sock[i] is None or (res[i] is None):
                    text = self.log_since(i)
                    if sock[i] is None and "serving on" in text:
                        sock[i] = now
                    if res[i] is None and "resync from etcd" in text:
                        res[i] = now
            if any(r is None for r in reg):
                pids = self.registered_pids()
                for i in range(self.n):
                    if reg[i] is None and pids.get(f"n{i}") == self.procs[i].pid:
                        reg[i] = time.monotonic() - t0
            if all(x is not None for x in sock + reg + res):
                break
            time.sleep(0.05)
        up = [None if None in (sock[i], reg[i], res[i]) else max(sock[i], reg[i], res[i])
              for i in range(self.n)]
        return {"sock": sock, "reg": reg, "up": up}

    def boot_retries(self):
        tot, seen = 0.0, 0
        for i in range(self.n):
            try:
                m = scrape(f"http://{self.net.addr(i)}:{METRICS_PORT}/metrics", 5)
            except OSError:
                continue
            seen += 1
            tot += m.get(("detd_etcd_boot_retries_total", ""), 0.0)
        return tot, seen

    def pids(self):
        return [p.pid for p in self.procs if p is not None and p.poll() is None]


def storm(fleet, etcd, timeout, need_resync, phase, late_s=0.0):
    """Start every daemon at once and measure until each is up. late_s > 0:
    etcd is stopped first and started again late_s seconds after the
    daemons; times count from etcd serving again."""
    if late_s > 0:
        etcd.stop()
    a = etcd_snapshot(etcd)
    cpu0 = 0.0
    t0 = fleet.start_all()
    if late_s > 0:
        time.sleep(late_s)
        etcd.resume()
        t0 = time.monotonic()
        a = etcd_snapshot(etcd)
    w = fleet.wait_up(t0, timeout, need_resync)
    b = etcd_snapshot(etcd)
    cpu = sum(cpu_s(p) for p in fleet.pids()) - cpu0
    retries, seen = fleet.boot_retries()
    up = [u for u in w["up"] if u is not None]
    fleet.live = [i for i, u in enumerate(w["up"]) if u is not None]
    d = delta(a, b)
    n = fleet.n
    return {"phase": phase, "n": n,
            "up": len(up), "all_s": max(up) if len(up) == n else None,
            "p50_s": pct(up, 50), "max_s": max(up) if up else None,
            "sock_p50_s": pct([x for x in w["sock"] if x is not None], 50),
            "retries": retries, "retries_seen": seen,
            "cpu_per_daemon_s": cpu / n,
            "req_per_daemon": sum(d["req"].values()) / n,
            "writes_per_daemon": sum(d["req"].get(k, 0.0) for k in WRITES) / n,
            "bytes_per_daemon": (d["sent"] + d["recv"]) / n,
            "timeout_s": timeout}


# ---- the workload ------------------------------------------------------------

class Clients:
    """One libdetd client per node of idx (rank i on node i); client j is
    on node idx[j]."""

    def __init__(self, fleet, idx):
        self.lib = load()
        self.idx = list(idx)
        self.cl = []
        for i in self.idx:
            ident = Identity(f"host{i}".encode(), i, 0, fleet.n, b"Bench GPU",
                             b"sm90", 132, b"scale")
            c = ctypes.c_void_p()
            rc = self.lib.detd_client_open(fleet.socks[i].encode(),
                                           ctypes.byref(ident), ctypes.byref(c))
            if rc != 0:
                raise RuntimeError(f"client on node {i}: {rc}")
            self.cl.append(c)
        self.arr = (ctypes.c_char_p * 4)(*CANDS)
        self.samples = [(ctypes.c_double * 1)(1.0 + j) for j in range(4)]
        self.tarr = (Timing * 4)(*[Timing(c, s, 1, 0)
                                   for c, s in zip(CANDS, self.samples)])

    def close(self):
        for c in self.cl:
            self.lib.detd_client_close(c)

    def ask(self, i, keystr, timeout_ms, pass_s=0.0):
        """Decide on node i; report after pass_s when designated. Returns
        (outcome, t_decide_s, t_report_s or None) or an error string."""
        key = Key(None, b"sm90", b"scale:kernel@0", keystr.encode(), self.arr, 4)
        ans = ctypes.POINTER(Answer)()
        t0 = time.perf_counter()
        rc = self.lib.detd_decide(self.cl[i], ctypes.byref(key), 0, timeout_ms,
                                  ctypes.byref(ans))
        t1 = time.perf_counter()
        if rc != 0:
            return f"decide rc {rc}"
        out = ans.contents.outcome
        claim = ans.contents.claim_id
        self.lib.detd_answer_free(ans)
        if out == DESIGNATED:
            time.sleep(pass_s)  # the timing pass
            rep = ctypes.POINTER(Answer)()
            rc = self.lib.detd_report(self.cl[i], claim, ctypes.byref(key),
                                      self.tarr, 4, b"3.6.0", timeout_ms,
                                      ctypes.byref(rep))
            t2 = time.perf_counter()
            if rc != 0:
                return f"report rc {rc}"
            self.lib.detd_answer_free(rep)
            return (out, t1 - t0, t2 - t1)
        if out != DECIDED:
            return f"outcome {out}"
        return (out, t1 - t0, None)


def seq_phase(fleet, cl, prefix, keys, deadline, pass_s=0.0):
    n = len(cl.idx)
    rows, errors = [], []
    bar = threading.Barrier(n + 1)
    go = {"key": None}
    res = [None] * n

    def worker(i):
        while True:
            bar.wait()
            k = go["key"]
            if k is None:
                return
            t = time.perf_counter()
            r = cl.ask(i, k, 30000 + int(pass_s * 1000), pass_s)
            res[i] = (r, time.perf_counter() - t) if not isinstance(r, str) else r
            bar.wait()

    th = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(n)]
    for t in th:
        t.start()
    done = 0
    for j in range(-2, keys):  # two warm-up keys
        if time.monotonic() > deadline:
            break
        go["key"] = f"{prefix}:{j}"
        bar.wait()  # go
        bar.wait()  # all answered
        errs = [r for r in res if isinstance(r, str) or r is None]
        if errs:
            errors.append((go["key"], errs[:3]))
            continue
        des = [r for r in res if r[0][0] == DESIGNATED]
        if len(des) != 1:
            errors.append((go["key"], f"{len(des)} designated"))
            continue
        winner = cl.idx[[i for i, r in enumerate(res) if r[0][0] == DESIGNATED][0]]
        if j >= 0:
            (_, t_dec, t_rep), _ = des[0]
            rows.append({"key": go["key"], "winner": winner, "miss": t_dec,
                         "commit": t_rep, "all": max(r[1] for r in res)})
            done += 1
    go["key"] = None
    bar.wait()
    for t in th:
        t.join(timeout=5)
    return rows, errors


def propagation(fleet, rows, idx):
    """Per key: from the committing daemon's "decided" line to the last
    other daemon's (watch) line, in ms; over the daemons of idx."""
    keyset = {r["key"]: r["winner"] for r in rows}
    pat = re.compile(r" decided .*kernel=scale:kernel@0 key=(\S+) ")
    at = {}
    for i in idx:
        for line in fleet.log_since(i).splitlines():
            m = pat.search(line)
            if m and m.group(1) in keyset:
                at.setdefault(m.group(1), {})[i] = ts_ms(line)
    out = []
    for k, w in keyset.items():
        t = at.get(k, {})
        if w not in t or len(t) != len(idx):
            continue
        out.append(max(v for i, v in t.items() if i != w) - t[w])
    return out


def burst_phase(fleet, cl, prefix, keys, deadline):
    n = len(cl.idx)
    errors, designated = [], [0] * n
    names = [f"{prefix}:{j}" for j in range(keys)]
    start = threading.Barrier(n + 1)

    def worker(i):
        order = names[(i * keys) // n:] + names[:(i * keys) // n]
        start.wait()
        for k in order:
            if time.monotonic() > deadline:
                errors.append((k, "phase deadline"))
                return
            r = cl.ask(i, k, 60000)
            if isinstance(r, str):
                errors.append((k, r))
            elif r[0] == DESIGNATED:
                designated[i] += 1

    th = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(n)]
    for t in th:
        t.start()
    start.wait()
    t0 = time.monotonic()
    for t in th:
        t.join(timeout=max(1.0, deadline - time.monotonic() + 5))
    took = time.monotonic() - t0
    return {"keys": keys, "s": took, "passes": sum(designated),
            "errors": errors[:5], "n_errors": len(errors)}


def run_config(root, net, etcd, m, n, a):
    ns_name = f"scale{n}m{m}"
    out = {"m": m, "n": n, "notes": [], "grpc_proxy": a.grpc_proxy}
    deadline = time.monotonic() + a.config_timeout
    proxies = GrpcProxies(root, net.host, etcd, a.grpc_proxy) if a.grpc_proxy else None
    fleet = Fleet(root, net, etcd, n, ns_name, proxies)
    try:
        out["storm"] = storm(fleet, etcd, a.storm_timeout, True, "storm")
        if out["storm"]["up"] < n:
            out["notes"].append(f"storm: {n - out['storm']['up']} of {n} daemons "
                                f"not up within {a.storm_timeout} s")
        fleet.stop_all()
        out["restart"] = storm(fleet, etcd, a.storm_timeout, False, "restart")
        if out["restart"]["up"] < n:
            out["notes"].append(f"restart: {n - out['restart']['up']} of {n} "
                                f"daemons not up within {a.storm_timeout} s")
        # The key phases run on the daemons that are up (all of them, when
        # the storms completed); the table says how many.
        if len(fleet.live) < 2:
            out["notes"].append("key phases skipped: fewer than 2 daemons up")
            return out
        out["live"] = len(fleet.live)
        if out["live"] < n:
            out["notes"].append(f"key phases on the {out['live']} daemons up")
        # Every daemon is up (registered, resynced): what its boot still
        # owes etcd is the registry read its resync marked due, made on its
        # status monitor's next round (every 1 s, CLUSTER_MONITOR_MS). Two
        # rounds, so that the idle figure below counts only idle requests.
        time.sleep(2.0)
        i0 = etcd_snapshot(etcd)
        time.sleep(a.idle_s)  # the idle window measured (--idle-s)
        idle = delta(i0, etcd_snapshot(etcd))
        out["idle"] = {"s": idle["s"],
                       "req_per_daemon_s": sum(idle["req"].values()) / n / idle["s"],
                       "req": {k: v / n / idle["s"] for k, v in idle["req"].items()},
                       "bytes_per_daemon_s": (idle["sent"] + idle["recv"]) / n / idle["s"],
                       "raw": idle,
                       "wal_per_s": idle["wal"] / idle["s"]}
        cl = Clients(fleet, fleet.live)
        try:
            epids = [x["pid"] for x in etcd.members if x.get("pid")]
            c0 = (sum(cpu_s(p) for p in fleet.pids()), sum(cpu_s(p) for p in epids))
            s0 = etcd_snapshot(etcd)
            rows, errors = seq_phase(fleet, cl, f"{ns_name}q", a.keys, deadline, a.pass_ms / 1e3)
            s1 = etcd_snapshot(etcd)
            c1 = (sum(cpu_s(p) for p in fleet.pids()), sum(cpu_s(p) for p in epids))
            out["seq"] = {"keys": len(rows), "asked": a.keys, "pass_ms": a.pass_ms, "errors": errors[:5],
                          "n_errors": len(errors),
                          "miss": [r["miss"] * 1e3 for r in rows],
                          "commit": [r["commit"] * 1e3 for r in rows],
                          "all": [r["all"] * 1e3 for r in rows],
                          "cost": net_of(delta(s0, s1), idle, max(1, len(rows) + 2)),
                          # CPU per key, idle share included: the daemons
                          # together, and the etcd members together.
                          "daemons_cpu_ms": (c1[0] - c0[0]) * 1e3 / max(1, len(rows) + 2),
                          "etcd_cpu_ms": (c1[1] - c0[1]) * 1e3 / max(1, len(rows) + 2)}
            if len(rows) < a.keys:
                out["notes"].append(f"seq: {len(rows)} of {a.keys} keys decided "
                                    f"({len(errors)} errors, time bound)")
            if time.monotonic() < deadline:
                b0 = etcd_snapshot(etcd)
                br = burst_phase(fleet, cl, f"{ns_name}b", a.burst, deadline)
                b1 = etcd_snapshot(etcd)
                br["cost"] = net_of(delta(b0, b1), idle, a.burst)
                out["burst"] = br
                if br["n_errors"]:
                    out["notes"].append(f"burst: {br['n_errors']} errors, e.g. "
                                        f"{br['errors'][:2]}")
            else:
                out["notes"].append("burst: skipped (configuration time bound)")
        finally:
            cl.close()
        # Every decided key's line is in every live daemon's log (what
        # propagation() reads) before the figures are taken. Bound: a watch's
        # longest reconnect wait (2 s) and a resync call's budget (3 s),
        # twice over (PROPAGATE_S in tests/integration/test_cluster.py).
        end = time.monotonic() + 2 * (2.0 + 3.0)
        while time.monotonic() < end and \
                len(propagation(fleet, [dict(r) for r in rows], fleet.live)) < len(rows):
            time.sleep(0.05)
        out["rss_daemon_kb"] = [rss_kb(p) for p in fleet.pids()]
        out["rss_etcd_kb"] = [rss_kb(x["pid"]) for x in etcd.members if x.get("pid")]
        out["prop"] = propagation(fleet, [dict(r) for r in rows], fleet.live)
        # Last, as it stops etcd: all daemons started while etcd is down.
        if a.late_s > 0:
            fleet.stop_all()
            out["late"] = storm(fleet, etcd, a.storm_timeout, False, "late",
                                a.late_s)
            if out["late"]["up"] < n:
                out["notes"].append(f"late: {n - out['late']['up']} of {n} "
                                    f"daemons not up within {a.storm_timeout} s "
                                    "of etcd serving again")
    finally:
        fleet.stop_all()
        if proxies is not None:
            proxies.stop()
    return out


# ---- report ----------------------------------------------------------------

def f1(x, unit=""):
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    return f"{x:.1f}{unit}"


def nlabel(r):
    live = r.get("live", r["n"])
    return f"{r['n']}" if live == r["n"] else f"{r['n']} ({live} up)"


def table(res):
    print("\nStart-up storm: all N daemons started at once (storm: first start; "
          "restart: SIGTERM, then all started again at once; late: all "
          "started while etcd is down, etcd started --late-s later, times "
          "from etcd serving again). up = serves its socket, is registered "
          "in etcd with its pid and (first start) has read the decisions.")
    print("| etcd | N | phase | up | all up | p50 | retries (sum) | CPU s/daemon |"
          " etcd requests/daemon | writes/daemon | etcd bytes/daemon |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in res:
        for ph in ("storm", "restart", "late"):
            s = r.get(ph)
            if not s:
                continue
            print(f"| {r['m']} | {r['n']} | {ph} | {s['up']}/{s['n']} | "
                  f"{f1(s['all_s'], ' s') if s['all_s'] is not None else 'not within ' + str(s['timeout_s']) + ' s'} | "
                  f"{f1(s['p50_s'], ' s')} | {s['retries']:.0f} ({s['retries_seen']} read) | "
                  f"{s['cpu_per_daemon_s']:.2f} | {s['req_per_daemon']:.1f} | "
                  f"{s['writes_per_daemon']:.1f} | {s['bytes_per_daemon'] / 1024:.1f} KiB |")
    print("\nKeys decided cluster-wide: every node asks each key at once; one is "
          "designated and reports at once (no timing pass). Latencies in ms.")
    print("| etcd | N | keys | miss p50 | p99 | commit p50 | p99 | all nodes answered p50 | p99 |"
          " propagation p50 | p99 | burst keys/s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in res:
        s = r.get("seq")
        if not s:
            continue
        b = r.get("burst")
        kps = f"{b['keys'] / b['s']:.1f}" if b and not b["n_errors"] else \
            ("incomplete" if b else "n/a")
        print(f"| {r['m']} | {nlabel(r)} | {s['keys']}/{s['asked']} | "
              f"{f1(pct(s['miss'], 50))} | {f1(pct(s['miss'], 99))} | "
              f"{f1(pct(s['commit'], 50))} | {f1(pct(s['commit'], 99))} | "
              f"{f1(pct(s['all'], 50))} | {f1(pct(s['all'], 99))} | "
              f"{f1(pct(r['prop'], 50))} | {f1(pct(r['prop'], 99))} | {kps} |")
    passes = sorted({r["seq"].get("pass_ms", 0) for r in res if r.get("seq")})
    print("\netcd cost per decided key (every node asking it; the idle rate "
          "subtracted; the timing pass held " + "/".join(map(str, passes or [0])) +
          " ms), idle load per daemon, memory.")
    print("| etcd | N | requests/key | writes/key (Txn, Put, Delete) | Txn/key (claims + commit) |"
          " Raft proposals/key | WAL bytes/key | watch msgs/key | bytes sent/key |"
          " bytes recv/key | CPU ms/key: daemons, etcd | idle req/daemon/s |"
          " idle bytes/daemon/s | daemon RSS mean | etcd RSS mean |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in res:
        s = r.get("seq")
        if not s:
            continue
        c = s["cost"]
        i = r["idle"]
        rd = r.get("rss_daemon_kb") or [0]
        re_ = r.get("rss_etcd_kb") or [0]
        print(f"| {r['m']} | {nlabel(r)} | {sum(c['req'].values()):.1f} | {c['writes']:.1f} | "
              f"{c['req'].get('Txn', 0.0):.1f} | {c['proposals']:.1f} | {c['wal']:.0f} | "
              f"{c['watch_msgs']:.1f} | {c['sent']:.0f} | {c['recv']:.0f} | "
              f"{s.get('daemons_cpu_ms', 0):.1f}, {s.get('etcd_cpu_ms', 0):.1f} | "
              f"{i['req_per_daemon_s']:.2f} | {i['bytes_per_daemon_s']:.0f} | "
              f"{sum(rd) / len(rd) / 1024:.1f} MiB | {sum(re_) / len(re_) / 1024:.1f} MiB |")
    for r in res:
        for note in r["notes"]:
            print(f"NOT COMPLETE: etcd {r['m']}, N {r['n']}: {note}")


def linfit(xs, ys):
    """Least squares y = a + b x; (a, b)."""
    n = len(xs)
    if n == 0:
        return 0.0, 0.0
    if n == 1 or len(set(xs)) == 1:
        return 0.0, sum(ys) / sum(xs) if sum(xs) else 0.0
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    return my - b * mx, b


def model(res, nodes=1000, ranks=8, keys=10000, write_rate=None):
    """Fit per-key and background costs against N (least squares, linear in
    N) from the measured configurations of the smallest etcd size, and
    predict nodes x ranks with keys."""
    ok = [r for r in res if r.get("seq") and r["seq"]["keys"] > 0]
    if not ok:
        print("\nmodel: no configuration completed the key phases; no fit")
        return None
    m = min(r["m"] for r in ok)
    use = [r for r in ok if r["m"] == m]
    xs = [r.get("live", r["n"]) for r in use]

    def fit(get):
        # A cost that does not grow with N (a slope below 0 from noise) is
        # predicted as its mean, not extrapolated downwards.
        ys = [get(r) for r in use]
        a_, b_ = linfit(xs, ys)
        return (a_, b_) if b_ >= 0 else (sum(ys) / len(ys), 0.0)
    claims = fit(lambda r: r["seq"]["cost"]["req"].get("Txn", 0.0))
    props = fit(lambda r: r["seq"]["cost"]["proposals"])
    wal = fit(lambda r: r["seq"]["cost"]["wal"])
    wmsg = fit(lambda r: r["seq"]["cost"]["watch_msgs"])
    sent = fit(lambda r: r["seq"]["cost"]["sent"])
    ireq = fit(lambda r: r["idle"]["req_per_daemon_s"])
    ibytes = fit(lambda r: r["idle"]["bytes_per_daemon_s"])
    bursts = [(r.get("live", r["n"]), r["burst"]["keys"] / r["burst"]["s"],
               r["burst"]["cost"]["proposals"] * r["burst"]["keys"] / r["burst"]["s"])
              for r in use if r.get("burst") and not r["burst"]["n_errors"]]
    measured_rate = max((b[2] for b in bursts), default=None)
    rate = write_rate or measured_rate
    allp = [x for r in use for x in r["seq"]["all"]]
    N = nodes
    at = lambda ab: ab[0] + ab[1] * N  # noqa: E731
    p_key, w_key, s_key = at(props), at(wal), at(sent)
    total_props = p_key * keys
    print(f"\nModel: {nodes} nodes x {ranks} ranks, {keys} keys, etcd {m} members")
    print("Inputs (least-squares fit y = a + b*N over N = "
          f"{', '.join(map(str, xs))} measured above, etcd {m} members):")
    for name, ab in (("Txn per key (the claims and one commit)", claims), ("Raft proposals per key", props),
                     ("WAL bytes per key (per member)", wal),
                     ("watch messages per key", wmsg), ("etcd bytes sent per key", sent),
                     ("idle etcd requests per daemon per s", ireq),
                     ("idle etcd bytes per daemon per s", ibytes)):
        print(f"  {name}: a = {ab[0]:.2f}, b = {ab[1]:.4f} per node -> "
              f"{at(ab):.1f} at N = {N}")
    print("Assumptions: the ranks of a node share its daemon (one claim per "
          "node per key, whatever the rank count: ranks only add local "
          "waiters); every node meets every key; costs stay linear in N; "
          "the timing passes themselves are excluded; the etcd write rate "
          + (f"is {rate:,.0f} Raft proposals/s ("
             + ("given with --write-rate" if write_rate else
                "the best burst measured here: 2 shared CPUs, all members on one disk")
             + ")" if rate else "was not measured (no burst completed)") + ".")
    print("| quantity | prediction |")
    print("|---|---|")
    print(f"| etcd writes (Raft proposals) for all keys | {total_props:,.0f} "
          f"({p_key:,.0f} per key) |")
    print(f"| Raft log (WAL) per member | {w_key * keys / 2**20:,.0f} MiB "
          f"(before compaction and snapshots) |")
    print(f"| watch traffic | {at(wmsg) * keys:,.0f} messages, "
          f"{s_key * keys / 2**30:,.1f} GiB sent by etcd |")
    # One claim per key (nodes that see the claim wait): the losing claim
    # Txns go (a key's Txns are its claims and one commit); the rest stay.
    # At least the claim and the commit (whose Txn deletes the claim).
    p_one = max(2.0, p_key - max(0.0, at(claims) - 2.0))
    out = {"m": m, "xs": xs, "props_per_key": p_key,
           "total_props": total_props, "wal_mib": w_key * keys / 2**20,
           "watch_msgs": at(wmsg) * keys, "watch_gib": s_key * keys / 2**30,
           "rate": rate, "time_s": total_props / rate if rate else None,
           "props_per_key_one_claim": p_one,
           "time_one_claim_s": p_one * keys / rate if rate else None,
           "idle_req_s": at(ireq) * N, "idle_mib_s": at(ibytes) * N / 2**20}
    if rate:
        t = total_props / rate
        print(f"| time to decide all keys, etcd-bound (every node asks every "
              f"key at once) | {t:,.0f} s at {rate:,.0f} proposals/s |")
        print(f"| etcd write rate needed to decide 10 keys/s | "
              f"{p_key * 10:,.0f} proposals/s |")
        print(f"| the same with one claimant per key | {p_one:,.1f} "
              f"proposals per key, "
              f"{out['time_one_claim_s']:,.0f} s |")
    print(f"| one key, cluster-wide, unloaded (measured p50 at N <= {max(xs)}) | "
          f"{pct(allp, 50):.1f} ms |")
    print(f"| idle load on etcd | {at(ireq) * N:,.0f} requests/s, "
          f"{at(ibytes) * N / 2**20:,.1f} MiB/s |")
    print(f"Where the limit is: Raft proposals per key grow by {props[1]:.3f} "
          f"per node ({p_key:,.1f} at N = {N}), so the etcd write rate bounds "
          f"the decide rate at about {(rate or 0) / max(1.0, p_key):,.1f} "
          "keys/s; watch messages per key grow by "
          f"{wmsg[1]:.2f} per node (every put or delete under the watched "
          "keys reaches every node). With one claimant per key (README, "
          "\"Scale\") only the key's owner claims and its commit deletes the "
          "claim in the same Txn: about 2 proposals and one watch message per "
          "node per key; keys a node meets together share one claim Txn and "
          "one commit Txn, and an etcd gRPC proxy per rack coalesces the "
          "watchers.")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", default="16,32,64")
    ap.add_argument("--members", default="3,5")
    ap.add_argument("--keys", type=int, default=30)
    ap.add_argument("--burst", type=int, default=60)
    ap.add_argument("--pass-ms", type=int, default=0,
                    help="seq: the designated node reports after this long")
    ap.add_argument("--idle-s", type=float, default=10.0)
    ap.add_argument("--storm-timeout", type=float, default=90.0)
    ap.add_argument("--late-s", type=float, default=5.0,
                    help="the late phase: etcd comes up this long after all "
                         "daemons (0: no late phase)")
    ap.add_argument("--config-timeout", type=float, default=300.0,
                    help="bound on each (etcd size, N) configuration, seconds")
    ap.add_argument("--subnet", default="10.231", help="first two octets")
    ap.add_argument("--json", help="write the measured figures here")
    ap.add_argument("--model", help="only print the tables and model of this "
                                    "JSON file")
    ap.add_argument("--daemon-arg", action="append", default=[], metavar="ARG",
                    help="an argument for every daemon (repeatable), e.g. "
                    "--daemon-arg=--claim-defer-slots --daemon-arg=40")
    ap.add_argument("--grpc-proxy", type=int, default=0, metavar="K",
                    help="daemons reach etcd through K `etcd grpc-proxy` "
                         "processes (daemon i through proxy i %% K)")
    ap.add_argument("--model-nodes", default="1000,10000",
                    help="the model's predictions for these node counts")
    ap.add_argument("--write-rate", type=float,
                    help="model with this etcd proposal rate instead of the "
                         "measured one")
    a = ap.parse_args()
    if a.model:
        data = json.loads(Path(a.model).read_text())
        table(data["results"])
        for n in a.model_nodes.split(","):
            model(data["results"], nodes=int(n), write_rate=a.write_rate)
        return 0
    DAEMON_ARGS[:] = a.daemon_arg
    if os.geteuid() != 0:
        sys.exit("run as root: the benchmark creates network namespaces")
    if shutil.which("etcd") is None:
        sys.exit("etcd-server is not installed")
    nodes = [int(x) for x in a.nodes.split(",")]
    members = [int(x) for x in a.members.split(",")]
    net = Net(a.subnet)
    atexit.register(net.down)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    results = []
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    with tempfile.TemporaryDirectory(prefix="detd-sb-", dir="/tmp") as d:
        root = Path(d)
        try:
            net.up(max(nodes))
            for m in members:
                etcd = EtcdCluster(root / f"etcd{m}", size=m, host=net.host)
                etcd.start()
                try:
                    for n in nodes:
                        t = time.monotonic()
                        r = run_config(root, net, etcd, m, n, a)
                        r["wall_s"] = time.monotonic() - t
                        results.append(r)
                        if a.json:  # what is done survives a later failure
                            Path(a.json).write_text(json.dumps(
                                {"meta": {"partial": True}, "results": results}))
                        print(f"etcd {m}, N {n}: {r['wall_s']:.0f} s; "
                              f"{'; '.join(r['notes']) or 'complete'}", flush=True)
                finally:
                    etcd.stop()
        finally:
            net.down()
    meta = {"date": datetime.utcnow().strftime("%Y-%m-%d %H:%M UTC"),
            "commit": commit, "cpus": os.cpu_count(), "argv": sys.argv[1:]}
    print(f"\n{meta['date']}, commit {commit}, {meta['cpus']} CPUs; "
          f"args: {' '.join(sys.argv[1:])}")
    table(results)
    for n in a.model_nodes.split(","):
        model(results, nodes=int(n), write_rate=a.write_rate)
    if a.json:
        Path(a.json).write_text(json.dumps({"meta": meta, "results": results},
                                           indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
