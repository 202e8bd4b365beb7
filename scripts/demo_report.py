"""Part of scripts/demo.sh: what the processes of one Triton run did.

    demo_report.py WORK LABEL PROCS

Reads each process's DETD_RUN_REPORT file (LABEL-triton-R.json), its
output (LABEL-triton-R.out) and the daemon's decisions
(LABEL-decisions.json, `detctl decisions --json`), and prints per kernel
and key: the config, who timed it (rank and pid, from the decision), who
waited and for how long, and whether every process launched that config;
then whether every process computed the same output bits. Exits 1 on any
disagreement, on a rerun that timed anything, or on a first run that
timed a key more than once.
"""

import glob
import json
import re
import sys


def decisions(path):
    doc = json.load(open(path))
    rows = doc.get("decisions", doc) if isinstance(doc, dict) else doc
    return {(r.get("kernel"), r.get("key")): r for r in rows}


def main(work, label, procs):
    reports = []
    for r in range(procs):
        reports.append(json.load(open(f"{work}/{label}-triton-{r}.json")))
    digests = {}
    for r in range(procs):
        out = open(f"{work}/{label}-triton-{r}.out").read()
        m = re.search(r"outputs sha256 (\w+)", out)
        digests[r] = m.group(1) if m else None
    decided = decisions(f"{work}/{label}-decisions.json")
    per_key = {}
    timed_here = 0
    for rep in reports:
        rank = rep.get("rank")
        for tuner in rep["autotuners"]:
            for k in tuner.get("keys", []):
                entry = per_key.setdefault((tuner["kernel"], k["key"]), [])
                entry.append((rank, rep["pid"], k.get("config"), k.get("source"), k.get("waited_ms"),
                              bool(k.get("timed_here"))))
                timed_here += bool(k.get("timed_here"))
    ok = True
    for (kernel, key), uses in sorted(per_key.items()):
        configs = {u[2] for u in uses}
        d = decided.get((kernel, key)) or next((v for (dk, dkey), v in decided.items() if dk == kernel
                                                and dkey == key), None)
        by = d.get("decided_by") or {} if d else {}
        timed_by = f"rank {by.get('rank', d.get('by_rank', '?'))} pid {by.get('pid', d.get('by_pid', '?'))}" \
            if d and d.get("source", "").lower().endswith("timed") else (d.get("source", "?") if d else "undecided")
        waits = ", ".join(f"rank {u[0]} {u[4]} ms" for u in uses if u[4] not in (None, 0)) or "nobody waited"
        agree = "same config in every process" if len(configs) == 1 else f"DISAGREEMENT: {sorted(configs)}"
        print(f"  {kernel.split('@')[0]} {key}: {sorted(configs)[0]}; timed by {timed_by}; waited: {waits}; "
              f"{agree}")
        ok &= len(configs) == 1 and len(uses) == procs
    same_bits = len(set(digests.values())) == 1 and None not in digests.values()
    print(f"{label}: {procs} processes, {len(per_key)} keys, {timed_here} timing passes, outputs "
          f"{'bit-identical in every process' if same_bits else 'DIFFER: ' + str(digests)}")
    if "rerun" in label and timed_here != 0:
        print(f"{label}: the rerun timed {timed_here} keys; expected 0")
        ok = False
    if "first" in label and timed_here > len(per_key):
        print(f"{label}: {timed_here} timing passes for {len(per_key)} keys")
        ok = False
    return 0 if ok and same_bits else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
