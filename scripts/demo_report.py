"""Part of scripts/demo.sh: what the processes of one Triton run did.

    demo_report.py WORK LABEL PROCS             # a run under detd
    demo_report.py --control WORK LABEL PROCS   # the control, without detd

Reads each process's output (LABEL-triton-R.out: the config its autotuner
chose per key, and the SHA-256 of its outputs).

The control: prints per key the configs the processes chose, how many keys
the processes chose differently and whether their outputs differ. The
disagreement is the problem the demo shows, so this exits 0 either way
(1 only when a process's output cannot be read).

Under detd it also reads each process's DETD_RUN_REPORT file
(LABEL-triton-R.json) and the daemon's decisions (LABEL-decisions.json,
`detctl decisions --json`), and prints per key: the config, who timed it
(rank and pid, from the decision), who waited and for how long, and
whether every process launched that config; then whether every process
computed the same output bits. Exits 1 on any disagreement, on a rerun
that timed anything, or on a first run that timed a key more than once.
"""

import json
import re
import sys


def outputs(work, label, procs):
    """Per rank: (the chosen config per key, the outputs' SHA-256)."""
    res = {}
    for r in range(procs):
        out = open(f"{work}/{label}-triton-{r}.out").read()
        chosen = re.search(r"^chosen (\{.*\})$", out, re.M)
        digest = re.search(r"^outputs sha256 (\w+)$", out, re.M)
        if chosen is None or digest is None:
            print(f"{label}: rank {r} printed no choices or no digest:\n{out[-2000:]}")
            return None
        res[r] = (json.loads(chosen.group(1)), digest.group(1))
    return res


def control(work, label, procs):
    res = outputs(work, label, procs)
    if res is None:
        return 1
    keys = sorted({k for chosen, _ in res.values() for k in chosen}, key=int)
    differ = 0
    for key in keys:
        picks = [res[r][0].get(key) for r in range(procs)]
        same = len(set(picks)) == 1
        differ += not same
        print(f"  row_sum N={key}: " + ", ".join(f"rank {r} {p}" for r, p in enumerate(picks))
              + ("; the same in every process" if same else "; the processes DISAGREE"))
    digests = {d for _, d in res.values()}
    if differ:
        print(f"{label}: {procs} processes, {len(keys)} keys, the processes chose different configs for "
              f"{differ} of {len(keys)} keys; outputs: {len(digests)} different results in {procs} processes"
              f" (the problem: every process timed on its own)")
    else:
        print(f"{label}: {procs} processes, {len(keys)} keys, every process happened to choose the same config "
              f"for every key this time; outputs: {len(digests)} different results in {procs} processes")
    return 0


def decisions(path):
    doc = json.load(open(path))
    rows = doc.get("decisions", doc) if isinstance(doc, dict) else doc
    return {(r.get("kernel"), r.get("key")): r for r in rows}


def governed(work, label, procs):
    res = outputs(work, label, procs)
    if res is None:
        return 1
    reports = [json.load(open(f"{work}/{label}-triton-{r}.json")) for r in range(procs)]
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
        d = decided.get((kernel, key))
        by = d.get("decided_by") or {} if d else {}
        timed_by = f"rank {by.get('rank', d.get('by_rank', '?'))} pid {by.get('pid', d.get('by_pid', '?'))}" \
            if d and d.get("source", "").lower().endswith("timed") else (d.get("source", "?") if d else "undecided")
        waits = ", ".join(f"rank {u[0]} {u[4]} ms" for u in uses if u[4] not in (None, 0)) or "nobody waited"
        agree = "same config in every process" if len(configs) == 1 else f"DISAGREEMENT: {sorted(configs)}"
        print(f"  {kernel.split('@')[0]} {key}: {sorted(configs)[0]}; timed by {timed_by}; waited: {waits}; "
              f"{agree}")
        ok &= len(configs) == 1 and len(uses) == procs
    # What the script's own autotuner cache says, as in the control.
    chosen = {json.dumps(c, sort_keys=True) for c, _ in res.values()}
    if len(chosen) != 1:
        print(f"{label}: the processes' autotuners chose differently: {sorted(chosen)}")
        ok = False
    digests = {r: d for r, (_, d) in res.items()}
    same_bits = len(set(digests.values())) == 1
    print(f"{label}: {procs} processes, {len(per_key)} keys, {timed_here} timing passes, outputs "
          f"{'bit-identical in every process' if same_bits else 'DIFFER: ' + str(digests)}")
    if "rerun" in label and timed_here != 0:
        print(f"{label}: the rerun timed {timed_here} keys; expected 0")
        ok = False
    if "first" in label and timed_here > len(per_key):
        print(f"{label}: {timed_here} timing passes for {len(per_key)} keys")
        ok = False
    return 0 if ok and same_bits else 1


def main(argv):
    if argv[0] == "--control":
        return control(argv[1], argv[2], int(argv[3]))
    return governed(argv[0], argv[1], int(argv[2]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
