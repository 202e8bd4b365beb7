"""The multi-GPU training run: torchrun with one rank per GPU, twice with
Triton's default autotuning and twice with detd (coordinated, one daemon on
the node, the same store for both runs). Prints a table.

    NCCL_NVLS_ENABLE=0 python3 tests/gpu/run_train.py [--gpus N] [--steps 300] [--out DIR]

Needs the binaries bundled by tests/gpu/bundle.sh under .gpu/ (see
run_gpu.py) and fla-core importable.
"""

import argparse
import collections
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from run_gpu import Daemon, counter, env_for  # noqa: E402


def torchrun(gpus, mode, out, steps, extra_env=None):
    env = env_for({"NCCL_NVLS_ENABLE": "0", **(extra_env or {})})
    log = open(out + ".log", "w")
    t0 = time.time()
    p = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                        f"--nproc_per_node={gpus}", os.path.join(HERE, "train.py"), "--mode", mode,
                        "--out", out, "--steps", str(steps)], env=env, stdout=log, stderr=subprocess.STDOUT)
    wall = time.time() - t0
    log.close()
    if p.returncode != 0:
        sys.stdout.write(open(out + ".log").read()[-4000:])
        raise SystemExit(f"torchrun {mode} exited {p.returncode}")
    ranks = [json.load(open(os.path.join(out, f"rank{r}.json"))) for r in range(gpus)]
    return ranks, wall


def disagreements(ranks):
    per = collections.defaultdict(set)
    for r in ranks:
        for k, v in r["configs"].items():
            per[k].add(v)
    return len(per), sum(1 for v in per.values() if len(v) > 1)


def same_run(a, b):
    """Losses (every step, every rank) and final weights bit-identical?"""
    losses = all(x["losses"] == y["losses"] and x["metrics"] == y["metrics"] for x, y in zip(a, b))
    weights = all(x["weights"] == y["weights"] for x, y in zip(a, b))
    return losses, weights


def steady(ranks, skip=10):
    """Steps per second after the first `skip` steps (median rank)."""
    return statistics.median(len(r["step_s"][skip:]) / sum(r["step_s"][skip:]) for r in ranks)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--out", default=os.environ.get("OUT") or tempfile.mkdtemp(prefix="detd-train-"))
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="detd-train-run-", dir="/tmp")
    runs = {}
    runs["default1"] = torchrun(a.gpus, "default", os.path.join(work, "default1"), a.steps)
    runs["default2"] = torchrun(a.gpus, "default", os.path.join(work, "default2"), a.steps)
    d = Daemon(os.path.join(work, "daemon"))
    try:
        runs["detd1"] = torchrun(a.gpus, "detd", os.path.join(work, "detd1"), a.steps)
        st1 = d.status()
        runs["detd2"] = torchrun(a.gpus, "detd", os.path.join(work, "detd2"), a.steps)
        st2 = d.status()
        v = d.detctl("verify")
    finally:
        rc = d.stop()

    print(f"\n== {a.gpus} ranks (one per GPU), {a.steps} steps, NCCL all-reduce ==")
    print(f"{'run':10s} {'entries':>7s} {'ranks disagree':>14s} {'timing passes':>13s} "
          f"{'verify':>6s} {'steps/s':>8s} {'wall s':>7s}")
    summary = {}
    for name, (ranks, wall) in runs.items():
        entries, dis = disagreements(ranks)
        passes = sum(r["passes"] for r in ranks)
        ver = sum(len(r["verified"]) for r in ranks)
        sps = steady(ranks)
        print(f"{name:10s} {entries:7d} {dis:14d} {passes:13d} {ver:6d} {sps:8.2f} {wall:7.1f}")
        summary[name] = {"entries": entries, "disagree": dis, "timing_passes": passes,
                         "verify_calls": ver, "steps_per_s": sps, "wall_s": wall,
                         "passes_per_rank": [r["passes"] for r in ranks]}
    for pair in (("default1", "default2"), ("detd1", "detd2")):
        l, w = same_run(runs[pair[0]][0], runs[pair[1]][0])
        print(f"{pair[0]} vs {pair[1]}: losses bit-identical {l}, final weights bit-identical {w}")
        summary[f"{pair[0]}_vs_{pair[1]}"] = {"losses_identical": l, "weights_identical": w}
    l, w = same_run(runs["default1"][0], runs["detd1"][0])
    summary["default1_vs_detd1"] = {"losses_identical": l, "weights_identical": w}
    src = collections.Counter(s for r in runs["detd1"][0] for s in r.get("sources", {}).values())
    print(f"detd run1 sources {dict(src)}; daemon timing passes: run1 {counter(st1, 'timing_passes')}, "
          f"run2 {counter(st2, 'timing_passes') - counter(st1, 'timing_passes')}; "
          f"detctl verify exit {v.returncode}; daemon exit {rc}")
    summary.update({"daemon_timing_passes_run1": counter(st1, "timing_passes"),
                    "daemon_timing_passes_run2": counter(st2, "timing_passes") - counter(st1, "timing_passes"),
                    "detctl_verify_exit": v.returncode, "daemon_exit": rc, "detd_sources": dict(src)})
    os.makedirs(a.out, exist_ok=True)
    json.dump(summary, open(os.path.join(a.out, "train_summary.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
