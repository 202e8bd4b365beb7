"""tests/gpu/replay_recheck.py on decisions whose samples are known: which
winner each variant of the re-measure gives, the held-out ratio of a
changed one, the clear-lead count, keys it must leave out, and a recorded
winner its rule does not reproduce (exit 1)."""

import json
import os
import subprocess
import sys

from conftest import HERE

SCRIPT = os.path.join(HERE, "..", "gpu", "replay_recheck.py")

# a: a lucky first measurement (1.00), then 1.10 twice; b: 1.05, then
# 1.02 twice; c: screened out. All samples: b wins (median 1.03 against
# 1.09); the first measurement alone: a; the first and one round: b
# (1.035 against 1.05). a's held-out rounds over b's: 1.10 / 1.02.
A = [1.00, 0.99, 1.01, 1.10, 1.09, 1.11, 1.10, 1.09, 1.11]
B = [1.05, 1.04, 1.06, 1.02, 1.01, 1.03, 1.02, 1.01, 1.03]
C = [1.50, 1.40, 1.60]


def decision(config, timings, source="timed"):
    return {"kernel": "m:k@0", "key": "[i:1]", "config": config, "source": source,
            "timings": [{"config": c, "ms": ms, "failed": False} for c, ms in timings.items()]}


def run(tmp_path, name, decisions):
    path = tmp_path / name
    path.write_text(json.dumps({"decisions": decisions}))
    return subprocess.run([sys.executable, SCRIPT, str(path)], capture_output=True, text=True, timeout=120)


def test_replay_gives_each_variants_winner_and_judges_it_on_held_out_rounds(tmp_path):
    p = run(tmp_path, "d.json", [
        decision("b", {"a": A, "b": B, "c": C}),
        decision("a", {"a": [1.0, 0.9, 1.1], "b": [2.0, 1.9, 2.1]}),  # nothing re-measured: left out
        decision("b", {"a": A, "b": B}, source="table"),  # not timed: left out
    ])
    assert p.returncode == 0, p.stdout + p.stderr
    row = p.stdout.strip().splitlines()[-1]
    # 1 of 3 re-measured; a's first spread (0.99-1.01) is below b's (1.04-1.06):
    # DETD_RECHECK_CLEAR=0 would skip it; no re-measure picks a, 1.0784x on
    # the held-out rounds; one round keeps b; nothing misread.
    assert row.endswith("| 1 of 3 | 1 | 1 / 1.0784x / 1 | 0 / - / 0 | 0 |"), row


def test_a_recorded_winner_the_rule_does_not_give_fails_the_replay(tmp_path):
    p = run(tmp_path, "d.json", [decision("a", {"a": A, "b": B, "c": C})])
    assert p.returncode == 1, p.stdout + p.stderr
    assert p.stdout.strip().splitlines()[-1].endswith("| 1 |")
