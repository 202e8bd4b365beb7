"""A second store starting warm from the first's lockfile, on one GPU.

    python3 tests/gpu/run_lockfile.py [--procs 8] [--no-fla] [--out DIR]

Store A: N processes under detd (worker.py, the agreement run's kernels)
time every key once; `detctl lock export --all` writes A's decisions.
Store B, a fresh state directory standing for another cluster, starts with
`detd --lock FILE`; N processes run the same workload against it. Store C
starts with the lock and `--lock-require torch_version=0.0.0` (a run whose
torch is not the lock's). Prints one table and exits 1 with a FAIL line
unless: B's daemon and processes timed nothing, every entry's config on B
is A's, every output's digest on B is A's, `detctl verify --lock FILE`
passes on B, every timed entry records how it was timed (benchmarker,
torch, driver: the provenance columns) and B keeps it as A had it, and C
stores none of the entries (each a skip, counted). Binaries: .gpu/ from
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


def decisions(d):
    """The store's decisions by id, as detctl decisions --json shows them."""
    return {x["id"]: x for x in json.loads(d.detctl("decisions", "--json").stdout)["decisions"]}


def provenance(d):
    """One timed decision's provenance columns, as one cell."""
    t = d.get("timing") or {}
    b = t.get("benchmarker") or {}
    return (f"{b.get('name')} {b.get('warmup', 0):g}/{b.get('rep', 0):g}, graphs "
            f"{'yes' if b.get('cuda_graphs') else 'no'}, lock {'yes' if b.get('timing_lock') else 'no'}; torch "
            f"{t.get('torch_version')}, CUDA {t.get('cuda_version')}, driver {t.get('driver')}")


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
        dec_a = decisions(da)
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
        dec_b = decisions(db)
    finally:
        db.stop()
    dc = Daemon(os.path.join(work, "c"), args=["--lock", lock, "--lock-require", "torch_version=0.0.0"])
    try:
        st_c = dc.status()
    finally:
        dc.stop()
    timed = [d for d in dec_a.values() if d["source"] == "timed"]
    how = sorted({provenance(d) for d in timed})
    kept = sum(1 for i, d in dec_a.items() if i in dec_b and dec_b[i]["timing"] == d["timing"])

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
        ("how A's timed entries were timed (benchmarker warmup/rep ms, graphs, lock; torch, CUDA, driver)",
         "; ".join(how) or "-"),
        ("entries whose provenance on B is A's", f"{kept} of {len(dec_a)}"),
        ("store C (torch_version=0.0.0 required): skipped / imported",
         f"{counter(st_c, 'lock_skipped')} / {counter(st_c, 'decisions_import')}"),
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
    if not timed or any(not (d["timing"] or {}).get("benchmarker") or not d["timing"].get("torch_version")
                        or d["timing"].get("driver") in (None, "none") for d in timed):
        fails.append("a timed entry does not record its benchmarker, torch or driver")
    if kept != len(dec_a):
        fails.append("store B does not keep A's provenance")
    if counter(st_c, "lock_skipped") != entries or counter(st_c, "decisions_import") != 0:
        fails.append("store C imported entries whose torch is not the run's")
    if ver.returncode != 0:
        fails.append("verify --lock failed:\n" + ver.stdout[-1500:] + ver.stderr[-500:])
    for f in fails:
        print("FAIL:", f)
    print("lockfile run:", "PASS" if not fails else "FAIL")
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
