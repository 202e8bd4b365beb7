"""What the near-best re-measure of a timing pass buys, replayed from the
samples a run kept: run_coldstart.py's ``decisions.json`` (``detctl
decisions --json`` after run 1). For every timed key whose near-best were
re-measured (:data:`detd._measure.RECHECK_ROUNDS` more measurements each),
the daemon's winner rule (lowest median; inside ``WINNER_EPSILON`` of it,
the smallest config string) is applied to the first measurement alone
(no re-measure) and to the first plus one round (one round), and the
winner compared with the one all the samples give. A changed winner is
judged by the measurements the variant did not use (its held-out rounds):
the variant's pick's held-out median over the full rule's pick's. Also
counted: the keys a clear-lead rule with ``DETD_RECHECK_CLEAR=0`` would
not have re-measured (:func:`detd._measure.clear_lead` on the first
measurements), and the keys where the full rule's winner is not the
recorded one (the replay misread the samples; 0 expected). Runs on any
machine; prints one table.

    python3 tests/gpu/replay_recheck.py /tmp/detd-coldstart-*/decisions.json
"""

import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
try:
    import detd  # noqa: F401 - installed, or on PYTHONPATH
except ImportError:
    sys.path.insert(0, os.path.join(HERE, "..", "..", "client", "python"))

from detd import _loop, _measure, _samples  # noqa: E402


def winner(medians):
    """The daemon's winner rule (daemon/core/engine_winner.c) on
    config -> median."""
    best = min(medians.values())
    bound = best + best * _loop.WINNER_EPSILON
    return min(c for c, m in medians.items() if m <= bound)


def replay_key(dec):
    """One decision: None where nothing was re-measured (or it was not
    timed), else a dict: per variant the winner and, where it differs from
    the full rule's, the held-out ratio (None: not judged); whether the
    clear-lead rule at 0 would skip it; whether the full rule gives the
    recorded config."""
    if dec.get("source") != "timed":
        return None
    t = {x["config"]: [float(v) for v in x["ms"]] for x in dec.get("timings", [])
         if not x.get("failed") and x.get("ms")}
    if not t:
        return None
    g = min(len(ms) for ms in t.values())  # samples per measurement (Triton's quantiles: 3)
    rounds = _measure.RECHECK_ROUNDS
    again = [c for c, ms in t.items() if len(ms) == g * (1 + rounds)]
    if not again or any(len(ms) not in (g, g * (1 + rounds)) for ms in t.values()):
        return None
    full = winner({c: _samples.median(ms) for c, ms in t.items()})
    out = {"recorded": full == dec.get("config")}
    for name, used in (("none", g), ("one", 2 * g)):
        w = winner({c: _samples.median(ms[:used]) for c, ms in t.items()})
        ratio = None
        if w != full and w in again and full in again:
            ratio = _samples.median(t[w][used:]) / _samples.median(t[full][used:])
        out[name] = (w != full, ratio)
    first = {c: _samples.median(ms[:g]) for c, ms in t.items()}
    spreads = {c: sp for c, sp in ((c, _measure.spread(ms[:g])) for c, ms in t.items()) if sp is not None}
    out["clear0_skips"] = _measure.clear_lead(again, first, spreads, 0.0)
    return out


def replay(path):
    """The table row of one decisions.json."""
    with open(path) as f:
        decs = json.load(f)["decisions"]
    keys = [k for k in (replay_key(d) for d in decs) if k is not None]
    row = {"file": path, "decisions": len(decs), "remeasured": len(keys),
           "clear0_skips": sum(k["clear0_skips"] for k in keys),
           "misread": sum(not k["recorded"] for k in keys)}
    for name in ("none", "one"):
        changed = [k[name][1] for k in keys if k[name][0]]
        judged = [r for r in changed if r is not None]
        row[name] = (len(changed), max(judged) if judged else None, sum(r > 1 + _loop.WINNER_EPSILON for r in judged))
    return row


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("decisions", nargs="+", help="decisions.json files (detctl decisions --json)")
    a = ap.parse_args(argv)
    rows = [replay(p) for p in a.decisions]
    print("| decisions.json | timed keys re-measured | skipped at DETD_RECHECK_CLEAR=0 | no re-measure: winners "
          "changed / worst held-out ratio / over 1.01x | one round: winners changed / worst / over 1.01x | misread |")
    print("|---|---|---|---|---|---|")

    def cell(v):
        n, worst, over = v
        return f"{n} / {'-' if worst is None else f'{worst:.4f}x'} / {over}"

    for r in rows:
        print(f"| {r['file']} | {r['remeasured']} of {r['decisions']} | {r['clear0_skips']} | {cell(r['none'])} | "
              f"{cell(r['one'])} | {r['misread']} |")
    return 1 if any(r["misread"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
