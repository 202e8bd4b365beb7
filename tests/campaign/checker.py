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
               deadline; a call whose whole deadline is below the
               tolerance excepted), and no waiter was told TIMEOUT after waiting
               longer than the pass bound (a timing pass may hold a key
               only that long before the claim passes on) plus what the
               faults overlapping its call cost it (fault_cost below: a
               killed claim holder's daemon holds the key until its node
               lease ends, the waiter's own daemon restarting holds the
               call), except while an etcd member was down (leader
               elections extend leases) or a daemon was cut off from etcd
               (partition: no node learns or commits a decision through
               it), and 3 s after
  client-died  every client process ended by itself with status 0, or by
               a scheduled kill; a process that died (on_miss=error after
               the daemon failed it) or hung is a finding, unless the
               faults it met while deciding that key cost more than its
               budget (fault_cost below: what the design promises each
               fault costs a waiter at most); such a death is counted as
               "over budget", with the costs, never silently
and returns {"answers": n, "violations": [...], "excused": n,
"over_budget": [...]}; each violation names its property, the key and the
evidence.

The promise the client-died property checks, per key: a process whose
budget (the hook's timeout_ms; deadline_ms here) is larger than the sum of
what the faults it meets cost, plus one timing pass, gets a config. What
a fault costs a waiter at most:
  hang of the process itself       the time it was stopped
  hang of the rank timing the key  the pass bound (the claim passes on)
  client_kill of that rank         one lease (its session or node lease)
  daemon_kill / daemon_term        the planned down time + RESTART_S (the
                                   new daemon serves and the client has
                                   reattached); the drain is not excused
  owner_kill (the claim holder's   the same, plus one lease (its claims
  daemon)                          go with its node lease)
  etcd_kill of a follower          the planned down time + one lease
  etcd_kill of the leader          the longer of the down time and the
                                   election (2 election timeouts: no write
                                   commits until a follower's randomized
                                   timer fires and a new leader is elected)
                                   + one etcd call attempt (a write the
                                   followers forwarded to the dead leader
                                   before they noticed is lost without an
                                   answer; the call retries when its attempt
                                   times out) + one lease
  partition                        its duration + one lease
Faults count when they overlap the key's attempts (first attempt to the
death); daemon faults count for the process's own daemon, or for any
daemon under etcd (its claims hold keys for every node).
"""

# A restarted daemon serves and its clients reattach within this (s).
RESTART_S = 0.5
# One timing pass and the calls around it (s): the campaign's passes are
# at most 300 ms.
PASS_S = 0.5
# The daemon's etcd calls time out an attempt after this (s) and retry
# (CLUSTER_ATTEMPT_MS in daemon/cluster/cluster_int.h).
ETCD_ATTEMPT_S = 1.0
# etcd's election timeout when the run does not say (ms).
ELECTION_MS = 1000

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


def _during(f, t0, t1, after=0.0):
    """Whether fault f overlaps [t0, t1] (a fault not ended yet lasts to
    t1), or ended at most ``after`` seconds before t0."""
    return f["start"] <= t1 and (f.get("end") or t1) + after >= t0


def _overlaps(faults, kinds, t0, t1, after=0.0):
    for f in faults:
        if f["fault"] in kinds and _during(f, t0, t1, after):
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
    procs = {p.get("pid"): p for p in run.get("procs", [])}
    for r in answers:
        if any(f.get("pid") == r.get("pid") and _during(f, r["start"], r["end"]) for f in stops):
            excused += 1
            continue
        wait = r["end"] - r["start"]
        dl = r["deadline_ms"] / 1000.0
        if wait > dl + tol:
            violate("wait-bound", key_of(r), f"waited {wait:.3f} s with a deadline of {dl:.3f} s",
                    [_brief(r)])
        elif r.get("errname") == "DETD_ETIMEDOUT" and dl > tol:
            # (A call whose whole deadline is shorter than the tolerance, the
            # last moments of a spent budget, is answered at its deadline
            # and that answer may arrive within the tolerance: after the
            # client gave up. Not a finding.)
            violate("wait-bound", key_of(r),
                    f"no answer within the deadline ({wait:.3f} s of {dl:.3f} s: DETD_ETIMEDOUT)",
                    [_brief(r)])
        elif (r.get("outcome") == "timeout" and pass_bound is not None
              and wait > pass_bound / 1000.0 + tol):
            # etcd itself slowed (a member down: leader elections extend
            # leases) or a daemon cut off from it (it cannot learn a
            # decision, or commit one, until the watch is back)
            f = _overlaps(faults, ("etcd_kill", "partition"), r["start"], r["end"], after=3.0)
            if f is not None:
                excused += 1
                continue
            # what the faults during the call cost this waiter at most (a
            # killed claim holder, its own daemon down and restarting)
            proc = procs.get(r.get("pid")) or {"pid": r.get("pid"), "daemon": r.get("daemon")}
            cost = sum(c for _, c in costs_during(run, proc, r.get("key"), r["start"], r["end"], answers))
            if cost > 0 and wait <= pass_bound / 1000.0 + cost + tol:
                excused += 1
                continue
            holder = _overlaps(faults, ("hang",), r["start"], r["end"])
            note = f"; a hung rank overlapped: {holder}" if holder else ""
            if cost > 0:
                note += f"; the faults during the call cost it at most {cost:.3f} s"
            violate("wait-bound", key_of(r),
                    f"told TIMEOUT after {wait:.3f} s although a pass may hold a key only "
                    f"{pass_bound / 1000.0:.3f} s{note}", [_brief(r)])

    # client-died
    died = {}
    for r in run.get("records", []):
        if r.get("ev") == "died":
            died[r.get("pid")] = r
    over_budget = []
    for p in run.get("procs", []):
        if p.get("killed"):
            continue
        if p.get("hung"):
            violate("client-died", None, f"client pid {p['pid']} ({p.get('daemon')}) still waiting "
                    "after its whole budget: hung", [p])
        elif p.get("exit_code") not in (0,):
            d = died.get(p["pid"], {})
            why = d.get("reason", "no record")
            costs = met_faults(run, p, d, answers)
            budget = run.get("deadline_ms")
            spent = sum(c for _, c in costs)
            if costs and budget is not None and spent + PASS_S >= budget / 1000.0:
                over_budget.append({"seed": seed, "pid": p["pid"], "key": d.get("key"),
                                    "budget_s": budget / 1000.0, "fault_cost_s": round(spent, 3),
                                    "faults": [f["fault"] for f, _ in costs]})
                continue
            note = (f"; the faults it met cost {spent:.3f} s of its {budget / 1000.0:.3f} s budget: "
                    f"{[(f['fault'], round(c, 3)) for f, c in costs]}") if budget is not None else ""
            violate("client-died", d.get("key"),
                    f"client pid {p['pid']} ({p.get('daemon')}) died with status "
                    f"{p.get('exit_code')}: {why}{note}", [p])

    return {"seed": seed, "answers": len(answers), "violations": violations, "excused": excused,
            "over_budget": over_budget}


def _timing_key(answers, pid, before):
    """The key a process was last designated for before a time."""
    best = None
    for r in answers:
        if (r.get("pid") == pid and r.get("op") == "decide" and r.get("outcome") == "designated"
                and r["end"] <= before and (best is None or r["end"] > best["end"])):
            best = r
    return best.get("key") if best else None


def fault_cost(run, f, proc, key=None, answers=()):
    """What fault f costs a process waiting for key at most (seconds; see
    the module's promise), or 0 when it cannot hold that key. A stopped or
    killed timing rank counts only when the key it was timing is this
    key."""
    lease = run.get("lease_ms", 1000) / 1000.0
    pass_bound = run.get("pass_bound_ms", 2000) / 1000.0
    kind = f["fault"]
    if kind == "hang":
        if f.get("pid") == proc.get("pid"):
            return max(0.0, (f.get("end") or f["start"]) - f["start"])
        if not f.get("designated") or _timing_key(answers, f.get("pid"), f["start"]) != key:
            return 0.0
        return pass_bound
    if kind == "client_kill":
        if not f.get("mid_pass") or _timing_key(answers, f.get("pid"), f["start"]) != key:
            return 0.0
        return lease
    if kind in ("daemon_kill", "daemon_term"):
        if f.get("daemon") != proc.get("daemon") and run.get("kind") != "etcd":
            return 0.0
        return f.get("down", 0.0) + RESTART_S
    if kind == "owner_kill":
        # Its claims hold the keys until its node lease expires (a
        # restart revokes it sooner), then a waiter's re-check takes over.
        return f.get("down", 0.0) + RESTART_S + lease
    if kind == "etcd_kill":
        down = f.get("down", 0.0)
        if f.get("leader", True):  # unknown counts as the leader
            election = 2 * run.get("election_ms", ELECTION_MS) / 1000.0
            down = max(down, election) + ETCD_ATTEMPT_S
        return down + lease
    if kind == "partition":
        return f.get("dur", 0.0) + lease
    return 0.0


def met_faults(run, proc, died, answers):
    """[(fault, cost)] for the faults that overlap the attempts at the key
    a process died on (its first attempt to its death)."""
    key, pid = died.get("key"), proc.get("pid")
    starts = [r["start"] for r in answers if r.get("pid") == pid and r.get("key") == key]
    if not starts or died.get("t") is None:
        return []
    return costs_during(run, proc, key, min(starts), died["t"], answers)


def costs_during(run, proc, key, t0, t1, answers):
    """[(fault, cost)] for the faults overlapping [t0, t1] that cost a
    process waiting for key anything (:func:`fault_cost`)."""
    out = []
    for f in run.get("faults", []):
        if _during(f, t0, t1):
            c = fault_cost(run, f, proc, key, answers)
            if c > 0:
                out.append((f, c))
    return out


def format_violation(v):
    lines = [f"seed {v['seed']}: {v['property']}: {v['message']}"
             + (f" [key {v['key']!r}]" if v.get("key") else "")]
    for e in v["evidence"]:
        lines.append(f"    {e}")
    return "\n".join(lines)
