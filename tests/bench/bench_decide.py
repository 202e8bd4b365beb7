"""Decide benchmark of the standalone daemon. Prints a table.

    python3 tests/bench/bench_decide.py [--seconds 3] [--keys 100000]

In one run, on decided keys: Decide latency p50/p99 through libdetd against
the grpc.health.v1 Check round trip on the same socket (the floor: same
transport, same rpc thread and loop hop, no store lookup); throughput with
1, 4 and 16 client threads sharing one libdetd handle; the daemon's
resident memory once it holds --keys decisions and has served them.
"""
import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("DETD_BUILD_DIR", REPO / "build"))


def rss_kib(pid):
    vals = {}
    for line in open(f"/proc/{pid}/status"):
        k, _, v = line.partition(":")
        if k in ("VmRSS", "VmHWM"):
            vals[k] = int(v.split()[0])
    return vals


def parse(line):
    return dict(kv.split("=", 1) for kv in line.split())


def bench(sock, *args):
    r = subprocess.run([str(BUILD / "tests" / "detd_bench"), sock, *map(str, args)], capture_output=True,
                       text=True, check=True)
    return parse(r.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--keys", type=int, default=100000)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="detd-bench-", dir="/tmp")
    sock = f"{tmp}/detd.sock"
    d = subprocess.Popen([str(BUILD / "daemon" / "detd"), "--socket", sock, "--state-dir", f"{tmp}/state",
                          "--log-level", "warn",
                          # One process populates every key: no per-client caps.
                          "--max-new-keys-per-session", "0", "--max-new-keys-per-uid", "0",
                          "--max-store-kib-per-session", "0", "--max-store-kib-per-uid", "0"])
    try:
        # Serving: a health check is answered (detd_bench's "health" mode
        # fails until then).
        for _ in range(100):
            if os.path.exists(sock) and subprocess.run(
                    [str(BUILD / "client" / "detctl"), "--socket", sock, "health"],
                    capture_output=True).returncode == 0:
                break
            time.sleep(0.05)
        pop = bench(sock, "populate", 1000, 4)
        rows = []
        h1 = bench(sock, "health", 1, a.seconds)
        d1 = bench(sock, "decide", 1000, 1, a.seconds)
        print(f"\n{'one thread, decided keys':28s} {'p50 us':>8s} {'p99 us':>8s} {'calls/s':>9s}")
        print(f"{'health check (floor)':28s} {float(h1['p50_us']):8.1f} {float(h1['p99_us']):8.1f} {float(h1['per_s']):9.0f}")
        print(f"{'Decide via libdetd':28s} {float(d1['p50_us']):8.1f} {float(d1['p99_us']):8.1f} {float(d1['per_s']):9.0f}")
        ratio = float(d1["p50_us"]) / float(h1["p50_us"])
        print(f"{'Decide p50 / floor p50':28s} {ratio:8.2f}   (target <= 1.5)")
        print(f"\n{'threads':>7s} {'Decide/s':>9s} {'p50 us':>8s} {'p99 us':>8s} {'health/s':>9s} {'errors':>6s}")
        for t in (1, 4, 16):
            dt = bench(sock, "decide", 1000, t, a.seconds)
            ht = bench(sock, "health", t, a.seconds)
            print(f"{t:7d} {float(dt['per_s']):9.0f} {float(dt['p50_us']):8.1f} {float(dt['p99_us']):8.1f} "
                  f"{float(ht['per_s']):9.0f} {int(dt['errors']):6d}")
            rows.append((t, dt))
        before = rss_kib(d.pid)
        pop = bench(sock, "populate", a.keys, 4)
        served = bench(sock, "decide", a.keys, 4, a.seconds)
        after = rss_kib(d.pid)
        db = Path(tmp, "state", "detd.sqlite").stat().st_size
        print(f"\n{'decisions':>9s} {'populate/s':>10s} {'RSS MiB':>8s} {'peak MiB':>8s} {'db MiB':>7s} "
              f"{'hits/s':>8s}   (target RSS < 64 MiB)")
        print(f"{1000:9d} {'':>10s} {before['VmRSS'] / 1024:8.1f} {before['VmHWM'] / 1024:8.1f}")
        print(f"{a.keys:9d} {float(pop['per_s']):10.0f} {after['VmRSS'] / 1024:8.1f} {after['VmHWM'] / 1024:8.1f} "
              f"{db / 2**20:7.1f} {float(served['per_s']):8.0f}")
        errors = int(pop["errors"]) + int(served["errors"]) + sum(int(r["errors"]) for _, r in rows)
        if errors:
            print(f"errors: {errors}")
            return 1
    finally:
        d.send_signal(signal.SIGTERM)
        d.wait(30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
