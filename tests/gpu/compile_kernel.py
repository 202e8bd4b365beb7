"""The kernel run_compile_threads.py compiles (a family: each BLOCK and S
its own compile) and benchmarks. Apart from the script, so that its
argument parsing needs no Triton."""

import triton
import triton.language as tl


@triton.jit
def chain(x, y, n, BLOCK: tl.constexpr, S: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = i < n
    v = tl.load(x + i, mask=m)
    for _ in tl.static_range(S):
        v = v * 1.5 + tl.exp(v)
    tl.store(y + i, v, mask=m)


SIGNATURE = {"x": "*fp32", "y": "*fp32", "n": "i32", "BLOCK": "constexpr", "S": "constexpr"}
