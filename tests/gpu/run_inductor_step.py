"""Step time of a GPU-bound model under torch.compile: default Inductor
autotuning against detd, one process at a time alone on the GPU, with the
default's own spread between rounds as the noise floor. Prints a table
and exits non-zero when detd is more than 1% slower than the default or a
detd claim does not hold.

    python3 tests/gpu/run_inductor_step.py [--rounds 3] [--steps 100]
                                           [--dims 4096,8192,4096,8192] [--budget-s 520] [--out DIR]

Each round runs one default process (detd in ``auto`` mode, which leaves
Inductor alone: it autotunes by itself, with a fresh cache folder, so
every round is a new default autotune) and one detd process
(coordinated, one daemon for all rounds: the first detd process times
the keys, the later ones read the decided store and time nothing). The
order alternates between rounds so that a drift of the machine does not
land on one side. The model is inductor_train.py's MLP at --dims, large
enough that the step is bound by the GPU (about 3 TFLOP of TF32 GEMMs
per step at the default dims) and not by the host's launches.

Reported per round: the median CUDA-event step time of each process.
Then: detd's median over rounds against the default's median, the
default's own spread (max/min over its rounds: what a second default run
can differ by), and for each GEMM selection key whether the default
rounds and detd chose the same algorithm. --budget-s stops starting
rounds when the next would not finish in time (one call's limit).

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


def run_one(mode, work, tag, steps, dims, extra, profile_steps):
    """One process alone on the GPU (run_inductor.run_procs with n = 1)."""
    return run_procs(1, mode, work, tag, steps, extra, dims, profile_steps)[0]


def selections(r):
    """GEMM selection key -> the chosen algorithm."""
    return {k: v for k, v in r["choices"].items() if '[s:"select"' in k}


def summarize(rows, default, detd, passes):
    """The comparison, from the rounds' rows ((round, order, default ms,
    detd ms, compile s, compile s)), the processes' results and the detd
    timing passes of each round."""
    md = statistics.median(r[2] for r in rows)
    mx = statistics.median(r[3] for r in rows)
    mean_ratio = statistics.mean(r[3] for r in rows) / statistics.mean(r[2] for r in rows)
    sel_x = selections(detd[0])
    others = {k: c for k, c in detd[0]["choices"].items() if k not in sel_x}

    def per_kernel(rs):
        names = {n for r in rs for n in r.get("kernels_us") or {}}
        return {n: statistics.mean((r.get("kernels_us") or {}).get(n, [0, 0.0])[1] for r in rs) for n in names}

    detd_choices = [r["choices"] for r in detd]
    detd_losses = [r["losses"] for r in detd]
    return dict(
        default_ms=md, detd_ms=mx, ratio=mx / md, mean_ratio=mean_ratio,
        default_spread=max(r[2] for r in rows) / min(r[2] for r in rows),
        detd_spread=max(r[3] for r in rows) / min(r[3] for r in rows),
        selections=sel_x,
        same_selection={k: sum(1 for r in default if selections(r).get(k) == c) for k, c in sel_x.items()},
        other_keys=len(others),
        differ={k: [str(r["choices"].get(k)) for r in default] for k, c in others.items()
                if any(r["choices"].get(k) != c for r in default)},
        kernels_default=per_kernel(default), kernels_detd=per_kernel(detd),
        checks={
            "detd step time within 1% of default (median over rounds)": mx / md <= 1.01,
            "first detd process timed its keys": passes[0] > 0,
            "later detd processes timed nothing": all(p == 0 for p in passes[1:]),
            "detd choices identical in every round": all(c == detd_choices[0] for c in detd_choices),
            "detd losses bit-identical in every round": all(x == detd_losses[0] for x in detd_losses),
        })


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--dims", default="4096,8192,4096,8192", help="d_in,d_hid,n_cls,batch")
    ap.add_argument("--budget-s", type=float, default=520.0)
    ap.add_argument("--profile-steps", type=int, default=5,
                    help="steps each process runs under torch.profiler after the timed ones (0: none)")
    ap.add_argument("--out", default=os.environ.get("OUT") or tempfile.mkdtemp(prefix="detd-step-"))
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    work = tempfile.mkdtemp(prefix="detd-step-run-", dir="/tmp")
    t_start = time.time()
    rows, default, detd = [], [], []
    d = Daemon(os.path.join(work, "daemon"))
    try:
        st_prev = d.status()
        passes = []
        longest = 0.0
        for i in range(a.rounds):
            if i > 0 and time.time() - t_start + longest > a.budget_s:
                print(f"(stopping after {i} rounds: the next would pass --budget-s {a.budget_s:.0f})")
                break
            t0 = time.time()
            order = ["default", "detd"] if i % 2 == 0 else ["detd", "default"]
            got = {}
            for mode in order:
                extra = {"DETD_NAMESPACE": f"step-default{i}"} if mode == "default" else {}
                got[mode] = run_one(mode, work, f"{mode}{i}", a.steps, a.dims, extra, a.profile_steps)
            st = d.status()
            passes.append(counter(st, "timing_passes") - counter(st_prev, "timing_passes"))
            st_prev = st
            default.append(got["default"])
            detd.append(got["detd"])
            sd, sx = statistics.median(got["default"]["step_ms"]), statistics.median(got["detd"]["step_ms"])
            rows.append((i + 1, "/".join(order), sd, sx, got["default"]["compile_s"], got["detd"]["compile_s"]))
            longest = max(longest, time.time() - t0)
        v = d.detctl("verify")
    finally:
        rc = d.stop()

    first = default[0]
    print(f"\n== step time alone on {first['device']}, torch {first['torch']}, "
          f"torch.compile(mode='max-autotune'), MLP dims {a.dims}, {a.steps} steps per process ==")
    print(f"{'round':5s} {'order':16s} {'default ms':>10s} {'detd ms':>9s} {'detd/default':>12s} "
          f"{'compile s def/detd':>18s} {'detd passes':>11s}")
    for (i, order, sd, sx, cd, cx), p in zip(rows, passes):
        print(f"{i:5d} {order:16s} {sd:10.3f} {sx:9.3f} {sx / sd:11.4f}x {cd:8.1f}/{cx:<9.1f} {p:11d}")
    m = summarize(rows, default, detd, passes)
    print(f"median over rounds: default {m['default_ms']:.3f} ms, detd {m['detd_ms']:.3f} ms: detd/default "
          f"{m['ratio']:.4f}x ({(m['ratio'] - 1) * 100:+.2f}%); means: {m['mean_ratio']:.4f}x")
    print(f"noise floor: the default's own rounds span {((m['default_spread'] - 1) * 100):.2f}% (max/min); "
          f"detd's rounds span {((m['detd_spread'] - 1) * 100):.2f}%")
    sel_x = m["selections"]
    print(f"GEMM selections: {len(sel_x)} keys; default rounds choosing detd's algorithm, per key: "
          f"{sorted(m['same_selection'].values())} of {len(default)}")
    for k, c in sorted(sel_x.items()):
        dflt = sorted({str(selections(r).get(k)) for r in default})
        print(f"  {k[:90]}\n      detd {c}; default {dflt}")
    print(f"pointwise/reduction keys: {m['other_keys']}; on which a default round chose another config: "
          f"{len(m['differ'])}")
    for k in sorted(m["differ"]):
        print(f"  {k[:90]}\n      detd {detd[0]['choices'][k]}; default {m['differ'][k]}")
    kd, kx = m["kernels_default"], m["kernels_detd"]
    if kx:
        print(f"GPU time per step by kernel (torch.profiler, {a.profile_steps} steps per process, mean over "
              f"rounds): default {sum(kd.values()) / 1000:.3f} ms, detd {sum(kx.values()) / 1000:.3f} ms; "
              f"largest differences:")
        names = sorted(set(kd) | set(kx), key=lambda n: -abs(kx.get(n, 0) - kd.get(n, 0)))
        for n in names[:12]:
            print(f"  {kd.get(n, 0):9.1f} us {kx.get(n, 0):9.1f} us {kx.get(n, 0) - kd.get(n, 0):+8.1f}  {n[:80]}")
    checks = dict(m["checks"], **{"detctl verify": v.returncode == 0})
    print(f"detctl verify exit {v.returncode}: {v.stdout.strip().splitlines()[-1] if v.stdout.strip() else ''}; "
          f"daemon exit {rc}; wall {time.time() - t_start:.0f} s")
    for name, ok in checks.items():
        print(f"  {'ok ' if ok else 'FAIL'} {name}")
    json.dump(dict(dims=a.dims, steps=a.steps, rows=rows, passes=passes, ratio=m["ratio"],
                   mean_ratio=m["mean_ratio"], default_spread=m["default_spread"],
                   detd_spread=m["detd_spread"], checks=checks,
                   step_ms={"default": [r["step_ms"] for r in default], "detd": [r["step_ms"] for r in detd]},
                   choices={"detd": detd[0]["choices"], "default": [r["choices"] for r in default]},
                   kernels_us={"detd": [r["kernels_us"] for r in detd],
                               "default": [r["kernels_us"] for r in default]}),
              open(os.path.join(a.out, "inductor_step.json"), "w"), indent=1)
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
