"""One process of test_final.py: decisions final before a process relies
on them (detd.wait_final(), and CUDA graph captures under detd).

    python final_worker.py ROLE OUT.json

Every role resolves the row-sum key N=96 (rowsum_kernels, the CPU
interpreter) while the test holds its one timing pass (the ``holder``,
gated in its pass by $DETD_TEST_BENCH_GATE). Settings come from DETD_*
variables. Phases the test waits for are files, never sleeps: a role
creates $FINAL_READY once it has done what it does before the decision
exists, then goes on to what only the decision ends. Every role but the
holder imports everything first, then waits for $FINAL_START (the test
creates it once the holder is in its pass).

``holder``
    Times the key (held at the gate), launches the decision; its timer
    begins a capture before each candidate (as do_bench_cudagraph does).
``waiter``
    Its wait runs out (DETD_TIMEOUT_MS, on_miss=cheapest): it launches the
    fallback. Then ``not_final()``; ``wait_final(SHORT_S)`` (the holder
    still in its pass: NotFinalError); READY; ``wait_final()`` (its own
    DETD_TIMEOUT_MS is short: the gates' bound; it returns once the holder
    reported); a launch again. Then, re-installed in
    pinned mode, a key nobody times (N=160): its fallback, ``wait_final``
    names it, and it is dropped from the cache.
``warn``
    Falls back like the waiter; a capture under DETD_CAPTURE=warn.
``wait``
    Falls back like the waiter; READY; a capture under DETD_CAPTURE=wait
    waits for the decision and replaces the fallback before it begins.
``resolving``
    on_miss=error: a thread resolves the key (waits for the holder) while
    the main thread begins a capture with DETD_CAPTURE_WAIT_S=SHORT_S:
    NotFinalError (state ``resolving``); READY; the thread's result.

A capture is begun through the function detd installs,
``torch.cuda.CUDAGraph.capture_begin``, on a stand-in object: torch's own
capture_begin then fails on a CPU build (AttributeError), after detd's
check ran.

OUT.json: ``launches`` (per launch: the config in the cache after it, the
output's SHA-256, do_bench calls), ``events`` (what each phase returned
or raised), ``stats`` (detd.stats()) and ``warnings``.
"""

import hashlib
import json
import os
import sys
import threading
import time
import warnings

os.environ.setdefault("TRITON_INTERPRET", "1")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import detd  # noqa: E402
import gates  # noqa: E402
from detd import _triton  # noqa: E402

N = 96
SHORT_S = 1.0  # the short waits that must end in NotFinalError


def launch(rk, n, out):
    before = len(rk.CALLS)
    y = rk.row_sum(rk.make_input(rows=4, n=n, seed=n))
    cfg = dict.get(rk.row_sum_kernel.cache, (n, "torch.float32", "torch.float32"))
    out["launches"].append(dict(n=n, config=_triton.config_string(cfg) if cfg is not None else None,
                                sha=hashlib.sha256(y.numpy().tobytes()).hexdigest(),
                                bench_calls=len(rk.CALLS) - before))


def event(out, name, fn):
    t0 = time.monotonic()
    try:
        res = fn()
        out["events"][name] = dict(ok=True, result=res, s=round(time.monotonic() - t0, 3))
    except Exception as e:  # noqa: BLE001 - the outcome the test checks
        out["events"][name] = dict(ok=False, error=type(e).__name__, text=str(e),
                                   keys=getattr(e, "keys", None), s=round(time.monotonic() - t0, 3))


def capture():
    """Begin a CUDA graph capture through what detd installed."""
    import torch

    torch.cuda.CUDAGraph.capture_begin(object())


def ready():
    open(os.environ["FINAL_READY"], "w").close()


def main():
    role, path = sys.argv[1], sys.argv[2]
    out = dict(role=role, launches=[], events={}, warnings=[])
    detd.install()
    import rowsum_kernels as rk

    if role != "holder":
        # Imported while the holder starts; the key is met once the
        # holder is in its pass (the test opens $FINAL_START then).
        gates.wait_for(os.environ["FINAL_START"])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if role == "holder":
            # Its timing pass begins a capture of its own, as Triton's
            # do_bench_cudagraph does: part of choosing, not checked.
            bench = rk.row_sum_kernel.do_bench

            def capturing_bench(*a, **kw):
                event(out, "pass_capture", capture)
                return bench(*a, **kw)

            rk.row_sum_kernel.do_bench = capturing_bench
            launch(rk, N, out)
        elif role == "waiter":
            launch(rk, N, out)  # the fallback
            out["events"]["not_final"] = detd.not_final()
            event(out, "short", lambda: detd.wait_final(SHORT_S))
            ready()
            event(out, "final", lambda: detd.wait_final(gates.GATE_BOUND_S))
            launch(rk, N, out)  # the decision
            out["autotuners"] = detd.autotuners()
            detd.install(mode="pinned")
            launch(rk, 160, out)  # nobody times it: the fallback
            event(out, "nobody", lambda: detd.wait_final(SHORT_S))
            out["events"]["after_nobody"] = dict(
                cached=(160, "torch.float32", "torch.float32") in dict(rk.row_sum_kernel.cache),
                not_final=detd.not_final())
        elif role in ("warn", "wait"):
            launch(rk, N, out)  # the fallback
            if role == "wait":
                ready()
            event(out, "capture", capture)
            out["events"]["after_capture"] = dict(not_final=detd.not_final())
            launch(rk, N, out)
            if role == "warn":
                ready()
        elif role == "resolving":
            t = threading.Thread(target=launch, args=(rk, N, out))
            t.start()
            # The thread is in its resolve loop and has heard who times
            # the key (DETD_WAIT_LOG_AFTER_S: its first slice's answer).
            end = time.monotonic() + gates.GATE_BOUND_S
            while "has been timing it" not in " ".join(k["why"] for k in detd.not_final()):
                assert time.monotonic() < end, "the resolving thread never heard of the holder"
                time.sleep(0.01)
            event(out, "capture", capture)
            ready()
            t.join()
        out["warnings"] = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    out["stats"] = detd.stats()
    with open(path, "w") as f:
        json.dump(out, f, default=str)


if __name__ == "__main__":
    main()
