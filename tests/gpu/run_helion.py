"""Helion on one GPU: its autotuner governed by detd (docs/helion.md).

    python3 tests/gpu/run_helion.py [--procs 4] [--out DIR]

Helion 1.5.0 (the newest release that imports under the GPU machine's
torch 2.11) and its imports come from .whl/helion/
(tests/gpu/fetch_packages.sh; installed with ``pip install --no-index
--no-deps --target``; $DETD_PKG_SITE names another directory); the
binaries from .gpu/ (tests/gpu/bundle.sh). A Helion matmul (bf16,
2048x2048x2048), ``autotune_effort="quick"``, Helion's default search
(LFBOTreeSearch when scikit-learn is importable; else PatternSearch, through
HELION_AUTOTUNER, said in the table). Runs N processes with Helion alone
(each searches), then N under detd (run 1: one search in the job), then N
again (the rerun: none), and prints the searches, the configs per rank,
agreement, output digests, the kernel time (median process) and a PASS/FAIL
line. Each process has its own HELION_CACHE_DIR, as separate nodes have.
"""

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def site():
    d = os.environ.get("DETD_PKG_SITE") or "/tmp/helion-site"
    if not os.path.isdir(os.path.join(d, "helion")):
        src = os.path.join(REPO, ".whl", "helion")
        whl = [os.path.join(src, f) for f in sorted(os.listdir(src)) if f.endswith(".whl")]
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--target", d,
                        *whl], check=True)
    return d


def worker(mode, out):
    """One process: the matmul autotuned and run; JSON to ``out``."""
    if mode == "detd":
        import detd

        detd.install()
    import torch
    from helion.autotuner import base_search

    searches = [0]
    orig = base_search.BaseSearch.autotune

    def counted(self, *a, **k):
        searches[0] += 1
        return orig(self, *a, **k)

    base_search.BaseSearch.autotune = counted
    sys.path.insert(0, HERE)
    from helion_matmul import matmul

    g = torch.Generator(device="cuda").manual_seed(1234)
    x = torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16, generator=g)
    y = torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16, generator=g)
    t0 = time.time()
    z = matmul(x, y)
    torch.cuda.synchronize()
    first_s = time.time() - t0
    from triton.testing import do_bench

    ms = do_bench(lambda: matmul(x, y), warmup=25, rep=100)
    cfg = matmul.bind((x, y))._config
    res = dict(searches=searches[0], config=json.dumps(dict(cfg.config), sort_keys=True), ms=ms,
               first_s=first_s, digest=hashlib.sha256(z.float().cpu().numpy().tobytes()).hexdigest())
    json.dump(res, open(out, "w"))


def procs(n, mode, work, tag, extra):
    sys.path.insert(0, HERE)
    from run_gpu import env_for

    ps = []
    for r in range(n):
        out = os.path.join(work, f"{tag}_r{r}.json")
        e = env_for({"RANK": str(r), "LOCAL_RANK": str(r), "WORLD_SIZE": str(n),
                     "HELION_CACHE_DIR": os.path.join(work, f"helion-cache-{tag}-{r}"), **extra})
        e["PYTHONPATH"] = os.pathsep.join([e.get("PYTHONPATH", ""), site()])
        log = open(os.path.join(work, f"{tag}_r{r}.log"), "w")
        ps.append((subprocess.Popen([sys.executable, __file__, "--worker", mode, out], env=e, stdout=log,
                                    stderr=subprocess.STDOUT), out, log))
    res = []
    for p, out, log in ps:
        rc = p.wait(timeout=170)
        log.close()
        if rc != 0 or not os.path.exists(out):
            raise RuntimeError(f"{tag}: a worker exited {rc}:\n{open(log.name).read()[-2000:]}")
        res.append(json.load(open(out)))
    return res


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "--worker":
        return worker(sys.argv[2], sys.argv[3])
    ap = argparse.ArgumentParser()
    ap.add_argument("--procs", type=int, default=4)
    ap.add_argument("--out", default=os.environ.get("OUT") or tempfile.mkdtemp(prefix="detd-helion-"))
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    work = tempfile.mkdtemp(prefix="helion-", dir=a.out)
    sys.path.insert(0, site())
    try:
        import sklearn  # noqa: F401

        extra, search = {}, "LFBOTreeSearch (default)"
    except ImportError:
        extra, search = {"HELION_AUTOTUNER": "PatternSearch"}, "PatternSearch (no scikit-learn here)"
    sys.path.insert(0, HERE)
    from run_gpu import Daemon, counter

    t0 = time.time()
    alone = procs(a.procs, "default", work, "alone", extra)
    print(f"helion: alone done, {time.time() - t0:.0f} s", flush=True)
    d = Daemon(os.path.join(work, "detd"))
    try:
        run1 = procs(a.procs, "detd", work, "detd1", {**extra, "DETD_JOB": "run1"})
        st1 = d.status()
        print(f"helion: detd run 1 done, {time.time() - t0:.0f} s", flush=True)
        rerun = procs(a.procs, "detd", work, "detd2", {**extra, "DETD_JOB": "rerun"})
        st2 = d.status()
        verify = d.detctl("verify", "--job", "run1")
        decs = json.loads(d.detctl("decisions", "--json").stdout)["decisions"]
        bench = sorted({json.dumps((x.get("timing") or {}).get("benchmarker")) for x in decs
                        if x["kernel"].startswith("helion::")})
    finally:
        d.stop()

    def n_configs(rs):
        return len({r["config"] for r in rs})

    def med(rs, f):
        return statistics.median(r[f] for r in rs)

    rows = [
        ("searches (alone / detd run 1 / rerun)",
         " / ".join(str(sum(r["searches"] for r in x)) for x in (alone, run1, rerun))),
        ("timing passes, daemon (run 1 / rerun)",
         f"{counter(st1, 'timing_passes')} / {counter(st2, 'timing_passes') - counter(st1, 'timing_passes')}"),
        ("distinct configs over ranks (alone / detd run 1 + rerun)", f"{n_configs(alone)} / {n_configs(run1 + rerun)}"),
        ("distinct output digests (alone / detd)",
         f"{len({r['digest'] for r in alone})} / {len({r['digest'] for r in run1 + rerun})}"),
        ("kernel ms, median process (alone / run 1 / rerun)",
         " / ".join(f"{med(x, 'ms'):.4f}" for x in (alone, run1, rerun))),
        ("first call s incl. search, median (alone / run 1 / rerun)",
         " / ".join(f"{med(x, 'first_s'):.1f}" for x in (alone, run1, rerun))),
        ("detctl verify run 1", "ok" if verify.returncode == 0 else f"FAIL ({verify.returncode})"),
        ("provenance: benchmarker of the decision", "; ".join(bench)),
    ]
    print(f"\nHelion matmul 2048^3 bf16, effort quick, {search}, {a.procs} processes")
    print("| measure | value |\n|---|---|")
    for k, v in rows:
        print(f"| {k} | {v} |")
    for tag, rs in (("alone", alone), ("detd run 1", run1)):
        for i, r in enumerate(rs):
            print(f"{tag} rank {i}: searches {r['searches']}, config {r['config']}")
    ok = (sum(r["searches"] for r in run1) == 1 and sum(r["searches"] for r in rerun) == 0
          and n_configs(run1 + rerun) == 1 and len({r["digest"] for r in run1 + rerun}) == 1
          and verify.returncode == 0)
    json.dump(dict(alone=alone, run1=run1, rerun=rerun), open(os.path.join(work, "helion.json"), "w"))
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
