"""tests/bench/leader_kill.py in CI: the etcd leader killed while one
node's rank reports a key and another node's rank waits for it. Both ranks
end with one config, each within what the campaign's checker allows a
leader's kill (tests/campaign/checker.py fault_cost)."""

import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "integration"))
import leader_kill  # noqa: E402
from conftest import CI, HAVE_ETCD  # noqa: E402


def test_leader_kill_one_config_within_the_priced_cost():
    if not HAVE_ETCD:
        if CI:
            pytest.fail("etcd and etcdctl are needed (CI is set: a missing requirement is a failure)",
                        pytrace=False)
        pytest.skip("etcd and etcdctl are needed")
    rows = leader_kill.run(trials=2, victim="leader", down=1.2)
    assert len(rows) == 2
    for r in rows:
        assert r["config_a"] is not None and r["config_a"] == r["config_b"], r
        assert r["config_a"] in (leader_kill.CONFIG_A, leader_kill.CONFIG_B), r
        assert r["etcd_writable_s"] is not None, r
        # the report returns and the waiter is served within the kill's price
        assert r["a_report_s"] < r["model_cost_s"], r
        assert r["b_total_s"] < r["model_cost_s"], r
