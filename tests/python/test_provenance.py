"""How a timing pass measured (detd._provenance, detd._triton.benchmarker):
the benchmarker and settings named for each way a Triton autotuner times,
the kernel's package and version, and every value bounded as the daemon
takes it. Pure Python: no Triton, no daemon."""

import functools

import pytest

from detd import _provenance, _triton


class Tuner:
    def __init__(self, **kw):
        self.use_cuda_graph, self.num_warmups, self.num_reps = False, None, None
        self.__dict__.update(kw)


def my_bench(fn, warmup=5, rep=20, quantiles=None):
    return fn()


def test_the_benchmarker_of_each_way_a_tuner_times():
    q = "quantiles=0.5,0.2,0.8"
    assert _triton.benchmarker(Tuner(use_cuda_graph=True)) == dict(
        benchmarker="triton.testing.do_bench_cudagraph", rep=100, cuda_graphs=True, return_mode=q)
    assert _triton.benchmarker(Tuner(num_warmups=10)) == dict(
        benchmarker="triton.testing.do_bench", warmup=10, rep=100, return_mode=q)
    assert _triton.benchmarker(Tuner(do_bench=my_bench)) == dict(
        benchmarker="test_provenance:my_bench", warmup=5, rep=20, return_mode=q)
    assert _triton.benchmarker(Tuner(do_bench=functools.partial(my_bench, rep=7))) == dict(
        benchmarker="test_provenance:my_bench", warmup=5, rep=7, return_mode=q)

    class NoDriver(Tuner):
        @property
        def do_bench(self):
            raise RuntimeError("0 active drivers")

    assert _triton.benchmarker(NoDriver()) == dict(return_mode=q)


def test_the_package_of_a_kernel_and_bounds():
    assert _provenance.package_of("pytest.mod") == ("pytest", pytest.__version__)
    assert _provenance.package_of("__main__") == ("", "")
    long = "x" * 300 + "\nforged"
    d = _provenance.describe(dict(benchmarker=long, warmup=float("nan"), rep=1e12), True, "pytest.k:f@1")
    assert d["benchmarker"] == "x" * 256 and d["warmup"] == 0.0 and d["rep"] == 1e9
    # cut to the daemon's 256 bytes, never inside a character
    d = _provenance.describe(dict(benchmarker="x" + "\u00e9" * 200), True, "pytest.k:f@1")
    assert d["benchmarker"] == "x" + "\u00e9" * 127 and len(d["benchmarker"].encode()) == 255
    assert d["package"] == "pytest" and d["package_version"] == pytest.__version__ and d["timing_lock"] == 1
    assert set(d) == {f for f, _ in _native_fields()}


def _native_fields():
    from detd import _native

    return _native._TimingInfo._fields_


def test_the_driver_release_from_the_kernel_module_line(tmp_path, monkeypatch):
    # /proc/driver/nvidia/version's first line, proprietary and open modules;
    # torch has no public call for the driver's release.
    lines = {"NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  Thu Sep 18 2025": "580.159.04",
             "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.86.15  Release Build  (b@h)  "
             "Thu Jan 23 2025": "570.86.15"}
    for line, want in lines.items():
        assert _provenance._NVRM.search(line).group(1) == want
    real_open = open

    def fake_open(path, *a, **kw):
        if path == "/proc/driver/nvidia/version":
            (tmp_path / "v").write_text(next(iter(lines)) + "\nGCC version: 12\n")
            return real_open(tmp_path / "v", *a, **kw)
        return real_open(path, *a, **kw)

    monkeypatch.setattr("builtins.open", fake_open)
    assert _provenance._driver_version() == "580.159.04"
