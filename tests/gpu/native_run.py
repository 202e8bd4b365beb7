"""The native example on the GPU: detd_autotune() in 8 processes at once.

    python3 tests/gpu/native_run.py [--procs 8] [--work DIR] [--prebuilt DIR] [--no-torch]

Builds examples/native/ with nvcc against the bundled libdetd (run
tests/gpu/bundle.sh first: .gpu/bin/detd, .gpu/lib/libdetd.so), starts a
daemon, and runs:

  C run 1       N processes of autotune_rowsum on 3 shapes at once
  C rerun       the daemon restarted on the same state: N processes again
  torch run 1   N processes of torch_rowsum.py (the PyTorch C++ extension,
                built once with torch.utils.cpp_extension.load) on 2 new shapes
  torch rerun   the same, again
  torch on C's  the extension on the C program's 3 shapes

and prints a table: processes, keys, timing passes (the daemon's counter:
1 per key, then 0), processes agreeing on every key, distinct output
digests per key (1), and the candidates that failed in the passes (the
BLOCK=2048 variant cannot launch). Every check is asserted; the last line
is "native GPU run: PASS" or the script exits 1 naming what failed.
--prebuilt: a directory holding autotune_rowsum already built by the
Makefile (when nvcc is not on this machine). The torch rows need torch
with CUDA and a CUDA toolkit for the extension (else they are reported
as not run, and the run still fails unless --no-torch).
"""

import argparse
import collections
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
EXAMPLE = os.path.join(REPO, "examples", "native")
BIN = os.environ.get("DETD_BIN", os.path.join(REPO, ".gpu", "bin"))
LIBDIR = os.path.dirname(os.environ.get("DETD_LIBRARY", os.path.join(REPO, ".gpu", "lib", "libdetd.so")))
C_SHAPES = "4096x1024,2048x8192,1024x32768"
T_SHAPES = "8192x512,512x65536"

failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
        print(f"CHECK FAILED: {what}", flush=True)
    return ok


def env_for(extra=None):
    e = dict(os.environ)
    e["LD_LIBRARY_PATH"] = os.pathsep.join([LIBDIR, e.get("LD_LIBRARY_PATH", "")])
    e.update(extra or {})
    return e


class Daemon:
    def __init__(self, work):
        self.sock = os.path.join(work, "detd.sock")
        self.state = os.path.join(work, "state")
        self.log = open(os.path.join(work, "detd.log"), "a")
        self.p = subprocess.Popen([os.path.join(BIN, "detd"), "--socket", self.sock, "--state-dir", self.state],
                                  env=env_for(), stdout=self.log, stderr=subprocess.STDOUT)
        for _ in range(200):
            if self.detctl("health").returncode == 0:
                return
            time.sleep(0.05)
        raise SystemExit("detd did not start: see " + self.log.name)

    def detctl(self, *a):
        return subprocess.run([os.path.join(BIN, "detctl"), "--socket", self.sock, *a], env=env_for(),
                              capture_output=True, text=True)

    def passes(self):
        st = json.loads(self.detctl("status", "--json").stdout)
        return int(st.get("counters", {}).get("timing_passes", 0))

    def stop(self):
        self.p.send_signal(signal.SIGTERM)
        self.p.wait(30)
        self.log.close()


def run_procs(n, cmd, work, tag, sock):
    procs = []
    for r in range(n):
        out = os.path.join(work, f"{tag}_r{r}.jsonl")
        log = open(os.path.join(work, f"{tag}_r{r}.log"), "w")
        e = env_for({"RANK": str(r), "WORLD_SIZE": str(n), "DETD_SOCKET": sock})
        procs.append((subprocess.Popen(cmd + ["--out", out], env=e, stdout=log, stderr=subprocess.STDOUT), out, log))
    res = []
    for p, out, log in procs:
        rc = p.wait(600)
        log.close()
        if not check(rc == 0, f"{tag}: a process exited {rc} (log {log.name})"):
            sys.stdout.write(open(log.name).read()[-3000:])
            res.append({})
            continue
        rows = [json.loads(line) for line in open(out) if line.strip()]
        res.append({row["key"]: row for row in rows})
    return res


def summarize(tag, results, passes, want_passes, keys, table, baseline=None):
    n = len(results)
    agree = sum(1 for r in results if all(r.get(k, {}).get("index") == results[0].get(k, {}).get("index")
                                          for k in keys) and len(r) == len(keys))
    digests = {k: {r.get(k, {}).get("digest") for r in results} for k in keys}
    timed = collections.Counter(k for r in results for k, d in r.items() if d.get("timed_here"))
    failed = sorted({d.get("n_failed") for r in results for d in r.values() if d.get("timed_here")} - {None})
    check(passes == want_passes, f"{tag}: {passes} timing passes, expected {want_passes}")
    check(agree == n, f"{tag}: {agree}/{n} processes agree")
    check(all(len(v) == 1 for v in digests.values()), f"{tag}: output digests differ: {digests}")
    check(sum(timed.values()) == want_passes, f"{tag}: {sum(timed.values())} processes timed, expected {want_passes}")
    if baseline is not None:
        for k in keys:
            b = baseline[0].get(k, {})
            check(results[0].get(k, {}).get("index") == b.get("index") and digests[k] == {b.get("digest")},
                  f"{tag}: key {k} differs from the earlier run")
    table.append((tag, n, len(keys), passes, f"{agree}/{n}", max(len(v) for v in digests.values()),
                  ",".join(map(str, failed)) or "-"))
    return {k: results[0].get(k, {}).get("config") for k in keys}


def torch_ready():
    try:
        import torch
        from torch.utils.cpp_extension import CUDA_HOME
    except Exception as e:  # noqa: BLE001
        return f"torch not importable: {e}"
    if not torch.cuda.is_available():
        return "torch sees no CUDA device"
    if CUDA_HOME is None:
        return "no CUDA toolkit for the extension (CUDA_HOME)"
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--procs", type=int, default=8)
    ap.add_argument("--work")
    ap.add_argument("--prebuilt")
    ap.add_argument("--no-torch", action="store_true")
    a = ap.parse_args()
    for p in (os.path.join(BIN, "detd"), os.path.join(BIN, "detctl"), os.path.join(LIBDIR, "libdetd.so")):
        if not os.path.exists(p):
            raise SystemExit(f"{p} is missing: run tests/gpu/bundle.sh first")
    work = a.work or tempfile.mkdtemp(prefix="detd-native-", dir="/tmp")
    os.makedirs(work, exist_ok=True)
    include = os.path.join(REPO, "client", "include")

    if a.prebuilt:
        prog = os.path.join(a.prebuilt, "autotune_rowsum")
    else:
        nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
        build = os.path.join(work, "build")
        os.makedirs(build, exist_ok=True)
        subprocess.run(["make", "-s", "-C", EXAMPLE, f"NVCC={nvcc}", f"O={build}", f"DETD_INCLUDE={include}",
                        f"DETD_LIB={LIBDIR}", "all"], check=True)
        prog = os.path.join(build, "autotune_rowsum")
    c_keys = [f"rows={s.split('x')[0]},cols={s.split('x')[1]},dtype=float32" for s in C_SHAPES.split(",")]
    t_keys = [f"rows={s.split('x')[0]},cols={s.split('x')[1]},dtype=float32" for s in T_SHAPES.split(",")]
    table = []

    d = Daemon(work)
    c1 = run_procs(a.procs, [prog, "--shapes", C_SHAPES], work, "c_run1", d.sock)
    chosen = summarize("C run 1", c1, d.passes(), len(c_keys), c_keys, table)
    # The BLOCK=2048 variant cannot launch: failed in every pass, never chosen.
    check(all(row["n_failed"] == 1 for r in c1 for row in r.values() if row["timed_here"]),
          "C run 1: the timing processes did not report exactly 1 failed candidate")
    check(all(row["config"] != "BLOCK=2048,ITEMS=1" for r in c1 for row in r.values()), "BLOCK=2048 was chosen")
    v = d.detctl("verify")
    check(v.returncode == 0, f"detctl verify after C run 1: exit {v.returncode}\n{v.stdout}{v.stderr}")
    # Each decision says how detd_autotune() timed it: CUDA events, the
    # example's launch counts, this machine's driver.
    prov = [r["timing"] for r in json.loads(d.detctl("decisions", "--json").stdout)["decisions"]]
    provenance = sorted({(t["benchmarker"]["name"], t["benchmarker"]["warmup"], t["benchmarker"]["rep"], t["driver"])
                         for t in prov})
    check(len(prov) == len(c_keys) and all(p[0] == "detd_autotune:cuda_events" and p[3] for p in provenance),
          f"C run 1 provenance: {provenance}")
    d.stop()
    d = Daemon(work)
    c2 = run_procs(a.procs, [prog, "--shapes", C_SHAPES], work, "c_rerun", d.sock)
    summarize("C rerun (restarted daemon)", c2, d.passes(), 0, c_keys, table, baseline=c1)

    torch_note = None
    if not a.no_torch:
        torch_note = torch_ready()
    if not a.no_torch and torch_note is None:
        tb = os.path.join(work, "torch_build")
        tcmd = [sys.executable, os.path.join(EXAMPLE, "torch_rowsum.py"), "--detd-include", include,
                "--detd-lib", LIBDIR, "--build-dir", tb]
        # Build the extension once (no shape: nothing asked), then load it
        # in every process.
        subprocess.run(tcmd + ["--shapes", ""], env=env_for({"DETD_SOCKET": d.sock}), check=True)
        p0 = d.passes()
        t1 = run_procs(a.procs, tcmd + ["--shapes", T_SHAPES], work, "torch_run1", d.sock)
        summarize("torch run 1", t1, d.passes() - p0, len(t_keys), t_keys, table)
        p0 = d.passes()
        t2 = run_procs(a.procs, tcmd + ["--shapes", T_SHAPES], work, "torch_rerun", d.sock)
        summarize("torch rerun", t2, d.passes() - p0, 0, t_keys, table, baseline=t1)
        p0 = d.passes()
        t3 = run_procs(a.procs, tcmd + ["--shapes", C_SHAPES], work, "torch_on_c", d.sock)
        summarize("torch on C's keys", t3, d.passes() - p0, 0, c_keys, table, baseline=c1)
    elif not a.no_torch:
        check(False, f"torch extension not run: {torch_note}")
    v = d.detctl("verify")
    check(v.returncode == 0, f"detctl verify: exit {v.returncode}\n{v.stdout}{v.stderr}")
    verify_line = (v.stdout.strip().splitlines() or ["?"])[-1]
    dec = d.detctl("decisions")
    d.stop()

    print()
    print(f"{'run':28} {'procs':>5} {'keys':>4} {'timing passes':>13} {'agreeing':>8} "
          f"{'digests/key':>11} {'failed in pass':>14}")
    for row in table:
        print(f"{row[0]:28} {row[1]:>5} {row[2]:>4} {row[3]:>13} {row[4]:>8} {row[5]:>11} {row[6]:>14}")
    print()
    for k, cfg in chosen.items():
        print(f"  {k}: {cfg}")
    print(f"detctl verify: {verify_line}")
    print(f"C run 1 provenance (benchmarker, warmup, rep, driver): {provenance}")
    print(dec.stdout[-2000:])
    if failures:
        print(f"native GPU run: FAIL ({len(failures)} checks)")
        for f in failures:
            print(f"  - {f}")
        sys.exit(1)
    print("native GPU run: PASS")


if __name__ == "__main__":
    main()
