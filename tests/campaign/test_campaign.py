"""The fault campaign in CI: DETD_CAMPAIGN_SCHEDULES short schedules
(default 50; fewer for a quick run), seeds from DETD_CAMPAIGN_SEED
(default 1), local and etcd schedules mixed by the seed. Fails on any
violation, printing each with its seed and evidence."""

import os
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import checker  # noqa: E402
from run_campaign import campaign, table  # noqa: E402

CI = os.environ.get("CI", "") != ""
HAVE_ETCD = shutil.which("etcd") is not None and shutil.which("etcdctl") is not None


def test_fault_campaign():
    if not HAVE_ETCD:
        if CI:
            pytest.fail("etcd and etcdctl are needed (CI is set: a missing requirement is a failure)")
        pytest.skip("etcd and etcdctl are needed")
    n = int(os.environ.get("DETD_CAMPAIGN_SCHEDULES", "50"))
    start = int(os.environ.get("DETD_CAMPAIGN_SEED", "1"))
    keep = os.environ.get("DETD_CAMPAIGN_KEEP") or None
    summary, results = campaign(range(start, start + n), "short", keep=keep)
    print(table(summary))
    assert summary["schedules"] == n
    bad = [checker.format_violation(v) for r in results for v in r["violations"]]
    assert not bad, (f"{len(bad)} violations in {len(summary['failed_seeds'])} of {n} schedules "
                     f"(seeds {summary['failed_seeds']}; replay: python3 tests/campaign/harness.py "
                     f"--seed N -v):\n" + "\n".join(bad))
