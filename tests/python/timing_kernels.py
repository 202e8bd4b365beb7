"""The kernels of test_timing.py (timing_worker.py) and of
tests/gpu/run_timing.py, imported after ``detd.install()``:

``get_best_config`` / ``run``: a package's own autotuner, as torchao's
``get_best_config_fn`` is: it times each candidate config with
``triton.testing.do_bench`` and keeps the fastest, per process, in its own
cache; no ``Autotuner`` is involved.

``governed_scale`` / ``run_governed``: an ``@triton.autotune`` kernel with
Triton's default benchmarker (the same ``triton.testing.do_bench``,
through the driver), which detd governs."""
import triton
import triton.language as tl
import triton.testing

BEST = {}  # key -> config: the tuner's own cache
TIMED = []  # (key, BLOCK) per candidate timed


@triton.jit
def scale(x_ptr, out_ptr, N, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < N
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2.0, mask=mask)


def launch(x, out, block):
    n = x.numel()
    scale[(triton.cdiv(n, block),)](x, out, n, BLOCK=block)


def get_best_config(x, out, blocks=(16, 32, 64)):
    key = (x.numel(), str(x.dtype))
    if key not in BEST:
        times = {}
        for b in blocks:
            TIMED.append((key, b))
            times[b] = triton.testing.do_bench(lambda: launch(x, out, b), warmup=1, rep=1)
        BEST[key] = min(times, key=times.get)
    return BEST[key]


def run(x):
    import torch

    out = torch.empty_like(x)
    block = get_best_config(x, out)
    launch(x, out, block)
    return block, out


@triton.autotune(configs=[triton.Config({"BLOCK": b}) for b in (16, 32, 64)], key=["N"])
@triton.jit
def governed_scale(x_ptr, out_ptr, N, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < N
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + 1.0, mask=mask)


def run_governed(x):
    import torch

    out = torch.empty_like(x)
    governed_scale[lambda m: (triton.cdiv(x.numel(), m["BLOCK"]),)](x, out, x.numel())
    return str(governed_scale.best_config), out
