"""flag-gems on one GPU: its LibTuner (which never calls Autotuner.run and
keeps its own on-disk table) governed by detd.

    python3 tests/gpu/run_flaggems.py [--procs 8] [--quick] [--out DIR]

flag-gems 5.0.2 and the wheels it needs come from .whl/flaggems/
(tests/gpu/fetch_packages.sh; installed with
``pip install --no-index --no-deps --target``; $DETD_PKG_SITE names
another directory); the binaries from .gpu/ (tests/gpu/bundle.sh). Each
process gets its own FLAGGEMS_CACHE_DIR, as separate nodes have. Runs N
processes with flag-gems alone, then N under detd (run 1), then N again
(the rerun), then N under detd with LibTuner left out of
DETD_CACHE_TUNERS (observed, not governed), and prints one table: LibTuner
keys, keys whose processes launched more than one config (alone / detd),
outputs with more than one digest (alone / detd), timing passes (run 1 /
rerun, the daemon's counter), detctl verify of each detd run (the last
must fail where its processes disagreed), and the workload's seconds
(median process).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import run_packages  # noqa: E402
from run_gpu import Daemon, counter  # noqa: E402
from run_packages import spread  # noqa: E402


def site():
    return run_packages.wheel_site("flaggems", "flag_gems", "/tmp/flaggems-site")


def procs(n, mode, work, tag, quick, extra=None):
    def worker(r, out, env):
        env["FLAGGEMS_CACHE_DIR"] = os.path.join(work, f"gems-cache-{tag}-{r}")
        env["PYTHONPATH"] = os.pathsep.join([env["PYTHONPATH"], site()])
        return [sys.executable, os.path.join(HERE, "flaggems_worker.py"), "--mode", mode, "--out", out,
                *(["--quick"] if quick else [])]

    return run_packages.procs(n, "flag-gems", mode, work, tag, quick, extra=extra, timeout=540, worker=worker)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--procs", type=int, default=8)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=os.environ.get("OUT") or tempfile.mkdtemp(prefix="detd-gems-"))
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    work = tempfile.mkdtemp(prefix="gems-", dir=a.out)
    t0 = time.time()

    def progress(phase):
        print(f"flag-gems: {phase} done, {time.time() - t0:.0f} s", flush=True)

    alone = procs(a.procs, "default", work, "alone", a.quick)
    progress("flag-gems alone")
    d = Daemon(os.path.join(work, "detd"))
    try:
        run1 = procs(a.procs, "detd", work, "detd1", a.quick, extra={"DETD_JOB": "run1"})
        st1 = d.status()
        progress("detd run 1")
        rerun = procs(a.procs, "detd", work, "detd2", a.quick, extra={"DETD_JOB": "rerun"})
        st2 = d.status()
        progress("detd rerun")
        # LibTuner left out of DETD_CACHE_TUNERS: not governed, its choices
        # observed; verify must fail where the processes chose differently.
        ungov = procs(a.procs, "detd", work, "ungov", a.quick,
                      extra={"DETD_JOB": "ungoverned", "DETD_CACHE_TUNERS": "none.Tuner"})
        progress("detd, LibTuner not governed")
        verify = {job: d.detctl("verify", "--job", job) for job in ("run1", "rerun", "ungoverned")}
    finally:
        d.stop()
    ca, da = spread(alone, "configs"), spread(alone, "digests")
    c1, d1 = spread(run1 + rerun, "configs"), spread(run1 + rerun, "digests")
    rows = [
        ("LibTuner keys (alone / detd)", f"{len(ca)} / {len(c1)}"),
        ("keys launched with >1 config (alone / detd, run 1 + rerun)",
         f"{sum(len(v) > 1 for v in ca.values())} / {sum(len(v) > 1 for v in c1.values())}"),
        ("outputs with >1 digest (alone / detd)",
         f"{sum(len(v) > 1 for v in da.values())} / {sum(len(v) > 1 for v in d1.values())} of {len(da)}"),
        ("timing passes, daemon (run 1 / rerun)",
         f"{counter(st1, 'timing_passes')} / {counter(st2, 'timing_passes') - counter(st1, 'timing_passes')}"),
        ("timing passes, processes (run 1 / rerun)",
         f"{sum(r['passes'] for r in run1)} / {sum(r['passes'] for r in rerun)}"),
        ("detctl verify (run 1 / rerun / LibTuner not governed)",
         " / ".join("ok" if v.returncode == 0 else f"FAIL ({v.returncode})" for v in verify.values())),
        ("keys launched with >1 config, LibTuner not governed",
         str(sum(len(v) > 1 for v in spread(ungov, "configs").values()))),
        ("workload s, median process (alone / run 1 / rerun)",
         " / ".join(f"{statistics.median(r['workload_s'] for r in x):.1f}" for x in (alone, run1, rerun))),
    ]
    print(f"\nflag-gems 5.0.2, flag_gems.enable(), {a.procs} processes{' [quick]' if a.quick else ''}")
    print("| measure | value |\n|---|---|")
    for k, v in rows:
        print(f"| {k} | {v} |")
    for k, v in sorted(ca.items()):
        if len(v) > 1:
            print(f"alone, {k}: {len(v)} configs")
    print("sources under detd:", sorted({s for r in run1 + rerun for s in r.get("sources", [])}))
    ung = sorted({u for r in run1 + rerun for u in r["ungoverned"]})
    if ung:
        print("ungoverned under detd:", ung[:6])
    errs = sorted({f"{op}: {e}" for r in alone + run1 + rerun for op, e in r["errors"].items()})
    if errs:
        print("errors:", errs[:6])
    print(verify["run1"].stdout[-600:])
    print(verify["ungoverned"].stdout[-1500:])
    json.dump(dict(alone=alone, run1=run1, rerun=rerun, ungoverned=ungov), open(os.path.join(work, "flaggems.json"), "w"))


if __name__ == "__main__":
    main()
