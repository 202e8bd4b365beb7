"""Seeded fault schedules: generate(seed) is a pure function of the seed
(and the profile), so `--seed N` replays exactly the same schedule.

A schedule is a dict:
    seed, kind ("local": one daemon, SQLite authority; "etcd": 2-3 daemons
    on one 3-member etcd cluster through proxies), daemons, lease_ms,
    deadline_ms, duration (s), clients: [{"id", "daemon", "wave", "start",
    "keys", "order_seed", "on_miss", "pass_ms"}], events (sorted by "t"):
      client_kill  {"client"}                  kill -9 mid-pass, then a
                                               replacement process
      daemon_kill  {"daemon", "down"}          kill -9, restart after down s
      daemon_term  {"daemon", "down"}          SIGTERM (an upgrade), restart
      hang         {"pick", "dur", "then"}     SIGSTOP the next designated
                                               client, then "cont" or "kill"
      etcd_kill    {"member", "down"}          kill -9 an etcd member, restart
      partition    {"daemon", "dur", "mode"}   daemon <-> etcd cut by its
                                               proxies ("drop" | "blackhole")
      owner_kill   {"pick", "down"}            kill -9 the daemon of the next
                                               designated client (its node
                                               holds the key's claim: the
                                               key's owner, normally),
                                               restart after down s
      partial      {"daemons", "clients",      new clients on those daemons
                    "keys", "order_seed"}      only (never all of them) ask
                                               keys of their own kernel: a
                                               key whose owner never meets it
The last two (one claimant per key) are drawn from a second stream of
the seed, so the schedules drawn before they existed are unchanged.
"""

import json
import random

FAULTS_LOCAL = ("client_kill", "daemon_kill", "daemon_term", "hang")
FAULTS_ETCD = FAULTS_LOCAL + ("etcd_kill", "partition")
FAULTS_CLAIMANT = ("owner_kill", "partial")

PROFILES = {
    # CI: a few seconds per schedule on 2 cores
    "short": {"duration": (2.5, 3.5), "clients": (3, 4), "keys": (3, 5), "faults": (1, 3),
              "pass_ms": (60, 200), "deadline_ms": 3000, "lease_ms": 1000},
    # the long script: a little more of everything
    "long": {"duration": (4.0, 6.0), "clients": (4, 6), "keys": (4, 7), "faults": (2, 5),
             "pass_ms": (60, 300), "deadline_ms": 4000, "lease_ms": 1000},
}


def generate(seed, profile="short", kind=None):
    p = PROFILES[profile]
    rnd = random.Random(f"detd-campaign/{profile}/{seed}")
    if kind is None:
        kind = "etcd" if rnd.random() < 0.5 else "local"
    daemons = 1 if kind == "local" else rnd.choice((2, 3))
    duration = round(rnd.uniform(*p["duration"]), 2)
    nclients = rnd.randint(*p["clients"])
    clients = []
    for i in range(nclients):
        # two waves: the second meets fresh keys while faults are running
        wave = 0 if i < (nclients + 1) // 2 else 1
        clients.append({
            "id": i, "daemon": i % daemons, "wave": wave,
            "start": round(rnd.uniform(0, 0.3) + (duration * 0.45 if wave else 0), 3),
            "keys": rnd.randint(*p["keys"]), "order_seed": rnd.randrange(1 << 30),
            "on_miss": rnd.choice(("error", "error", "first")),
            "pass_ms": rnd.randint(*p["pass_ms"]),
        })
    events = []
    kinds = FAULTS_LOCAL if kind == "local" else FAULTS_ETCD
    for _ in range(rnd.randint(*p["faults"])):
        f = rnd.choice(kinds)
        t = round(rnd.uniform(0.2, duration * 0.8), 3)
        if f == "client_kill":
            e = {"client": rnd.randrange(nclients)}
        elif f in ("daemon_kill", "daemon_term"):
            e = {"daemon": rnd.randrange(daemons), "down": round(rnd.uniform(0.1, 1.0), 3)}
        elif f == "hang":
            e = {"pick": rnd.randrange(1 << 16), "dur": round(rnd.uniform(2.0, 4.5), 3),
                 "then": rnd.choice(("cont", "kill"))}
        elif f == "etcd_kill":
            e = {"member": rnd.randrange(3), "down": round(rnd.uniform(0.3, 1.5), 3)}
        else:
            e = {"daemon": rnd.randrange(daemons), "dur": round(rnd.uniform(0.5, 2.0), 3),
                 "mode": rnd.choice(("drop", "blackhole"))}
        events.append({"t": t, "fault": f, **e})
    if kind == "etcd":
        events += claimant_events(seed, profile, daemons, duration, p)
    events.sort(key=lambda e: (e["t"], e["fault"]))
    return {"seed": seed, "profile": profile, "kind": kind, "daemons": daemons,
            "lease_ms": p["lease_ms"], "deadline_ms": p["deadline_ms"], "duration": duration,
            "clients": clients, "events": events}


def claimant_events(seed, profile, daemons, duration, p):
    """The owner_kill and partial events of an etcd schedule (each in
    about 4 schedules of 10), from their own stream of the seed."""
    rnd = random.Random(f"detd-campaign/{profile}/{seed}/claimant")
    out = []
    if rnd.random() < 0.4:
        out.append({"t": round(rnd.uniform(0.2, duration * 0.6), 3), "fault": "owner_kill",
                    "pick": rnd.randrange(1 << 16), "down": round(rnd.uniform(0.1, 1.0), 3)})
    if rnd.random() < 0.4:
        left_out = rnd.randrange(daemons)
        out.append({"t": round(rnd.uniform(0.1, duration * 0.5), 3), "fault": "partial",
                    "daemons": [d for d in range(daemons) if d != left_out],
                    "clients": rnd.randint(1, 2), "keys": rnd.randint(*p["keys"]),
                    "order_seed": rnd.randrange(1 << 30),
                    "pass_ms": rnd.randint(*p["pass_ms"])})
    return out


if __name__ == "__main__":
    import sys
    print(json.dumps(generate(int(sys.argv[1]), *(sys.argv[2:3] or ["short"])), indent=1))
