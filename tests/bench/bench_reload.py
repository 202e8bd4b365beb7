"""Table reload benchmark: memory kept across reloads and Decide latency
while a reload runs. Prints a table.

    python3 tests/bench/bench_reload.py [--entries 250000] [--reloads 6]

A daemon serves one generated sm90 table of --entries entries. It is
reloaded --reloads times (`detctl reload`); the daemon's resident memory
is read after the first and after each later reload, and after a reload
of an empty table (read once the daemon logged that the replaced set was
freed: that happens on a worker after the reload answered). Meanwhile detd_bench (`miss` mode: undecided keys asked
without a claim, each answered by the daemon's loop after its store and
table lookups, never from the answer cache) measures Decide latency, first
with no reload running, then while reloads run back to back.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("DETD_BUILD_DIR", REPO / "build"))
DETCTL = BUILD / "client" / "detctl"
BENCH = BUILD / "tests" / "detd_bench"


def rss_mib(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def freed_rss_mib(pid, log, n, limit_s=60.0):
    """RSS once the daemon logged its n-th "replaced tables freed" (the
    replaced set is freed on a worker after the reload answered)."""
    end = time.monotonic() + limit_s
    while log.read_text(errors="replace").count("replaced tables freed") < n:
        if time.monotonic() > end:
            raise RuntimeError(f"replaced set {n} not freed after {limit_s} s")
        time.sleep(0.05)
    return rss_mib(pid)


def write_table(path, entries):
    """entries entries: 500 kernels of entries/500 keys each."""
    per = max(1, entries // 500)
    kernels = {}
    n = 0
    k = 0
    while n < entries:
        keys = {}
        for j in range(min(per, entries - n)):
            keys[f"[i:{j},i:{k},s:\"torch.bfloat16\"]"] = {
                "kwargs": {"BLOCK": 16 << (j % 4)}, "num_warps": 4, "num_stages": 3,
                "num_ctas": 1, "maxnreg": None}
        kernels[f"bench.kernels:kernel_{k}"] = keys
        n += len(keys)
        k += 1
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"format": "detd-table-1", "arch": "sm90", "kernels": kernels}))
    tmp.rename(path)


def reload(sock):
    r = subprocess.run([str(DETCTL), "--socket", sock, "--timeout", "600000", "reload"],
                       capture_output=True, text=True,
                       timeout=600)
    if r.returncode != 0:
        raise RuntimeError(f"reload failed: {r.stdout}{r.stderr}")


def parse(line):
    return dict(kv.split("=", 1) for kv in line.split())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--entries", type=int, default=250000)
    ap.add_argument("--reloads", type=int, default=6)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="detd-bench-reload-", dir="/tmp"))
    tables = tmp / "tables"
    tables.mkdir()
    write_table(tables / "sm90.json", a.entries)
    sock = str(tmp / "detd.sock")
    log = tmp / "detd.log"
    d = subprocess.Popen([str(BUILD / "daemon" / "detd"), "--socket", sock, "--state-dir",
                          str(tmp / "state"), "--tables", str(tables), "--log-level", "info"],
                         stdout=open(log, "wb"), stderr=subprocess.STDOUT)
    try:
        for _ in range(1200):
            if subprocess.run([str(DETCTL), "--socket", sock, "health"],
                              capture_output=True).returncode == 0:
                break
            time.sleep(0.05)
        rss = [("start (one load)", rss_mib(d.pid))]
        t0 = time.monotonic()
        reload(sock)
        one = time.monotonic() - t0
        rss.append(("after reload 1", freed_rss_mib(d.pid, log, 1)))
        quiet = parse(subprocess.run(
            [str(BENCH), sock, "miss", "1000", str(a.threads), f"{max(2.0, one):.1f}"],
            capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1])
        # Reloads back to back for the whole measurement window.
        window = one * (a.reloads - 1)
        b = subprocess.Popen([str(BENCH), sock, "miss", "1000", str(a.threads), f"{window:.1f}"],
                             stdout=subprocess.PIPE, text=True)
        n = 1
        while n < a.reloads or b.poll() is None:
            reload(sock)
            n += 1
            if n <= a.reloads:
                rss.append((f"after reload {n}", freed_rss_mib(d.pid, log, n)))
        busy = parse(b.communicate()[0].strip().splitlines()[-1])
        (tables / "sm90.json").write_text(json.dumps({"format": "detd-table-1", "arch": "sm90",
                                                      "kernels": {}}))
        reload(sock)
        rss.append(("after an empty table", freed_rss_mib(d.pid, log, n + 1)))

        print(f"\n{a.entries} entries, one reload {one:.2f} s, {n} reloads in all")
        print(f"\n{'daemon RSS':24s} {'MiB':>8s} {'x reload 1':>10s}")
        base = rss[1][1]
        for what, mib in rss:
            print(f"{what:24s} {mib:8.1f} {mib / base:10.2f}")
        print(f"\n{'Decide (MISS via the loop)':28s} {'calls':>8s} {'p50 ms':>8s} {'p99 ms':>8s} "
              f"{'max ms':>8s} {'errors':>7s}")
        for what, r in (("no reload", quiet), ("reloads back to back", busy)):
            print(f"{what:28s} {int(r['calls']):8d} {float(r['p50_us']) / 1000:8.2f} "
                  f"{float(r['p99_us']) / 1000:8.2f} {float(r['max_us']) / 1000:8.2f} {r['errors']:>7s}")
        return 0
    finally:
        d.terminate()
        d.wait(60)
        subprocess.run(["rm", "-rf", str(tmp)])


if __name__ == "__main__":
    sys.exit(main())
