"""Runs every autotuner pattern of pattern_kernels.py once under detd (the
mode from $DETD_MODE) and writes what happened as JSON:

    patterns_worker.py OUT [pattern,...]

Per pattern: ``ok`` (the output equals the reference computed with torch),
``error`` (type: message, when the launch raised), ``config`` (the config
launched, from detd.autotuners()), ``best_config`` (the tuner's, after the
launch) and whether it is the very object in its cache, ``candidates``,
``bench`` (do_bench calls for this pattern), ``hooks``.
"""

import json
import os
import sys
import traceback

os.environ.setdefault("TRITON_INTERPRET", "1")

import torch  # noqa: E402

import detd  # noqa: E402
from detd import _triton  # noqa: E402

detd.install()

import pattern_kernels as pk  # noqa: E402


def _entry(name_part):
    for t in detd.autotuners():
        if t["name"].endswith(":" + name_part):
            return t
    return None


def _tuner_state(tuner):
    cache = tuner.cache
    best = getattr(tuner, "best_config", None)
    live = list(dict.values(cache)) if isinstance(cache, dict) else []
    return dict(best_config=_triton.config_string(best) if best is not None else None,
                best_in_cache=any(best is c for c in live))


def pattern(fn, kernel_name, tuner, reference_ok):
    before_calls, before_hooks = len(pk.CALLS), len(pk.HOOKS)
    out = dict(ok=False, error=None)
    try:
        out["ok"] = bool(reference_ok(fn()))
    except Exception as e:  # noqa: BLE001
        out["error"] = f"{type(e).__name__}: {e}"
        out["trace"] = traceback.format_exc()[-1500:]
    out["bench"] = len(pk.CALLS) - before_calls
    out["hooks"] = [h for h, _ in pk.HOOKS[before_hooks:]]
    e = _entry(kernel_name)
    if e is not None:
        out["governed"] = e["governed"]
        out["why"] = e["why"]
        out["keys"] = e["keys"]
        out["config"] = e["keys"][-1]["config"] if e["keys"] else None
        out["candidates"] = e["keys"][-1].get("candidates") if e["keys"] else None
    if tuner is not None:
        out.update(_tuner_state(tuner))
    return out


def main():
    path = sys.argv[1]
    only = set(sys.argv[2].split(",")) if len(sys.argv) > 2 and sys.argv[2] else None
    x = torch.arange(100, dtype=torch.float32) / 7.0
    x64 = torch.arange(64, dtype=torch.float32) / 7.0
    res = {}

    def want(name):
        return only is None or name in only

    if want("pruned"):
        res["pruned"] = pattern(lambda: pk.run_pruned(x64), "scale_pruned", pk.scale_pruned,
                                lambda o: torch.equal(o, x64 * 2.0))
    if want("perf"):
        res["perf"] = pattern(lambda: pk.run_perf(x), "scale_perf", pk.scale_perf,
                              lambda o: torch.equal(o, x * 2.0))
    if want("reset_restore"):
        inplace = torch.full((100,), 2.0)

        def acc():
            a = pk.run_accumulate(x, inplace)
            return a, inplace

        res["reset_restore"] = pattern(acc, "accumulate", pk.accumulate,
                                       lambda o: torch.equal(o[0], x) and torch.equal(o[1], torch.full((100,), 6.0)))
    if want("hooks"):
        res["hooks"] = pattern(lambda: pk.run_hooks(x), "scale_hooks", pk.scale_hooks,
                               lambda o: torch.equal(o, x * 2.0))
    if want("heuristics"):
        res["heuristics"] = pattern(lambda: pk.run_heur(x64), "scale_heur", pk.scale_heur,
                                    lambda o: torch.equal(o, x64 * 2.0))
    if want("cached"):
        res["cached"] = pattern(lambda: pk.run_cached(x), "scale_cached", pk.scale_cached,
                                lambda o: torch.equal(o, x * 2.0))
    if want("somefail"):
        res["somefail"] = pattern(lambda: pk.run_somefail(x), "scale_somefail", pk.scale_somefail,
                                  lambda o: torch.equal(o, x * 2.0))
    if want("allfail"):
        res["allfail"] = pattern(lambda: pk.run_allfail(x), "scale_allfail", pk.scale_allfail,
                                 lambda o: torch.equal(o, x * 2.0))
    if want("late"):
        late = pk.make_late_tuner()
        res["late"] = pattern(lambda: pk.run_tuner(late, x), "make_late_tuner.<locals>.scale_late", late,
                              lambda o: torch.equal(o, x * 2.0))
    if want("subclass_bypass"):
        t = pk.make_subclass_tuner(pk.FirstConfigTuner, pk.scale_bypass, "bypass")
        res["subclass_bypass"] = pattern(lambda: pk.run_tuner(t, x), "scale_bypass", t,
                                         lambda o: torch.equal(o, x * 2.0))
    if want("subclass_super"):
        t = pk.make_subclass_tuner(pk.CountingTuner, pk.scale_super, "super")
        before = pk.CountingTuner.calls
        r = pattern(lambda: [pk.run_tuner(t, x) for _ in range(3)][-1], "scale_super", t,
                    lambda o: torch.equal(o, x * 2.0))
        r["subclass_calls"] = pk.CountingTuner.calls - before
        res["subclass_super"] = r
    with open(path, "w") as f:
        json.dump(res, f)


if __name__ == "__main__":
    main()
