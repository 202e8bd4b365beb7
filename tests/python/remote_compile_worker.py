"""The timing process's side of compiling in worker processes
(detd._workers), run by test_workers.py without TRITON_INTERPRET: Triton
compiles for sm90 here (no GPU needed to compile), through a stand-in for
the CUDA driver that says which device and target (the one part that needs
a GPU; the GPU run is tests/gpu/run_coldstart.py). A timing pass's first
round (detd._measure.Compiler) compiles the candidates of an autotuned
kernel in worker processes: the compile captured here
(detd._triton.remote_spec), made in a worker, then loaded here from
Triton's cache. Prints one JSON line: the counters, the cache's entries
before and after the loads, the candidates sent, the binaries' hashes.

    python remote_compile_worker.py [--main]

``--main``: the kernel is this script's own (``__main__``): a worker could
not find it by name, so it compiles in this process's threads.
"""

import json
import os
import sys

import triton
import triton.language as tl
from triton.runtime import driver

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from stand_in_driver import Sm90  # noqa: E402


@triton.autotune(configs=[triton.Config({"BLOCK": b}) for b in (16, 32, 64)], key=["N"])
@triton.jit
def main_scale(x_ptr, out_ptr, N, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + i, tl.load(x_ptr + i, mask=i < N) * 3, mask=i < N)


def entries(cache):
    return sorted(d for d in os.listdir(cache)) if os.path.isdir(cache) else []


def main():
    import torch

    from detd import _measure, _triton, _workers

    driver.set_active(Sm90())
    import timing_kernels

    tuner = main_scale if "--main" in sys.argv else timing_kernels.governed_scale
    x, out = torch.zeros(256), torch.zeros(256)
    args = (x, out, 256)
    pool = _workers.Pool(2, 0)
    sent = []

    def submit(config):
        fut = pool.submit(_triton.remote_spec(tuner, args, {}, config))
        sent.append(fut is not None)
        return fut

    hashes = []

    def compile_one(config):
        h = _triton.compile_only(tuner, args, {}, config)
        hashes.append(h)
        return h

    comp = _measure.Compiler(tuner.configs, compile_one, 2, True, None, submit)
    for f in comp.remote.values():
        f.exception()
    cache = os.environ["TRITON_CACHE_DIR"]
    before = entries(cache)
    for i in comp.order():
        comp(i)
    comp.close()
    print(json.dumps(dict(counts=dict(_workers.counts(), **_measure.counts()), before=before, after=entries(cache),
                          sent=sent, hashes=hashes, contended=len(comp.contended()))))


if __name__ == "__main__":
    main()
