"""scripts/demo.sh, the README's first command, against this build tree:
it exits 0, the first run times each key once with every process agreeing,
the rerun times nothing (for the libdetd load generator and for an
unmodified script with real @triton.autotune kernels under detd.run), and
`detctl verify` passes."""
import os
import re
import shutil
import subprocess

from conftest import BUILD, REPO


# The demo's venv (torch, Triton) is kept with the suite's other venvs, so a
# fresh clone's run does not install torch again; its own, not a Triton
# matrix venv, since the demo reinstalls the package into it while other
# suites may run from those.
VENV = os.path.join(os.environ.get("DETD_VENV_ROOT")
                    or os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"),
                                    "detd-venvs"), "demo")


def test_demo_script():
    env = dict(os.environ, DETD_BUILD_DIR=str(BUILD), DETD_DEMO_PROCS="8", DETD_DEMO_KEYS="40",
               DETD_DEMO_TRITON_PROCS="4", TRITON_INTERPRET="1", DETD_DEMO_VENV=VENV)
    r = subprocess.run(["bash", str(REPO / "scripts" / "demo.sh")], env=env, capture_output=True, text=True,
                       timeout=1500)
    out = r.stdout + r.stderr
    m = re.search(r"^demo state and logs: (/tmp/detd-demo\.\w+)$", r.stdout, re.M)
    try:
        assert r.returncode == 0, out[-6000:]
        lines = r.stdout.splitlines()
        assert ("first: 8 processes x 40 keys: 40 timing passes, "
                "every process used the same config for every key") in lines, out[-6000:]
        assert ("rerun: 8 processes x 40 keys: 0 timing passes, "
                "every process used the same config for every key") in lines, out[-6000:]
        # The unmodified Triton script: 4 processes x 6 keys, each key timed
        # once in the whole run, the same bits everywhere, nothing timed again.
        assert ("triton-first: 4 processes, 6 keys, 6 timing passes, "
                "outputs bit-identical in every process") in lines, out[-6000:]
        assert ("triton-rerun: 4 processes, 6 keys, 0 timing passes, "
                "outputs bit-identical in every process") in lines, out[-6000:]
        assert sum("same config in every process" in ln for ln in lines) == 12, out[-6000:]
        assert "ok: 46 keys checked, 688 observations, 0 divergences" in lines, out[-6000:]
        assert re.search(r"^\s+timing_passes\s+46$", r.stdout, re.M), out[-6000:]
        assert m is not None, out[-6000:]
    finally:
        if m is not None:
            shutil.rmtree(m.group(1), ignore_errors=True)
