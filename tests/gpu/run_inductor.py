"""The Inductor GPU run: N processes on one GPU, each training a small
model under ``torch.compile(mode="max-autotune")`` (GEMM selection,
pointwise/reduction config benchmarking, coordinate descent), three
times: Inductor's default autotuning, detd run 1, detd rerun (the same
daemon and store). Prints a table and exits non-zero when a detd claim
does not hold.

    python3 tests/gpu/run_inductor.py [--procs 8] [--steps 40] [--solo-steps 200] [--solo-rounds 2]
                                      [--solo-dims D_IN,D_HID,N_CLS,BATCH] [--skip-default] [--out DIR]

Step time is compared twice: in the three runs above (8 processes
sharing the GPU, so each step also waits for the others), and alone:
--solo-rounds times one default process, then one detd process against
the decided store (it times nothing), each by itself on the GPU for
--solo-steps steps. --skip-default leaves out the 8-process default run
(the solo comparison still runs default torch.compile). The default model's
step is bound by the host's launch time; --solo-dims makes the solo runs'
model larger (GPU-bound; its keys are new, so the solo detd process times
them itself, alone on the GPU as the default process does).

Needs the detd binaries bundled by tests/gpu/bundle.sh under .gpu/ (or
DETD_BIN / DETD_LIBRARY pointing at a build); client/python is put on the
path. Checked, for detd run 1 and the rerun: no key on which processes
launched different choices; every process's losses and gradients
(every step) bit-identical, and identical between run 1 and the rerun;
in run 1 each timed key timed by exactly one process (the daemon's
timing_passes counter equal to the number of timed keys); in the rerun
no timing pass at all; ``detctl verify`` exits 0.

    python3 tests/gpu/run_inductor.py --share-compare [--legs share,no-share] [--procs 8] [--steps 5]

compares instead the cold start (run 1) of the --procs processes with the
shared pass on (``DETD_SHARE_PASS=1``: a process waiting for another's
GEMM selection precompiles a share of its choices) and off (``=0``), in
the order --legs gives: each leg with a namespace, an Inductor cache
folder and a Triton cache folder of its own, fresh and shared by its
processes (as one user's caches on a node are). Prints per leg the run-1
wall time, the processes' compile times (first step), the shares
compiled (``detd.stats()["inductor_shares"]``, and their errors), the
compile phase of the waiting processes, the daemon's timing passes and
whether every process chose the same; PASS when both legs agree on every
key and time each timed key once (the wall times are reported, not
judged).
"""

import argparse
import collections
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from run_gpu import Daemon, counter, env_for  # noqa: E402


def run_procs(n, mode, work, tag, steps, extra=None, dims=None, profile_steps=0, args=()):
    """n inductor_train.py processes at once (ranks 0..n-1, each with its
    own Inductor cache folder); their results, in rank order.
    profile_steps > 0 adds a torch.profiler pass (kernels_us); args: more
    of inductor_train.py's arguments."""
    procs = []
    for r in range(n):
        out = os.path.join(work, f"{tag}_r{r}.json")
        e = env_for({"RANK": str(r), "LOCAL_RANK": str(r), "WORLD_SIZE": str(n),
                     "TORCHINDUCTOR_CACHE_DIR": os.path.join(work, f"inductor_{tag}_r{r}"), **(extra or {})})
        log = open(os.path.join(work, f"{tag}_r{r}.log"), "w")
        procs.append((subprocess.Popen([sys.executable, os.path.join(HERE, "inductor_train.py"), "--mode", mode,
                                        "--out", out, "--steps", str(steps),
                                        *(["--dims", dims] if dims else []),
                                        *(["--profile-steps", str(profile_steps)] if profile_steps else []),
                                        *args],
                                       env=e, stdout=log,
                                       stderr=subprocess.STDOUT), out, log))
    res = []
    for p, out, log in procs:
        rc = p.wait()
        log.close()
        if rc != 0:
            sys.stdout.write(open(log.name).read()[-4000:])
            raise SystemExit(f"{tag}: process exited {rc}")
        res.append(json.load(open(out)))
    return res


def summarize(results):
    per = collections.defaultdict(set)
    timed = collections.Counter()
    for r in results:
        for k, v in r["choices"].items():
            per[k].add(v)
        timed.update(r["timed"])
    keys = len(per)
    disagree = sum(1 for v in per.values() if len(v) > 1)
    losses = len({tuple(r["losses"]) for r in results}) == 1
    grads = len({tuple(r["grads"]) for r in results}) == 1
    step = statistics.median(statistics.median(r["step_ms"]) for r in results)
    return dict(keys=keys, disagree=disagree, timing_passes=sum(timed.values()), timed=timed,
                losses_identical=losses, grads_identical=grads, step_ms=step,
                compile_s=statistics.median(r["compile_s"] for r in results))


def share_compare(a):
    """The --share-compare run (module docstring); its exit status."""
    legs = [x.strip() for x in a.legs.split(",") if x.strip()]
    bad = [x for x in legs if x not in ("share", "no-share")]
    if bad or not legs:
        raise SystemExit(f"--legs {a.legs!r}: expected share and/or no-share, comma-separated")
    work = tempfile.mkdtemp(prefix="detd-inductor-share-", dir="/tmp")
    rows = {}
    d = Daemon(os.path.join(work, "daemon"))
    try:
        for leg in legs:
            caches = os.path.join(work, f"caches-{leg}")
            extra = {"DETD_NAMESPACE": f"inductor-{leg}-{os.getpid()}", "DETD_SHARE_PASS": "1" if leg == "share" else "0",
                     "TORCHINDUCTOR_CACHE_DIR": os.path.join(caches, "inductor"),
                     "TRITON_CACHE_DIR": os.path.join(caches, "triton")}
            st0 = d.status()
            t0 = time.time()
            rs = run_procs(a.procs, "detd", work, f"share_{leg}", a.steps, extra)
            wall = time.time() - t0
            passes = counter(d.status(), "timing_passes") - counter(st0, "timing_passes")
            x = summarize(rs)
            stats = [r.get("stats") or {} for r in rs]
            timed = {k for r in rs for k, src in r["sources"].items() if src == "timed"}
            rows[leg] = dict(wall_s=wall, compile_s=[r["compile_s"] for r in rs], passes=passes, keys=x["keys"],
                             select=rs[0]["stages"].get("select", 0), disagree=x["disagree"],
                             once=passes == len(timed) and all(x["timed"][k] == 1 for k in timed),
                             shares=sum(s.get("inductor_shares", 0) for s in stats),
                             share_errors=sum(s.get("inductor_share_errors", 0) for s in stats),
                             compile_phase_s=sum((s.get("phases") or {}).get("compile", 0.0) for s in stats),
                             losses_same=x["losses_identical"])
    finally:
        rc = d.stop()
    first = rs[0]
    print(f"\n== cold start (run 1), {a.procs} processes on {first['device']}, torch {first['torch']}, "
          f"torch.compile(mode='max-autotune'), {a.steps} steps, shared pass on and off ==")
    print(f"{'leg':9s} {'run-1 wall s':>12s} {'compile s med/max':>17s} {'shares':>6s} {'errors':>6s} "
          f"{'compile phase s':>15s} {'passes':>6s} {'keys':>5s} {'select':>6s} {'agree':>5s} {'once':>5s}")
    for leg, r in rows.items():
        c = r["compile_s"]
        print(f"{leg:9s} {r['wall_s']:12.1f} {statistics.median(c):8.1f}/{max(c):<8.1f} {r['shares']:6d} "
              f"{r['share_errors']:6d} {r['compile_phase_s']:15.1f} {r['passes']:6d} {r['keys']:5d} "
              f"{r['select']:6d} {str(r['disagree'] == 0):>5s} {str(r['once']):>5s}")
    if len(rows) == 2:
        w = {k: r["wall_s"] for k, r in rows.items()}
        print(f"run-1 wall, share / no-share: {w['share'] / w['no-share']:.3f}x "
              f"({w['share'] - w['no-share']:+.1f} s)")
    checks = {"every process chose the same in each leg": all(r["disagree"] == 0 for r in rows.values()),
              "each timed key timed once in each leg": all(r["once"] for r in rows.values()),
              "losses identical across processes in each leg": all(r["losses_same"] for r in rows.values()),
              "GEMM selections governed": all(r["select"] > 0 for r in rows.values()),
              "no share compiled with the shared pass off": rows.get("no-share", {}).get("shares", 0) == 0,
              "daemon exit 0": rc == 0}
    for name, ok in checks.items():
        print(f"  {'ok ' if ok else 'FAIL'} {name}")
    ok = all(checks.values())
    print("PASS" if ok else "FAIL")
    json.dump(dict(rows=rows, checks=checks), open(os.path.join(a.out, "inductor_share.json"), "w"), indent=1)
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--procs", type=int, default=8)
    ap.add_argument("--steps", type=int, default=None, help="steps per process (default 40; 5 with --share-compare)")
    ap.add_argument("--share-compare", action="store_true",
                    help="only compare run 1 with the shared pass on and off (module docstring)")
    ap.add_argument("--legs", default="share,no-share",
                    help="with --share-compare: the legs, in order (share, no-share)")
    ap.add_argument("--solo-steps", type=int, default=200)
    ap.add_argument("--solo-rounds", type=int, default=2)
    ap.add_argument("--skip-default", action="store_true")
    ap.add_argument("--solo-dims", default="",
                    help="d_in,d_hid,n_cls,batch of the solo runs (default: the 8-process runs'); other "
                         "dims are other keys, which the solo detd process then times alone")
    ap.add_argument("--out", default=os.environ.get("OUT") or tempfile.mkdtemp(prefix="detd-inductor-"))
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    if a.share_compare:
        a.steps = 5 if a.steps is None else a.steps
        return share_compare(a)
    a.steps = 40 if a.steps is None else a.steps
    work = tempfile.mkdtemp(prefix="detd-inductor-run-", dir="/tmp")
    n = a.procs
    runs, walls = {}, {}
    d = Daemon(os.path.join(work, "daemon"))
    try:
        # The default run only lists Inductor's own choices (detd's auto
        # mode), in a namespace of its own.
        if not a.skip_default:
            t0 = time.time()
            runs["default"] = run_procs(n, "default", work, "default", a.steps, {"DETD_NAMESPACE": "inductor-default"})
            walls["default"] = time.time() - t0
        st0 = d.status()
        t0 = time.time()
        runs["detd run1"] = run_procs(n, "detd", work, "detd1", a.steps)
        walls["detd run1"] = time.time() - t0
        st1 = d.status()
        t0 = time.time()
        runs["detd rerun"] = run_procs(n, "detd", work, "detd2", a.steps)
        walls["detd rerun"] = time.time() - t0
        st2 = d.status()
        solo = []  # (default, detd) per round
        for i in range(a.solo_rounds if a.solo_steps > 0 else 0):
            sd = run_procs(1, "default", work, f"solo_default{i}", a.solo_steps,
                           {"DETD_NAMESPACE": f"inductor-solo{i}"}, dims=a.solo_dims)[0]
            sx = run_procs(1, "detd", work, f"solo_detd{i}", a.solo_steps, dims=a.solo_dims)[0]
            solo.append((sd, sx))
        st3 = d.status()
        v = d.detctl("verify")
        dec = d.detctl("decisions")
    finally:
        rc = d.stop()

    s = {k: summarize(r) for k, r in runs.items()}
    base = s["default"]["step_ms"] if "default" in s else None
    first = next(iter(runs.values()))[0]
    print(f"\n== {n} processes on {first['device']}, torch {first['torch']}, "
          f"torch.compile(mode='max-autotune'), {a.steps} steps ==")
    print(f"{'run':11s} {'keys':>5s} {'disagree':>8s} {'timing passes':>13s} {'losses same':>11s} "
          f"{'grads same':>10s} {'step ms':>8s} {'vs default':>10s} {'compile s':>9s} {'wall s':>7s}")
    for name, x in s.items():
        print(f"{name:11s} {x['keys']:5d} {x['disagree']:8d} {x['timing_passes']:13d} "
              f"{str(x['losses_identical']):>11s} {str(x['grads_identical']):>10s} {x['step_ms']:8.3f} "
              f"{(x['step_ms'] / base - 1) * 100 if base else float('nan'):+9.2f}% {x['compile_s']:9.1f} "
              f"{walls[name]:7.1f}")
    r1, r2 = runs["detd run1"], runs["detd rerun"]
    same_runs = r1[0]["losses"] == r2[0]["losses"] and r1[0]["grads"] == r2[0]["grads"]
    passes1 = counter(st1, "timing_passes") - counter(st0, "timing_passes")
    passes2 = counter(st2, "timing_passes") - counter(st1, "timing_passes")
    timed_keys = {k for r in r1 for k, src in r["sources"].items() if src == "timed"}
    once = all(s["detd run1"]["timed"][k] == 1 for k in timed_keys)
    src = collections.Counter(v for r in r1 for v in r["sources"].values())
    print(f"detd run1 vs rerun: losses and gradients bit-identical {same_runs}")
    print(f"detd run1: {len(timed_keys)} timed keys, each timed by exactly one process: {once}; "
          f"daemon timing passes run1 {passes1}, rerun {passes2}; sources {dict(src)}")
    if "default" in runs:
        print(f"default vs detd run1 losses identical: {runs['default'][0]['losses'] == r1[0]['losses']}")
    print(f"detctl verify exit {v.returncode}; daemon exit {rc}")
    print(f"inductor status (detd run1): {r1[0]['status']}")
    for name, rs in runs.items():
        print(f"{name}: keys by stage {rs[0]['stages']}; selections {(rs[0]['status'] or {}).get('selections')}")
        if any(r.get("stats") for r in rs):  # the selections' precompiles, summed over processes
            print(f"{name}: " + ", ".join(f"{f} {sum((r.get('stats') or {}).get(f, 0) for r in rs)}" for f in (
                "inductor_precompiles_skipped", "inductor_failed_here", "inductor_lost_used",
                "inductor_precompiles_deferred", "inductor_deferred_compiled", "early_claims", "early_passed_on")))
    solo_ratio = None
    if solo:
        print(f"alone on the GPU, {a.solo_steps} steps per process, dims {a.solo_dims or 'as above'}, median "
              f"step ms (detd timing passes here: {counter(st3, 'timing_passes') - counter(st2, 'timing_passes')}):")
        sums = [0.0, 0.0]
        for i, (pd, px) in enumerate(solo):
            sd, sx = statistics.median(pd["step_ms"]), statistics.median(px["step_ms"])
            sums[0] += sd
            sums[1] += sx
            print(f"  round {i + 1}: default {sd:.4f} ms, detd {sx:.4f} ms ({(sx / sd - 1) * 100:+.2f}%)")
        solo_ratio = sums[1] / sums[0]
        print(f"  all rounds: detd {(solo_ratio - 1) * 100:+.2f}% against default torch.compile")
    checks = {
        "solo step time within 1% of default": solo_ratio is not None and solo_ratio <= 1.01,
        "no disagreement (detd run1, rerun)": s["detd run1"]["disagree"] == 0 and s["detd rerun"]["disagree"] == 0,
        "losses/grads identical across processes (detd)": all(
            s[k]["losses_identical"] and s[k]["grads_identical"] for k in ("detd run1", "detd rerun")),
        "run1 == rerun": same_runs,
        "one timing pass per timed key": once and passes1 == len(timed_keys) and len(timed_keys) > 0,
        "rerun times nothing": passes2 == 0 and s["detd rerun"]["timing_passes"] == 0,
        "inductor governed": r1[0]["status"] is not None and r1[0]["status"]["status"] == "governed",
        "detctl verify": v.returncode == 0,
        "GEMM selections decided by detd": r1[0]["stages"].get("select", 0) > 0,
    }
    for name, ok in checks.items():
        print(f"  {'ok ' if ok else 'FAIL'} {name}")
    summary = {k: {kk: vv for kk, vv in x.items() if kk != "timed"} for k, x in s.items()}
    summary.update(checks=checks, daemon_timing_passes_run1=passes1, daemon_timing_passes_rerun=passes2,
                   walls=walls, solo_ratio=solo_ratio, stages={k: r[0]["stages"] for k, r in runs.items()},
                   verify=v.stdout[-2000:], decisions=dec.stdout[-6000:])
    json.dump(summary, open(os.path.join(a.out, "inductor_summary.json"), "w"), indent=1)
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
