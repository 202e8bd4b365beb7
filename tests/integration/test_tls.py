"""TLS on the --listen TCP listener (server TLS, and mTLS with
--listen-client-ca) driven by detctl, and the daemon's TLS client to a
real etcd member that requires client certificates."""
import json
import socket
import subprocess
import time

import pytest

from conftest import DETCTL, Daemon, counter
from etcd_cluster import EtcdCluster


def ossl(d, *args):
    subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True, timeout=30)


def make_ca(d, name):
    ossl(d, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-days", "2", "-subj", f"/CN={name}", "-keyout", f"{name}.key",
         "-out", f"{name}.crt")


def make_cert(d, ca, name, ext):
    ossl(d, "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
         "-subj", f"/CN={name}", "-keyout", f"{name}.key", "-out", f"{name}.csr")
    (d / f"{name}.ext").write_text(ext + "\n")
    ossl(d, "x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.crt", "-CAkey", f"{ca}.key",
         "-CAcreateserial", "-days", "2", "-extfile", f"{name}.ext", "-out", f"{name}.crt")
    return str(d / f"{name}.crt"), str(d / f"{name}.key")


@pytest.fixture
def pki(tmpdir_short):
    d = tmpdir_short / "pki"
    d.mkdir()
    make_ca(d, "ca")
    make_ca(d, "otherca")
    p = {"ca": str(d / "ca.crt")}
    p["server"] = make_cert(d, "ca", "server", "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
                            "extendedKeyUsage=serverAuth")
    p["good"] = make_cert(d, "ca", "good", "extendedKeyUsage=clientAuth")
    p["bad"] = make_cert(d, "otherca", "bad", "extendedKeyUsage=clientAuth")
    return p


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def detctl_tcp(addr, *args):
    return subprocess.run([str(DETCTL), "--timeout", "3000", "--server", addr, *args],
                          capture_output=True, text=True, timeout=30)


def test_listen_mtls(tmpdir_short, pki):
    port = free_port()
    addr = f"127.0.0.1:{port}"
    cert, key = pki["server"]
    d = Daemon(tmpdir_short, ["--listen", addr, "--listen-cert", cert, "--listen-key", key,
                              "--listen-client-ca", pki["ca"]]).start()
    try:
        good = ["--tls-ca", pki["ca"], "--tls-cert", pki["good"][0], "--tls-key", pki["good"][1]]
        r = detctl_tcp(addr, *good, "status", "--json")
        assert r.returncode == 0, r.stderr
        st = json.loads(r.stdout)
        assert st["etcd"]["listen"] == addr and st["pid"] == d.proc.pid
        assert detctl_tcp(addr, *good, "health").returncode == 0
        # A client certificate from another CA: the handshake fails.
        r = detctl_tcp(addr, "--tls-ca", pki["ca"], "--tls-cert", pki["bad"][0],
                       "--tls-key", pki["bad"][1], "status")
        assert r.returncode == 3 and "status" not in r.stdout  # 3: unavailable (TLS)
        # No client certificate at all: refused too.
        r = detctl_tcp(addr, "--tls-ca", pki["ca"], "status")
        assert r.returncode == 3
        # Plaintext to a TLS listener: refused.
        r = detctl_tcp(addr, "status")
        assert r.returncode == 3
        # A server checked against the wrong CA: the client refuses it.
        r = detctl_tcp(addr, "--tls-ca", str(tmpdir_short / "pki" / "otherca.crt"),
                       "--tls-cert", pki["good"][0], "--tls-key", pki["good"][1], "status")
        assert r.returncode == 3
        # Only the good call reached the daemon's Status method.
        st = d.status()
        assert st["pid"] == d.proc.pid
    finally:
        d.stop()


def test_listen_server_tls_without_client_ca(tmpdir_short, pki):
    port = free_port()
    addr = f"127.0.0.1:{port}"
    cert, key = pki["server"]
    d = Daemon(tmpdir_short, ["--listen", addr, "--listen-cert", cert, "--listen-key", key]).start()
    try:
        r = detctl_tcp(addr, "--tls-ca", pki["ca"], "health")
        assert r.returncode == 0, r.stderr
        assert detctl_tcp(addr, "health").returncode == 3  # plaintext refused
    finally:
        d.stop()


def test_detctl_tls_flag_errors(tmpdir_short, pki):
    r = subprocess.run([str(DETCTL), "--socket", str(tmpdir_short / "x.sock"), "--tls-ca", pki["ca"],
                        "status"], capture_output=True, text=True, timeout=10)
    assert r.returncode == 2 and "need --address" in r.stderr
    r = detctl_tcp("127.0.0.1:1", "--tls-cert", pki["good"][0], "status")
    assert r.returncode == 2 and "--tls-cert and --tls-key go together" in r.stderr
    r = detctl_tcp("127.0.0.1:1", "--tls-ca", str(tmpdir_short / "missing.crt"), "status")
    assert r.returncode == 2 and "missing.crt" in r.stderr


def wait_for(pred, timeout=20.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = pred()
        if v:
            return v
        time.sleep(0.2)
    return pred()


def test_etcd_tls_client_certificates(tmpdir_short, pki):
    cluster = EtcdCluster(tmpdir_short / "etcd", size=1, tls=True)
    cluster.start()
    try:
        t = cluster.tls_files()
        base = ["--etcd", cluster.endpoints, "--etcd-ca", t["ca"], "--node-id", "n1"]
        d = Daemon(tmpdir_short, [*base, "--etcd-cert", t["cert"], "--etcd-key", t["key"]]).start()
        try:
            st = wait_for(lambda: (lambda s: s if s["etcd"]["endpoints"] and
                                   s["etcd"]["endpoints"][0]["healthy"] else None)(d.status()))
            assert st, d.status()
            assert st["etcd"]["connected"] is True
            r = subprocess.run([*client_cmd(d), "--keys", "3", "--key-prefix", "t:"],
                               capture_output=True, text=True, timeout=60)
            out = json.loads(r.stdout)
            assert out["errors"] == [] and len(out["keys"]) == 3
            assert d.status()["decisions"] == 3
        finally:
            assert d.stop() == 0
        # The same node with a client certificate etcd does not trust.
        bad = Daemon(tmpdir_short, [*base, "--etcd-cert", pki["bad"][0],
                                    "--etcd-key", pki["bad"][1]]).start()
        try:
            st = wait_for(lambda: (lambda s: s if s["etcd"]["endpoints"] and
                                   s["etcd"]["error"] else None)(bad.status()))
            assert st, bad.status()
            assert st["etcd"]["connected"] is False
            assert not st["etcd"]["endpoints"][0]["healthy"]
            err = (st["etcd"]["error"] + " " + st["etcd"]["endpoints"][0]["error"]).lower()
            log = bad.read_log().lower()
            assert any(w in err or w in log for w in ("tls", "ssl", "certificate", "handshake")), (err, log[-3000:])
            # Decided keys are still served from the local copy.
            r = subprocess.run([*client_cmd(bad), "--keys", "3", "--key-prefix", "t:"],
                               capture_output=True, text=True, timeout=60)
            out = json.loads(r.stdout)
            assert out["errors"] == []
            assert all(e["outcome"] == 1 for e in out["keys"].values()), out
            assert counter(bad.status(), "decide_hits") == 3
        finally:
            bad.stop()
    finally:
        cluster.stop()


def client_cmd(d):
    import sys
    from conftest import CLIENT
    return [sys.executable, str(CLIENT), "--socket", d.socket]
