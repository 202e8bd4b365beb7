"""Timing outside detd, named, on the GPU (detd._timing).

    python3 tests/gpu/run_timing.py [--procs 2] [--out DIR]

N processes against one daemon (binaries: .gpu/ from tests/gpu/bundle.sh,
or DETD_BIN and DETD_LIBRARY), each with detd installed before its
imports (as ``detd-run`` does):

- tests/python/timing_kernels.py's package-style tuner, in the way of
  torchao's ``get_best_config_fn``: it times 3 configs with
  ``triton.testing.do_bench`` (Triton's benchmarker on the GPU: CUDA events),
  keeps the fastest in its own cache, and is called twice;
- its ``@triton.autotune`` kernel with Triton's default benchmarker (the
  same ``triton.testing.do_bench``, through the CUDA driver): detd's timing
  pass.

PASS when every process names the outside tuner's call site once with its
3 calls and nothing else, the governed kernel was timed once in the whole
job (the daemon's ``timing_passes``) and every process launched its
decision, and ``detctl verify`` exits 0 listing the call site as
``UNGOVERNED timing``. Prints a table; exit 1 with a FAIL line otherwise.
Under a minute on an H200.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from run_gpu import REPO, Daemon, counter, env_for  # noqa: E402

SITE = "timing_kernels:get_best_config"

WORKER = r'''
import json, sys
import detd

detd.install()
import torch
import timing_kernels as tk

x = torch.arange(1 << 20, dtype=torch.float32, device="cuda")
b1, y = tk.run(x)
b2, _ = tk.run(x)
governed, y2 = tk.run_governed(x)
torch.cuda.synchronize()
out = dict(outside_block=b1, outside_again=b2, outside_ok=bool(torch.equal(y, x * 2.0)),
           governed_ok=bool(torch.equal(y2, x + 1.0)), governed=governed,
           timing=[t for t in detd.autotuners() if t["kind"] == "timing"],
           stats={k: v for k, v in detd.stats().items() if k.startswith("timing_")})
json.dump(out, open(sys.argv[1], "w"))
'''


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--procs", type=int, default=2)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    work = a.out or tempfile.mkdtemp(prefix="detd-timing-")
    os.makedirs(work, exist_ok=True)
    d = Daemon(os.path.join(work, "daemon"))
    tests_python = os.path.join(REPO, "tests", "python")
    procs = []
    for r in range(a.procs):
        e = env_for({"RANK": str(r), "LOCAL_RANK": "0", "WORLD_SIZE": str(a.procs)})
        e["PYTHONPATH"] = tests_python + os.pathsep + e["PYTHONPATH"]
        log = open(os.path.join(work, f"r{r}.log"), "w")
        procs.append((subprocess.Popen([sys.executable, "-c", WORKER, os.path.join(work, f"r{r}.json")], env=e,
                                       stdout=log, stderr=subprocess.STDOUT), log))
    res, fails = [], []
    for r, (p, log) in enumerate(procs):
        rc = p.wait(300)
        log.close()
        if rc != 0:
            sys.stdout.write(open(log.name).read()[-3000:])
            fails.append(f"rank {r} exited {rc}")
            continue
        res.append(json.load(open(os.path.join(work, f"r{r}.json"))))
    st = d.status()
    v = d.detctl("verify")
    d.stop()
    print(f"{'rank':>4}  {'outside BLOCK':>13}  {'named call sites':<40}  {'calls':>5}  governed config")
    for r, o in enumerate(res):
        names = ",".join(t["name"] for t in o["timing"]) or "-"
        calls = sum(t["calls"] for t in o["timing"])
        print(f"{r:>4}  {o['outside_block']:>13}  {names:<40}  {calls:>5}  {o['governed']}")
    print(f"daemon timing_passes: {counter(st, 'timing_passes')}; detctl verify exit {v.returncode}")
    print("\n".join(ln for ln in v.stdout.splitlines() if ln.startswith(("autotuners:", "UNGOVERNED", "ok", "FAIL"))))
    for r, o in enumerate(res):
        if [t["name"] for t in o["timing"]] != [SITE] or o["timing"][0]["calls"] != 3:
            fails.append(f"rank {r} named {o['timing']}, not {SITE} with 3 calls")
        if not (o["outside_ok"] and o["governed_ok"] and o["outside_block"] == o["outside_again"]):
            fails.append(f"rank {r}: wrong output or the outside tuner's cache did not answer")
    if len({o["governed"] for o in res}) != 1:
        fails.append("the governed kernel's config differs between ranks")
    if counter(st, "timing_passes") != 1:
        fails.append(f"timing_passes {counter(st, 'timing_passes')}, not 1")
    if v.returncode != 0 or f"UNGOVERNED timing timing::{SITE}" not in v.stdout:
        fails.append("detctl verify did not exit 0 listing the call site")
    for f in fails:
        print("FAIL", f)
    print("PASS" if not fails else "FAIL")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
