"""scripts/demo.sh, the README's first command, against this build tree:
it exits 0 and is quiet (package, build and pip output in its log); the
libdetd load generator's first run times each key once with every process
agreeing and its rerun times nothing; the control, an unmodified script
with a real @triton.autotune kernel whose candidates are near-tied, run
in 4 processes WITHOUT detd, is reported as disagreeing (the problem:
each process's own autotuning picks its own winners, and the outputs
differ); the same script under detd.run agrees on every key, bit for
bit, and its rerun times nothing; `detctl verify` passes."""
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
KEYS = 12  # scripts/demo_train.py's default: row sums of 12 lengths
TPROCS = 4


def test_demo_script():
    env = dict(os.environ, DETD_BUILD_DIR=str(BUILD), DETD_DEMO_PROCS="8", DETD_DEMO_KEYS="40",
               DETD_DEMO_TRITON_PROCS=str(TPROCS), TRITON_INTERPRET="1", DETD_DEMO_VENV=VENV)
    r = subprocess.run(["bash", str(REPO / "scripts" / "demo.sh")], env=env, capture_output=True, text=True,
                       timeout=1500)
    out = r.stdout + r.stderr
    m = re.search(r"^demo state and logs: (/tmp/detd-demo\.\w+)$", r.stdout, re.M)
    try:
        assert r.returncode == 0, out[-6000:]
        lines = r.stdout.splitlines()
        # Quiet: one line per set-up stage, the log named first.
        assert re.fullmatch(r"demo log: /tmp/detd-demo\.\w+/demo\.log", lines[0]), out[-6000:]
        for stage in ("Debian packages", "configure", "build detd", "start detd", "Python venv"):
            assert sum(ln.startswith(stage) and re.search(r" \.\.\. ok \(\d+ s\)$", ln) is not None
                       for ln in lines) == 1, (stage, out[-6000:])
        assert not any(re.search(r"Building C object|Collecting |Successfully installed|apt-get", ln)
                       for ln in lines), out[-6000:]
        assert ("first: 8 processes x 40 keys: 40 timing passes, "
                "every process used the same config for every key") in lines, out[-6000:]
        assert ("rerun: 8 processes x 40 keys: 0 timing passes, "
                "every process used the same config for every key") in lines, out[-6000:]
        # The control, without detd: its disagreement is reported as the
        # problem, and the demo still exits 0. Each key's 4 candidates do the
        # same work, so each process's pick is its timing noise: 4 processes
        # agree on one key with probability sum(p_i^4), 1/64 when the picks
        # are uniform and under 0.35 even when one candidate wins 3 picks of
        # 4; on all 12 keys under 0.35^12 < 4e-6 (scripts/demo_train.py).
        control = [ln for ln in lines if ln.startswith("control: ")]
        assert len(control) == 1, out[-6000:]
        cm = re.fullmatch(rf"control: {TPROCS} processes, {KEYS} keys, the processes chose different configs "
                          rf"for (\d+) of {KEYS} keys; outputs: (\d+) different results in {TPROCS} processes "
                          r"\(the problem: every process timed on its own\)", control[0])
        assert cm is not None, out[-6000:]
        assert 1 <= int(cm.group(1)) <= KEYS and 2 <= int(cm.group(2)) <= TPROCS, control[0]
        assert sum(ln.endswith("; the processes DISAGREE") for ln in lines) == int(cm.group(1)), out[-6000:]
        # The same script under detd: each key timed once in the whole run,
        # the same bits everywhere, nothing timed again.
        assert (f"triton-first: {TPROCS} processes, {KEYS} keys, {KEYS} timing passes, "
                "outputs bit-identical in every process") in lines, out[-6000:]
        assert (f"triton-rerun: {TPROCS} processes, {KEYS} keys, 0 timing passes, "
                "outputs bit-identical in every process") in lines, out[-6000:]
        assert sum(ln.endswith("; same config in every process") for ln in lines) == 2 * KEYS, out[-6000:]
        keys = 40 + KEYS
        observations = 2 * (8 * 40 + TPROCS * KEYS)
        # verify judges every run of the demo, not only the last job.
        assert any(ln.startswith("job: every job (--all-jobs; ") for ln in lines), out[-6000:]
        assert f"ok: {keys} keys checked, {observations} observations, 0 divergences" in lines, out[-6000:]
        assert re.search(rf"^\s+timing_passes\s+{keys}$", r.stdout, re.M), out[-6000:]
        assert m is not None, out[-6000:]
    finally:
        if m is not None:
            shutil.rmtree(m.group(1), ignore_errors=True)
