"""Coordinate descent over a space too large to list, on the GPU: a model
whose cross-entropy spans a 32,000-wide vocabulary (inductor_train.py's
MLP with n_cls 32000), whose reductions' descent reaches more configs than
a key can list (docs/inductor.md, "Large searches"). Step time of default
torch.compile, of detd as it was before it searched such spaces (the
start config kept), and of detd now (the search run once and committed),
each process alone on the GPU. Prints a table and PASS/FAIL.

    python3 tests/gpu/run_coordesc.py [--steps 60] [--dims 1024,1024,32000,4096] [--out DIR]

The processes, one at a time, against one daemon (``torch.compile`` in
its default mode with ``coordinate_descent_tuning`` on; GEMMs are cuBLAS
in every variant, so the variants differ in their Triton kernels only):

``default``
    detd in ``auto`` mode (Inductor untouched: its own descent).
``detd run 1``
    coordinated: times every key, each search included.
``detd rerun``
    the decided store: times nothing.
``detd before``
    the decided store, with each searched kernel overridden
    (``DETD_OVERRIDES``) to its start config, the committed choice of its
    ``configs`` key: what detd launched before, when it kept the start
    config of such a descent ("not searched").

Per variant: the median CUDA-event step time, and the GPU time per step
of the searched kernels (torch.profiler). Checks: the wide reductions'
keys name a search; run 1 searched each of them once (one timing pass per
timed key on the daemon), the rerun timed nothing; run 1 and the rerun
launched the same configs with bit-identical losses; no process said "not
searched"; ``detd before`` launched each searched kernel's start config;
``detctl verify`` of run 1 and the rerun passes. Step time is reported,
not checked.

Needs the detd binaries bundled by tests/gpu/bundle.sh under .gpu/ (or
DETD_BIN / DETD_LIBRARY pointing at a build).
"""

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from run_gpu import Daemon, counter  # noqa: E402
from run_inductor import run_procs  # noqa: E402

VARIANTS = ("default", "detd before", "detd run 1", "detd rerun")


def kernel_name(ident):
    """Inductor's kernel name of a key ``inductor::<name>@<guard> <key>``."""
    return ident.split(" ", 1)[0].split("::", 1)[-1].rsplit("@", 1)[0]


def overrides(searches):
    """DETD_OVERRIDES that keep each searched kernel at its start config."""
    return {ident.split(" ", 1)[0]: cands[0] for ident, cands in searches.items()}


def summarize(runs, passes, logs, verify_rc):
    """The table's rows and the checks, from each variant's process result
    (``runs``), the daemon's timing passes of run 1 and the rerun, the
    processes' output (``logs``) and detctl verify's exit status."""
    run1, rerun, before = runs["detd run 1"], runs["detd rerun"], runs["detd before"]
    searches = run1["searches"]
    names = sorted({kernel_name(i) for i in searches})
    base = statistics.median(runs["default"]["step_ms"])
    rows = []
    for v in VARIANTS:
        r = runs[v]
        ms = statistics.median(r["step_ms"])
        us = {n: (r.get("kernels_us") or {}).get(n, [0, 0.0])[1] for n in names}
        rows.append(dict(variant=v, step_ms=ms, vs_default=ms / base, searched_us=sum(us.values()), kernels_us=us,
                         configs={i: r["choices"].get(i) for i in searches}))
    checks = {
        "the 32,000-wide reductions' keys name a search": len(searches) > 0,
        "run 1 searched each of them once": all(i in run1["timed"] for i in searches),
        "one timing pass per timed key in run 1 (daemon)": passes[0] == len(run1["timed"]),
        "the rerun timed nothing (daemon: 0 passes)": passes[1] == 0 and not rerun["timed"],
        "run 1 and the rerun launched the same configs": run1["choices"] == rerun["choices"],
        "run 1 and the rerun: losses bit-identical": run1["losses"] == rerun["losses"],
        "no process said 'not searched'": all("not searched" not in t for t in logs),
        "detd before launched each searched kernel's start config":
            all(before["choices"].get(i) == c[0] for i, c in searches.items()),
        "detctl verify (run 1 and the rerun)": verify_rc == 0,
    }
    return rows, checks


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--dims", default="1024,1024,32000,4096", help="d_in,d_hid,n_cls,batch")
    ap.add_argument("--profile-steps", type=int, default=5)
    ap.add_argument("--out", default=os.environ.get("OUT") or tempfile.mkdtemp(prefix="detd-coordesc-"))
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    work = tempfile.mkdtemp(prefix="detd-coordesc-run-", dir="/tmp")
    t_start = time.time()
    args = ["--compile-mode", "default"]
    runs, walls, passes = {}, {}, []
    d = Daemon(os.path.join(work, "daemon"))

    def one(variant, tag, mode, extra):
        t0 = time.time()
        runs[variant] = run_procs(1, mode, work, tag, a.steps, extra, a.dims, a.profile_steps, args)[0]
        walls[variant] = time.time() - t0

    try:
        one("default", "default", "default", {"DETD_NAMESPACE": "coordesc-default", "DETD_JOB": "default"})
        for variant, tag in (("detd run 1", "run1"), ("detd rerun", "rerun")):
            st0 = d.status()
            one(variant, tag, "detd", {"DETD_JOB": "after"})
            passes.append(counter(d.status(), "timing_passes") - counter(st0, "timing_passes"))
        v = d.detctl("verify", "--job", "after")
        ov = os.path.join(work, "before-overrides.json")
        json.dump(overrides(runs["detd run 1"]["searches"]), open(ov, "w"))
        one("detd before", "before", "detd", {"DETD_JOB": "before", "DETD_OVERRIDES": "@" + ov})
    finally:
        rc = d.stop()
    logs = [open(os.path.join(work, f"{t}_r0.log")).read() for t in ("default", "run1", "rerun", "before")]
    rows, checks = summarize(runs, passes, logs, v.returncode)

    first = runs["default"]
    print(f"\n== coordinate descent over large spaces, alone on {first['device']}, torch {first['torch']}, "
          f"torch.compile + coordinate_descent_tuning, MLP dims {a.dims} (cross-entropy over "
          f"{a.dims.split(',')[2]} classes), {a.steps} steps per process ==")
    print(f"{'variant':12s} {'step ms':>8s} {'vs default':>10s} {'searched kernels us/step':>24s} "
          f"{'compile s':>9s} {'wall s':>7s}")
    for r in rows:
        print(f"{r['variant']:12s} {r['step_ms']:8.3f} {r['vs_default']:9.4f}x {r['searched_us']:24.1f} "
              f"{runs[r['variant']]['compile_s']:9.1f} {walls[r['variant']]:7.1f}")
    by = {r["variant"]: r for r in rows}
    after, before = by["detd rerun"], by["detd before"]
    print(f"detd after (rerun) against detd before: step {after['step_ms'] / before['step_ms']:.4f}x, searched "
          f"kernels {after['searched_us'] / max(before['searched_us'], 1e-9):.4f}x")
    print(f"searched keys: {len(runs['detd run 1']['searches'])}; daemon timing passes run 1 {passes[0]}, "
          f"rerun {passes[1]}")
    for ident, cands in sorted(runs["detd run 1"]["searches"].items()):
        n = kernel_name(ident)
        print(f"  {n}\n      search {cands[1]}\n      start  {cands[0]}")
        for r in rows:
            print(f"      {r['variant']:12s} {r['kernels_us'][n]:9.1f} us  {r['configs'][ident]}")
    print(f"detctl verify --job after exit {v.returncode}: "
          f"{v.stdout.strip().splitlines()[-1] if v.stdout.strip() else v.stderr.strip()[-200:]}; "
          f"daemon exit {rc}; wall {time.time() - t_start:.0f} s")
    for name, ok in checks.items():
        print(f"  {'ok ' if ok else 'FAIL'} {name}")
    ok = all(checks.values())
    print("PASS" if ok else "FAIL")
    json.dump(dict(dims=a.dims, steps=a.steps, rows=rows, passes=passes, checks=checks, walls=walls,
                   searches=runs["detd run 1"]["searches"],
                   step_ms={v: runs[v]["step_ms"] for v in VARIANTS}),
              open(os.path.join(a.out, "coordesc.json"), "w"), indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
