"""One process for the cold-start tests (test_coldstart.py).

    python coldstart_worker.py OUT.json

An autotuned kernel with 4 candidates (BLOCK 16, 32, 64, 128; ``CS_BLOCKS``:
another comma-separated list) whose
``do_bench=`` returns timings the test sets, run once under detd
(``detd.install()`` from the environment). Controls:

- ``CS_TIMINGS``: JSON ``{"16": [[first samples], [second samples]], ...}``
  by BLOCK: the n-th measurement of a candidate returns its n-th list (the
  last one again after that); default: 1.0 for every call.
- ``CS_BENCH_SLEEP``: seconds each measurement sleeps (a long pass).
- ``CS_SCALE``: every measurement is multiplied by it (a slower GPU).
- ``CS_DIE_ON``: a BLOCK whose measurement kills the process (exit 9),
  after creating ``$CS_DYING`` (when set).
- ``CS_IN_PASS``: a file created when the first measurement starts.
- ``CS_GATE``: the first measurement waits until this file exists.
- ``CS_N``: the kernel's N (default 256): another N is another key.
- ``CS_RECHECK_MAX``: the re-measure's cap (``detd._measure.RECHECK_MAX``).
- ``CS_BENCH_LOG``: a file each measurement appends ``pid start end``
  (``time.monotonic()``) to.
- ``CS_LINES``: a file each ``detd`` log line is appended to as it is
  logged (a test waits on them).
- ``CS_COMPILE``: ``sleep:S`` or ``die``: the compile step of a helper and
  of the timing pass (``detd._triton.compile_only``; the CPU interpreter
  compiles nothing)
  creates ``$CS_HELPING`` (when set), then sleeps S seconds or kills the
  process (exit 9).
- ``CS_COMPILE_AFTER``: ``A:B``: with ``CS_COMPILE``, BLOCK A's compile
  first waits (at most 30 s) until BLOCK B has been measured (a compile
  slower than the others').

Writes OUT.json: the config launched, the measurements made per BLOCK,
the BLOCKs in the order they were measured, when each compile ended and
each measurement began,
(and the ``rep`` each was asked for: ``do_bench=`` takes ``warmup`` and
``rep``, as Triton's benchmarker does),
the hook's record of the key, the ``detd`` log lines, the wall time of the
launch and when it ended (``time.monotonic()``, comparable across
processes), the pid and ``detd.stats()["phases"]``.
"""

import json
import logging
import os
import sys
import threading
import time

os.environ.setdefault("TRITON_INTERPRET", "1")

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

import detd  # noqa: E402
from detd import _triton  # noqa: E402

BLOCKS = tuple(int(b) for b in os.environ.get("CS_BLOCKS", "16,32,64,128").split(","))
MEASURED = {}  # BLOCK -> measurements made
ORDER = []  # the BLOCKs in the order they were measured
TIMES = {"compiled": [], "measured": []}  # time.monotonic() of each compile's end, each measurement's start
MEASURED_EVENT = threading.Condition()
REPS = {}  # BLOCK -> the rep (ms) each measurement was asked for
_current = [None]
TIMINGS = {int(k): v for k, v in json.loads(os.environ.get("CS_TIMINGS", "{}")).items()}


def _note(nargs):
    _current[0] = nargs.get("BLOCK")


def cs_do_bench(kernel_call, quantiles=None, warmup=25, rep=100, **kw):
    marker = os.environ.get("CS_IN_PASS")
    if marker and not MEASURED:
        open(marker, "w").close()
    gate = os.environ.get("CS_GATE")
    if gate and not MEASURED:
        deadline = time.monotonic() + 60
        while not os.path.exists(gate) and time.monotonic() < deadline:
            time.sleep(0.01)
    t_start = time.monotonic()
    TIMES["measured"].append(t_start)
    if os.environ.get("CS_BENCH_SLEEP"):
        time.sleep(float(os.environ["CS_BENCH_SLEEP"]))
    kernel_call()  # its pre_hook names the BLOCK measured
    if os.environ.get("CS_DIE_ON") and _current[0] == int(os.environ["CS_DIE_ON"]):
        if os.environ.get("CS_DYING"):
            open(os.environ["CS_DYING"], "w").close()
        os._exit(9)
    if os.environ.get("CS_BENCH_LOG"):
        with open(os.environ["CS_BENCH_LOG"], "a") as f:
            f.write(f"{os.getpid()} {t_start:.6f} {time.monotonic():.6f}\n")
    b = _current[0]
    n = MEASURED.get(b, 0)
    with MEASURED_EVENT:
        MEASURED[b] = n + 1
        ORDER.append(b)
        MEASURED_EVENT.notify_all()
    REPS.setdefault(b, []).append(rep)
    lists = TIMINGS.get(b)
    scale = float(os.environ.get("CS_SCALE", "1"))
    if not lists:
        ms = (1.0 + BLOCKS.index(b)) * scale
        return [ms, ms, ms] if quantiles else ms
    return [x * scale for x in lists[min(n, len(lists) - 1)]]


@triton.autotune(configs=[triton.Config({"BLOCK": b}, num_warps=4, num_stages=1, pre_hook=_note) for b in BLOCKS],
                 key=["N"], do_bench=cs_do_bench)
@triton.jit
def cs_add_kernel(x_ptr, out_ptr, N: tl.constexpr, BLOCK: tl.constexpr):
    for start in range(0, N, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + offs, mask=offs < N, other=0.0)
        tl.store(out_ptr + offs, x + 1.0, mask=offs < N)


class _Lines(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.lines = []
        self.levels = []

    def emit(self, record):
        self.lines.append(record.getMessage())
        self.levels.append(record.levelname)
        if os.environ.get("CS_LINES"):
            with open(os.environ["CS_LINES"], "a") as f:
                f.write(record.getMessage().replace("\n", " ") + "\n")


def main():
    out_path = sys.argv[1]
    lines = _Lines()
    logging.basicConfig(level=logging.INFO)
    logging.getLogger("detd").addHandler(lines)
    comp = os.environ.get("CS_COMPILE", "")
    if comp:
        def compile_only(tuner, args, kwargs, config, device=None):
            if os.environ.get("CS_HELPING"):
                open(os.environ["CS_HELPING"], "w").close()
            if comp == "die":
                os._exit(9)
            after = os.environ.get("CS_COMPILE_AFTER", "")
            if after and config.kwargs.get("BLOCK") == int(after.split(":")[0]):
                with MEASURED_EVENT:
                    MEASURED_EVENT.wait_for(lambda: int(after.split(":")[1]) in MEASURED, timeout=30)
            time.sleep(float(comp.split(":", 1)[1]))
            TIMES["compiled"].append(time.monotonic())
            return True

        _triton.compile_only = compile_only
    detd.install()
    if os.environ.get("CS_RECHECK_MAX"):
        from detd import _measure

        _measure.RECHECK_MAX = int(os.environ["CS_RECHECK_MAX"])
    n = int(os.environ.get("CS_N", "256"))
    x = torch.arange(n, dtype=torch.float32)
    out = torch.empty_like(x)
    t0 = time.monotonic()
    error = None
    try:
        cs_add_kernel[(1,)](x, out, n)
    except Exception as e:  # reported, the test decides
        error = f"{type(e).__name__}: {e}"
    t_end = time.monotonic()
    wall = t_end - t0
    cfg = dict.get(cs_add_kernel.cache, (n, "torch.float32", "torch.float32"))
    keys = [k for r in detd.autotuners() if r["name"].endswith("cs_add_kernel") for k in r["keys"]]
    with open(out_path, "w") as f:
        json.dump({"pid": os.getpid(), "config": _triton.config_string(cfg) if cfg is not None else None,
                   "measured": {str(k): v for k, v in MEASURED.items()}, "order": ORDER, "times": TIMES,
                   "reps": {str(k): v for k, v in REPS.items()}, "keys": keys, "lines": lines.lines,
                   "levels": lines.levels,
                   "wall_s": wall, "t_end": t_end, "error": error, "ok": bool(torch.equal(out, x + 1.0)),
                   "phases": detd.stats()["phases"]}, f)


if __name__ == "__main__":
    main()
