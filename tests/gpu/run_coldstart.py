"""The cold-start run: N processes on one GPU meeting every key cold, with
the timing pass shared (DETD_SHARE_PASS=1: waiting ranks compile shares of
the candidates into Triton's cache) and not shared, each from a fresh store
and a fresh TRITON_CACHE_DIR, then a rerun of each against its store.

    python3 tests/gpu/run_coldstart.py [--procs 8] [--no-fla] [--out DIR]

Prints one table: first-run wall time per process (median / max), the
rerun's, their ratio, timing passes (daemon / counted in the processes),
shares given, and the kernel time of the chosen configs (noise-aware
winner) against a fresh timed autotune in one process. Checks, and exits 1
with a FAIL line if any fails: every process succeeds, all ranks launch
the same config per entry, exactly one timing pass per key, no timing in
the rerun, shares given only with sharing on. Binaries: .gpu/ from
tests/gpu/bundle.sh (as run_gpu.py). About 4 minutes with FLA.
"""

import argparse
import json
import os
import statistics
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from run_gpu import Daemon, counter, kernel_time, run_procs  # noqa: E402


def condition(name, share, n, root, wargs):
    work = tempfile.mkdtemp(prefix=f"{name}-", dir=root)
    cache = os.path.join(work, "triton-cache")
    d = Daemon(os.path.join(work, "detd"))
    try:
        env = {"TRITON_CACHE_DIR": cache, "DETD_SHARE_PASS": "1" if share else "0", "DETD_TIMEOUT_MS": "900000"}
        run1 = run_procs(n, "detd", work, "run1", extra_env=env, args=wargs)
        st1 = d.status()
        run2 = run_procs(n, "detd", work, "run2", extra_env=env, args=wargs)
        st2 = d.status()
    finally:
        d.stop()
    return dict(name=name, share=share, work=work, run1=run1, run2=run2,
                passes=counter(st1, "timing_passes"), passes2=counter(st2, "timing_passes") - counter(
                    st1, "timing_passes"), shares=counter(st1, "pass_shares"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--procs", type=int, default=8)
    ap.add_argument("--no-fla", action="store_true")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    root = a.out or tempfile.mkdtemp(prefix="detd-coldstart-")
    os.makedirs(root, exist_ok=True)
    wargs = ["--no-fla"] if a.no_fla else []
    failures = []
    rows = []
    for name, share in (("single", False), ("shared", True)):
        c = condition(name, share, a.procs, root, wargs)
        t1 = [r["startup_s"] for r in c["run1"]]
        t2 = [r["startup_s"] for r in c["run2"]]
        entries = set(c["run1"][0]["configs"])
        for r in c["run1"] + c["run2"]:
            if r["configs"] != c["run1"][0]["configs"]:
                failures.append(f"{name}: rank {r['rank']} launched other configs than rank 0")
        counted = sum(r["passes"] for r in c["run1"])
        if c["passes"] != len(entries) or counted != len(entries):
            failures.append(f"{name}: {c['passes']} timing passes (daemon), {counted} counted, "
                            f"for {len(entries)} keys: want one per key")
        if c["passes2"] != 0 or sum(r["passes"] for r in c["run2"]) != 0:
            failures.append(f"{name}: the rerun timed {c['passes2']} keys")
        if share and c["shares"] == 0:
            failures.append("shared: no share was given (did the waiting ranks ask?)")
        if not share and c["shares"] != 0:
            failures.append(f"single: {c['shares']} shares given with sharing off")
        kt_rows, fresh, chosen = kernel_time(c["work"], wargs, c["run1"][0]["configs"], f"kt_{name}")
        ps = [v for r in c["run1"] for v in (r.get("pass_s") or {}).values()]
        split = dict(keys=len(ps), candidates=sum(v.get("candidates", 0) for v in ps),
                     first_s=sum(v.get("first", 0.0) for v in ps), recheck_s=sum(v.get("recheck", 0.0) for v in ps))
        rows.append(dict(name=name, split=split, med1=statistics.median(t1), max1=max(t1), med2=statistics.median(t2),
                         max2=max(t2), passes=c["passes"], counted=counted, shares=c["shares"],
                         kt=chosen / fresh if fresh else float("nan"), keys=len(entries),
                         slower=[r for r in kt_rows if r["detd_ms"] > 1.01 * r["fresh_ms"]]))
    print(f"\ncold start, {a.procs} processes on one GPU, fresh store and TRITON_CACHE_DIR per condition")
    print(f"{'pass':8} {'run1 med s':>10} {'run1 max s':>10} {'run2 med s':>10} {'run1/run2':>9} "
          f"{'passes':>7} {'shares':>6} {'kernel time vs fresh autotune':>30}")
    for r in rows:
        print(f"{r['name']:8} {r['med1']:10.2f} {r['max1']:10.2f} {r['med2']:10.2f} {r['med1'] / r['med2']:9.2f} "
              f"{r['passes']:>4}/{r['keys']:<2} {r['shares']:6d} {r['kt']:30.4f}")
    if len(rows) == 2:
        print(f"shared / single, run-1 median: {rows[1]['med1'] / rows[0]['med1']:.3f}")
    for r in rows:
        x = r["split"]
        print(f"{r['name']}: the timing passes of run 1: {x['keys']} keys, {x['candidates']} candidates, "
              f"first round (compile and time each) {x['first_s']:.1f} s, re-measure {x['recheck_s']:.1f} s")
    for r in rows:
        for s in r["slower"]:
            print(f"  {r['name']}: {s['entry']}: {s['detd']} {s['detd_ms']:.4f} ms vs fresh {s['fresh']} "
                  f"{s['fresh_ms']:.4f} ms")
    json.dump(rows, open(os.path.join(root, "coldstart.json"), "w"), indent=1, default=str)
    for f in failures:
        print("FAIL", f)
    if failures:
        sys.exit(1)
    print("PASS: one timing pass per key, all ranks agree, no timing in the rerun; results in", root)


if __name__ == "__main__":
    main()
