"""The autotuner features the CPU interpreter cannot run, on the GPU, under
detd: ``use_cuda_graph=True`` (Triton times with CUDA graphs) and
``warmup``/``rep``, next to a plain tuner, in N processes at once against
one daemon, then a rerun.

    python3 tests/gpu/run_features.py [--procs 4]

Checks, per kernel: every process launches the same config and gets the
right output; exactly one timing pass per key in run 1 (the daemon's count
and the processes' own), none in the rerun; the process that timed the key
reported a timing for every candidate, measured by the tuner's own
benchmarker (for ``use_cuda_graph`` that is Triton's CUDA-graph
benchmarker: counted by wrapping it). Prints a table; exit 1 with a FAIL
line when a check fails. Binaries: .gpu/ from tests/gpu/bundle.sh.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from run_gpu import Daemon, counter, env_for  # noqa: E402

WORKER = r'''
import hashlib, json, os, sys
import torch, triton, triton.language as tl
import triton.testing as tt

GRAPH_CALLS = [0]
_orig = tt.do_bench_cudagraph
def counting(*a, **k):
    GRAPH_CALLS[0] += 1
    return _orig(*a, **k)
tt.do_bench_cudagraph = counting
import triton.runtime.autotuner as at
if hasattr(at, "do_bench_cudagraph"):
    at.do_bench_cudagraph = counting

import detd

CONFIGS = [triton.Config({"BLOCK": b}, num_warps=w) for b in (256, 512, 1024, 2048) for w in (2, 4)]

@triton.autotune(configs=CONFIGS, key=["n"], use_cuda_graph=True)
@triton.jit
def graph_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=m) * 2.0 + 1.0, mask=m)

@triton.autotune(configs=CONFIGS, key=["n"], warmup=5, rep=20)
@triton.jit
def warm_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=m) * 3.0 - 1.0, mask=m)

@triton.autotune(configs=CONFIGS, key=["n"])
@triton.jit
def plain_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=m) - 0.5, mask=m)

detd.install()
n = 1 << 22
torch.manual_seed(0)  # the same input in every process
x = torch.randn(n, device="cuda")
out = {}
for name, k, ref in (("graph", graph_kernel, x * 2.0 + 1.0), ("warm", warm_kernel, x * 3.0 - 1.0),
                     ("plain", plain_kernel, x - 0.5)):
    y = torch.empty_like(x)
    k[lambda META: (triton.cdiv(n, META["BLOCK"]),)](x, y, n)
    torch.cuda.synchronize()
    # close to torch's (the kernel may fuse a multiply-add), and its bits
    # compared across processes by the parent
    out[name] = dict(ok=bool(torch.allclose(y, ref, rtol=1e-6, atol=1e-6)), config=str(k.best_config),
                     digest=hashlib.sha256(y.cpu().numpy().tobytes()).hexdigest()[:16],
                     use_cuda_graph=bool(getattr(k, "use_cuda_graph", False)))
recs = {r["name"].rsplit(".", 1)[-1].split(":")[-1]: r for r in detd.autotuners()}
for name in out:
    r = next((v for kname, v in recs.items() if kname.startswith(name)), None)
    keys = r["keys"] if r else []
    out[name]["timed_here"] = any(k.get("timed_here") for k in keys)
    out[name]["timings"] = max((len(k.get("timings") or {}) for k in keys), default=0)
    out[name]["governed"] = bool(r and r["governed"])
out["graph_bench_calls"] = GRAPH_CALLS[0]
json.dump(out, open(sys.argv[1], "w"))
'''


def run(n, work, tag):
    procs = []
    script = os.path.join(work, "features_worker.py")
    with open(script, "w") as f:
        f.write(WORKER)
    for r in range(n):
        out = os.path.join(work, f"{tag}_r{r}.json")
        log = open(os.path.join(work, f"{tag}_r{r}.log"), "w")
        e = env_for({"RANK": str(r), "LOCAL_RANK": str(r), "WORLD_SIZE": str(n)})
        procs.append((subprocess.Popen([sys.executable, script, out], env=e, stdout=log,
                                       stderr=subprocess.STDOUT), out, log))
    res = []
    for p, out, log in procs:
        rc = p.wait(600)
        log.close()
        if rc != 0:
            sys.stdout.write(open(log.name).read()[-3000:])
            raise SystemExit(f"FAIL {tag}: a worker exited {rc}")
        res.append(json.load(open(out)))
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--procs", type=int, default=4)
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="detd-features-")
    d = Daemon(os.path.join(work, "detd"))
    fails = []
    try:
        run1 = run(a.procs, work, "run1")
        st1 = d.status()
        rerun = run(a.procs, work, "rerun")
        st2 = d.status()
    finally:
        d.stop()
    passes1 = counter(st1, "timing_passes")
    passes2 = counter(st2, "timing_passes") - passes1
    print(f"{a.procs} processes, 3 kernels (use_cuda_graph, warmup/rep, plain), 8 candidates each")
    print("kernel | governed | configs (run1+rerun) | outputs right, one digest | timed by | timings reported")
    for name in ("graph", "warm", "plain"):
        both = run1 + rerun
        cfgs = {r[name]["config"] for r in both}
        oks = all(r[name]["ok"] for r in both) and len({r[name]["digest"] for r in both}) == 1
        timed = sum(r[name]["timed_here"] for r in run1) + sum(r[name]["timed_here"] for r in rerun)
        reported = max(r[name]["timings"] for r in run1)
        gov = all(r[name]["governed"] for r in both)
        print(f"{name} | {gov} | {len(cfgs)} | {oks} | {timed} process(es) | {reported} of 8")
        if not gov or len(cfgs) != 1 or not oks or timed != 1 or reported != 8:
            fails.append(f"{name}: governed {gov}, configs {cfgs}, ok {oks}, timed {timed}, timings {reported}")
    graph_calls = sum(r["graph_bench_calls"] for r in run1)
    print(f"CUDA-graph benchmark calls in run 1: {graph_calls} (the timing process, one per candidate)")
    print(f"timing passes: run 1 {passes1}, rerun {passes2}")
    if graph_calls < 8:
        fails.append(f"use_cuda_graph: {graph_calls} CUDA-graph benchmark calls, expected >= 8")
    if passes1 != 3 or passes2 != 0:
        fails.append(f"timing passes run1 {passes1} (expected 3), rerun {passes2} (expected 0)")
    for f in fails:
        print("FAIL", f)
    print("features GPU run:", "PASS" if not fails else "FAIL")
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
