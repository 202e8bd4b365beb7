"""A real etcd cluster on loopback for integration tests.

Starts N members of Debian's `etcd` (3.4) on free ports of 127.0.0.1 (or of
host=ADDR, e.g. a bridge address) in a directory, and can kill, restart, find
the leader, compact and enable auth.
With tls=True it makes a CA, a server certificate for 127.0.0.1 and a client
certificate (openssl), serves clients over https and requires client
certificates; tls_files() names the PEM files.
Its state (ports, pids, credentials) is kept in <dir>/state.json, so a test
program can drive the same cluster from the command line while pytest owns
it:

    python3 etcd_cluster.py --state DIR start [--size 3] [--auth-token-ttl S]
                                              [--tls]
    python3 etcd_cluster.py --state DIR endpoints | leader | kill-leader
    python3 etcd_cluster.py --state DIR kill I | restart I | compact REV
    python3 etcd_cluster.py --state DIR auth-enable USER PASSWORD | stop

From pytest:

    cluster = EtcdCluster(tmp_path / "etcd"); cluster.start()
    ... cluster.endpoints ...
    cluster.stop()

Members are numbered from 0. Processes are ended only by their recorded
pid. Every wait is bounded.
"""

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

STATE = "state.json"


def _free_ports(n, host="127.0.0.1"):
    """n distinct free TCP ports on host (bound, then released)."""
    socks, ports = [], []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((host, 0))
            socks.append(s)
            ports.append(s.getsockname()[1])
    finally:
        for s in socks:
            s.close()
    return ports


def _alive(pid):
    """True if pid runs and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state not in ("Z", "X")


def _reap(pid):
    """Reap pid if it is our child; harmless otherwise."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


class EtcdError(RuntimeError):
    pass


class EtcdCluster:
    # Raft timing of every member (etcd's defaults): a follower starts an
    # election when it has heard no heartbeat for a randomized time in
    # [ELECTION_TIMEOUT_MS, 2 * ELECTION_TIMEOUT_MS).
    HEARTBEAT_MS = 100
    ELECTION_TIMEOUT_MS = 1000
    # A member's graceful stop, at most: etcd's request timeout (5 s plus
    # two election timeouts) bounds a leadership transfer on shutdown.
    STOP_S = 5 + 2 * ELECTION_TIMEOUT_MS / 1000

    def __init__(self, base_dir, size=3, auth_token_ttl=None,
                 etcd_bin=None, etcdctl_bin=None, tls=False, host="127.0.0.1"):
        self.base = os.path.abspath(str(base_dir))
        self.host = host  # the address members listen on (client and peer)
        self.size = size
        self.auth_token_ttl = auth_token_ttl
        self.tls = tls
        self.etcd_bin = etcd_bin or shutil.which("etcd") or "etcd"
        self.etcdctl_bin = etcdctl_bin or shutil.which("etcdctl") or "etcdctl"
        self.members = []
        self.auth = None

    # ---- state ----------------------------------------------------------
    @classmethod
    def load(cls, base_dir):
        with open(os.path.join(base_dir, STATE)) as f:
            st = json.load(f)
        c = cls(base_dir, st["size"], st.get("auth_token_ttl"),
                st["etcd_bin"], st["etcdctl_bin"], st.get("tls", False),
                st.get("host", "127.0.0.1"))
        c.members = st["members"]
        c.auth = st.get("auth")
        return c

    def refresh(self):
        """Re-read pids and credentials: the command line may have
        restarted members or enabled auth behind this object's back."""
        try:
            with open(os.path.join(self.base, STATE)) as f:
                st = json.load(f)
        except FileNotFoundError:
            return
        self.members = st["members"]
        self.auth = st.get("auth")

    def save(self):
        st = {"size": self.size, "auth_token_ttl": self.auth_token_ttl,
              "etcd_bin": self.etcd_bin, "etcdctl_bin": self.etcdctl_bin,
              "members": self.members, "auth": self.auth, "tls": self.tls,
              "host": self.host}
        tmp = os.path.join(self.base, STATE + ".tmp")
        with open(tmp, "w") as f:
            json.dump(st, f, indent=1)
        os.replace(tmp, os.path.join(self.base, STATE))

    @property
    def endpoints(self):
        """Comma-separated client URLs of every member."""
        return ",".join(self.endpoint(i) for i in range(self.size))

    def endpoint(self, i):
        scheme = "https" if self.tls else "http"
        return f"{scheme}://{self.host}:{self.members[i]['client_port']}"

    def tls_files(self):
        """{"ca", "cert", "key"}: PEM paths of the CA and a client cert."""
        d = os.path.join(self.base, "tls")
        return {"ca": os.path.join(d, "ca.crt"),
                "cert": os.path.join(d, "client.crt"),
                "key": os.path.join(d, "client.key")}

    def _make_certs(self):
        d = os.path.join(self.base, "tls")
        os.makedirs(d, exist_ok=True)

        def ossl(*args):
            subprocess.run(["openssl"] + list(args), cwd=d, check=True,
                           capture_output=True, timeout=30)

        ossl("req", "-x509", "-newkey", "ec", "-pkeyopt",
             "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2",
             "-subj", "/CN=detd-test-ca", "-keyout", "ca.key",
             "-out", "ca.crt")
        for name, ext in (
                ("server", "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
                           "extendedKeyUsage=serverAuth"),
                ("client", "extendedKeyUsage=clientAuth")):
            ossl("req", "-newkey", "ec", "-pkeyopt",
                 "ec_paramgen_curve:prime256v1", "-nodes",
                 "-subj", f"/CN=detd-test-{name}", "-keyout", f"{name}.key",
                 "-out", f"{name}.csr")
            with open(os.path.join(d, f"{name}.ext"), "w") as f:
                f.write(ext + "\n")
            ossl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt",
                 "-CAkey", "ca.key", "-CAcreateserial", "-days", "2",
                 "-extfile", f"{name}.ext", "-out", f"{name}.crt")

    def alive(self, i):
        pid = self.members[i].get("pid")
        return pid is not None and _alive(pid)

    # ---- processes ------------------------------------------------------
    def _spawn(self, i):
        m = self.members[i]
        initial = ",".join(
            f"{x['name']}=http://{self.host}:{x['peer_port']}"
            for x in self.members)
        args = [
            self.etcd_bin,
            "--name", m["name"],
            "--data-dir", m["data_dir"],
            "--listen-client-urls", self.endpoint(i),
            "--advertise-client-urls", self.endpoint(i),
            "--listen-peer-urls", f"http://{self.host}:{m['peer_port']}",
            "--initial-advertise-peer-urls",
            f"http://{self.host}:{m['peer_port']}",
            "--initial-cluster", initial,
            "--initial-cluster-token", "detd-test-" + str(os.getpid()),
            "--initial-cluster-state", "new",
            "--heartbeat-interval", str(self.HEARTBEAT_MS),
            "--election-timeout", str(self.ELECTION_TIMEOUT_MS),
            "--logger", "zap", "--log-level", "warn",
        ]
        if self.auth_token_ttl:
            args += ["--auth-token-ttl", str(self.auth_token_ttl)]
        if self.tls:
            d = os.path.join(self.base, "tls")
            args += ["--cert-file", os.path.join(d, "server.crt"),
                     "--key-file", os.path.join(d, "server.key"),
                     "--trusted-ca-file", os.path.join(d, "ca.crt"),
                     "--client-cert-auth"]
        log = open(os.path.join(self.base, m["name"] + ".log"), "ab")
        p = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log,
                             stderr=log, start_new_session=True)
        log.close()
        m["pid"] = p.pid
        self.save()

    def start(self, timeout=30):
        """Start a new cluster of `size` members and wait until healthy."""
        os.makedirs(self.base, exist_ok=True)
        if self.tls:
            self._make_certs()
        ports = _free_ports(2 * self.size, self.host)
        self.members = []
        for i in range(self.size):
            name = f"m{i}"
            self.members.append({
                "name": name, "client_port": ports[2 * i],
                "peer_port": ports[2 * i + 1],
                "data_dir": os.path.join(self.base, name + ".etcd"),
                "pid": None})
        self.save()
        for i in range(self.size):
            self._spawn(i)
        self.wait_healthy(timeout=timeout)

    def resume(self, timeout=30):
        """Start every member again on its data dir (after stop());
        wait until the cluster is healthy."""
        self.refresh()
        for i in range(self.size):
            if not self.alive(i):
                self._spawn(i)
        self.wait_healthy(timeout=timeout)

    def kill(self, i, sig=signal.SIGKILL):
        """Kill member i (SIGKILL by default) and wait until it is gone."""
        self.refresh()
        self._kill(i, sig)

    def _kill(self, i, sig=signal.SIGKILL):
        if not self._signal(i, sig, 10):
            raise EtcdError(f"member {i} (pid {self.members[i].get('pid')}) did not exit")

    def _signal(self, i, sig, bound_s):
        """Send member i ``sig`` and wait up to ``bound_s`` for it to exit
        (reaped); whether it is gone (True for a member not running)."""
        pid = self.members[i].get("pid")
        if pid is None:
            return True
        if not _alive(pid):
            _reap(pid)
            return True
        os.kill(pid, sig)
        deadline = time.monotonic() + bound_s
        while _alive(pid):
            _reap(pid)
            if time.monotonic() > deadline:
                return False
            time.sleep(0.02)
        _reap(pid)
        return True

    def restart(self, i, timeout=30):
        """Start member i again on its data dir; wait until it serves."""
        self.kill(i)
        self._spawn(i)
        self.wait_healthy([i], timeout=timeout)

    def stop(self):
        """Stop every member, one at a time (SIGTERM, then SIGKILL after
        STOP_S). A leader given SIGTERM first hands its leadership to a
        live peer (etcd's transfer on shutdown: a tenth of a second here).
        Members stopped all at once cost 5 s: the leader picks a peer that
        is stopping too, and waits out its request timeout for a transfer
        that never completes."""
        self.refresh()
        for i in range(len(self.members)):
            if self.members[i].get("pid") is None:
                continue
            if not self._signal(i, signal.SIGTERM, self.STOP_S):
                self._kill(i)
            self.members[i]["pid"] = None
        if self.members:
            self.save()

    # ---- etcdctl --------------------------------------------------------
    def ctl(self, *args, endpoints=None, timeout=15, check=True):
        self.refresh()
        cmd = [self.etcdctl_bin, "--endpoints",
               endpoints or self.endpoints, "--dial-timeout", "2s",
               "--command-timeout", "5s"]
        if self.auth:
            cmd += ["--user", f"{self.auth[0]}:{self.auth[1]}"]
        if self.tls:
            t = self.tls_files()
            cmd += ["--cacert", t["ca"], "--cert", t["cert"], "--key",
                    t["key"]]
        env = dict(os.environ, ETCDCTL_API="3")
        r = subprocess.run(cmd + list(args), env=env, capture_output=True,
                           text=True, timeout=timeout)
        if check and r.returncode != 0:
            raise EtcdError(f"etcdctl {' '.join(args)}: {r.stderr.strip()}")
        return r

    def wait_healthy(self, members=None, timeout=30):
        """Wait until the given members (default all) answer a quorum read."""
        members = range(self.size) if members is None else members
        eps = ",".join(self.endpoint(i) for i in members)
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            r = self.ctl("endpoint", "health", endpoints=eps, check=False)
            if r.returncode == 0:
                return
            last = r.stderr.strip()
            time.sleep(0.2)
        raise EtcdError(f"cluster not healthy after {timeout}s: {last}")

    def leader(self, timeout=15):
        """Index of the current leader among the live members."""
        self.refresh()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            live = [i for i in range(self.size) if self.alive(i)]
            r = self.ctl("endpoint", "status", "-w", "json",
                         endpoints=",".join(self.endpoint(i) for i in live),
                         check=False)
            try:
                st = json.loads(r.stdout)
            except ValueError:
                st = []
            ids = {}
            lead = 0
            for e in st:
                s = e.get("Status", {})
                ids[s.get("header", {}).get("member_id")] = e["Endpoint"]
                lead = lead or s.get("leader", 0)
            if lead in ids:
                return [self.endpoint(i) for i in range(self.size)].index(
                    ids[lead])
            time.sleep(0.1)
        raise EtcdError("no leader")

    def kill_leader(self):
        i = self.leader()
        self.kill(i)
        return i

    def compact(self, rev):
        self.ctl("compact", str(rev), "--physical")

    def enable_auth(self, user, password):
        """Create user (with the root role) and turn authentication on."""
        self.ctl("role", "add", "root", check=False)
        self.ctl("user", "add", f"{user}:{password}")
        self.ctl("user", "grant-role", user, "root")
        self.ctl("auth", "enable")
        self.auth = [user, password]
        self.save()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--state", required=True, help="cluster directory")
    ap.add_argument("cmd")
    ap.add_argument("args", nargs="*")
    ap.add_argument("--size", type=int, default=3)
    ap.add_argument("--auth-token-ttl", type=int, default=None)
    ap.add_argument("--tls", action="store_true")
    a = ap.parse_args(argv)
    if a.cmd == "start":
        c = EtcdCluster(a.state, a.size, a.auth_token_ttl, tls=a.tls)
        c.start()
        print(c.endpoints)
        return 0
    c = EtcdCluster.load(a.state)
    if a.cmd == "endpoints":
        print(c.endpoints)
    elif a.cmd == "leader":
        print(c.leader())
    elif a.cmd == "kill-leader":
        print(c.kill_leader())
    elif a.cmd == "kill":
        c.kill(int(a.args[0]))
    elif a.cmd == "restart":
        c.restart(int(a.args[0]))
    elif a.cmd == "compact":
        c.compact(int(a.args[0]))
    elif a.cmd == "auth-enable":
        c.enable_auth(a.args[0], a.args[1])
    elif a.cmd == "stop":
        c.stop()
    else:
        print(f"unknown command {a.cmd}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
