"""A Hugging Face model trained bit-identically: N processes on one GPU,
each training the same randomly initialized ``LlamaForCausalLM``
(transformers 5, SDPA attention, bf16, AdamW) under
``torch.compile(mode="max-autotune")`` (hf_llama_train.py).

    python3 tests/gpu/run_hf_llama.py [--procs 8] [--steps 10] [--timed-steps 20]
                                      [--dims H,I,L,HEADS,VOCAB,SEQ,BATCH] [--budget-s 540]
                                      [--no-negative] [--no-default] [--no-rerun]
                                      [--compile-mode M] [--lock-out FILE] [--lock-in FILE]
                                      [--same-as JSON] [--warm-rerun] [--split-gpus] [--cpu]
                                      [--only-default | --default-from JSON] [--out DIR]

Runs, each with fresh Inductor and Triton caches per process:
default torch.compile (detd not imported, torch's defaults); detd run 1
with docs/determinism.md's recommended settings (a fresh daemon and
store; the determinism audit on, DETD_AUDIT=1); the detd rerun (the same
store); and, when the budget leaves room, detd with torch's defaults and
the audit on (the negative: what the settings are for). Each process runs
--steps steps hashing every step's loss and gradients and, after the
last, the parameters, then --timed-steps steps timed with CUDA events.

Prints one table: processes whose parameters after the last hashed step
equal rank 0's (and whose every loss and gradient does), run 1 against
the rerun, the SDPA backward each run's processes ran (an eager probe
step), timing passes (run 1 / rerun, the daemon's counter), keys
governed, `detctl verify --job` and `--strict-determinism` of each detd
run with their NONDET lines, the wall time from a run's start to the last
hashed step (max over processes), and the step time (median over
processes of each one's median), with the targets printed as met or
not. PASS when detd run 1's processes and the rerun's are bit-identical,
run 1 equals the rerun, and verify (strict) passes for both.

Each run is capped (--cap-s, and --budget-s over the whole script, for a
10-minute call): a capped run's processes are killed and what they
wrote after the hashed steps is still reported. transformers comes from
.whl/hf/ (tests/gpu/fetch_packages.sh), installed with
``pip install --no-index --no-deps --target`` when it is not importable
($DETD_PKG_SITE names the directory). Binaries: .gpu/ (tests/gpu/bundle.sh).
--lock-out FILE writes detd run 1's decisions as a lockfile (`detctl lock
export --job run1`); --lock-in FILE imports one into the fresh store
before detd run 1 (`detctl lock import`), so run 1 starts warm from
another run's decisions: it should time nothing and reach the same bits,
and `detctl verify --lock FILE` must pass for it (every key it used came
from the lock, with the lock's config). --same-as JSON compares detd run
1's bits (parameters, every loss and gradient) with those of the run that
wrote that hf_llama.json (another call, another store).
--warm-rerun adds a third detd run on run 1's Inductor and Triton caches
(each rank its own): it should read every compiled graph back from
Inductor's FX graph cache (each entry checked against the daemon's
decisions, docs/inductor.md "The FX graph cache, checked"), time nothing
and reach run 1's bits.
--split-gpus (a machine with two GPUs) runs default torch.compile's run 1
on GPU 1, pinned to half the CPUs, at the same time as the detd runs on
GPU 0 and the other half: run 1 against the default's in one call where
one after the other does not fit 10 minutes (the default's cap, the first
of --cap-s, counts from its own start).
--only-default runs default torch.compile's run 1 alone and writes its
hf_llama.json; --default-from JSON takes the default's column from such
a file instead of running it: run 1 against the default's on one GPU
where both do not fit one 10-minute call, in two calls on the same
machine (the second while the machine is still held), the first's result
left outside the repository's copy (e.g. --out /tmp/hf-default).
--cpu: a tiny model on the CPU, 2 processes, torch.compile's default
mode, to check the script (DETD_BIN, DETD_LIBRARY: the local build).
"""

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from run_gpu import Daemon, counter, env_for  # noqa: E402
from run_packages import wheel_site  # noqa: E402

STEP_TARGET = 1.05  # detd's step time over the default's
WALL_TARGET = 1.0  # detd run 1's wall time to the last hashed step over the default's run 1


def hf_path():
    """What to add to PYTHONPATH for transformers ('' when importable)."""
    if subprocess.run([sys.executable, "-c", "import transformers"], env=env_for({}),
                      capture_output=True).returncode == 0:
        return ""
    return wheel_site("hf", "transformers", "/tmp/hf-site")


def launch(a, work, tag, mode, recommended, extra, cap, settings="", caches=None, procs=None):
    """procs (default a.procs) hf_llama_train.py processes at once, with
    --recommended and/or --settings settings, killed at cap seconds;
    (their results in rank order, None for a process that wrote nothing,
    whether the cap was hit, the run's wall seconds). Each process's
    Inductor and Triton caches are fresh, or those of rank r of an
    earlier run given the same caches name."""
    return finish(start(a, work, tag, mode, recommended, extra, settings, caches, procs), cap)


def start(a, work, tag, mode, recommended, extra, settings="", caches=None, procs=None, cpus=None):
    """The processes of launch(), started (cpus: the CPUs they may run
    on, all when None); finish() waits for them."""
    t0 = time.time()
    ps = []
    procs = procs or a.procs
    sync = os.path.join(work, f"sync_{tag}")  # timed steps one process at a time
    os.makedirs(sync, exist_ok=True)
    caches = caches or tag
    for r in range(procs):
        out = os.path.join(work, f"{tag}_r{r}.json")
        e = env_for({"RANK": str(r), "LOCAL_RANK": "0", "WORLD_SIZE": str(procs), "DETD_HF_T0": repr(t0),
                     "TORCHINDUCTOR_CACHE_DIR": os.path.join(work, f"inductor_{caches}_r{r}"),
                     "TRITON_CACHE_DIR": os.path.join(work, f"triton_{caches}_r{r}"), "DETD_HF_SYNC": sync,
                     **extra})
        if a.site:
            e["PYTHONPATH"] = os.pathsep.join([e["PYTHONPATH"], a.site])
        log = open(os.path.join(work, f"{tag}_r{r}.log"), "w")
        cmd = [sys.executable, os.path.join(HERE, "hf_llama_train.py"), "--mode", mode, "--out", out,
               "--steps", str(a.steps), "--timed-steps", str(a.timed_steps), "--dims", a.dims,
               "--device", a.device, "--compile-mode", a.compile_mode, *(["--recommended"] if recommended else []),
               *(["--settings", settings] if settings else [])]
        pin = (lambda: os.sched_setaffinity(0, cpus)) if cpus else None
        ps.append((subprocess.Popen(cmd, env=e, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                    preexec_fn=pin), out, log))
    return tag, t0, ps, procs


def finish(started, cap):
    """Wait for start()'s processes, killed at cap seconds from their
    start; launch()'s result."""
    tag, t0, ps, procs = started
    capped, res = False, []
    for p, out, log in ps:
        try:
            p.wait(max(1.0, t0 + cap - time.time()))
        except subprocess.TimeoutExpired:
            capped = True
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
        log.close()
        if p.returncode != 0 and not capped:
            print(f"{tag}: a process exited {p.returncode}; last output:\n{open(log.name).read()[-2500:]}")
        res.append(json.load(open(out)) if os.path.exists(out) else None)
    ends = [os.path.getmtime(out) for _, out, _ in ps if os.path.exists(out)]
    wall = (max(ends) if len(ends) == len(ps) else time.time()) - t0
    prog = [json.load(open(out + ".progress")) if os.path.exists(out + ".progress") else None for _, out, _ in ps]
    print(f"{tag}: {sum(r is not None for r in res)}/{procs} processes reported, {wall:.0f} s"
          f"{' (capped at %.0f s)' % cap if capped else ''}; hashed steps done per process: "
          + ", ".join(f"{q['step']} ({q['s']:.0f} s)" if q else "0" for q in prog), flush=True)
    return res, capped, wall


def lock_import(d, path):
    """`detctl lock import path` into daemon d; exits the script when it
    fails."""
    imp = d.detctl("lock", "import", path)
    print(f"detctl lock import {path}: exit {imp.returncode}\n{(imp.stdout + imp.stderr)[-600:]}")
    if imp.returncode != 0:
        raise SystemExit("lock import failed")


def same_as_rank0(res):
    """(processes whose parameters equal rank 0's, processes whose every
    loss and gradient digest does too) out of those that reported."""
    if not res or res[0] is None or "params" not in res[0]:
        return 0, 0
    r0 = res[0]
    done = [r for r in res if r is not None and "params" in r]
    return (sum(r["params"] == r0["params"] for r in done),
            sum(r["params"] == r0["params"] and r["losses"] == r0["losses"] and r["grads"] == r0["grads"]
                for r in done))


def same_bits(x, y):
    """Whether two processes' results have the same parameters after the
    hashed steps and the same loss and gradients at every step."""
    return bool(x and y and "params" in x and "params" in y
                and all(x[f] == y[f] for f in ("params", "losses", "grads")))


def step_ms(res):
    vals = [statistics.median(r["step_ms"]) for r in res if r is not None and r.get("step_ms")]
    return statistics.median(vals) if vals else None


def wall_to_step(res):
    vals = [r["wall_to_step"] for r in res if r is not None and "wall_to_step" in r]
    return max(vals) if len(vals) == len(res) else None


def fmt(x, spec=".1f"):
    return "-" if x is None else format(x, spec)


def default_summary(a, runs, capped):
    """Default torch.compile's run 1 in a line: wall to the last step, step
    time, and whether it was cut."""
    return (f"wall s to step {a.steps} {fmt(wall_to_step(runs['default']))}, step ms "
            f"{fmt(step_ms(runs['default']), '.2f')}{' (capped)' if capped['default'] else ''}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--procs", type=int, default=None, help="default 8 (2 with --cpu)")
    ap.add_argument("--steps", type=int, default=None, help="hashed steps (default 10; 2 with --cpu)")
    ap.add_argument("--timed-steps", type=int, default=None, help="timed steps after them (default 20; 0 with --cpu)")
    ap.add_argument("--dims", default=None, help="hidden,intermediate,layers,heads,vocab,seq,batch "
                                                 "(default 512,1536,4,8,32000,512,4)")
    ap.add_argument("--budget-s", type=float, default=540.0, help="the whole script's seconds")
    ap.add_argument("--cap-s", default="190,190,130,110",
                    help="caps of the default run, detd run 1, the rerun and the negative run (seconds)")
    ap.add_argument("--no-negative", action="store_true", help="leave out detd with torch's defaults")
    ap.add_argument("--no-default", action="store_true", help="leave out default torch.compile's run")
    ap.add_argument("--no-rerun", action="store_true",
                    help="leave out the detd rerun (run 1 against the default in one call)")
    ap.add_argument("--cpu", action="store_true", help="a tiny model on the CPU (a check of the script)")
    ap.add_argument("--compile-mode", default=None,
                    help="torch.compile's mode (default max-autotune; 'default' with --cpu; 'none': eager)")
    ap.add_argument("--lock-out", default=None,
                    help="write detd run 1's decisions here (detctl lock export --job run1)")
    ap.add_argument("--lock-in", default=None,
                    help="import this lockfile into the fresh store before detd run 1 (detctl lock import): "
                         "run 1 starts warm from another run's decisions and should time nothing")
    ap.add_argument("--split-gpus", action="store_true",
                    help="default torch.compile on GPU 1 and half the CPUs, at the same time as the detd runs "
                         "on GPU 0 and the other half (a machine with two GPUs)")
    ap.add_argument("--warm-rerun", action="store_true",
                    help="add a detd rerun on run 1's Inductor and Triton caches (graphs read back)")
    ap.add_argument("--same-as", default=None,
                    help="another run's hf_llama.json: detd run 1 must reach its run 1's bits")
    ap.add_argument("--only-default", action="store_true",
                    help="run default torch.compile's run 1 alone and write its hf_llama.json")
    ap.add_argument("--default-from", default=None,
                    help="an --only-default run's hf_llama.json: the default's column, not run here")
    ap.add_argument("--out", default=os.environ.get("OUT") or tempfile.mkdtemp(prefix="detd-hf-"))
    a = ap.parse_args()
    if a.only_default and (a.default_from or a.no_default or a.split_gpus):
        ap.error("--only-default runs the default alone: not with --default-from, --no-default or --split-gpus")
    if a.default_from and (a.no_default or a.split_gpus):
        ap.error("--default-from is the default's column: not with --no-default or --split-gpus")
    cpu = a.cpu
    a.procs = a.procs or (2 if cpu else 8)
    a.steps = a.steps or (2 if cpu else 10)
    a.timed_steps = a.timed_steps if a.timed_steps is not None else (0 if cpu else 20)
    a.dims = a.dims or ("64,128,2,4,256,32,2" if cpu else "512,1536,4,8,32000,512,4")
    a.device = "cpu" if cpu else "cuda"
    a.compile_mode = a.compile_mode or ("default" if cpu else "max-autotune")
    caps = [float(x) for x in a.cap_s.split(",")]
    t_start = time.time()
    os.makedirs(a.out, exist_ok=True)
    work = tempfile.mkdtemp(prefix="detd-hf-run-", dir="/tmp")
    a.site = hf_path()

    def cap(i):
        return max(1.0, min(caps[i], a.budget_s - (time.time() - t_start) - sum(caps[i + 1:3])))

    runs, capped, walls = {}, {}, {}
    gpu, mine, beside = (lambda i: {}), None, None  # detd's device and CPUs; the default's, when split
    if a.split_gpus:
        cpus = sorted(os.sched_getaffinity(0))
        mine, theirs = set(cpus[:len(cpus) // 2]), set(cpus[len(cpus) // 2:]) or set(cpus)
        gpu = (lambda i: {}) if cpu else (lambda i: {"CUDA_VISIBLE_DEVICES": str(i)})
        print(f"split: default torch.compile on GPU 1 and CPUs {sorted(theirs)}, at the same time as detd on "
              f"GPU 0 and CPUs {sorted(mine)}", flush=True)
    if a.no_default:
        runs["default"], capped["default"], walls["default"] = [None] * a.procs, False, 0.0
    elif a.default_from:
        prior = json.load(open(a.default_from))
        runs["default"], capped["default"], walls["default"] = (prior[k]["default"]
                                                               for k in ("runs", "capped", "walls"))
        print(f"default torch.compile's run 1 from {a.default_from}: {default_summary(a, runs, capped)}",
              flush=True)
    elif a.split_gpus:
        runs["default"], capped["default"], walls["default"] = [None] * a.procs, False, 0.0  # its column first
        beside = start(a, work, "default", "default", False, gpu(1), cpus=theirs)
    else:
        runs["default"], capped["default"], walls["default"] = launch(a, work, "default", "default", False, {},
                                                                      cap(0))
    if a.only_default:
        json.dump(dict(runs=runs, capped=capped, walls=walls), open(os.path.join(a.out, "hf_llama.json"), "w"))
        done = sum(r is not None and "params" in r for r in runs["default"])
        print(f"default torch.compile run 1: {done}/{a.procs} processes reached step {a.steps}; "
              f"{default_summary(a, runs, capped)}; bit-identical to rank 0: "
              f"{same_as_rank0(runs['default'])[1]}/{a.procs}; {os.path.join(a.out, 'hf_llama.json')}")
        return 0 if done == a.procs and not capped["default"] else 1
    d = Daemon(os.path.join(work, "daemon"))
    exported = None  # --lock-out: detctl lock export's result
    jobs = {"detd run 1": "run1"} if a.no_rerun else {"detd run 1": "run1", "detd rerun": "rerun"}
    if a.warm_rerun:
        jobs["detd warm rerun"] = "warm"
    try:
        if a.lock_in:
            lock_import(d, a.lock_in)
        st0 = d.status()
        for i, (name, job) in enumerate(jobs.items(), 1):
            runs[name], capped[name], walls[name] = finish(start(
                a, work, job, "detd", True, {"DETD_AUDIT": "1", "DETD_JOB": job, **gpu(0)},
                caches="run1" if job == "warm" else None, cpus=mine), cap(min(i, 2)))
            if i == 1:
                st1 = d.status()
                if a.lock_out:
                    exported = d.detctl("lock", "export", "--job", job, "-o", a.lock_out)
                    print(f"detctl lock export --job {job} -o {a.lock_out}: exit {exported.returncode} "
                          f"{(exported.stdout + exported.stderr).strip()[-300:]}")
        st2 = d.status()
        if a.no_rerun:
            runs["detd rerun"], capped["detd rerun"], walls["detd rerun"] = [None] * a.procs, False, 0.0
        # The decisions each detd run made, to name any key a rerun met
        # that run 1 did not (it is timed in the rerun).
        decisions = json.loads(d.detctl("decisions", "--json").stdout or "{}").get("decisions", [])
        left = a.budget_s - (time.time() - t_start)
        if not a.no_negative and left >= caps[3]:
            name = "detd, torch defaults"
            jobs[name] = "defaults"
            runs[name], capped[name], walls[name] = finish(start(
                a, work, "defaults", "detd", False, {"DETD_AUDIT": "1", "DETD_JOB": "defaults", **gpu(0)},
                cpus=mine), caps[3])
        elif not a.no_negative:
            print(f"(negative run left out: {left:.0f} s of the budget left, its cap is {caps[3]:.0f} s)")
        empty = ["--allow-empty"] if cpu else []
        verify = {n: (d.detctl("verify", "--job", j, *empty), d.detctl("verify", "--strict-determinism", "--job", j,
                                                                        *empty)) for n, j in jobs.items()}
        # With --lock-in: every key run 1 used must be the lock's, with its config.
        vlock = d.detctl("verify", "--job", jobs["detd run 1"], "--lock", a.lock_in, *empty) if a.lock_in else None
    finally:
        d.stop()
        if beside is not None:  # the default's run beside detd's, capped from its own start
            runs["default"], capped["default"], walls["default"] = finish(beside, caps[0])

    n = a.procs
    first = next((r for r in runs["default"] + runs["detd run 1"] if r), {})
    print(f"\n== LlamaForCausalLM (transformers) dims {a.dims}, {n} processes on one {first.get('device', '?')}, "
          f"torch {first.get('torch', '?')}, torch.compile(mode={a.compile_mode!r}), AdamW, {a.steps} hashed + "
          f"{a.timed_steps} timed steps ==")
    print("| measure | " + " | ".join(runs) + " |")
    print("|---|" + "---|" * len(runs))

    def row(label, f):
        print(f"| {label} | " + " | ".join(f(k, v) for k, v in runs.items()) + " |")

    row("processes reporting (capped?)", lambda k, v: f"{sum(r is not None for r in v)}/{n}"
        + (" capped" if capped[k] else ""))
    row(f"params after step {a.steps} equal rank 0's", lambda k, v: f"{same_as_rank0(v)[0]}/{n}")
    row("... and every loss and gradient too", lambda k, v: f"{same_as_rank0(v)[1]}/{n}")
    row("SDPA backward (eager probe)", lambda k, v: "/".join(sorted({b for r in v if r for b in r["sdpa_backward"]})))
    row(f"wall s to step {a.steps} (max process)", lambda k, v: fmt(wall_to_step(v)))
    row("step ms (median)", lambda k, v: fmt(step_ms(v), ".2f"))
    row("keys governed / listed (rank 0)", lambda k, v: f"{v[0].get('governed')}/{v[0].get('keys')}"
        if v and v[0] and "keys" in v[0] else "-")
    row("choices failed to compile in one process / committed among them / precompiles skipped / deferred "
        "/ deferred compiled / early claims / passed on (sum)",
        lambda k, v: "/".join(str(sum((r or {}).get("stats", {}).get(f) or 0 for r in v))
                              for f in ("inductor_failed_here", "inductor_lost_used",
                                        "inductor_precompiles_skipped", "inductor_precompiles_deferred",
                                        "inductor_deferred_compiled", "early_claims", "early_passed_on"))
        if any(r and "stats" in r for r in v) else "-")
    row("FX graph cache: graphs read back / entries passed over / graphs not saved (sum)",
        lambda k, v: "/".join(str(sum((r or {}).get("stats", {}).get(f"inductor_graph_cache_{f}") or 0 for r in v))
                              for f in ("hits", "refused", "unsaved")) if any(r and "stats" in r for r in v) else "-")
    row("detctl verify exit / --strict-determinism exit",
        lambda k, v: f"{verify[k][0].returncode} / {verify[k][1].returncode}" if k in verify else "-")

    r1, r2 = runs["detd run 1"], runs["detd rerun"]
    same12 = same_bits(r1[0], r2[0])
    passes1 = counter(st1, "timing_passes") - counter(st0, "timing_passes")
    passes2 = counter(st2, "timing_passes") - counter(st1, "timing_passes")
    wd, w1 = wall_to_step(runs["default"]), wall_to_step(r1)
    sd, s1, s2 = step_ms(runs["default"]), step_ms(r1), step_ms(r2)
    print(f"detd run 1 = rerun (params, every loss and gradient): {same12}; timing passes, daemon: run 1 {passes1}, "
          f"rerun{'s' if a.warm_rerun else ''} {passes2}")
    late = [x for x in decisions if (x.get("decided_by") or {}).get("job") == "rerun"]
    for x in late[:12]:  # decided in the rerun: a key run 1 did not meet
        base = x["kernel"].split("@")[0]
        near = [y for y in decisions
                if (y.get("decided_by") or {}).get("job") == "run1" and y["kernel"].split("@")[0] == base]
        print(f"  rerun-only key: {x['kernel']} {x['key'][:160]} ({len(x.get('timings') or [])} candidates); "
              f"run 1 had {len(near)} of that name: " + "; ".join(
                  f"{y['kernel']} {y['key'][:160]} ({len(y.get('timings') or [])} candidates)" for y in near[:2]))
    if sd and s1:
        print(f"step ms: default {sd:.2f}, detd run 1 {s1:.2f} ({s1 / sd:.3f}x)"
              + (f", rerun {s2:.2f} ({s2 / sd:.3f}x)" if s2 else ""))
    if wd and w1:
        print(f"run 1 wall s to step {a.steps}: default {wd:.1f}, detd {w1:.1f} ({w1 / wd:.3f}x)")
    for name, (v, vs) in verify.items():
        lines = [ln for ln in v.stdout.splitlines()
                 if ln.startswith(("configs agree", "nondeterminism", "NONDET", "runtime:", "ok:", "FAIL"))]
        print(f"\n-- detctl verify --job {jobs[name]} ({name}): exit {v.returncode}, --strict-determinism "
              f"exit {vs.returncode}")
        print("\n".join(lines) if lines else (v.stdout + v.stderr)[-1500:])

    targets = {f"detd step time within {STEP_TARGET:.2f}x of the default (run 1 and rerun)":
               max(s1, s2 or s1) / sd <= STEP_TARGET if sd and s1 and (s2 or a.no_rerun) else None,
               f"detd run 1's wall to step {a.steps} within {WALL_TARGET:.2f}x of the default's":
               w1 / wd <= WALL_TARGET if wd and w1 else None}
    neg = runs.get("detd, torch defaults")
    if neg is not None:
        nondet = [ln for ln in verify["detd, torch defaults"][0].stdout.splitlines() if ln.startswith("NONDET")]
        done = sum(r is not None and "params" in r for r in neg)
        targets["negative: torch defaults under detd give processes differing bits"] = \
            same_as_rank0(neg)[1] < n if done == n else None
        targets["negative: verify names cuDNN attention"] = any("sdpa cudnn" in ln or "cudnn_sdp" in ln
                                                                for ln in nondet)
    for t, ok in targets.items():
        print(f"  target {'n/a    ' if ok is None else 'met    ' if ok else 'NOT met'} {t}")
    checks = {f"detd run 1: all {n} processes bit-identical": same_as_rank0(r1)[1] == n,
              f"detd rerun: all {n} processes bit-identical": same_as_rank0(r2)[1] == n,
              "detd run 1 = rerun": same12,
              "detctl verify --strict-determinism passes (run 1, rerun)":
              all(verify[k][0].returncode == 0 and verify[k][1].returncode == 0
                  for k in ("detd run 1", "detd rerun", "detd warm rerun") if k in verify)}  # the negative's strict verify must fail
    if a.lock_in:
        checks["detd run 1 from the lock timed nothing"] = passes1 == 0
        checks[f"detctl verify --lock {a.lock_in} passes (run 1)"] = vlock.returncode == 0
        print(f"\n-- detctl verify --job run1 --lock {a.lock_in}: exit {vlock.returncode}\n"
              + "\n".join(ln for ln in vlock.stdout.splitlines() if ln.startswith(("ok:", "FAIL", "lock"))))
    if a.lock_out:
        checks[f"detctl lock export -o {a.lock_out} succeeded"] = exported is not None and exported.returncode == 0
    if a.warm_rerun:
        w = runs["detd warm rerun"]
        hits = sum((r or {}).get("stats", {}).get("inductor_graph_cache_hits") or 0 for r in w)
        checks[f"detd warm rerun: all {n} processes bit-identical, = run 1"] = \
            same_as_rank0(w)[1] == n and same_bits(r1[0], w[0])
        checks["detd warm rerun read compiled graphs back (FX graph cache hits), reruns timed nothing"] = \
            hits > 0 and passes2 == 0
        if walls.get("detd rerun") and wall_to_step(w) and wall_to_step(r2):
            print(f"warm rerun wall s to step {a.steps}: {wall_to_step(w):.1f}, cold rerun {wall_to_step(r2):.1f}")
    if a.same_as:
        ref = (json.load(open(a.same_as))["runs"].get("detd run 1") or [None])[0] or {}
        checks[f"detd run 1 = {a.same_as}'s run 1 (params {ref.get('params', '?')[:16]})"] = same_bits(r1[0], ref)
    if a.no_rerun:  # what needs the rerun is not checked
        checks = {c: ok for c, ok in checks.items() if "rerun" not in c.split(":")[0] or "run 1, rerun" in c}
    for c, ok in checks.items():
        print(f"  {'ok  ' if ok else 'FAIL'} {c}")
    json.dump(dict(runs=runs, capped=capped, walls=walls, passes=[passes1, passes2], targets=targets, checks=checks,
                   decisions=decisions,
                   verify={k: [v.stdout, vs.stdout] for k, (v, vs) in verify.items()}),
              open(os.path.join(a.out, "hf_llama.json"), "w"))
    ok = all(checks.values())
    print(f"hf llama run: {'PASS' if ok else 'FAIL'} ({time.time() - t_start:.0f} s)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
