"""The long fault campaign: many seeded schedules, one summary table.

    DETD_BUILD_DIR=build python3 tests/campaign/run_campaign.py \\
        --schedules 500 --seed-start 1 [--profile long|short] \\
        [--kind local|etcd] [--keep DIR] [--json FILE] [-q]

Schedule i uses seed S+i; any failing one is replayed with
`python3 tests/campaign/harness.py --seed N --profile P -v`.
Exit status 1 when any schedule violated a property.
"""

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import checker  # noqa: E402
import schedule as schedmod  # noqa: E402
from harness import Harness  # noqa: E402

FAULTS = ("client_kill", "daemon_kill", "daemon_term", "hang", "etcd_kill", "partition")


def campaign(seeds, profile="short", kind=None, keep=None, progress=None, verbose=False):
    """Runs one schedule per seed; returns (summary, results)."""
    h = Harness(verbose=verbose, keep_failed=keep)
    results = []
    t0 = time.monotonic()
    try:
        for s in seeds:
            res = h.run(schedmod.generate(s, profile, kind))
            results.append(res)
            if progress:
                progress(res)
    finally:
        h.close()
    summary = {"schedules": len(results), "wall_s": round(time.monotonic() - t0, 1),
               "answers": sum(r["answers"] for r in results),
               "violations": sum(len(r["violations"]) for r in results),
               "failed_seeds": [r["seed"] for r in results if r["violations"]],
               "over_budget": [o for r in results for o in r.get("over_budget", [])],
               "kinds": {}, "faults": {}, "properties": {}}
    for r in results:
        summary["kinds"][r["kind"]] = summary["kinds"].get(r["kind"], 0) + 1
        for f, n in r["faults"].items():
            summary["faults"][f] = summary["faults"].get(f, 0) + n
        for v in r["violations"]:
            p = v["property"]
            summary["properties"][p] = summary["properties"].get(p, 0) + 1
    return summary, results


def table(summary):
    n = max(summary["schedules"], 1)
    rows = [("schedules", summary["schedules"]),
            ("  local / etcd", f"{summary['kinds'].get('local', 0)} / {summary['kinds'].get('etcd', 0)}"),
            ("answers checked", summary["answers"]),
            ("violations", summary["violations"])]
    for p in ("one-config", "durable", "candidate", "wait-bound", "client-died"):
        rows.append((f"  {p}", summary["properties"].get(p, 0)))
    rows.append(("schedules failing", len(summary["failed_seeds"])))
    ob = summary.get("over_budget", [])
    rows.append(("deaths over budget", f"{len(ob)} (the faults met cost more than the key's budget; "
                 "not violations)"))
    rows.append(("faults injected", sum(summary["faults"].get(f, 0) for f in FAULTS)))
    for f in FAULTS:
        rows.append((f"  {f}", summary["faults"].get(f, 0)))
    rows.append(("wall time", f"{summary['wall_s']} s ({summary['wall_s'] / n:.1f} s per schedule)"))
    w = max(len(r[0]) for r in rows)
    return "\n".join(f"{k:<{w}}  {v}" for k, v in rows)


def main(argv=None):
    ap = argparse.ArgumentParser(description="run the long fault campaign")
    ap.add_argument("--schedules", type=int, default=500)
    ap.add_argument("--seed-start", type=int, default=1)
    ap.add_argument("--profile", default="long", choices=sorted(schedmod.PROFILES))
    ap.add_argument("--kind", choices=("local", "etcd"))
    ap.add_argument("--keep", help="copy each failing schedule's files here")
    ap.add_argument("--json", help="write the summary and every violation here")
    ap.add_argument("-q", "--quiet", action="store_true", help="no line per schedule")
    ap.add_argument("-v", "--verbose", action="store_true")
    a = ap.parse_args(argv)

    def progress(res):
        if not a.quiet:
            print(f"seed {res['seed']:>6} {res['kind']:<5} answers {res['answers']:>4} "
                  f"violations {len(res['violations']):>2}  {res['wall_s']:5.1f} s  {res['faults']}",
                  flush=True)
        for v in res["violations"]:
            print(checker.format_violation(v), flush=True)

    seeds = range(a.seed_start, a.seed_start + a.schedules)
    summary, results = campaign(seeds, a.profile, a.kind, a.keep, progress, a.verbose)
    print()
    print(table(summary))
    if summary["failed_seeds"]:
        print(f"failing seeds (replay: harness.py --seed N --profile {a.profile} -v): "
              + " ".join(map(str, summary["failed_seeds"])))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"summary": summary,
                       "violations": [v for r in results for v in r["violations"]]}, f, indent=1)
    return 1 if summary["violations"] else 0


if __name__ == "__main__":
    sys.exit(main())
