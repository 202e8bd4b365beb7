"""detd beside Megatron-LM's megatron.core.tuning, which patches the same
Autotuner.run: one of them governs, the other stands down, a log line says
which, never both patching. Megatron-LM is not installable here: the
stand-in package under fake_megatron/ patches Triton's autotuner the way
the real interception module does. Real Triton (CPU interpreter) and the
real daemon."""
import json
import os
import sys

import pytest

import prestart
from conftest import HERE

# Runs on every Triton release (run_matrix.sh): it drives the hook through Triton's own API.
pytestmark = pytest.mark.triton_release

FAKE = os.path.join(HERE, "fake_megatron")


def run(daemon, tmp_path, order, **env):
    out = tmp_path / f"{order}.json"
    e = daemon.env(RANK=0, WORLD_SIZE=1, **env)
    e["PYTHONPATH"] = os.pathsep.join([HERE, FAKE, e.get("PYTHONPATH", "")])
    p = prestart.run([sys.executable, os.path.join(HERE, "megatron_worker.py"), str(out), order], env=e,
                     timeout=300)
    assert p.returncode == 0 and out.exists(), p.stdout + p.stderr + daemon.log()
    return json.loads(out.read_text())


@pytest.mark.parametrize("order,when", [("megatron-first", "imported before detd.install(); its patch of "
                                         "Autotuner.run was undone"),
                                        ("detd-first", "imported after detd.install()")])
def test_detd_governs_and_megatron_stands_down(daemon, tmp_path, order, when):
    r = run(daemon, tmp_path, order)  # the stand-in pins by default, as Megatron in deterministic mode
    # Only detd's patch is in place; Megatron's wrapper never ran.
    assert r["run_module"] == "detd._triton" and r["megatron_calls"] == 0, r
    assert r["megatron_installed"] is True  # its install() returns without patching
    assert r["installed"] and r["detd_keys"] == [dict(source="timed", governed=True, timed_here=True)], r
    (line,) = r["log"]
    assert f"megatron.core.tuning is installed as well ({when})" in line, line
    assert "detd governs Triton's autotuner, megatron.core.tuning stands down" in line, line
    # The daemon decided the key (one timing pass) and verify sees it governed.
    v = json.loads(daemon.detctl("verify", "--json").stdout)
    assert v["ok"] and v["keys_checked"] == 1 and not [t for t in v["autotuners"] if t["ungoverned"]], v


def test_megatron_governs_when_asked_and_detd_stands_down(daemon, tmp_path):
    r = run(daemon, tmp_path, "megatron-governs", DETD_MEGATRON="megatron", MCORE_AUTOTUNE_MODE="pinned")
    assert r["run_module"] == "megatron.core.tuning.interception" and r["megatron_calls"] == 1, r
    assert not r["installed"] and r["detd_keys"] == [], r
    (line,) = r["log"]
    assert "megatron.core.tuning governs Triton's autotuner; detd stands down" in line, line
    # detd observed nothing: verify has nothing to check.
    v = daemon.detctl("verify")
    assert v.returncode == 1 and "nothing was checked" in v.stdout, v.stdout


def test_megatron_setting_is_validated():
    from detd import _policy

    assert _policy.parse(environ={}).megatron == "detd"
    assert _policy.parse(environ={"DETD_MEGATRON": "Megatron"}).megatron == "megatron"
    with pytest.raises(ValueError, match="DETD_MEGATRON"):
        _policy.parse(environ={"DETD_MEGATRON": "both"})
