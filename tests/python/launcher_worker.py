"""The launcher built beside a timing pass's compiles
(detd._triton.prepare_launcher, detd._measure.Compiler's ``prepare``),
run by test_launcher.py without TRITON_INTERPRET: Triton compiles for sm90
here and builds its launchers with the C compiler, as on a GPU node. A
stand-in for the CUDA driver says which device and target, and
TRITON_LIBCUDA_PATH names a stand-in libcuda.so.1 that the test builds
(the one part that needs a GPU; the GPU run is
tests/gpu/run_coldstart.py). A pass's compiles run with the launcher
prepared beside them; then each candidate's binary makes its launcher as
its first launch would (``launcher_cls(binary.src, binary.metadata)``).
Prints one JSON line: the C builds made while preparing and in all, the
counters.

    python launcher_worker.py
"""

import json
import os
import sys

import triton.runtime.build as build
from triton.runtime import driver

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from stand_in_driver import Sm90  # noqa: E402


def main():
    import torch
    from triton.backends.nvidia import driver as nvidia

    from detd import _measure, _triton

    driver.set_active(Sm90(nvidia.CudaLauncher))
    builds = []
    real = build._build

    def counted(name, *args, **kwargs):
        builds.append(name)
        return real(name, *args, **kwargs)

    build._build = counted
    import timing_kernels

    tuner = timing_kernels.governed_scale
    args = (torch.zeros(256), torch.zeros(256), 256)
    configs = tuner.configs
    comp = _measure.Compiler(configs, lambda c: _triton.compile_only(tuner, args, {}, c), 2, True, None, None,
                             lambda: _triton.prepare_launcher(tuner, args, {}, configs[0]))
    for i in comp.order():
        comp(i)  # the first waits for the launcher
    comp.close()
    prepared = list(builds)
    per_signature = getattr(nvidia, "make_launcher", None) is not None  # 3.3 to 3.6
    if per_signature and _triton.remote_compiles():
        fn = _triton.jit_function(tuner)
        for c in configs:
            binary = fn.warmup(*args, grid=(1,), **c.all_kwargs())
            driver.active.launcher_cls(binary.src, binary.metadata)
    print(json.dumps(dict(prepared=prepared, builds=builds, counts=_measure.counts(), per_signature=per_signature)))


if __name__ == "__main__":
    main()
