"""The package run: autotuners as packages write them, on one GPU.

    python3 tests/gpu/run_packages.py [--procs 8] [--packages gemlite,liger,mamba,fla] [--quick] [--out DIR]

Per package: N processes at once with default Triton, then N under detd
(run 1, coordinated), then N again against the same store (the rerun, with
the determinism audit on in rank 0), then one fresh default process that
times detd's configs against its own fresh autotune. Prints one table:
keys disagreeing (default / detd), outputs with more than one digest
(default / detd, over run 1 and the rerun together), timing passes (run 1 /
rerun), kernel time of detd's configs over a fresh timed autotune, the
audit's list, and the errors of ops that failed.

Packages: wheels installed with
``pip install --no-index --no-deps --target /tmp/site .whl/*.whl``
(liger-kernel, fla-core; $DETD_PKG_SITE names another directory), and
unpacked source in .pkgsrc/ (mamba_ssm, gemlite-0.6.0.post2/gemlite).
Each package runs in its own try block: one that fails prints its error
line and the others go on. Binaries: .gpu/ from tests/gpu/bundle.sh (as
run_gpu.py). --quick: 4 processes, fewer ops and shapes, no kernel-time
comparison. Triton's compile cache is shared by every process of a
package, so only the first run compiles. Each phase prints a progress line
(package, phase, seconds so far) as it ends, so a run cut off by a time
limit still shows how far it got. liger and fla together did not finish
in 440 s on the H200 (2026-12-02): under a 10-minute limit per command, run
one or two packages per command.
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

from run_gpu import REPO, Daemon, counter, env_for  # noqa: E402

PACKAGES = ("gemlite", "liger", "mamba", "fla")


def wheel_site(folder, module, default):
    """A directory holding the wheels of .whl/<folder>/, installed with
    ``pip install --no-index --no-deps --target`` when <module> is not
    there yet ($DETD_PKG_SITE, else default)."""
    d = os.environ.get("DETD_PKG_SITE") or default
    if not os.path.isdir(os.path.join(d, module)):
        src = os.path.join(REPO, ".whl", folder)
        whl = [os.path.join(src, f) for f in sorted(os.listdir(src)) if f.endswith(".whl")]
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--target", d,
                        *whl], check=True)
    return d


def procs(n, package, mode, work, tag, quick, extra=None, per_rank=None, args=(), timeout=480, worker=None):
    """n workers at once (pkg_worker.py, or worker(rank, out, env) -> the
    command, which may add to env); their JSON results in rank order."""
    ps = []
    for r in range(n):
        out = os.path.join(work, f"{tag}_r{r}.json")
        e = env_for({"RANK": str(r), "LOCAL_RANK": str(r), "WORLD_SIZE": str(n),
                     "TRITON_CACHE_DIR": os.path.join(work, "triton-cache"), **(extra or {}),
                     **((per_rank or (lambda i: {}))(r))})
        log = open(os.path.join(work, f"{tag}_r{r}.log"), "w")
        cmd = worker(r, out, e) if worker else \
            [sys.executable, os.path.join(HERE, "pkg_worker.py"), "--package", package, "--mode", mode,
             "--out", out, *(["--quick"] if quick else []), *args]
        ps.append((subprocess.Popen(cmd, env=e, stdout=log, stderr=subprocess.STDOUT), out, log))
    res = []
    deadline = time.time() + timeout
    for p, out, log in ps:
        try:
            rc = p.wait(max(1, deadline - time.time()))
        except subprocess.TimeoutExpired:
            p.kill()
            rc = p.wait()
        log.close()
        if rc != 0 or not os.path.exists(out):
            tail = open(log.name).read()[-1500:]
            raise RuntimeError(f"{tag}: a worker exited {rc}; last output:\n{tail}")
        res.append(json.load(open(out)))
    return res


def spread(results, field):
    vals = collections.defaultdict(set)
    for r in results:
        for k, v in r[field].items():
            vals[k].add(v)
    return vals


def run_package(pkg, a, root):
    work = tempfile.mkdtemp(prefix=f"{pkg}-", dir=root)
    row = dict(package=pkg)
    t0 = time.time()
    def progress(phase):
        print(f"{pkg}: {phase} done, {time.time() - t0:.0f} s", flush=True)

    default = procs(a.procs, pkg, "default", work, "default", a.quick)
    progress("default Triton")
    row["errors"] = sorted({f"{op}: {err}" for r in default for op, err in r["errors"].items()})
    cd, dd = spread(default, "configs"), spread(default, "digests")
    row["keys"] = len(cd)
    row["default_disagree"] = sum(1 for v in cd.values() if len(v) > 1)
    row["default_multi_digest"] = sum(1 for v in dd.values() if len(v) > 1)
    row["default_passes"] = sum(r["passes"] for r in default)

    d = Daemon(os.path.join(work, "detd"))
    try:
        run1 = procs(a.procs, pkg, "detd", work, "detd1", a.quick, extra={"DETD_MODE": "coordinated"})
        st1 = d.status()
        progress("detd run 1")
        rerun = procs(a.procs, pkg, "detd", work, "detd2", a.quick, extra={"DETD_MODE": "coordinated"},
                      per_rank=lambda r: {"DETD_AUDIT": "1"} if r == 0 else {})
        st2 = d.status()
        progress("detd rerun")
        v = d.detctl("verify", "--json")
        verify = json.loads(v.stdout) if v.stdout.strip() else {}
    finally:
        d.stop()
    both = run1 + rerun
    c2, d2 = spread(both, "configs"), spread(both, "digests")
    row["detd_keys"] = len(c2)
    row["detd_disagree"] = sum(1 for v in c2.values() if len(v) > 1)
    multi = sorted(k for k, v in d2.items() if len(v) > 1)
    row["detd_multi_digest"] = multi
    row["passes_run1"] = counter(st1, "timing_passes")
    row["passes_rerun"] = counter(st2, "timing_passes") - counter(st1, "timing_passes")
    row["client_passes"] = (sum(r["passes"] for r in run1), sum(r["passes"] for r in rerun))
    row["verify_ok"] = bool(verify.get("ok"))
    row["verify_divergences"] = [f"{x.get('kernel')}: {x.get('reason')}" for x in verify.get("divergences", [])][:5]
    row["audit"] = sorted({f"{x['name']} ({', '.join(x['differing']) or x['status']})"
                           for x in (rerun[0].get("audit") or [])})
    row["ungoverned"] = sorted({u for r in both for u in r.get("ungoverned", [])})
    # Cold start: the workload's seconds per process, run 1 against the
    # rerun (rank 0 of the rerun runs the audit: left out).
    w1 = statistics.median(r["workload_s"] for r in run1)
    w2 = statistics.median(r["workload_s"] for r in rerun[1:] or rerun)
    row["cold"] = dict(run1_s=w1, rerun_s=w2, ratio=w1 / w2 if w2 > 0 else None)
    ps = [v for r in run1 for v in (r.get("pass_s") or {}).values()]
    row["pass_split"] = dict(keys=len(ps), candidates=sum(v.get("candidates", 0) for v in ps),
                             first_s=sum(v.get("first", 0.0) for v in ps),
                             recheck_s=sum(v.get("recheck", 0.0) for v in ps))
    row["errors"] += sorted({f"detd {op}: {err}" for r in both for op, err in r["errors"].items()})

    if not a.quick:
        cfg = os.path.join(work, "detd-configs.json")
        json.dump({k: next(iter(v)) for k, v in c2.items() if len(v) == 1}, open(cfg, "w"))
        (fresh,) = procs(1, pkg, "default", work, "fresh", a.quick, args=["--compare", cfg])
        f_ms = sum(x["fresh_ms"] for x in fresh["compare"])
        d_ms = sum(x["detd_ms"] for x in fresh["compare"])
        row["time_ratio"] = d_ms / f_ms if f_ms > 0 else None
        row["time_entries"] = len(fresh["compare"])
        row["time_rows"] = fresh["compare"]
    row["seconds"] = round(time.time() - t0, 1)
    progress("kernel time" if not a.quick else "all")
    return row


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--procs", type=int, default=None)
    ap.add_argument("--packages", default=",".join(PACKAGES))
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    if a.procs is None:
        a.procs = 4 if a.quick else 8
    wanted = [p.strip() for p in a.packages.split(",") if p.strip()]
    bad = [p for p in wanted if p not in PACKAGES]
    if bad:
        raise SystemExit(f"unknown package(s) {bad}: choose from {','.join(PACKAGES)}")
    root = a.out or tempfile.mkdtemp(prefix="detd-pkgs-")
    os.makedirs(root, exist_ok=True)
    rows = []
    for pkg in wanted:
        try:
            rows.append(run_package(pkg, a, root))
        except Exception as e:  # noqa: BLE001 - one package failing leaves the others
            print(f"{pkg}: ERROR: {type(e).__name__}: {e}", flush=True)
            rows.append(dict(package=pkg, failed=f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"))
    json.dump(rows, open(os.path.join(root, "packages.json"), "w"), indent=1)

    print(f"\n{a.procs} processes per run, Triton default vs detd (run 1 + rerun){' [quick]' if a.quick else ''}")
    hdr = ("package", "keys", "disagree def/detd", "multi-digest def/detd", "passes run1/rerun", "time detd/fresh",
           "run1/rerun s", "verify", "audit: nondeterministic")
    print(" | ".join(hdr))
    print(" | ".join("---" for _ in hdr))
    for r in rows:
        if "failed" in r:
            print(f"{r['package']} | FAILED: {r['failed']}")
            continue
        ratio = f"{r['time_ratio']:.3f}x ({r['time_entries']} keys)" if r.get("time_ratio") else "-"
        print(" | ".join(str(x) for x in (
            r["package"], r["detd_keys"], f"{r['default_disagree']}/{r['detd_disagree']}",
            f"{r['default_multi_digest']}/{len(r['detd_multi_digest'])}", f"{r['passes_run1']}/{r['passes_rerun']}",
            ratio, f"{r['cold']['run1_s']:.1f}/{r['cold']['rerun_s']:.1f} = {r['cold']['ratio']:.2f}x",
            "ok" if r["verify_ok"] else "FAIL", "; ".join(r["audit"]) or "none")))
    for r in rows:
        x = r.get("pass_split")
        if x:
            print(f"{r['package']}: the timing passes of run 1: {x['keys']} keys, {x['candidates']} candidates, "
                  f"first round (compile and time each) {x['first_s']:.1f} s, re-measure {x['recheck_s']:.1f} s")
    for r in rows:
        for x in r.get("time_rows") or []:
            if not x["same"]:
                print(f"{r['package']} {x['entry']}: fresh {x['fresh_ms']:.4f} ms, detd {x['detd_ms']:.4f} ms "
                      f"({x['detd_ms'] / x['fresh_ms']:.3f}x)" if x["fresh_ms"] > 0 else f"{r['package']} {x}")
    for r in rows:
        for k in ("detd_multi_digest", "verify_divergences", "ungoverned", "errors"):
            if r.get(k):
                print(f"{r['package']} {k}: {r[k]}")
    print(f"\nresults: {root}/packages.json")


if __name__ == "__main__":
    main()
