"""Runs the etcd adapter's C tests (test_etcd_adapter) against a real
3-member etcd cluster, a fresh one per case.

The binary comes from $DETD_BUILD_DIR (default <repo>/build), at
daemon/test_etcd_adapter.
"""

import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from conftest import HAVE_ETCD, requires  # noqa: E402
from etcd_cluster import EtcdCluster  # noqa: E402

REPO = os.path.dirname(os.path.dirname(HERE))
BUILD = os.environ.get("DETD_BUILD_DIR", os.path.join(REPO, "build"))
BINARY = os.path.join(BUILD, "daemon", "test_etcd_adapter")

CASES = [
    "put_if_absent_race",
    "create_batch",
    "kv_basic",
    "lease_keepalive",
    "lease_lost_on_outage",
    "watch_order",
    "watch_member_restart",
    "watch_compacted",
    "leader_kill_puts",
    "quorum_loss",
    "status",
    "auth",
    "latency",
    "tls",
]

pytestmark = requires(HAVE_ETCD, "etcd-server and etcd-client are not installed")


@pytest.fixture
def cluster(tmp_path, request):
    # Auth tokens live 2 s so the auth case sees one expire; the tls case
    # gets a cluster that serves https and requires client certificates.
    tls = request.node.callspec.params.get("case") == "tls"
    c = EtcdCluster(tmp_path / "etcd", size=3, auth_token_ttl=2, tls=tls)
    try:
        c.start()
        yield c
    finally:
        c.stop()


def test_binary_built():
    assert os.access(BINARY, os.X_OK), f"build {BINARY} first"


@pytest.mark.parametrize("case", CASES)
def test_case(cluster, case):
    assert os.access(BINARY, os.X_OK), f"build {BINARY} first"
    env = dict(os.environ)
    env["DETD_ETCD_ENDPOINTS"] = cluster.endpoints
    env["DETD_ETCD_CTL"] = "%s %s --state %s" % (
        sys.executable, os.path.join(HERE, "etcd_cluster.py"), cluster.base)
    env["DETD_TEST_TIMEOUT"] = "120"
    if cluster.tls:
        t = cluster.tls_files()
        env["DETD_ETCD_CA"] = t["ca"]
        env["DETD_ETCD_CERT"] = t["cert"]
        env["DETD_ETCD_KEY"] = t["key"]
    r = subprocess.run([BINARY, case], env=env, capture_output=True,
                       text=True, timeout=150)
    sys.stdout.write(r.stdout)
    sys.stderr.write(r.stderr)
    assert r.returncode == 0, f"{case} failed:\n{r.stdout}\n{r.stderr}"
    assert "1 passed, 0 failed" in r.stdout
