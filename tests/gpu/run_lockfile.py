"""A second store starting warm from the first's lockfile, on one GPU.

    python3 tests/gpu/run_lockfile.py [--procs 8] [--no-fla] [--out DIR]

Store A: N processes under detd (worker.py, the agreement run's kernels)
time every key once; `detctl lock export --all` writes A's decisions.
Store B, a fresh state directory standing for another cluster, starts with
`detd --lock FILE`; N processes run the same workload against it. Prints
one table and exits 1 with a FAIL line unless: B's daemon and processes
timed nothing, every entry's config on B is A's, every output's digest on
B is A's, and `detctl verify --lock FILE` passes on B. Binaries: .gpu/ from
tests/gpu/bundle.sh.
"""

import argparse
import json
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from run_gpu import Daemon, agreement, counter, run_procs  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--procs", type=int, default=8)
    ap.add_argument("--no-fla", action="store_true")
    ap.add_argument("--out", default=os.environ.get("OUT") or tempfile.mkdtemp(prefix="detd-lock-"))
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    work = tempfile.mkdtemp(prefix="detd-lock-run-", dir="/tmp")
    wargs = ["--no-fla"] if a.no_fla else []
    lock = os.path.join(a.out, "run.lock.json")

    da = Daemon(os.path.join(work, "a"))
    try:
        run_a = run_procs(a.procs, "detd", work, "a", args=wargs)
        st_a = da.status()
        exp = da.detctl("lock", "export", "--all", "-o", lock)
    finally:
        da.stop()
    if exp.returncode != 0:
        raise SystemExit(f"FAIL: lock export exited {exp.returncode}: {exp.stdout}{exp.stderr}")
    entries = len(json.load(open(lock))["entries"])

    db = Daemon(os.path.join(work, "b"), args=["--lock", lock])
    try:
        run_b = run_procs(a.procs, "detd", work, "b", args=wargs)
        st_b = db.status()
        ver = db.detctl("verify", "--lock", lock)
    finally:
        db.stop()

    ca, dga = agreement(run_a)
    cb, dgb = agreement(run_b)
    same_cfg = sum(1 for k in ca if cb.get(k) == ca[k] and len(ca[k]) == 1)
    same_bits = sum(1 for k in dga if dgb.get(k) == dga[k] and len(dga[k]) == 1)
    rows = [
        ("lock entries", entries),
        ("timing passes, daemon (store A / store B)",
         f"{counter(st_a, 'timing_passes')} / {counter(st_b, 'timing_passes')}"),
        ("timing passes, processes (A / B)",
         f"{sum(r['passes'] for r in run_a)} / {sum(r['passes'] for r in run_b)}"),
        ("entries whose config on B is A's (one config each)", f"{same_cfg} of {len(ca)}"),
        ("outputs whose digest on B is A's (one digest each)", f"{same_bits} of {len(dga)}"),
        ("detctl verify --lock on B", "ok" if ver.returncode == 0 else f"FAIL ({ver.returncode})"),
    ]
    print(f"\n{a.procs} processes per store, one GPU")
    print("| measure | value |\n|---|---|")
    for k, v in rows:
        print(f"| {k} | {v} |")
    fails = []
    if counter(st_b, "timing_passes") != 0 or sum(r["passes"] for r in run_b) != 0:
        fails.append("store B timed something")
    if same_cfg != len(ca) or set(cb) != set(ca):
        fails.append("configs differ between the stores")
    if same_bits != len(dga):
        fails.append("outputs differ between the stores")
    if ver.returncode != 0:
        fails.append("verify --lock failed:\n" + ver.stdout[-1500:] + ver.stderr[-500:])
    for f in fails:
        print("FAIL:", f)
    print("lockfile run:", "PASS" if not fails else "FAIL")
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
