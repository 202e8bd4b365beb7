"""What the audit's runtime findings cost a process (detd._nondet), against
a real daemon on a temporary socket, on the CPU.

    DETD_BUILD_DIR=build python3 tests/bench/bench_nondet.py [--calls 20000]

(python3: an interpreter with torch and the package, e.g. a venv of
tests/python/run_matrix.sh, with PYTHONPATH=client/python.) Prints one
table: start-up, a settings read that sends every setting (one Observe
call each) and one that sends nothing, and per call the cost the audit adds
to scaled_dot_product_attention (its wrapper, a signature already seen)
and to an op torch names nondeterministic (warn_only's warning, already
reported). Figures go to docs/determinism.md.
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("DETD_BUILD_DIR", os.path.join(REPO, "build"))


def per_call_us(cases, calls, rounds=7):
    """cases: name -> (setup, fn). Per name, the median over rounds of the
    mean time of one call in microseconds; the cases alternate within each
    round, so a busy machine slows them alike."""
    out = {k: [] for k in cases}
    for _ in range(rounds):
        for k, (setup, fn) in cases.items():
            setup()
            t = time.perf_counter()
            for _ in range(calls):
                fn()
            out[k].append((time.perf_counter() - t) / calls * 1e6)
    return {k: statistics.median(v) for k, v in out.items()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=20000)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="detd-bench-nondet-")
    sock = os.path.join(tmp, "detd.sock")
    d = subprocess.Popen([os.path.join(BUILD, "daemon", "detd"), "--socket", sock, "--state-dir", tmp],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    os.environ.update(DETD_SOCKET=sock, DETD_LIBRARY=os.path.join(BUILD, "client", "libdetd.so"),
                      TRITON_INTERPRET="1")
    try:
        import torch
        import torch.nn.functional as F

        import detd
        from detd import _nondet

        deadline = time.monotonic() + 10
        while detd.daemon_problem(sock) and time.monotonic() < deadline:
            time.sleep(0.05)
        detd.install()
        torch.set_num_threads(1)  # per-call figures: one thread, less noise from other load
        q = torch.randn(1, 2, 8, 16)
        x, i, v = torch.zeros(8), torch.tensor([1]), torch.tensor([1.0])
        t = time.perf_counter()
        _nondet.start()
        start_ms = (time.perf_counter() - t) * 1e3
        t = time.perf_counter()
        _nondet._refresh()
        send_ms = (time.perf_counter() - t) * 1e3
        t = time.perf_counter()
        _nondet._refresh()
        read_us = (time.perf_counter() - t) * 1e6
        F.scaled_dot_product_attention(q, q, q)  # the signature's first call asks torch's selection
        x.put_(i, v)  # reported once
        orig = F.scaled_dot_product_attention.__wrapped__

        def det(on):
            return lambda: torch.use_deterministic_algorithms(on, warn_only=True)

        with warnings.catch_warnings():
            warnings.simplefilter("default")
            r = per_call_us({
                "sdpa": (det(False), lambda: orig(q, q, q)),
                "sdpa_wrapped": (det(False), lambda: F.scaled_dot_product_attention(q, q, q)),
                "sdpa_audit": (det(True), lambda: F.scaled_dot_product_attention(q, q, q)),
                "probe": (det(True), lambda: _nondet._note_sdpa(torch, (q, q, q), {})),
                "put": (det(False), lambda: x.put_(i, v)),
                "put_audit": (det(True), lambda: x.put_(i, v)),
            }, a.calls)
        n = len(_nondet.findings())
    finally:
        d.terminate()
        d.wait(10)
    rows = [
        ("start (deterministic mode, showwarning, SDPA wrapper)", f"{start_ms:.2f} ms"),
        (f"settings read, sending {n - 2} findings", f"{send_ms:.2f} ms"),
        ("settings read, nothing new to send", f"{read_us:.0f} us"),
        ("scaled_dot_product_attention (1x2x8x16): plain / the wrapper alone / the audit",
         f"{r['sdpa']:.1f} / {r['sdpa_wrapped']:.1f} / {r['sdpa_audit']:.1f} us per call"),
        ("the wrapper's own work per call (a signature seen before)", f"{r['probe']:.1f} us per call"),
        ("put_ (an op torch names nondeterministic), without / with the audit",
         f"{r['put']:.1f} / {r['put_audit']:.1f} us per call"),
    ]
    print(f"torch {torch.__version__}, Python {sys.version.split()[0]}, {a.calls} calls x 7 rounds, "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print("| measure | value |\n|---|---|")
    for k, val in rows:
        print(f"| {k} | {val} |")


if __name__ == "__main__":
    main()
