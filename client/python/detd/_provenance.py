"""How a timing pass measured, recorded with the decision it makes
(docs/lockfile.md, "Provenance"): the benchmarker and its settings (the
adapter says them), whether detd's timing lock was held, the torch, CUDA
and driver versions of this process, and the distribution that owns the
kernel's module with its version.

Nothing here imports torch: its versions are read only when the process
has loaded it (a CPU process without torch records ""); torch's is its
distribution's (``importlib.metadata``), the version ``detd-run --lock``
requires. Every string is
cut to :data:`MAX_BYTES` of UTF-8, a whole character at most (the
daemon refuses more).
"""

import ctypes
import functools
import importlib.metadata
import math
import re
import sys
from typing import Dict, Tuple

MAX_BYTES = 256  # the daemon's limit (common/provfmt.h PROVFMT_MAX_STRING)

# The members of libdetd's struct detd_timing_info that are strings.
_STRINGS = ("benchmarker", "return_mode", "torch_version", "cuda_version", "driver", "package",
            "package_version")


def _cut(s) -> str:
    if not s:
        return ""
    b = str(s).replace("\n", " ").encode("utf-8", "replace")[:MAX_BYTES]
    return b.decode("utf-8", "ignore")  # a character cut in two is dropped


def _torch_versions() -> Tuple[str, str, str]:
    """(torch, CUDA of its build, the CUDA driver) when torch is loaded:
    "none" for the CUDA of a CPU build and for the driver without a
    visible GPU; ("", "", "") without torch."""
    torch = sys.modules.get("torch")
    if torch is None:
        return "", "", ""
    try:  # the distribution's version: what detd-run requires of a lock
        version = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        version = ""
    cuda = getattr(getattr(torch, "version", None), "cuda", None) or "none"
    driver = "none"
    try:
        if torch.cuda.is_available():
            driver = _driver_version()
    except Exception:  # noqa: BLE001 - an old or odd torch: not known
        driver = ""
    return str(version), str(cuda), driver


_NVRM = re.compile(r"Kernel Module(?: for \S+)?\s+(\d+(?:\.\d+)+)")


def _driver_version() -> str:
    """The NVIDIA driver's release (e.g. "580.159.04", the kernel module's
    version in /proc/driver/nvidia/version, first line, read capped), else
    the CUDA version the driver supports ("cuda 13.0", libcuda's
    cuDriverGetVersion), else ""."""
    try:
        with open("/proc/driver/nvidia/version", encoding="ascii", errors="replace") as f:
            m = _NVRM.search(f.readline(512))
        if m:
            return m.group(1)
    except OSError:
        pass
    try:
        v = ctypes.c_int(0)
        if ctypes.CDLL("libcuda.so.1").cuDriverGetVersion(ctypes.byref(v)) == 0 and v.value > 0:
            return f"cuda {v.value // 1000}.{v.value % 1000 // 10}"
    except (OSError, AttributeError):
        pass
    return ""


_versions_cache: Dict[str, Tuple[str, str, str]] = {}


def environment() -> Dict[str, str]:
    """This process's torch, CUDA and driver versions (read once torch is
    loaded, then kept)."""
    got = _versions_cache.get("v")
    if got is None:
        got = _torch_versions()
        if got[0]:
            _versions_cache["v"] = got
    return dict(torch_version=_cut(got[0]), cuda_version=_cut(got[1]), driver=_cut(got[2]))


@functools.lru_cache(maxsize=1)
def _distributions() -> Dict[str, list]:
    try:
        return dict(importlib.metadata.packages_distributions())
    except Exception:  # noqa: BLE001 - broken metadata: nothing known
        return {}


@functools.lru_cache(maxsize=256)
def package_of(module: str) -> Tuple[str, str]:
    """(distribution, version) that owns the top-level package of
    ``module`` (``fla.ops.x`` -> ``("flash-linear-attention", "0.3.1")``),
    or ("", "") when none does (a script, a test file)."""
    top = (module or "").split(".")[0]
    names = _distributions().get(top) or []
    if not names:
        return "", ""
    try:
        return _cut(names[0]), _cut(importlib.metadata.version(names[0]))
    except Exception:  # noqa: BLE001 - metadata without a version
        return _cut(names[0]), ""


def _ms(v) -> float:
    """A warmup or rep as the daemon takes it: finite, 0 to 1e9."""
    try:
        v = float(v or 0.0)
    except (TypeError, ValueError):
        return 0.0
    return min(v, 1e9) if math.isfinite(v) and v > 0 else 0.0


def describe(bench: Dict, held: bool, kernel: str) -> Dict:
    """The provenance of one timing pass: ``bench`` (the adapter's
    benchmarker: name, warmup, rep, return_mode, cuda_graphs), whether
    the timing lock was ``held``, this process's versions and the package
    of ``kernel`` ("module:qualname@guard")."""
    pkg, pkg_version = package_of(kernel.split(":")[0])
    out = dict(environment(), package=pkg, package_version=pkg_version, timing_lock=int(bool(held)))
    out.update(benchmarker=_cut(bench.get("benchmarker")), return_mode=_cut(bench.get("return_mode")),
               warmup=_ms(bench.get("warmup")), rep=_ms(bench.get("rep")),
               cuda_graphs=int(bool(bench.get("cuda_graphs"))))
    for k in _STRINGS:
        out[k] = _cut(out.get(k))
    return out
