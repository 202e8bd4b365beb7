"""The node registry past one page: `detctl status` and `detctl verify
--cluster` on a real etcd with 1,100 synthetic node registrations (written
straight into etcd in the registry's key/value format) and two real
daemons, and a registry past its cap.

What is checked: status lists every registered node once, in node id order
(more than one etcd range page, more than one Status page); a Status as a
client built before paging sends it gets the first page with the whole
status, and the page token gives the rest; verify --cluster asks every node
and names each synthetic one that cannot answer (refused, no --listen, or
silent until its per-node deadline) rather than stopping at a cap, while
the real daemons are checked; the names come in more than one Verify page
and detctl follows them to the end. Past CLUSTER_MAX_NODES registrations,
status names the error and verify --cluster fails naming the cap.
"""

import base64
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from conftest import HAVE_ETCD, PROBE, requires  # noqa: E402
from etcd_cluster import EtcdCluster  # noqa: E402
from test_cluster import (ETCD_CALL_S, NS, REGISTRY_S, Node,  # noqa: E402
                          detctl, free_port, wait_for)

pytestmark = requires(HAVE_ETCD, "etcd-server and etcd-client are not installed")

# The daemon's paging (daemon/ops/admin.c, daemon/cluster/cluster.h) that
# the node counts below are chosen to cross.
STATUS_FIRST_PAGE = 256  # ADMIN_NODES_PAGE: what a Status without a size gets
MAX_NODES = 65536        # CLUSTER_MAX_NODES: the registry's cap
VERIFY_PAGE = 1000       # ADMIN_VERIFY_PAGE: names per Verify answer
ETCD_RANGE_PAGE = 500    # the etcd adapter's range page
PEER_TIMEOUT_S = 5.0     # CLUSTER_PEER_TIMEOUT_MS: one page of one node
CONCURRENCY = 16         # CLUSTER_FANOUT_CONCURRENCY

N_REFUSED = 1060  # listen on a closed port: refused at once
N_NO_LISTEN = 30  # registered without --listen
N_SILENT = 10     # accept and never answer: each takes its deadline
N_SYNTH = N_REFUSED + N_NO_LISTEN + N_SILENT
assert N_SYNTH + 2 > VERIFY_PAGE and N_SYNTH > 2 * ETCD_RANGE_PAGE


@pytest.fixture
def etcd1(tmpdir_short):
    c = EtcdCluster(tmpdir_short / "etcd", size=1)
    try:
        c.start()
        yield c
    finally:
        c.stop()


class Silent:
    """A TCP listener that accepts and never answers (a hung peer)."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.conns = []
        self.stop = False
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def run(self):
        self.sock.settimeout(0.2)
        while not self.stop:
            try:
                c, _ = self.sock.accept()
                self.conns.append(c)
            except OSError:
                pass

    def close(self):
        self.stop = True
        self.t.join(5)
        for c in self.conns:
            c.close()
        self.sock.close()


def put(etcd, key, value):
    """One key through etcd's JSON gateway (/v3/kv/put)."""
    body = json.dumps({"key": base64.b64encode(key.encode()).decode(),
                       "value": base64.b64encode(value.encode()).decode()})
    req = urllib.request.Request(etcd.endpoint(0) + "/v3/kv/put",
                                 data=body.encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        assert r.status == 200, r.read()


def node_value(name, listen):
    # As cluster_node_encode() writes it (daemon/cluster/cluster_codec.c).
    return json.dumps({"node": name, "listen": listen, "socket": "",
                       "pid": 1, "started": 1700000000000,
                       "version": "synthetic"})


def put_many(etcd, kvs):
    """Keys through etcd's JSON gateway, 128 puts a transaction (etcd's
    default --max-txn-ops)."""
    b64 = lambda x: base64.b64encode(x.encode()).decode()  # noqa: E731
    for s in range(0, len(kvs), 128):
        ops = [{"requestPut": {"key": b64(k), "value": b64(v)}}
               for k, v in kvs[s:s + 128]]
        req = urllib.request.Request(etcd.endpoint(0) + "/v3/kv/txn",
                                     data=json.dumps({"success": ops}).encode(),
                                     method="POST")
        with urllib.request.urlopen(req, timeout=10) as r:
            assert r.status == 200, r.read()


# ---- protobuf on the wire, as a client built before paging sends it ----

def varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def field(num, value):
    if isinstance(value, int):
        return varint(num << 3) + varint(value)
    if isinstance(value, str):
        value = value.encode()
    return varint(num << 3 | 2) + varint(len(value)) + value


def fields(buf):
    """[(field number, int or bytes)] of one message."""
    out, i = [], 0
    while i < len(buf):
        key, shift = 0, 0
        while True:
            b = buf[i]
            i += 1
            key |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                break
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, shift = 0, 0
            while True:
                b = buf[i]
                i += 1
                v |= (b & 0x7F) << shift
                shift += 7
                if not b & 0x80:
                    break
            out.append((num, v))
        elif wt == 2:
            n, shift = 0, 0
            while True:
                b = buf[i]
                i += 1
                n |= (b & 0x7F) << shift
                shift += 7
                if not b & 0x80:
                    break
            out.append((num, buf[i:i + n]))
            i += n
        else:
            raise AssertionError(f"wire type {wt}")
    return out


def raw_call(nd, method, req):
    """(gRPC status, response fields) of a raw call to nd's socket."""
    r = subprocess.run([str(PROBE), nd.socket, method, "--hex", req.hex()],
                       capture_output=True, text=True, timeout=30,
                       env={**os.environ, "DETD_PROBE_RESPONSE": "1"})
    lines = r.stdout.splitlines()
    assert lines and lines[0].startswith("status="), r.stdout + r.stderr
    code = int(lines[0].split()[0][len("status="):])
    resp = bytes.fromhex(lines[1][len("response="):]) if len(lines) > 1 else b""
    return code, fields(resp)


def node_ids(fs):
    # StatusResponse.nodes = 18, ClusterNode.node_id = 1
    return [dict(fields(v))[1].decode() for n, v in fs if n == 18]


def one(fs, num, default):
    v = [x for n, x in fs if n == num]
    return v[0] if v else default


def status_nodes(nd):
    r = detctl("--socket", nd.socket, "status", "--json")
    assert r.returncode == 0, r.stderr
    return [x["node_id"] for x in json.loads(r.stdout)["etcd"]["nodes"]]


def test_status_and_verify_cluster_page_through_every_node(tmpdir_short,
                                                            etcd1):
    # Nothing listens on this port of any loopback address: connections
    # are refused. Each node has an address of its own, as real nodes do
    # (gRPC shares a connection's backoff between calls to one address).
    closed = free_port()
    silent = [Silent() for _ in range(N_SILENT)]
    made = []
    try:
        # Synthetic names sort on both sides of the real daemons' (n0, n1),
        # so the real ones sit inside the list, not at an end.
        synth = {}
        for i in range(N_SYNTH):
            name = f"{'a' if i % 2 else 'z'}-{i:04d}"
            if i < N_REFUSED:
                listen = f"127.0.{1 + i // 250}.{1 + i % 250}:{closed}"
            elif i < N_REFUSED + N_NO_LISTEN:
                listen = ""
            else:
                listen = f"127.0.0.1:{silent[i % N_SILENT].port}"
            synth[name] = listen
            put(etcd1, f"/detd/v1/{NS}/nodes/{name}", node_value(name, listen))
        for i in range(2):
            nd = Node(tmpdir_short, f"n{i}", etcd1.endpoints,
                      ["--listen", f"127.0.0.1:{free_port()}"])
            made.append(nd)
            nd.start()
        everyone = sorted([*synth, "n0", "n1"])

        # Status: every node once, in order. The monitor reads nodes/ on a
        # change it watched: one round after the last daemon registered
        # (REGISTRY_S), the read of 1,102 keys in 3 range pages inside it.
        for nd in made:
            wait_for(lambda: len(status_nodes(nd)) == len(everyone),
                     REGISTRY_S, f"{len(everyone)} nodes in {nd.name}'s status")
        for nd in made:
            listed = status_nodes(nd)
            assert len(listed) == len(set(listed)), "a node listed twice"
            assert listed == everyone
        txt = detctl("--socket", made[0].socket, "status")
        assert txt.returncode == 0, txt.stderr
        assert f"nodes ({len(everyone)} registered)" in txt.stdout
        assert "NOT COMPLETE" not in txt.stdout
        rows = [ln.split()[0] for ln in txt.stdout.splitlines()
                if ln.startswith("  ") and ln.split()
                and ln.split()[0] in synth]
        assert len(rows) == N_SYNTH

        # On the wire. A Status as a client built before paging sends it
        # (api_version only) gets the first 256 nodes, in order, with the
        # rest of the status; the token and a nodes_only call give the rest.
        code, fs = raw_call(made[0], "/detd.v1.Admin/Status", field(1, 1))
        assert code == 0, fs
        assert node_ids(fs) == everyone[:STATUS_FIRST_PAGE]
        assert one(fs, 4, b"") == b"etcd"          # backend: the full status
        assert one(fs, 26, 0) == len(everyone)     # nodes_total
        token = one(fs, 25, b"").decode()          # nodes_next_page_token
        assert token != ""
        code, fs = raw_call(made[0], "/detd.v1.Admin/Status",
                            field(1, 1) + field(2, 1000) + field(3, token)
                            + field(4, 1))
        assert code == 0, fs
        assert node_ids(fs) == everyone[STATUS_FIRST_PAGE:]
        assert one(fs, 25, b"") == b"" and one(fs, 4, b"") == b""
        code, _ = raw_call(made[0], "/detd.v1.Admin/Status",
                           field(1, 1) + field(3, "not-a-token"))
        assert code == 3  # INVALID_ARGUMENT
        code, _ = raw_call(made[0], "/detd.v1.Admin/Verify",
                           field(1, 1) + field(3, 1) + field(5, "v1:ffff:0"))
        assert code == 5  # NOT_FOUND: no such answer held

        # verify --cluster: every node asked, CONCURRENCY at a time; the
        # silent ones each take PEER_TIMEOUT_S, all of them in parallel.
        # Bound: those deadlines, and a second per round of the rest (a
        # refused connect is a few milliseconds), within detctl's timeout.
        rounds = -(-(N_SYNTH + 1) // CONCURRENCY)
        budget_s = PEER_TIMEOUT_S * -(-N_SILENT // CONCURRENCY) + rounds * 1.0
        t0 = time.monotonic()
        r = detctl("--socket", made[0].socket, "--timeout",
                   str(int((budget_s + 30) * 1000)), "verify", "--cluster",
                   "--allow-empty", "--json", timeout=budget_s + 60)
        took = time.monotonic() - t0
        assert r.returncode == 1, r.stdout[-2000:] + r.stderr[-2000:]
        v = json.loads(r.stdout)
        assert sorted(v["nodes_checked"]) == ["n0", "n1"], v["nodes_checked"]
        unreach = v["nodes_unreachable"]
        named = [u.split(":", 1)[0] for u in unreach]
        assert len(named) == len(set(named)) == N_SYNTH
        assert set(named) == set(synth)
        why = dict(u.split(": ", 1) for u in unreach)
        for name, listen in synth.items():
            if listen == "":
                assert "without a --listen" in why[name], why[name]
            elif listen.startswith("127.0.0.1:"):
                assert "deadline" in why[name].lower() or \
                    "timed out" in why[name].lower(), why[name]
        assert took < budget_s + 30, took
    finally:
        for nd in made:
            nd.stop()
        for x in silent:
            x.close()


def test_registry_past_the_cap_is_named_not_cut(tmpdir_short, etcd1):
    """CLUSTER_MAX_NODES registrations and one daemon: past the cap the
    status says the registry could not be read (and keeps the last list
    that could), and verify --cluster fails naming the cap, instead of
    either showing a part of the nodes as all of them."""
    nd = Node(tmpdir_short, "n0", etcd1.endpoints,
              ["--listen", f"127.0.0.1:{free_port()}"])
    nd.start()
    try:
        put_many(etcd1, [(f"/detd/v1/{NS}/nodes/c-{i:05d}",
                          node_value(f"c-{i:05d}", ""))
                         for i in range(MAX_NODES)])
        # The monitor reads nodes/ one round after the last change (it was
        # watched), in pages of ETCD_RANGE_PAGE keys, each within its call
        # budget.
        read_s = REGISTRY_S + (MAX_NODES // ETCD_RANGE_PAGE + 1) * ETCD_CALL_S

        def error():
            r = detctl("--socket", nd.socket, "status", "--json")
            assert r.returncode == 0, r.stderr
            return json.loads(r.stdout)["etcd"]
        wait_for(lambda: error()["nodes_error"] != "", read_s,
                 "the status names the registry's error")
        e = error()
        assert f"more than {MAX_NODES} nodes" in e["nodes_error"], e["nodes_error"]
        assert len(e["nodes"]) <= MAX_NODES
        txt = detctl("--socket", nd.socket, "status")
        assert "NOT COMPLETE: more than" in txt.stdout
        r = detctl("--socket", nd.socket, "--timeout", "60000", "verify",
                   "--cluster", "--allow-empty", "--json", timeout=120)
        assert r.returncode == 1, r.stdout[-2000:] + r.stderr[-2000:]
        v = json.loads(r.stdout)
        (why,) = v["nodes_unreachable"]
        assert why.startswith("node registry:") and \
            f"more than {MAX_NODES} nodes" in why, why
    finally:
        nd.stop()
