"""mamba_ssm as the GPU harness imports it, for every Python process whose
path holds this folder at start: pkg_worker.setup_paths puts it on the
harness process's path and runs it, and detd's compile workers
(detd._workers), started with that process's path, run it at start. A
bare package object for .pkgsrc/mamba_ssm: its __init__ imports CUDA
extensions that its Triton kernels do not need and that the unpacked
source does not have built."""

import os
import sys
import types

_SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))),
                    ".pkgsrc", "mamba_ssm")
if os.path.isdir(_SRC) and "mamba_ssm" not in sys.modules:
    _m = types.ModuleType("mamba_ssm")
    _m.__path__ = [_SRC]
    sys.modules["mamba_ssm"] = _m
