"""What each determinism setting costs, and what each is for: the Hugging
Face Llama of run_hf_llama.py (hf_llama_train.py) trained under detd with
one set of torch settings after another, all from the same decisions.

    python3 tests/gpu/run_hf_settings.py [--lock-in FILE] [--procs 2] [--variants V;V;...]
                                         [--default-procs 1] [--timed-steps 50] [--budget-s 560]
                                         [--cap-s 150] [--default-first] [--default-cap-s 240]
                                         [--cpu] [--out DIR]

One daemon and store for the whole script; --lock-in FILE imports a
lockfile first (`detctl lock import`, e.g. the one run_hf_llama.py
--lock-out wrote), so that every variant runs the same configs and times
nothing. Each variant is --procs processes with hf_llama_train.py
--settings V (its names: apply_settings() there; "recommended" stands
for docs/determinism.md's set; "audit" turns the audit on, DETD_AUDIT=1,
which changes what runs: it turns on deterministic algorithms in
warn-only mode where they are off) and a job of its own; the variants share each rank's Inductor and Triton caches (torch
keys its graph cache by the deterministic-algorithm settings, so a
variant never reuses another's graph compiled under other settings).
Then (or first, --default-first), with --default-procs N and budget
left, default torch.compile
(detd not imported, torch's defaults, its own caches): the step time of
the configs each process picks by itself, in the same call.

Prints one table, a row per variant: processes reaching the last hashed
step, processes whose parameters, every loss and every gradient equal
rank 0's, whether rank 0's bits equal the first variant's, the SDPA
backward the eager probe ran, CUDA graph skips (Inductor's counter), the
daemon's timing passes during the variant, the median step time (median
over processes of each one's median over --timed-steps steps, timed one
process at a time) and its ratio to the first variant's, and what
`detctl verify --strict-determinism --job` says (exit and NONDET lines).

--cpu: a tiny model on the CPU with torch.compile's default mode, to
check the script (DETD_BIN, DETD_LIBRARY: the local build).
"""

import argparse
import json
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from hf_llama_train import RECOMMENDED  # noqa: E402
from run_gpu import Daemon, counter  # noqa: E402
from run_hf_llama import fmt, hf_path, launch, lock_import, same_as_rank0, same_bits, step_ms, wall_to_step  # noqa: E402

VARIANTS = ("torch defaults=;torch defaults, audit on=audit;recommended=recommended;"
            "recommended, no NaN fill=recommended,nofill;cuDNN attention off=cublas_ws,no_cudnn_sdp;"
            "math attention=cublas_ws,math_sdp")


def parse_variants(text):
    """[(label, settings, audit)] from 'label=names;label=names'
    ("recommended" in names stands for hf_llama_train.RECOMMENDED;
    "audit" is not a setting but the audit on, DETD_AUDIT=1, which turns
    on deterministic algorithms in warn-only mode where they are off)."""
    out = []
    for item in (x.strip() for x in text.split(";")):
        if not item:
            continue
        label, sep, names = item.partition("=")
        if not sep:
            raise SystemExit(f"--variants: '{item}' is not label=settings")
        names = [RECOMMENDED if n == "recommended" else n for n in names.split(",") if n]
        out.append((label.strip(), ",".join(n for n in names if n != "audit"), "audit" in names))
    if not out:
        raise SystemExit("--variants: none given")
    return out


def reached(res):
    """Processes that reached the last hashed step."""
    return sum(r is not None and "params" in r for r in res)


def cells(res, capped, base_r0, base_ms, passes="-"):
    """A run's cells of the table, from "reached step" to "vs first"."""
    n, ms = len(res), step_ms(res)
    return [f"{reached(res)}/{n}{' capped' if capped else ''}", f"{same_as_rank0(res)[1]}/{n}",
            "yes" if same_bits(res[0], base_r0) else "no",
            "/".join(sorted({b for r in res if r for b in r["sdpa_backward"]})) or "-",
            "/".join(map(str, sorted({(r or {}).get("cudagraph_skips", "?") for r in res if r}))) or "-",
            str(passes), fmt(wall_to_step(res)), fmt(ms, ".2f"), fmt(ms / base_ms if ms and base_ms else None, ".3f")]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lock-in", default=None, help="lockfile imported into the fresh store first")
    ap.add_argument("--procs", type=int, default=2)
    ap.add_argument("--variants", default=VARIANTS, help="label=settings;... (the first is the ratios' base)")
    ap.add_argument("--default-procs", type=int, default=0,
                    help="then default torch.compile (detd not imported) in this many processes")
    ap.add_argument("--steps", type=int, default=None, help="hashed steps (default 10; 2 with --cpu)")
    ap.add_argument("--timed-steps", type=int, default=None, help="timed steps (default 50; 0 with --cpu)")
    ap.add_argument("--dims", default=None, help="as run_hf_llama.py")
    ap.add_argument("--budget-s", type=float, default=560.0, help="the whole script's seconds")
    ap.add_argument("--cap-s", type=float, default=150.0, help="each variant's cap (seconds)")
    ap.add_argument("--default-first", action="store_true", help="the default run before the variants")
    ap.add_argument("--default-cap-s", type=float, default=240.0, help="the default run's cap (seconds)")
    ap.add_argument("--cpu", action="store_true", help="a tiny model on the CPU (a check of the script)")
    ap.add_argument("--compile-mode", default=None)
    ap.add_argument("--out", default=os.environ.get("OUT") or tempfile.mkdtemp(prefix="detd-hfs-"))
    a = ap.parse_args()
    a.steps = a.steps or (2 if a.cpu else 10)
    a.timed_steps = a.timed_steps if a.timed_steps is not None else (0 if a.cpu else 50)
    a.dims = a.dims or ("64,128,2,4,256,32,2" if a.cpu else "512,1536,4,8,32000,512,4")
    a.device = "cpu" if a.cpu else "cuda"
    a.compile_mode = a.compile_mode or ("default" if a.cpu else "max-autotune")
    variants = parse_variants(a.variants)
    t_start = time.time()
    os.makedirs(a.out, exist_ok=True)
    work = tempfile.mkdtemp(prefix="detd-hfs-run-", dir="/tmp")
    a.site = hf_path()
    reserve = a.default_cap_s if a.default_procs else 0.0

    default = None

    def run_default():
        nonlocal default
        left = a.budget_s - (time.time() - t_start)
        if left >= 60:
            res, capped, _ = launch(a, work, "default", "default", False, {}, min(a.default_cap_s, left),
                                    procs=a.default_procs)
            default = (res, capped)
        else:
            print(f"(default torch.compile left out: {left:.0f} s of the budget left)")

    if a.default_procs and a.default_first:
        run_default()
        reserve = 0.0
    rows = []  # (label, settings, results, capped, passes, (verify, strict))
    d = Daemon(os.path.join(work, "daemon"))
    try:
        if a.lock_in:
            lock_import(d, a.lock_in)
        for i, (label, names, audit) in enumerate(variants):
            left = a.budget_s - (time.time() - t_start) - reserve
            if left < 30:
                print(f"(left out from '{label}' on: {left:.0f} s of the budget left)")
                break
            job = f"v{i}"
            st0 = d.status()
            res, capped, _ = launch(a, work, job, "detd", False, {"DETD_AUDIT": "1" if audit else "0", "DETD_JOB": job},
                                    min(a.cap_s, left), settings=names, caches="shared")
            passes = counter(d.status(), "timing_passes") - counter(st0, "timing_passes")
            empty = ["--allow-empty"] if a.cpu else []
            rows.append((label, ",".join(filter(None, [names, "audit" if audit else ""])), res, capped, passes,
                         d.detctl("verify", "--strict-determinism", "--job", job, *empty)))
    finally:
        d.stop()
    if a.default_procs and not a.default_first:
        run_default()
    first = next((r for row in rows for r in row[2] if r), {})
    print(f"\n== LlamaForCausalLM dims {a.dims}, {a.procs} processes on one {first.get('device', '?')}, torch "
          f"{first.get('torch', '?')}, torch.compile(mode={a.compile_mode!r}), {a.steps} hashed + {a.timed_steps} "
          f"timed steps, under detd{' from ' + a.lock_in if a.lock_in else ''} ==")
    print("| variant | settings | reached step | bit-identical | = first's bits | SDPA backward | cudagraph skips "
          "| timing passes | wall s to step | step ms | vs first | verify --strict exit | NONDET |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    base_ms = step_ms(rows[0][2]) if rows else None
    base_r0 = rows[0][2][0] if rows else None
    summary = []
    for label, names, res, capped, passes, v in rows:
        nondet = [ln[len("NONDET "):] for ln in v.stdout.splitlines() if ln.startswith("NONDET")]
        print("| " + " | ".join([label, names or "-", *cells(res, capped, base_r0, base_ms, passes), str(v.returncode),
                                 "; ".join(x[:90] for x in nondet) or "none"]) + " |")
        summary.append(dict(label=label, settings=names, reached=reached(res), identical=same_as_rank0(res)[1],
                            procs=len(res), step_ms=step_ms(res), passes=passes, verify_strict=v.returncode,
                            nondet=nondet, capped=capped))
    if default is not None:
        res, capped = default
        print("| " + " | ".join(["default torch.compile (detd not imported)", "-",
                                 *cells(res, capped, base_r0, base_ms), "-", "-"]) + " |")
        summary.append(dict(label="default torch.compile", step_ms=step_ms(res), procs=len(res), capped=capped))
    json.dump(dict(rows=summary, results={row[0]: row[2] for row in rows},
                   default=default[0] if default else None),
              open(os.path.join(a.out, "hf_settings.json"), "w"))
    ok = bool(rows) and all(r["reached"] == r["procs"] for r in summary if "reached" in r)
    print(f"hf settings run: {'every variant reached its last hashed step' if ok else 'INCOMPLETE'} "
          f"({time.time() - t_start:.0f} s)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
