"""The test kernels: an autotuned row-sum whose BLOCK changes the reduction
tree, so the output bits depend on the config.

Under the interpreter Triton's default benchmarker needs CUDA, so the
autotuner gets a ``do_bench=``.  It runs the candidate once (so the timing
pass really executes the kernel) and returns a timing that is deterministic
but different per process: rank r ranks the candidates in a rotated order,
so processes timing on their own would pick different winners.  That makes
agreement a property of detd, not of the machine's noise, and it makes the
auto-mode control test (processes disagree without detd) deterministic.
Every call is counted and written to $DETD_TEST_COUNTS at exit.

Phases a test drives by events, not sleeps: with $DETD_TEST_BENCH_GATE=PATH
the first do_bench call creates PATH.waiting and blocks until PATH exists;
with $DETD_TEST_DIE_WHEN=PATH it does the same, then the process dies
(exit 9) in the middle of its timing pass; with $DETD_TEST_BENCH_FAIL set
every candidate raises after running; with $DETD_TEST_BENCH_ENV set the
first one raises ModuleNotFoundError for numpy (an environment error).
"""

import atexit
import json
import os

import gates  # tests/python, beside this file
import torch
import triton
import triton.language as tl

BLOCKS = (16, 32, 64, 128)
CALLS = []  # one entry per do_bench call: (kernel, BLOCK)


def _position():
    # Which rotation this process uses; RANK when set, else the pid.
    r = os.environ.get("RANK")
    return int(r) if r not in (None, "") else os.getpid()


def fake_do_bench(kernel_call, quantiles=None, **kw):
    if os.environ.get("DETD_TEST_DIE_IN_BENCH"):
        # A designated rank that dies in the middle of its pass.
        import time

        time.sleep(float(os.environ["DETD_TEST_DIE_IN_BENCH"]))
        os._exit(9)
    if os.environ.get("DETD_TEST_DIE_WHEN"):
        # The same, at a moment the test picks: once the file exists.
        gates.wait_for(os.environ["DETD_TEST_DIE_WHEN"])
        os._exit(9)
    gate = os.environ.get("DETD_TEST_BENCH_GATE")
    if gate and not CALLS:
        # A designated rank held in its timing pass until the test opens
        # the gate (the file exists).
        gates.wait_for(gate)
    if os.environ.get("DETD_TEST_BENCH_ENV"):
        # An environment error: nothing about the candidate.
        raise ModuleNotFoundError("No module named 'numpy'", name="numpy")
    kernel_call()
    frame_block = _current_block[0]
    CALLS.append(frame_block)
    if os.environ.get("DETD_TEST_BENCH_FAIL"):
        raise RuntimeError(f"BLOCK={frame_block} fails (DETD_TEST_BENCH_FAIL)")
    idx = BLOCKS.index(frame_block) if frame_block in BLOCKS else 0
    ms = 1.0 + ((idx + _position()) % len(BLOCKS))
    if quantiles:
        return [ms for _ in quantiles]
    return ms


_current_block = [None]


def _note_block(nargs):
    _current_block[0] = nargs.get("BLOCK")


def configs(blocks=BLOCKS):
    return [triton.Config({"BLOCK": b}, num_warps=4, num_stages=1, pre_hook=_note_block) for b in blocks]


@triton.autotune(configs=configs(), key=["N"], do_bench=fake_do_bench)
@triton.jit
def row_sum_kernel(x_ptr, out_ptr, N: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.sum(tl.zeros([BLOCK], dtype=tl.float32), axis=0)
    for start in range(0, N, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * N + offs, mask=offs < N, other=0.0)
        acc += tl.sum(x, axis=0)
    tl.store(out_ptr + row, acc)


def row_sum(x, kernel=row_sum_kernel):
    rows, n = x.shape
    out = torch.empty(rows, dtype=torch.float32)
    kernel[(rows,)](x, out, n)
    return out


def make_input(rows=4, n=256, seed=0):
    g = torch.Generator().manual_seed(seed)
    mag = torch.pow(10.0, torch.randint(-6, 7, (rows, n), generator=g).float())
    sign = torch.where(torch.rand(rows, n, generator=g) < 0.5, -1.0, 1.0)
    return (torch.rand(rows, n, generator=g) * mag * sign).float().contiguous()


def _dump():
    path = os.environ.get("DETD_TEST_COUNTS")
    if path:
        with open(path, "w") as f:
            json.dump({"pid": os.getpid(), "calls": CALLS}, f)


atexit.register(_dump)
