"""A stand-in for the launcher side of Triton's CUDA driver, for scripts
that compile for sm90 without a GPU (remote_compile_worker.py,
launcher_worker.py): it says which device and target, the one part that
needs a GPU. Compiling needs none; the GPU runs are under tests/gpu/."""

from triton.backends.compiler import GPUTarget


class Sm90:
    """What the CUDA driver says about the device: sm90, device 0, the
    default stream; ``launcher_cls``: Triton's own launcher class, where a
    script builds launchers."""

    def __init__(self, launcher_cls=None):
        if launcher_cls is not None:
            self.launcher_cls = launcher_cls

    def get_current_target(self):
        return GPUTarget("cuda", 90, 32)

    def get_current_device(self):
        return 0

    def set_current_device(self, device):
        pass

    def get_current_stream(self, device=None):
        return 0

    def get_benchmarker(self):  # 3.3's autotuner asks for it when defined
        import triton.testing

        return triton.testing.do_bench
