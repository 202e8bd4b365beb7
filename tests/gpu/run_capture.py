"""CUDA graphs captured while a key is still being timed, on one GPU.

    python3 tests/gpu/run_capture.py [--out DIR]

Four processes against one daemon (binaries: .gpu/ from tests/gpu/bundle.sh,
or DETD_BIN and DETD_LIBRARY), one autotuned row-sum kernel (its BLOCK
changes the reduction order, so the output bits tell configs apart):

``holder`` (rank 1)
    Is designated for the key and held in its timing pass until the three
    others are where the test wants them; its timer then ranks the largest
    BLOCK fastest (a fixed ranking: the decision is never the cheapest
    fallback, so the bits tell them apart). Launches the decision eagerly.
``wait`` (rank 0, ``DETD_CAPTURE=wait``)
    Its wait runs out (``DETD_TIMEOUT_MS=2000``, ``on_miss=cheapest``): a
    warm-up launch of the fallback, then ``torch.cuda.graph`` at once: the
    capture waits for the decision and records it (the decided config
    compiles in the capture).
``final`` (rank 2, ``DETD_CAPTURE=wait``)
    The same fallback, then ``detd.wait_final()``, a warm-up launch (the
    decision, compiled eagerly), then the capture: the flow docs/python.md
    recommends.
``warn`` (rank 3, ``DETD_CAPTURE=warn``)
    The same fallback, then the capture at once: a warning naming the key
    and its holder, and the graph records the fallback (the control).

Each capturing process replays its graph and digests the output. Prints a
table and PASS when: the holder timed the key once; the ``wait`` and
``final`` graphs replay the holder's bytes (the decision) and their cache
holds the decision; the ``warn`` process warned once, naming the key, and
its graph replays the fallback's bytes (different from the decision's).
Under 2 minutes on an H200.
"""

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

ROWS, N = 64, 8192
BLOCKS = (256, 512, 1024, 2048)
TIMEOUT_MS = 2000  # the capturers' wait before they fall back
BOUND_S = 100  # every phase; the whole run stays under 2 minutes


# ---------------------------------------------------------------- worker

def wait_file(path):
    end = time.monotonic() + BOUND_S
    while not os.path.exists(path):
        if time.monotonic() > end:
            raise SystemExit(f"gave up waiting for {path}")
        time.sleep(0.01)


def worker(role, work, out_path):
    import torch
    import triton

    import detd
    import kernels

    detd.install()
    calls = []

    def bench(kernel_call, quantiles=None, **kw):
        # The holder: held until the others are in place, then a fixed
        # ranking (largest BLOCK fastest), after a real launch.
        if not calls:
            open(os.path.join(work, "holder.timing"), "w").close()
            wait_file(os.path.join(work, "gate"))
        kernel_call()
        torch.cuda.synchronize()
        calls.append(1)
        ms = 1.0 + (len(BLOCKS) - 1 - BLOCKS.index(block[0]))
        return [ms for _ in quantiles] if quantiles else ms

    block = [None]

    def note(nargs):
        block[0] = nargs.get("BLOCK")

    # The agreement run's row-sum (kernels.py), with these candidates and timer.
    row_sum_kernel = triton.autotune(
        configs=[triton.Config({"BLOCK": b}, num_warps=4, num_stages=1, pre_hook=note) for b in BLOCKS],
        key=["N"], do_bench=bench)(kernels.row_sum_kernel.fn)

    g = torch.Generator(device="cuda").manual_seed(7)
    x = torch.randn(ROWS, N, device="cuda", generator=g) * 1e3
    y = torch.empty(ROWS, device="cuda")

    def launch():
        row_sum_kernel[(ROWS,)](x, y, N, x.stride(0))

    def cached():
        from detd import _triton

        cfg = dict.get(row_sum_kernel.cache, (N, "torch.float32", "torch.float32"))
        return _triton.config_string(cfg) if cfg is not None else None

    def digest():
        torch.cuda.synchronize()
        return hashlib.sha256(y.cpu().numpy().tobytes()).hexdigest()[:16]

    out = dict(role=role, warnings=[])
    if role != "holder":
        wait_file(os.path.join(work, "holder.timing"))
    launch()
    out["eager_config"], out["eager_digest"] = cached(), digest()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if role == "final":
            t0 = time.monotonic()
            open(os.path.join(work, f"{role}.ready"), "w").close()
            out["wait_final"] = detd.wait_final(BOUND_S)
            out["wait_final_s"] = round(time.monotonic() - t0, 2)
            launch()  # the warm-up of the decided config
        if role != "holder":
            if role != "final":
                open(os.path.join(work, f"{role}.ready"), "w").close()
            graph = torch.cuda.CUDAGraph()
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            t0 = time.monotonic()
            try:
                with torch.cuda.graph(graph, stream=s):
                    launch()
                out["capture_s"] = round(time.monotonic() - t0, 2)
                y.zero_()
                graph.replay()
                out["graph_digest"] = digest()
            except Exception as e:  # noqa: BLE001 - reported in the table
                out["capture_error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
            out["graph_config"] = cached()
        out["warnings"] = [str(w.message) for w in caught if "CUDA graph capture" in str(w.message)]
    out["bench_calls"] = len(calls)
    out["stats"] = {k: v for k, v in detd.stats().items() if k.startswith(("final_", "capture_", "fallbacks"))}
    with open(out_path, "w") as f:
        json.dump(out, f, default=str)


# ---------------------------------------------------------------- orchestrator

# rank, settings. The capture's own wait is bounded by the run's bound,
# not by the short DETD_TIMEOUT_MS that made these processes fall back.
WAIT = {"DETD_CAPTURE": "wait", "DETD_CAPTURE_WAIT_S": str(BOUND_S)}
ROLES = {"holder": (1, {}), "wait": (0, WAIT), "final": (2, WAIT), "warn": (3, {"DETD_CAPTURE": "warn"})}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT") or tempfile.mkdtemp(prefix="detd-capture-"))
    ap.add_argument("--role")
    ap.add_argument("--work")
    a = ap.parse_args()
    if a.role:
        return worker(a.role, a.work, os.path.join(a.work, f"{a.role}.json"))
    from run_gpu import Daemon, env_for

    os.makedirs(a.out, exist_ok=True)
    work = tempfile.mkdtemp(prefix="detd-capture-run-", dir="/tmp")
    t_start = time.monotonic()
    d = Daemon(os.path.join(work, "daemon"))
    procs = {}
    try:
        for role, (rank, extra) in ROLES.items():
            env = env_for({"RANK": str(rank), "LOCAL_RANK": "0", "WORLD_SIZE": str(len(ROLES)),
                           "DETD_SOCKET": d.sock, **extra})
            if role != "holder":
                env.update(DETD_TIMEOUT_MS=str(TIMEOUT_MS), DETD_ON_MISS="cheapest")
            log = open(os.path.join(a.out, f"{role}.log"), "w")
            procs[role] = (subprocess.Popen([sys.executable, __file__, "--role", role, "--work", work], env=env,
                                            stdout=log, stderr=subprocess.STDOUT), log)
        # The holder opens its pass once the capturers fell back and are
        # at (or waiting in) their capture: "wait" in the daemon's waiters.
        end = time.monotonic() + BOUND_S
        while not (all(os.path.exists(os.path.join(work, f"{r}.ready")) for r in ("wait", "final", "warn"))
                   and os.path.exists(os.path.join(work, "warn.json")) and d.status().get("waiters", 0) >= 2):
            dead = [r for r, (p, _) in procs.items() if p.poll() not in (None, 0)]
            if dead or time.monotonic() > end:
                for r, (p, _) in procs.items():
                    p.kill()
                raise SystemExit(f"FAIL: {'exited: ' + ', '.join(dead) if dead else 'not in place'}; logs in {a.out}")
            time.sleep(0.05)
        open(os.path.join(work, "gate"), "w").close()
        for role, (p, log) in procs.items():
            rc = p.wait(BOUND_S)
            log.close()
            if rc != 0:
                sys.stdout.write(open(log.name).read()[-3000:])
                raise SystemExit(f"FAIL: {role} exited {rc}; logs in {a.out}")
        st = d.status()
    finally:
        d.stop()
    r = {role: json.load(open(os.path.join(work, f"{role}.json"))) for role in ROLES}
    json.dump(r, open(os.path.join(a.out, "capture.json"), "w"), indent=1)
    h = r["holder"]
    decided, dec_digest = h["eager_config"], h["eager_digest"]
    fb_digest = r["warn"]["eager_digest"]
    print(f"\nCUDA graph capture while rank 1 times the key ({len(BLOCKS)} candidates, N={N})")
    print("| process | DETD_CAPTURE | eager launch | capture waited s | graph's config | graph replays | warnings |")
    print("|---|---|---|---|---|---|---|")
    for role in ROLES:
        x = r[role]
        dg = x.get("graph_digest")
        replays = "-" if role == "holder" else x.get("capture_error") or (
            "the decision" if dg == dec_digest else "the fallback" if dg == fb_digest else f"other ({dg})")
        print(f"| {role} (rank {ROLES[role][0]}) | {ROLES[role][1].get('DETD_CAPTURE', '-')} | "
              f"{(x['eager_config'] or '').split(',')[0]} | {x.get('capture_s', '-')} | "
              f"{(x.get('graph_config') or '-').split(',')[0]} | {replays} | {len(x['warnings'])} |")
    print(f"\ndecision: {decided}; timing passes (daemon): {int(st.get('counters', {}).get('timing_passes', 0))}; "
          f"total {time.monotonic() - t_start:.0f} s; logs and JSON in {a.out}")
    fails = []
    if h["bench_calls"] != len(BLOCKS):
        fails.append(f"the holder timed {h['bench_calls']} candidates, not {len(BLOCKS)}")
    if dec_digest == fb_digest:
        fails.append("the fallback's bytes equal the decision's: the control tells nothing")
    for role in ("wait", "final"):
        x = r[role]
        if x.get("graph_digest") != dec_digest or x.get("graph_config") != decided:
            fails.append(f"{role}: the graph does not replay the decision ({x.get('capture_error') or x.get('graph_config')})")
        if x["warnings"]:
            fails.append(f"{role}: warned: {x['warnings'][0][:200]}")
    w = r["warn"]
    if len(w["warnings"]) != 1 or "has been timing it" not in w["warnings"][0]:
        fails.append(f"warn: expected one warning naming the holder, got {w['warnings']}")
    if w.get("graph_digest") != fb_digest:
        fails.append("warn: the graph does not replay the fallback")
    for f in fails:
        print(f"FAIL: {f}")
    print("PASS" if not fails else "FAIL")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
