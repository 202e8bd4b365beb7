"""The cold-start run: N processes on one GPU meeting every key cold under
detd (run 1, fresh store and TRITON_CACHE_DIR), where run 1's time went,
the floor it is measured against, the rerun, and default Triton's run 1.

    python3 tests/gpu/run_coldstart.py [--procs 8] [--keys suite|mamba] [--no-fla]
        [--out DIR] [--before] [--env NAME=VALUE ...] [--default-cap S | --no-default] [--quiet-chain]

The key set (``--keys``, kernels.py): ``suite`` (the default), the suite's
row sums and matmuls and FLA's ``chunk_gated_delta_rule`` (``--no-fla``
leaves FLA out); ``mamba``, mamba_ssm 2.3.2.post1's autotuned Triton
kernels at a Mamba2 layer's sizes (batch 2, 2048 tokens, 64 heads of 64,
d_state 128, chunk 256, bf16; d_model 2048): the chunked scan
(``mamba_chunk_scan_combined``) and the fused add + RMSNorm, forward and
backward, from .pkgsrc/mamba_ssm (fetch_packages.sh; found there without
PYTHONPATH, pkg_worker.setup_paths; it needs einops).

In one call:

1. detd run 1: N processes at once (``DETD_PHASES`` on), then the rerun
   against the same store and cache (nothing timed).
2. Run 1 split into phases (``detd.stats()["phases"]``, detd/_phases.py):
   compile, benchmark (first measurement), re-measure, waiting for another
   rank, daemon calls, other; summed over the processes, and on the
   critical path: for each key, the resolve of the rank that timed it.
   Outside detd: each process's workload time less its time in detd.
3. The floor: one default-Triton process on run 1's warm cache benchmarks
   every candidate once with the tuner's own settings, each compiled first
   and timed apart (``worker.py --floor``): the sum of the benchmarker's
   cost per candidate; plus the longest compile chain on this node's
   cores: per key, its compiles' total work in run 1 (every process,
   helpers' shares included) over the cores, or its longest single
   compile, whichever is larger, summed over the keys (keys are met one
   after another). The same process times the chosen configs against its
   own fresh autotune (kernel time, target 1.01x).
4. Default Triton's run 1: N processes, fresh TRITON_CACHE_DIR, no detd,
   cut at ``--default-cap`` seconds (default 150; a cut run reports how
   many keys its median process had tuned).
5. With ``--quiet-chain``, before the default run: one default-Triton
   process on a fresh cache, alone on the node, compiles each candidate
   just before its benchmark (``worker.py --floor``), so each compile is
   made alone; the longest of each key, summed, is the compile chain with
   a core for every candidate (a key's pass cannot end before its slowest
   candidate is compiled, and keys are met one after another). With
   default Triton's full run 1, it prints what that chain leaves of the
   run 1 that the 5x target allows.

``--before`` runs detd as it behaved before the cuts:
``DETD_RECHECK_CLEAR=off``, ``DETD_COMPILE_AHEAD=0``, ``DETD_SCREEN=off``,
``DETD_COMPILE_NICE=0`` and ``DETD_SHARE_PASS=0`` (the shares of earlier releases compiled nothing:
their ``warmup`` call raised, see docs/gpu-results.md); ``--env`` passes any setting to the detd
processes (e.g. ``--env DETD_COMPILE_AHEAD=8``, ``--env DETD_SHARE_PASS=0``).
Prints a table and PASS or FAIL: every process succeeds, all ranks launch
the same config per entry, one timing pass per key, nothing timed in the
rerun, each process's phases sum to its time in detd, and the chosen
configs' kernel time within 1.01x of the fresh autotune (under a key over
it, the run-1 samples of both configs). Writes ``coldstart.json`` (the
figures) and ``decisions.json`` (run 1's decisions with every candidate's
samples, for tests/gpu/replay_recheck.py) to ``--out`` (default: a new
/tmp/detd-coldstart-* folder). The targets (run
1 at most 1.5x the floor, at least 5x faster than default Triton's run 1)
are printed as met or not, without failing the run. Binaries: .gpu/ from
tests/gpu/bundle.sh (as run_gpu.py); FLA from .whl/ (fetch_packages.sh),
importable; mamba_ssm in .pkgsrc/. Each step prints a progress line.
Time: run 1 + rerun + about 60 s for the floor process + the default run
(at most its cap) + with ``--quiet-chain``, every candidate compiled once
in one process.
"""

import argparse
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

PHASES = ("compile", "benchmark", "remeasure", "waiting", "daemon", "other")
T_START = time.time()


def say(msg):
    print(f"[{time.time() - T_START:6.1f} s] {msg}", flush=True)


def procs(n, mode, work, tag, extra_env, args, cap=None):
    """n worker.py processes at once; their JSON results in rank order, or
    None for one cut at ``cap`` seconds (killed). A failure raises."""
    ps = []
    for r in range(n):
        out = os.path.join(work, f"{tag}_r{r}.json")
        e = env_for({"RANK": str(r), "LOCAL_RANK": str(r), "WORLD_SIZE": str(n), **extra_env(r)})
        log = open(os.path.join(work, f"{tag}_r{r}.log"), "w")
        ps.append((subprocess.Popen([sys.executable, os.path.join(HERE, "worker.py"), "--mode", mode, "--out", out,
                                     *args], env=e, stdout=log, stderr=subprocess.STDOUT), out, log))
    deadline = time.time() + cap if cap else None
    res = []
    for p, out, log in ps:
        try:
            rc = p.wait(None if deadline is None else max(0.1, deadline - time.time()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            rc = None
        log.close()
        if rc is None:
            res.append(None)
            continue
        if rc != 0 or not os.path.exists(out):
            sys.stdout.write(open(log.name).read()[-3000:])
            raise SystemExit(f"{tag}: a worker exited {rc}")
        res.append(json.load(open(out)))
    return res


def run1_samples(decisions, row):
    """For a kernel-time row over 1.01x (worker.compare): the run-1 samples
    (ms) the daemon kept of detd's config and of the fresh autotune's, from
    ``detctl decisions --json``, for each decision of that kernel that chose
    detd's config (a kernel met with several keys can match more than one)."""
    try:
        listed = json.loads(decisions)["decisions"]
    except (ValueError, KeyError, TypeError):
        return ["run-1 samples: detctl decisions gave no list"]
    kernel = row["entry"].split("|")[0]
    lines = []
    for dec in listed:
        if dec["kernel"].split("@")[0] != kernel or dec["config"] != row["detd"]:
            continue
        ms = {t["config"]: t["ms"] for t in dec["timings"]}
        for tag, cfg in (("detd", row["detd"]), ("fresh", row["fresh"])):
            got = ms.get(cfg)
            lines.append(f"run 1, {tag}: " + (" ".join(f"{v:.4f}" for v in got) if got else "not measured"))
    return lines or ["run-1 samples: no decision of this kernel chose that config"]


def quiet_chain(pass_compiles):
    """From a --floor process on a fresh cache (worker.py's
    ``pass_compiles``: per timing pass, its kernel and each candidate's
    compile seconds, made alone): the compiles, their seconds in all, and
    the longest of each pass summed (the compile chain with a core per
    candidate: no pass can end before its slowest candidate is compiled).
    A pass with nothing compiled (its binaries came from an earlier pass)
    adds nothing."""
    longest = [max(s, default=0.0) for _, s in pass_compiles]
    return dict(passes=len(pass_compiles), compiles=sum(len(s) for _, s in pass_compiles),
                work=sum(sum(s) for _, s in pass_compiles), chain=sum(longest),
                per_pass=[[k, m, len(s)] for (k, s), m in zip(pass_compiles, longest)])


def phase_table(run1):
    """Run 1's phases: summed over processes, and on the critical path
    (per key, the phases of the rank that timed it)."""
    summed = {p: sum(r["phases"][p] for r in run1) for p in PHASES + ("total", "compile_work")}
    crit = dict.fromkeys(PHASES + ("total",), 0.0)
    per_key = {}
    for r in run1:
        for entry, kp in r.get("key_phases", {}).items():
            k = per_key.setdefault(entry, {"work": 0.0, "max": 0.0, "timed": None})
            k["work"] += kp.get("compile_work", 0.0)
            k["max"] = max(k["max"], kp.get("compile_max", 0.0))
            if kp.get("timed_here"):
                k["timed"] = kp
    for k in per_key.values():
        if k["timed"] is not None:
            for p in crit:
                crit[p] += k["timed"].get(p, 0.0)
    outside = [r["startup_s"] - r["phases"]["total"] for r in run1]
    return summed, crit, per_key, outside


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--procs", type=int, default=8)
    ap.add_argument("--keys", choices=("suite", "mamba"), default="suite",
                    help="the key set: the suite's and FLA's kernels, or mamba_ssm's (kernels.py)")
    ap.add_argument("--no-fla", action="store_true", help="--keys suite without FLA")
    ap.add_argument("--out", default=None)
    ap.add_argument("--before", action="store_true",
                    help="the cuts off: DETD_RECHECK_CLEAR=off, DETD_COMPILE_AHEAD=0, DETD_SCREEN=off, "
                         "DETD_COMPILE_NICE=0, DETD_SHARE_PASS=0")
    ap.add_argument("--env", action="append", default=[], help="NAME=VALUE for the detd processes")
    ap.add_argument("--default-cap", type=float, default=150.0, help="seconds default Triton's run 1 may take")
    ap.add_argument("--no-default", action="store_true")
    ap.add_argument("--quiet-chain", action="store_true",
                    help="also compile every candidate alone, one at a time, in one process on a fresh cache")
    a = ap.parse_args()
    if a.no_fla and a.keys != "suite":
        ap.error(f"--no-fla leaves FLA out of --keys suite; --keys {a.keys} has no FLA")
    root = a.out or tempfile.mkdtemp(prefix="detd-coldstart-")
    os.makedirs(root, exist_ok=True)
    wargs = ["--keys", a.keys] + (["--no-fla"] if a.no_fla else [])
    settings = {"DETD_TIMEOUT_MS": "900000"}
    if a.before:
        settings.update(DETD_RECHECK_CLEAR="off", DETD_COMPILE_AHEAD="0", DETD_SCREEN="off", DETD_COMPILE_NICE="0",
                        DETD_SHARE_PASS="0")
    for kv in a.env:
        name, _, value = kv.partition("=")
        settings[name] = value
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    failures = []

    work = tempfile.mkdtemp(prefix="detd-", dir=root)
    cache = os.path.join(work, "triton-cache")
    d = Daemon(os.path.join(work, "detd"))
    env = dict(settings, TRITON_CACHE_DIR=cache)
    try:
        say(f"detd run 1: {a.procs} processes, key set {a.keys}, fresh store and cache, settings {settings}")
        t0 = time.time()
        run1 = procs(a.procs, "detd", work, "run1", lambda r: dict(env, DETD_PHASES=os.path.join(
            work, "phases1-{rank}.json")), wargs)
        wall1 = time.time() - t0
        st1 = d.status()
        decisions = d.detctl("decisions", "--json").stdout
        with open(os.path.join(root, "decisions.json"), "w") as f:  # each candidate's run-1 samples
            f.write(decisions)
        say("detd rerun")
        run2 = procs(a.procs, "detd", work, "run2", lambda r: env, wargs)
        st2 = d.status()
    finally:
        d.stop()
    entries = set(run1[0]["configs"])
    for r in run1 + run2:
        if r["configs"] != run1[0]["configs"]:
            failures.append(f"rank {r['rank']} launched other configs than rank 0")
    passes, counted = counter(st1, "timing_passes"), sum(r["passes"] for r in run1)
    if passes != len(entries) or counted != len(entries):
        failures.append(f"{passes} timing passes (daemon), {counted} counted, for {len(entries)} keys: want one per key")
    rerun_passes = counter(st2, "timing_passes") - passes
    if rerun_passes != 0 or sum(r["passes"] for r in run2) != 0:
        failures.append(f"the rerun timed {rerun_passes} keys")
    for r in run1:
        ph = r["phases"]
        written = json.load(open(os.path.join(work, f"phases1-{r['rank']}.json")))["phases"]
        if abs(sum(ph[p] for p in PHASES) - ph["total"]) > 1e-3 * max(1, ph["keys"]) or written != ph:
            failures.append(f"rank {r['rank']}: phases do not sum to its time in detd: {ph}")

    say("floor and kernel time: one default process on run 1's warm cache")
    cfile = os.path.join(work, "chosen.json")
    json.dump(run1[0]["configs"], open(cfile, "w"))
    (fl,) = procs(1, "default", work, "floor", lambda r: {"TRITON_CACHE_DIR": cache},
                  wargs + ["--floor", "--compare", cfile])
    kt_fresh = sum(x["fresh_ms"] for x in fl["compare"])
    kt_chosen = sum(x["detd_ms"] for x in fl["compare"])
    kt = kt_chosen / kt_fresh if kt_fresh else float("nan")
    if not kt <= 1.01:
        failures.append(f"kernel time of the chosen configs {kt:.4f}x a fresh autotune (want <= 1.01x)")

    quiet = None
    if a.quiet_chain:
        say("compiles alone: one default process, fresh cache, each candidate compiled before its benchmark")
        qwork = tempfile.mkdtemp(prefix="quiet-", dir=root)
        (q,) = procs(1, "default", qwork, "quiet", lambda r: {"TRITON_CACHE_DIR": os.path.join(qwork, "triton-cache")},
                     wargs + ["--floor"])
        quiet = quiet_chain(q["pass_compiles"])

    summed, crit, per_key, outside = phase_table(run1)
    chain = sum(max(k["work"] / cores, k["max"]) for k in per_key.values())
    floor = fl["bench_s"] + chain
    med1 = statistics.median(r["startup_s"] for r in run1)
    med2 = statistics.median(r["startup_s"] for r in run2)

    default = None
    if not a.no_default:
        say(f"default Triton run 1: {a.procs} processes, fresh cache, cut at {a.default_cap:.0f} s")
        dwork = tempfile.mkdtemp(prefix="default-", dir=root)
        dres = procs(a.procs, "default", dwork, "default", lambda r: {
            "TRITON_CACHE_DIR": os.path.join(dwork, "triton-cache"),
            "COLDSTART_PROGRESS": os.path.join(dwork, f"progress_r{r}.txt")}, wargs, cap=a.default_cap)
        if all(x is not None for x in dres):
            default = dict(cut=False, s=statistics.median(x["startup_s"] for x in dres))
        else:
            done = []
            for r in range(a.procs):
                pf = os.path.join(dwork, f"progress_r{r}.txt")
                lines = open(pf).read().split() if os.path.exists(pf) else []
                done.append(int(lines[-1]) if lines else 0)
            default = dict(cut=True, s=a.default_cap, keys=statistics.median(done))

    n_cands = sum(k["timed"]["candidates"] for k in per_key.values() if k["timed"] is not None)
    print(f"\ncold start, {a.procs} processes on one GPU, key set {a.keys}: {len(entries)} keys "
          f"({n_cands} candidates), {cores} cores; detd settings {settings}; in effect: compile ahead "
          f"{run1[0].get('compile_ahead')} {'processes' if run1[0].get('compile_processes') else 'threads'}, "
          f"screening band {run1[0].get('screen')}, compiles {run1[0].get('compile_nice', 0)} nice levels below "
          f"the process")
    print(f"{'run 1 phase':14} {'all processes s':>16} {'critical path s':>16}")
    for p in PHASES + ("total",):
        print(f"{p:14} {summed[p]:16.2f} {crit[p]:16.2f}")
    print(f"{'outside detd':14} {sum(outside):16.2f} {'':>16}   (the workload's launches and torch work)")
    print(f"compile work in run 1 (every compile's own time, all processes): {summed['compile_work']:.1f} s")
    print(f"run 1 wall {wall1:.1f} s; workload per process: run 1 median {med1:.2f} s, rerun median {med2:.2f} s")
    print(f"floor: benchmark every candidate once {fl['bench_s']:.2f} s ({fl['bench_calls']} benchmarks, "
          f"compile-or-load first {fl['compile_s']:.2f} s) + compile chain on {cores} cores {chain:.2f} s "
          f"= {floor:.2f} s")
    print(f"run 1 / floor: {med1 / floor:.2f}x (target <= 1.5x: {'met' if med1 <= 1.5 * floor else 'not met'})")
    if default is not None:
        if default["cut"]:
            print(f"default Triton run 1: > {default['s']:.0f} s (cut; median process had tuned {default['keys']:.0f} "
                  f"of {len(entries)} keys); default / detd run 1 > {default['s'] / med1:.2f}x "
                  f"(target >= 5x: {'met' if default['s'] >= 5 * med1 else 'not shown'})")
        else:
            print(f"default Triton run 1: median {default['s']:.2f} s; default / detd run 1 {default['s'] / med1:.2f}x "
                  f"(target >= 5x: {'met' if default['s'] >= 5 * med1 else 'not met'})")
    ps = [v for r in run1 for v in (r.get("pass_s") or {}).values()]
    if any("screened_out" in v for v in ps):  # DETD_SCREEN=on
        out = sum(v.get("screened_out", 0) for v in ps)
        total = sum(v["candidates"] for v in ps)
        print(f"screening: {total} candidates in {len(ps)} passes, {total - out} measured in full, {out} screened out")
    wk = {k: sum(r.get("workers", {}).get(k, 0) for r in run1) for k in run1[0].get("workers", {})}
    if wk:
        print("compile workers and launchers, all processes: " + ", ".join(f"{k} {v}" for k, v in sorted(wk.items())))
        if wk.get("remote_compiles") and not wk.get("remote_loaded"):
            failures.append("no binary a compile worker made was loaded as it was made (the cache keys differ)")
        if wk.get("launcher_errors"):
            failures.append(f"{wk['launcher_errors']} launchers failed to build beside a timing pass's compiles")
    print(f"timing passes: {passes}/{len(entries)} run 1, {rerun_passes} rerun; kernel time of the chosen configs "
          f"vs a fresh autotune: {kt:.4f}x ({kt_chosen:.4f} / {kt_fresh:.4f} ms)")
    if quiet is not None:
        print(f"compiles alone (one process, fresh cache, one at a time): {quiet['compiles']} in {quiet['passes']} "
              f"passes, {quiet['work']:.2f} s in all; per key the longest, summed: {quiet['chain']:.2f} s "
              f"(run 1's chain {chain:.2f} s, its compile on the critical path {crit['compile']:.2f} s)")
        if default is not None and not default["cut"]:
            need = default["s"] / 5
            print(f"5x needs detd's run 1 at most {need:.2f} s: after the compiles alone, {need - quiet['chain']:.2f} s "
                  f"for all else; run 1's benchmark and re-measure on the critical path took "
                  f"{crit['benchmark'] + crit['remeasure']:.2f} s")
    for x in fl["compare"]:
        if x["detd_ms"] > 1.01 * x["fresh_ms"]:
            print(f"  {x['entry']}: {x['detd']} {x['detd_ms']:.4f} ms vs fresh {x['fresh']} {x['fresh_ms']:.4f} ms")
            for line in run1_samples(decisions, x):
                print("    " + line)
    json.dump(dict(key_set=a.keys, settings=settings, summed=summed, critical=crit, outside=outside, floor=floor,
                   chain=chain, bench_floor=fl["bench_s"], run1_median=med1, rerun_median=med2, wall1=wall1,
                   default=default, kernel_time=kt, passes=passes, keys=len(entries), per_key=per_key,
                   quiet=quiet),
              open(os.path.join(root, "coldstart.json"), "w"), indent=1, default=str)
    for f in failures:
        print("FAIL", f)
    if failures:
        sys.exit(1)
    print("PASS: one timing pass per key, all ranks agree, no timing in the rerun, phases sum, kernel time "
          f"within 1.01x; results in {root}")


if __name__ == "__main__":
    main()
