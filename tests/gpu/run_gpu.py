"""The GPU agreement run: N processes on one GPU, Triton's default autotuning
against detd, then kernel time and launch overhead. Prints a table.

    python3 tests/gpu/run_gpu.py [--procs 8] [--out DIR] [--no-fla]

Needs the detd binaries bundled by tests/gpu/bundle.sh under .gpu/ (or
DETD_BIN / DETD_LIBRARY pointing at a build) and the detd package on the
path (client/python is added automatically).
"""

import argparse
import collections
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
BIN = os.environ.get("DETD_BIN", os.path.join(REPO, ".gpu", "bin"))
LIB = os.environ.get("DETD_LIBRARY", os.path.join(REPO, ".gpu", "lib", "libdetd.so"))


def env_for(extra):
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join([os.path.join(REPO, "client", "python"), HERE, e.get("PYTHONPATH", "")])
    e["DETD_LIBRARY"] = LIB
    e["DETD_DETCTL"] = os.path.join(BIN, "detctl")
    e["LD_LIBRARY_PATH"] = os.pathsep.join([os.path.dirname(LIB), e.get("LD_LIBRARY_PATH", "")])
    e.update(extra)
    return e


def run_procs(n, mode, outdir, tag, extra_env=None, args=()):
    procs = []
    for r in range(n):
        out = os.path.join(outdir, f"{tag}_r{r}.json")
        e = env_for({"RANK": str(r), "LOCAL_RANK": str(r), "WORLD_SIZE": str(n), **(extra_env or {})})
        log = open(os.path.join(outdir, f"{tag}_r{r}.log"), "w")
        procs.append((subprocess.Popen([sys.executable, os.path.join(HERE, "worker.py"), "--mode", mode,
                                        "--out", out, *args], env=e, stdout=log, stderr=subprocess.STDOUT), out, log))
    res = []
    for p, out, log in procs:
        rc = p.wait()
        log.close()
        if rc != 0:
            sys.stdout.write(open(log.name).read()[-3000:])
            raise SystemExit(f"{tag}: worker exited {rc}")
        res.append(json.load(open(out)))
    return res


def agreement(results):
    """Entries where processes disagree, distinct digests per output."""
    cfg = collections.defaultdict(set)
    for r in results:
        for k, v in r["configs"].items():
            cfg[k].add(v)
    dig = collections.defaultdict(set)
    for r in results:
        for k, v in r["digests"].items():
            dig[k].add(v)
    return cfg, dig


class Daemon:
    def __init__(self, root, tables=None, args=()):
        os.makedirs(root, exist_ok=True)
        self.root = root
        self.sock = os.path.join(root, "detd.sock")
        self.state = os.path.join(root, "state")
        self.log = open(os.path.join(root, "detd.log"), "a")
        os.environ["DETD_SOCKET"] = self.sock  # for the workers' detd.install()
        extra = (["--tables", tables] if tables else []) + list(args)
        self.p = subprocess.Popen([os.path.join(BIN, "detd"), "--socket", self.sock, "--state-dir", self.state,
                                   *extra], env=env_for({}), stdout=self.log, stderr=subprocess.STDOUT)
        for _ in range(200):
            if self.detctl("health").returncode == 0:
                return
            time.sleep(0.05)
        raise SystemExit("detd did not start")

    def detctl(self, *a):
        return subprocess.run([os.path.join(BIN, "detctl"), "--socket", self.sock, *a], env=env_for({}),
                              capture_output=True, text=True)

    def status(self):
        return json.loads(self.detctl("status", "--json").stdout)

    def stop(self):
        self.p.send_signal(signal.SIGTERM)
        return self.p.wait(30)


def counter(st, name):
    return int(st.get("counters", {}).get(name, 0))


def kernel_time(work, wargs, configs, tag):
    """Kernel time of the given configs (entry -> config) against a fresh
    timed autotune: entry by entry, in one process, alternating A/B, in 2
    fresh processes. Returns (rows, fresh total ms, given total ms)."""
    cfile = os.path.join(work, f"{tag}.json")
    json.dump(configs, open(cfile, "w"))
    rows = []
    for i in range(2):
        rows += run_procs(1, "default", work, f"{tag}_fresh{i}", args=wargs + ["--compare", cfile])[0]["compare"]
    f_tot = sum(r["fresh_ms"] for r in rows)
    d_tot = sum(r["detd_ms"] for r in rows)
    return rows, f_tot, d_tot


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--procs", type=int, default=8)
    ap.add_argument("--out", default=os.environ.get("OUT") or tempfile.mkdtemp(prefix="detd-gpu-"))
    ap.add_argument("--no-fla", action="store_true")
    ap.add_argument("--phases", default="agree,time,overhead")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    work = tempfile.mkdtemp(prefix="detd-gpu-run-", dir="/tmp")
    wargs = ["--no-fla"] if a.no_fla else []
    phases = a.phases.split(",")
    n = a.procs
    table = []
    summary = {}
    d = Daemon(work)
    try:
        if "agree" in phases:
            t0 = time.time()
            default = run_procs(n, "default", work, "default", args=wargs)
            t_default = time.time() - t0
            t0 = time.time()
            run1 = run_procs(n, "detd", work, "detd1", args=wargs)
            t_run1 = time.time() - t0
            st1 = d.status()
            v1 = d.detctl("verify")
            t0 = time.time()
            run2 = run_procs(n, "detd", work, "detd2", args=wargs)
            t_run2 = time.time() - t0
            st2 = d.status()
            v2 = d.detctl("verify")
            cd, dd = agreement(default)
            c1, d1 = agreement(run1)
            c2, d2 = agreement(run2)
            d12 = collections.defaultdict(set)
            for k in d1:
                d12[k] = d1[k] | d2.get(k, set())
            print(f"\n== agreement, {n} processes on one GPU ==")
            print(f"{'entry':70s} {'default cfgs':>12s} {'detd cfgs':>9s}")
            for k in sorted(set(cd) | set(c1)):
                print(f"{k[:70]:70s} {len(cd.get(k, ())):12d} {len(c1.get(k, ())):9d}")
            print(f"\n{'output':34s} {'default digests':>15s} {'detd digests (run1+run2)':>25s}")
            for k in sorted(dd):
                print(f"{k:34s} {len(dd[k]):15d} {len(d12.get(k, ())):25d}")
            dis_default = sum(1 for v in cd.values() if len(v) > 1)
            dis_detd = sum(1 for v in c1.values() if len(v) > 1) + sum(1 for v in c2.values() if len(v) > 1)
            passes_default = sum(r["passes"] for r in default)
            passes1 = sum(r["passes"] for r in run1)
            passes2 = sum(r["passes"] for r in run2)
            summary.update({
                "entries": len(c1), "disagree_default": dis_default, "disagree_detd": dis_detd,
                "outputs_differing_default": sum(1 for v in dd.values() if len(v) > 1),
                "outputs_differing_detd": sum(1 for v in d12.values() if len(v) > 1),
                "timing_passes_default": passes_default, "timing_passes_detd_run1": passes1,
                "timing_passes_detd_run2": passes2,
                "daemon_timing_passes_run1": counter(st1, "timing_passes"),
                "daemon_timing_passes_after_run2": counter(st2, "timing_passes"),
                "detctl_verify_run1": v1.returncode, "detctl_verify_run2": v2.returncode,
                "startup_s_default_median": statistics.median(r["startup_s"] for r in default),
                "startup_s_detd_run1_median": statistics.median(r["startup_s"] for r in run1),
                "startup_s_detd_run2_median": statistics.median(r["startup_s"] for r in run2),
                "wall_s": {"default": t_default, "run1": t_run1, "run2": t_run2},
            })
            if v1.returncode != 0 or v2.returncode != 0:
                print(v1.stdout, v1.stderr, v2.stdout, v2.stderr)
        if "time" in phases:
            # Kernel time of detd's committed configs against a fresh timed
            # autotune: entry by entry, in one process, alternating A/B.
            if "agree" in phases:
                decided = run1[0]["configs"]
            else:
                decided = run_procs(1, "detd", work, "decide", args=wargs)[0]["configs"]
            rows, f_tot, d_tot = kernel_time(work, wargs, decided, "decided")
            diff = [r for r in rows if not r["same"]]
            print(f"\n== kernel time: detd's configs vs a fresh timed autotune (2 fresh processes) ==")
            print(f"{'entry':60s} {'fresh cfg':>30s} {'ms':>8s} {'detd cfg':>30s} {'ms':>8s}")
            for r in diff:
                print(f"{r['entry'][:60]:60s} {r['fresh'][-30:]:>30s} {r['fresh_ms']:8.4f} "
                      f"{r['detd'][-30:]:>30s} {r['detd_ms']:8.4f}")
            same = sum(1 for r in rows if r["same"])
            print(f"entries compared {len(rows)} ({same} with the same config); total kernel time: "
                  f"fresh autotune {f_tot:.4f} ms, detd {d_tot:.4f} ms ({(d_tot / f_tot - 1) * 100:+.2f}%)")
            summary.update({"compared_entries": len(rows), "same_config_entries": same,
                            "kernel_ms_fresh_autotune": f_tot, "kernel_ms_detd": d_tot,
                            "detd_vs_fresh": d_tot / f_tot - 1.0})
        if "overhead" in phases:
            plain, hooked = [], []
            for _ in range(3):
                plain += run_procs(1, "default", work, f"plain{len(plain)}", args=["--launch-overhead"])
                hooked += run_procs(1, "detd", work, f"hooked{len(hooked)}", args=["--launch-overhead"])
            pu = statistics.median(r["launch_us"] for r in plain)
            hu = statistics.median(r["launch_us"] for r in hooked)
            gpu_p = statistics.median(r["gpu_bound_launch_us"] for r in plain)
            gpu_h = statistics.median(r["gpu_bound_launch_us"] for r in hooked)
            print(f"\n== launch on a decided key: unpatched Triton vs detd (3 processes each, median) ==")
            print(f"tiny kernel (host-bound)   {pu:8.2f} us  {hu:8.2f} us  {(hu / pu - 1) * 100:+.1f}%")
            print(f"4096x16384 row sum         {gpu_p:8.2f} us  {gpu_h:8.2f} us  {(gpu_h / gpu_p - 1) * 100:+.1f}%")
            summary.update({"launch_us_plain": pu, "launch_us_detd": hu, "launch_overhead": hu / pu - 1.0,
                            "gpu_bound_us_plain": gpu_p, "gpu_bound_us_detd": gpu_h,
                            "gpu_bound_overhead": gpu_h / gpu_p - 1.0,
                            "launch_plain_runs": [r["launch_us"] for r in plain],
                            "launch_detd_runs": [r["launch_us"] for r in hooked]})
        if "paired" in phases:
            r = run_procs(1, "detd", work, "paired", args=["--launch-paired"])[0]
            print(f"\n== launch on a decided key, unpatched and detd alternated in one process "
                  f"(10 x 5000 launches each, median) ==")
            print(f"tiny kernel (host-bound)   {r['paired_plain_us']:8.2f} us  {r['paired_detd_us']:8.2f} us  "
                  f"{r['paired_overhead'] * 100:+.1f}%  (median paired difference "
                  f"{r['paired_diff_us_median']:+.2f} us; direct launch path: {r['direct']})")
            summary.update({k: v for k, v in r.items() if k.startswith("paired") or k == "direct"})
        tdir = os.path.join(REPO, "tables")  # the shipped tables
        if "record" in phases:
            # Record a table: a fresh daemon, every process in record mode
            # (each times as Triton would and votes), the majority exported.
            rd = Daemon(os.path.join(work, "record"))
            try:
                rec = run_procs(n, "detd", rd.root, "record", extra_env={"DETD_MODE": "record"}, args=wargs)
                votes = json.loads(rd.detctl("votes", "--json").stdout)
                tdir = os.path.join(a.out, "tables")
                os.makedirs(tdir, exist_ok=True)
                ex = rd.detctl("table", "export", "--arch", "sm90", "--votes", "--source",
                               f"detd GPU suite (tests/gpu): record mode, {n} processes on one H200, "
                               "majority of their timing-pass winners", "-o", os.path.join(tdir, "sm90.json"))
            finally:
                rd.stop()
            print(f"\n== record mode: {n} processes, every one times every key ==")
            print(ex.stdout.strip(), ex.stderr.strip())
            summary.update({"record_timing_passes": sum(r["passes"] for r in rec),
                            "record_votes": len(votes["votes"]), "record_export_exit": ex.returncode})
            if ex.returncode != 0:
                raise SystemExit("table export failed")
        if "table" in phases:
            # Table only: pinned mode against the recorded (or shipped) table.
            td = Daemon(os.path.join(work, "table"), tables=tdir)
            try:
                tab = run_procs(n, "detd", td.root, "table", extra_env={"DETD_MODE": "pinned"}, args=wargs)
                stt = td.status()
                vt = td.detctl("verify")
            finally:
                td.stop()
            ct, dt = agreement(tab)
            sources = collections.Counter(v for r in tab for v in r.get("sources", {}).values())
            rows, f_tot, t_tot = kernel_time(work, wargs, tab[0]["configs"], "table")
            print(f"\n== table only (pinned), {n} processes ==")
            print(f"entries {len(ct)}, disagreeing {sum(1 for v in ct.values() if len(v) > 1)}, "
                  f"outputs with >1 digest {sum(1 for v in dt.values() if len(v) > 1)}, "
                  f"timing passes {sum(r['passes'] for r in tab)}, sources {dict(sources)}, "
                  f"detctl verify exit {vt.returncode}")
            print(f"kernel time: fresh autotune {f_tot:.4f} ms, table {t_tot:.4f} ms "
                  f"({(t_tot / f_tot - 1) * 100:+.2f}%)")
            summary.update({"table_entries": len(ct), "table_disagree": sum(1 for v in ct.values() if len(v) > 1),
                            "table_outputs_differing": sum(1 for v in dt.values() if len(v) > 1),
                            "table_timing_passes": sum(r["passes"] for r in tab),
                            "table_sources": dict(sources), "table_hits": counter(stt, "table_hits"),
                            "table_daemon_timing_passes": counter(stt, "timing_passes"),
                            "table_verify_exit": vt.returncode, "table_kernel_ms_fresh": f_tot,
                            "table_kernel_ms": t_tot, "table_vs_fresh": t_tot / f_tot - 1.0})
    finally:
        rc = d.stop()
        summary["daemon_exit"] = rc
        shutil.copy(os.path.join(work, "detd.log"), os.path.join(a.out, "detd.log"))
    json.dump(summary, open(os.path.join(a.out, "summary.json"), "w"), indent=1)
    print("\n== summary ==")
    for k, v in summary.items():
        print(f"{k:34s} {v}")


if __name__ == "__main__":
    main()
