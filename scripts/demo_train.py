"""A small training-style script with a real @triton.autotune kernel, as a
user writes it: nothing in it knows about detd. scripts/demo.sh runs it in
several processes, first on its own (Triton's default autotuning), then
under `python -m detd.run` (Triton's CPU interpreter here,
TRITON_INTERPRET=1; the GPU where there is one).

The row sum's candidates are near-tied, as the candidates of real kernels
often are: each does the same work, one load and one reduction of the
whole row, and they differ only in where the reduction starts (ROT
rotates the row by a quarter). Timing cannot tell them apart beyond its
noise, so each process's own autotuning picks its own winner per key;
and the rotation changes the order of the floating-point sum, so the
output bits depend on that pick. Processes under detd all launch the one
committed config.

The script prints one line with the config its autotuner chose for each
key (from the autotuner's own cache) and one line with the SHA-256 of its
outputs.
"""

import hashlib
import json
import os
import time

import torch
import triton
import triton.language as tl

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
KEYS = int(os.environ.get("DEMO_KEYS", "12"))


def cpu_bench(kernel_call, quantiles=None, **kw):
    # The interpreter has no GPU timer: time one call on the CPU (noisy, as
    # real timing is).
    t = time.perf_counter()
    kernel_call()
    ms = (time.perf_counter() - t) * 1e3
    return [ms] * len(quantiles) if quantiles else ms


BENCH = {"do_bench": cpu_bench} if INTERPRET else {}


@triton.autotune(configs=[triton.Config({"ROT": r}, num_warps=4) for r in range(4)], key=["N"], **BENCH)
@triton.jit
def row_sum(x, out, N: tl.constexpr, BLOCK: tl.constexpr, ROT: tl.constexpr):
    row = tl.program_id(0)
    offs = (tl.arange(0, BLOCK) + ROT * (BLOCK // 4)) % BLOCK
    tl.store(out + row, tl.sum(tl.load(x + row * N + offs, mask=offs < N, other=0.0), axis=0))


def main():
    device = "cpu" if INTERPRET else "cuda"
    g = torch.Generator().manual_seed(0)
    digest = hashlib.sha256()
    rows = 4
    for n in range(1000, 1000 + 100 * KEYS, 100):
        # Magnitudes over 12 decades: the sum's bits depend on its order.
        mag = torch.pow(10.0, torch.randint(-6, 7, (rows, n), generator=g).float())
        x = (torch.randn(rows, n, generator=g) * mag).float().contiguous().to(device)
        out = torch.empty(rows, device=device, dtype=torch.float32)
        row_sum[(rows,)](x, out, n, triton.next_power_of_2(n))
        digest.update(out.cpu().numpy().tobytes())
    chosen = {str(key[0]): f"ROT={cfg.kwargs['ROT']}" for key, cfg in row_sum.cache.items()}
    print(f"chosen {json.dumps(chosen, sort_keys=True)}")
    print(f"outputs sha256 {digest.hexdigest()}")


if __name__ == "__main__":
    main()
