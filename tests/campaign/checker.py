"""The history checker of the fault campaign: pure functions over one
schedule's recorded history, no I/O.

A run (what harness.py records for one schedule) is a dict:

    seed, kind ("local" | "etcd"), tolerance_ms, pass_bound_ms
    records   every JSON line the client processes wrote (campaign_client.c):
              {"ev": "answer", "op": "decide"|"report", "kernel", "key",
               "cands", "outcome", "config", "errname", "start", "end",
               "deadline_ms", "pid", "daemon"}, {"ev": "died", "reason"},
              {"ev": "fallback"}, {"ev": "exit"}
    procs     one per client process: {"pid", "daemon", "rank",
              "exit_code", "killed" (a scheduled kill -9), "hung" (still
              running when the schedule ended and its budget was spent)}
    stores    {daemon: {"<kernel>\\n<key>": config} or None (unreadable)},
              read after the schedule healed everything
    faults    [{"fault", "target", "start", "end"}] in CLOCK_MONOTONIC
              seconds, the realized schedule

check(run) proves, over the whole history:
  one-config   per key at most one config was ever answered DECIDED (a
               Decide's DECIDED answer or a Report's committed answer),
               across every client, daemon and restart
  durable      every acknowledged decision is in every daemon's store
               afterwards, with the same config
  candidate    every answered config is one of the asker's own candidates
  wait-bound   no call ran past its deadline (end - start <= deadline +
               tolerance), no call ended without an answer from the daemon
               (DETD_ETIMEDOUT: the answer did not leave before the
               deadline), and no waiter was told TIMEOUT after waiting
               longer than the pass bound (a timing pass may hold a key
               only that long before the claim passes on), except while
               an etcd member was down (leader elections extend leases)
  client-died  every client process ended by itself with status 0, or by
               a scheduled kill; a process that died (on_miss=error after
               the daemon failed it) or hung is a finding
and returns {"answers": n, "violations": [...], "excused": n}; each
violation names its property, the key and the evidence.
"""

DECIDED_OPS = ("decide", "report")


def key_of(rec):
    return f"{rec['kernel']}\n{rec['key']}"


def acknowledged(rec):
    """True for an answer that hands the client a committed config."""
    if rec.get("ev") != "answer" or rec.get("outcome") == "error":
        return False
    if rec.get("op") == "decide":
        return rec.get("outcome") == "decided" and rec.get("config") is not None
    if rec.get("op") == "report":
        return rec.get("config") is not None
    return False


def _brief(rec):
    return {k: rec.get(k) for k in ("op", "outcome", "config", "pid", "daemon", "start", "end",
                                     "deadline_ms", "errname") if rec.get(k) is not None}


def _overlaps(faults, kinds, t0, t1, after=0.0):
    for f in faults:
        if f["fault"] in kinds and f["start"] <= t1 and (f.get("end") or t1) + after >= t0:
            return f
    return None


def check(run):
    seed = run.get("seed")
    tol = run.get("tolerance_ms", 250) / 1000.0
    pass_bound = run.get("pass_bound_ms")
    faults = run.get("faults", [])
    answers = [r for r in run.get("records", []) if r.get("ev") == "answer"]
    violations = []
    excused = 0

    def violate(prop, key, msg, evidence):
        violations.append({"seed": seed, "property": prop, "key": key, "message": msg,
                           "evidence": evidence})

    # one-config
    by_key = {}
    for r in answers:
        if acknowledged(r):
            by_key.setdefault(key_of(r), {}).setdefault(r["config"], []).append(r)
    for k, configs in sorted(by_key.items()):
        if len(configs) > 1:
            violate("one-config", k, f"{len(configs)} configs answered DECIDED for one key",
                    [_brief(sorted(rs, key=lambda x: x["end"])[0]) | {"answers": len(rs)}
                     for _, rs in sorted(configs.items())])

    # durable
    stores = run.get("stores", {})
    for k, configs in sorted(by_key.items()):
        for cfg, rs in sorted(configs.items()):
            for d, st in sorted(stores.items()):
                if st is None:
                    continue
                have = st.get(k)
                if have != cfg:
                    what = "missing" if have is None else f"holds {have!r}"
                    violate("durable", k, f"acknowledged {cfg!r} but daemon {d}'s store {what}",
                            [_brief(rs[0]), {"daemon": d, "store": have}])
    for d, st in sorted(stores.items()):
        if st is None:
            violate("durable", None, f"daemon {d}'s store could not be read after the schedule", [])

    # candidate
    for r in answers:
        cfg = r.get("config")
        if r.get("outcome") != "error" and cfg is not None and cfg not in r.get("cands", []):
            violate("candidate", key_of(r), f"answered {cfg!r}, not one of the asker's candidates",
                    [_brief(r) | {"cands": r.get("cands")}])

    # wait-bound (a process the schedule itself stopped is not judged on
    # the calls it had in flight while stopped)
    stops = [f for f in faults if f["fault"] == "hang"]
    for r in answers:
        if any(f.get("pid") == r.get("pid") and f["start"] <= r["end"]
               and (f.get("end") or r["end"]) >= r["start"] for f in stops):
            excused += 1
            continue
        wait = r["end"] - r["start"]
        dl = r["deadline_ms"] / 1000.0
        if wait > dl + tol:
            violate("wait-bound", key_of(r), f"waited {wait:.3f} s with a deadline of {dl:.3f} s",
                    [_brief(r)])
        elif r.get("errname") == "DETD_ETIMEDOUT":
            violate("wait-bound", key_of(r),
                    f"no answer within the deadline ({wait:.3f} s of {dl:.3f} s: DETD_ETIMEDOUT)",
                    [_brief(r)])
        elif (r.get("outcome") == "timeout" and pass_bound is not None
              and wait > pass_bound / 1000.0 + tol):
            f = _overlaps(faults, ("etcd_kill",), r["start"], r["end"], after=3.0)
            if f is not None:
                excused += 1
                continue
            holder = _overlaps(faults, ("hang",), r["start"], r["end"])
            note = f"; a hung rank overlapped: {holder}" if holder else ""
            violate("wait-bound", key_of(r),
                    f"told TIMEOUT after {wait:.3f} s although a pass may hold a key only "
                    f"{pass_bound / 1000.0:.3f} s{note}", [_brief(r)])

    # client-died
    died = {}
    for r in run.get("records", []):
        if r.get("ev") == "died":
            died[r.get("pid")] = r
    for p in run.get("procs", []):
        if p.get("killed"):
            continue
        if p.get("hung"):
            violate("client-died", None, f"client pid {p['pid']} ({p.get('daemon')}) still waiting "
                    "after its whole budget: hung", [p])
        elif p.get("exit_code") not in (0,):
            why = died.get(p["pid"], {}).get("reason", "no record")
            violate("client-died", died.get(p["pid"], {}).get("key"),
                    f"client pid {p['pid']} ({p.get('daemon')}) died with status "
                    f"{p.get('exit_code')}: {why}", [p])

    return {"seed": seed, "answers": len(answers), "violations": violations, "excused": excused}


def format_violation(v):
    lines = [f"seed {v['seed']}: {v['property']}: {v['message']}"
             + (f" [key {v['key']!r}]" if v.get("key") else "")]
    for e in v["evidence"]:
        lines.append(f"    {e}")
    return "\n".join(lines)
