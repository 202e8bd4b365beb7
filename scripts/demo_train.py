"""A small training-style script with real @triton.autotune kernels, as a
user writes it: nothing in it knows about detd. scripts/demo.sh runs it in
several processes under `python -m detd.run` (Triton's CPU interpreter
here, TRITON_INTERPRET=1; the GPU where there is one).

The row sum's BLOCK changes the order of its floating-point reduction, so
the output bits depend on which config the autotuner picked: processes
that time on their own can disagree, processes under detd cannot. The
script prints one line with the SHA-256 of its outputs.
"""

import hashlib
import os
import time

import torch
import triton
import triton.language as tl

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"


def cpu_bench(kernel_call, quantiles=None, **kw):
    # The interpreter has no GPU timer: time the call on the CPU (noisy, as
    # real timing is).
    t = time.perf_counter()
    kernel_call()
    ms = (time.perf_counter() - t) * 1e3
    return [ms] * len(quantiles) if quantiles else ms


BENCH = {"do_bench": cpu_bench} if INTERPRET else {}


@triton.autotune(configs=[triton.Config({"BLOCK": b}, num_warps=4) for b in (32, 64, 128, 256)], key=["N"],
                 **BENCH)
@triton.jit
def row_sum(x, out, N: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.sum(tl.zeros([BLOCK], dtype=tl.float32), axis=0)
    for start in range(0, N, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        acc += tl.sum(tl.load(x + row * N + offs, mask=offs < N, other=0.0), axis=0)
    tl.store(out + row, acc)


@triton.autotune(configs=[triton.Config({"BLOCK": b}) for b in (64, 128, 256)], key=["n"], **BENCH)
@triton.jit
def scale_add(x, y, out, alpha, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=m) * alpha + tl.load(y + offs, mask=m), mask=m)


def main():
    device = "cpu" if INTERPRET else "cuda"
    g = torch.Generator().manual_seed(0)
    digest = hashlib.sha256()
    for rows, n in ((8, 1000), (8, 3000), (4, 5000)):
        # Magnitudes over 12 decades: the sum's bits depend on its order.
        mag = torch.pow(10.0, torch.randint(-6, 7, (rows, n), generator=g).float())
        x = (torch.randn(rows, n, generator=g) * mag).float().contiguous().to(device)
        out = torch.empty(rows, device=device, dtype=torch.float32)
        row_sum[(rows,)](x, out, n)
        y = torch.randn(rows * n, generator=g, dtype=torch.float32).to(device)
        z = torch.empty_like(y)
        scale_add[lambda meta: (triton.cdiv(rows * n, meta["BLOCK"]),)](x.reshape(-1), y, z, 0.5, rows * n)
        digest.update(out.cpu().numpy().tobytes())
        digest.update(z.cpu().numpy().tobytes())
    print(f"outputs sha256 {digest.hexdigest()}")


if __name__ == "__main__":
    main()
