"""Nondeterminism no config choice fixes: the audit's runtime findings.

A config decided once for every rank fixes the reduction order of the
kernels detd governs; it does not fix an op whose kernel is
nondeterministic by construction (``adaptive_avg_pool2d``'s backward on
CUDA, the backward of cuDNN attention, ...) or a setting that lets the runtime choose per
process (``torch.backends.cudnn.benchmark``). With the determinism audit on
(``DETD_AUDIT=1``, :func:`detd.audit`, also under ``detd-run``), this module
reports to the daemon, once per process and finding, as observations of
source RUNTIME (``detctl verify`` lists them beside the configs'
agreement; ``docs/determinism.md``):

- ``op``: every op torch names nondeterministic. The audit turns on
  ``torch.use_deterministic_algorithms(True, warn_only=True)`` (unless
  deterministic algorithms are on already) and reads torch's warnings
  ("... does not have a deterministic implementation", "... defaults to a
  non-deterministic algorithm", cuBLAS without ``CUBLAS_WORKSPACE_CONFIG``).
  This changes what runs: ops with a deterministic variant take it (for
  example ``index_add_`` on CUDA), so an audited run is not bit for bit
  the run without the audit; that is why it is opt-in. The audit sets
  torch's flag only, not Inductor's deterministic mode (which
  ``torch.use_deterministic_algorithms`` also turns on, and which stops
  Inductor's autotuning).
- ``sdpa``: the attention backend ``scaled_dot_product_attention`` chose
  (torch's own selection for the call's tensors: ``math``, ``flash``,
  ``flash_cpu``, ``efficient``, ``cudnn``), with why when its backward is
  nondeterministic. Read on calls outside ``torch.compile`` (compiled
  graphs choose at trace time, out of reach; there the ``setting``
  ``cudnn_sdp`` says whether cuDNN attention can be chosen).
- ``setting``: ``CUBLAS_WORKSPACE_CONFIG``, deterministic algorithms,
  ``torch.backends.cudnn.deterministic``/``benchmark``, TF32 and reduced
  precision flags, the float32 matmul precision, the SDPA backends
  enabled, TunableOp (PyTorch's own GEMM tuner); a setting that breaks
  bit-identity carries why, and ranks that report different values of
  one setting are named by verify.

Bounds: at most ``MAX_OPS`` op names and ``MAX_SDPA`` SDPA signatures per
process (past them one ``op`` finding says more were not listed); names
and values are cut to 256 bytes and why to 1024, control characters
replaced. Settings are read (about fifteen attribute reads) with each new
finding and at exit, and at start when CUDA is initialized already (never
earlier: reading the device before the program picks its own would make a
CUDA context on device 0). Cost: those reads; per SDPA call outside compiled code, one
signature lookup (the first of each signature asks torch's selection once);
each new finding is one Observe call. Findings that cannot be sent cost
one warning, never the run.
"""

from __future__ import annotations

import atexit
import functools
import logging
import os
import re
import threading
import warnings
from typing import Dict, Optional, Tuple

from . import _native, _process

__all__ = ["start", "stop", "findings", "MAX_OPS"]

log = logging.getLogger("detd")

MAX_OPS = 64
MAX_SDPA = 64
_TEXT = 256  # the daemon's cap on a finding's name and value
_WHY = 1024

_lock = threading.RLock()
_on = False
_det_set = False  # the audit turned deterministic algorithms on (warn_only)
_det_before: Tuple[bool, bool] = (False, False)  # (on, warn_only) before the audit
_prev_showwarning = None
_ORIG_SHOWWARNING = warnings.showwarning
_sdpa_orig = None
_sdpa_seen: set = set()
_sent: Dict[Tuple[str, str], Tuple[str, str]] = {}  # (kind, name) -> (value, why)
_ops = 0
_more_ops = False
_atexit_set = False

# torch's words for an op without a deterministic implementation.
_OP_RE = re.compile(r"^\s*(\S+) does not have a deterministic implementation")
_NAMED = (
    ("Memory Efficient attention defaults to a non-deterministic algorithm", "efficient attention backward"),
    ("Flash Attention defaults to a non-deterministic algorithm", "flash attention backward"),
    ("uses CuBLAS and you have CUDA >= 10.2", "cuBLAS (CUBLAS_WORKSPACE_CONFIG)"),
)
_BACKENDS = {"MATH": "math", "FLASH_ATTENTION": "flash", "EFFICIENT_ATTENTION": "efficient",
             "CUDNN_ATTENTION": "cudnn", "OVERRIDEABLE": "overrideable", "ERROR": "none"}


def _clean(s: str, cap: int) -> str:
    s = "".join(" " if (ord(c) < 0x20 or ord(c) == 0x7F) else c for c in str(s))
    b = s.encode("utf-8", "replace")[:cap]
    return b.decode("utf-8", "ignore")


def findings() -> Dict[Tuple[str, str], Tuple[str, str]]:
    """What this process reported: (kind, name) -> (value, why)."""
    with _lock:
        return dict(_sent)


def _report(kind: str, name: str, value: str, why: str = "") -> None:
    """Send one finding, unless this process sent the same already."""
    name, value, why = _clean(name, _TEXT), _clean(value, _TEXT), _clean(why, _WHY)
    with _lock:
        if _sent.get((kind, name)) == (value, why):
            return
        _sent[(kind, name)] = (value, why)
    try:
        key = _native.Key(_process.settings().namespace, _process.identity()["arch"], "runtime::" + kind, name,
                          ("runtime",))
        _process.client().observe(key, value, _native.SOURCE_RUNTIME, False, False, why=why or None)
    except (_native.DetdError, _native.LibraryNotFound, OSError) as e:
        _process.warn_once("runtime-send", f"detd: cannot send the audit's runtime findings to the daemon: {e}")
    if why:
        log.warning("detd audit: %s %s%s: %s", kind, name, f" ({value})" if value else "", why)


# ---------------------------------------------------------------- settings

def _cuda(torch) -> bool:
    try:
        # Never a CUDA call of its own: one before the program picks its
        # device would make a context on device 0.
        return bool(torch.cuda.is_initialized()) and _process.identity()["arch"].startswith("sm")
    except Exception:  # noqa: BLE001 - no device query may break the run
        return False


def _ours(torch) -> bool:
    """Whether torch's deterministic flag is still the audit's warn-only
    one (the program may have set its own since)."""
    return _det_set and torch.are_deterministic_algorithms_enabled() and \
        torch.is_deterministic_algorithms_warn_only_enabled()


def _det_state(torch) -> Tuple[bool, bool]:
    """(on, warn_only) as the program set them: before the audit while
    the flag is still the audit's."""
    if _ours(torch):
        return _det_before
    return torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()


def _strict(torch) -> bool:
    """Deterministic algorithms on, and not warn-only, as the program set them."""
    on, warn_only = _det_state(torch)
    return bool(on and not warn_only)


def _tunableop(torch) -> str:
    """PyTorch's own GEMM autotuner (``torch.cuda.tunable``): ``off``,
    ``on, tuning`` or ``on, not tuning``, from torch where its build has
    TunableOp, else from the variables it reads at start."""
    try:
        t = torch.cuda.tunable
        on, tuning = bool(t.is_enabled()), bool(t.tuning_is_enabled())
        where = "torch.cuda.tunable"
    except Exception:  # noqa: BLE001 - a build without TunableOp (CPU): its variables
        on = os.environ.get("PYTORCH_TUNABLEOP_ENABLED", "0").strip() == "1"
        tuning = os.environ.get("PYTORCH_TUNABLEOP_TUNING", "1").strip() != "0"
        where = "PYTORCH_TUNABLEOP_ENABLED"
    return "off" if not on else f"on, {'tuning' if tuning else 'not tuning'} ({where})"


def _settings(torch) -> None:
    cuda, strict = _cuda(torch), _strict(torch)
    b = torch.backends
    ws = os.environ.get("CUBLAS_WORKSPACE_CONFIG", "")
    on, warn_only = _det_state(torch)
    det = "True" if on and not warn_only else ("warn_only" if on else "False")
    rows = [
        ("torch.use_deterministic_algorithms", det + (" (the audit set warn_only)" if _ours(torch) else ""),
         "" if strict or not cuda else
         "ops without a deterministic implementation run nondeterministically and SDPA may choose a "
         "nondeterministic backward; torch.use_deterministic_algorithms(True) makes them deterministic or raise"),
        ("CUBLAS_WORKSPACE_CONFIG", ws or "unset",
         "cuBLAS may reduce in a nondeterministic order across streams: set CUBLAS_WORKSPACE_CONFIG=:4096:8"
         if cuda and ws not in (":4096:8", ":16:8") else ""),
    ]
    getters = [
        ("torch.backends.cudnn.deterministic", lambda: b.cudnn.deterministic,
         lambda v: "" if (v or strict or not cuda) else
         "cuDNN may choose nondeterministic convolution algorithms: set torch.backends.cudnn.deterministic = True"),
        ("torch.backends.cudnn.benchmark", lambda: b.cudnn.benchmark,
         lambda v: "cuDNN benchmarks convolution algorithms in each process, so ranks may run different ones: "
                   "set torch.backends.cudnn.benchmark = False" if (v and cuda) else ""),
        ("TunableOp", lambda: _tunableop(torch),
         lambda v: "TunableOp times GEMM solutions in each process, so ranks may run different ones: tune once "
                   "and give every rank the same results file with tuning off (PYTORCH_TUNABLEOP_TUNING=0)"
                   if (v.startswith("on, tuning") and cuda) else ""),
        ("torch.backends.cuda.matmul.allow_tf32", lambda: b.cuda.matmul.allow_tf32, None),
        ("torch.backends.cudnn.allow_tf32", lambda: b.cudnn.allow_tf32, None),
        ("torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction",
         lambda: b.cuda.matmul.allow_fp16_reduced_precision_reduction, None),
        ("torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction",
         lambda: b.cuda.matmul.allow_bf16_reduced_precision_reduction, None),
        ("torch.get_float32_matmul_precision", torch.get_float32_matmul_precision, None),
        ("torch.backends.cuda.cudnn_sdp_enabled", lambda: b.cuda.cudnn_sdp_enabled(),
         lambda v: "SDPA may choose cuDNN attention, whose backward is nondeterministic (torch.compile's graphs "
                   "choose out of the audit's sight): torch.use_deterministic_algorithms(True) or "
                   "torch.backends.cuda.enable_cudnn_sdp(False)" if (v and cuda and not strict) else ""),
        ("torch.backends.cuda.flash_sdp_enabled", lambda: b.cuda.flash_sdp_enabled(), None),
        ("torch.backends.cuda.mem_efficient_sdp_enabled", lambda: b.cuda.mem_efficient_sdp_enabled(), None),
        ("torch.backends.cuda.math_sdp_enabled", lambda: b.cuda.math_sdp_enabled(), None),
    ]
    for name, get, judge in getters:
        try:
            v = get()
        except Exception:  # noqa: BLE001 - a flag this torch lacks
            continue
        rows.append((name, str(v), judge(v) if judge else ""))
    for name, value, why in rows:
        _report("setting", name, value, why)


# ---------------------------------------------------------------- torch's warnings

def _op_of(text: str) -> Optional[str]:
    m = _OP_RE.match(text)
    if m:
        return m.group(1)
    for needle, name in _NAMED:
        if needle in text:
            return name
    return None


def _showwarning(message, category, filename, lineno, file=None, line=None):
    try:
        if _on and issubclass(category, UserWarning):
            _note_warning(str(message))
    except Exception:  # noqa: BLE001 - a warning must never raise here
        pass
    prev = _prev_showwarning or _ORIG_SHOWWARNING
    return prev(message, category, filename, lineno, file, line)


def _note_warning(text: str) -> None:
    global _ops, _more_ops
    op = _op_of(text)
    if op is None:
        return
    with _lock:
        if ("op", _clean(op, _TEXT)) in _sent:
            return
        if _ops >= MAX_OPS:
            if _more_ops:
                return
            _more_ops = True
            op, why = "(more ops)", f"more than {MAX_OPS} ops were named nondeterministic; the rest are not listed"
        else:
            _ops += 1
            why = "torch: " + re.split(r", but you set|\. You can file", text)[0].strip()
    _report("op", op, "nondeterministic", why)
    _refresh()


# ---------------------------------------------------------------- SDPA

def _sdpa_why(torch, backend: str, grad: bool) -> str:
    if not grad or backend in ("math", "flash_cpu", "none"):
        return ""
    if backend == "cudnn":
        return ("cuDNN attention's backward is nondeterministic: torch.use_deterministic_algorithms(True) "
                "(without warn_only) makes SDPA skip it, or torch.backends.cuda.enable_cudnn_sdp(False)")
    if backend in ("flash", "efficient") and not _strict(torch):
        name = "flash" if backend == "flash" else "memory-efficient"
        return (f"{name} attention's backward is nondeterministic unless torch.use_deterministic_algorithms(True) "
                "(without warn_only)")
    return ""


_LEGACY = {"float": "float32", "half": "float16", "double": "float64"}


def _dtype_name(t) -> str:
    """"bfloat16", "float32", ...: from the tensor's type name (this
    package reads no ``dtype`` attribute outside its Triton adapter)."""
    name = t.type().rsplit(".", 1)[-1].replace("Tensor", "").lower()
    return _LEGACY.get(name, name)


def _note_sdpa(torch, args, kwargs) -> None:
    names = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal")
    a = dict(zip(names, args))
    a.update({k: v for k, v in kwargs.items()})
    q, k, v = a.get("query"), a.get("key"), a.get("value")
    if q is None or k is None or v is None:
        return
    grad = torch.is_grad_enabled() and any(getattr(t, "requires_grad", False) for t in (q, k, v))
    mask = a.get("attn_mask")
    sig = (q.device.type, q.type(), grad, tuple(q.shape[-1:]), mask is not None, bool(a.get("is_causal")),
           float(a.get("dropout_p") or 0.0) > 0)
    with _lock:
        if sig in _sdpa_seen or len(_sdpa_seen) >= MAX_SDPA:
            return
        _sdpa_seen.add(sig)
    extra = {n: a[n] for n in ("scale", "enable_gqa") if n in a}
    try:
        choice = torch._fused_sdp_choice(q, k, v, mask, float(a.get("dropout_p") or 0.0), bool(a.get("is_causal")),
                                         **extra)
        from torch.nn.attention import SDPBackend

        backend = _BACKENDS.get(SDPBackend(int(choice)).name, str(choice))
    except Exception as e:  # noqa: BLE001 - this torch's selection API differs
        backend = "unknown"
        log.info("detd audit: cannot read the SDPA backend: %s", e)
    if backend == "flash" and q.device.type == "cpu":
        backend = "flash_cpu"
    detail = f"{q.device.type} {_dtype_name(q)} {'backward' if grad else 'forward only'}"
    _report("sdpa", backend, detail, _sdpa_why(torch, backend, grad))
    _refresh()


def _wrap_sdpa(torch) -> None:
    global _sdpa_orig
    F = torch.nn.functional
    if _sdpa_orig is not None or getattr(F.scaled_dot_product_attention, "__detd_sdpa__", False):
        return
    orig = F.scaled_dot_product_attention
    compiling = getattr(getattr(torch, "compiler", None), "is_compiling", lambda: False)

    @functools.wraps(orig)
    def scaled_dot_product_attention(*args, **kwargs):
        if _on and not compiling():
            try:
                _note_sdpa(torch, args, kwargs)
            except Exception as e:  # noqa: BLE001 - the audit never breaks the run
                log.info("detd audit: SDPA probe failed: %s", e)
        return orig(*args, **kwargs)

    scaled_dot_product_attention.__detd_sdpa__ = True  # type: ignore[attr-defined]
    _sdpa_orig = orig
    F.scaled_dot_product_attention = scaled_dot_product_attention


# ---------------------------------------------------------------- start / stop

def _refresh() -> None:
    if not _on:
        return
    try:
        import torch

        _settings(torch)
    except Exception as e:  # noqa: BLE001 - the audit never breaks the run
        log.info("detd audit: cannot read torch's settings: %s", e)


def _set_deterministic(torch, on: bool) -> None:
    """torch's deterministic flag, warn-only, without Inductor's
    deterministic mode: ``torch.use_deterministic_algorithms`` also sets
    ``torch._inductor.config.deterministic``, which turns off Inductor's
    autotuning (the choices detd governs), so the audited run would not
    compile what the run compiles."""
    flag = getattr(torch._C, "_set_deterministic_algorithms", None)
    if flag is not None:
        flag(on, warn_only=on)
        return
    import torch._inductor.config as inductor_config

    before = inductor_config.deterministic
    torch.use_deterministic_algorithms(on, warn_only=on)
    inductor_config.deterministic = before


def start() -> bool:
    """Turn the runtime findings on (the audit's). Idempotent. Returns
    False when torch cannot be imported (nothing to watch)."""
    global _on, _det_set, _det_before, _prev_showwarning, _atexit_set
    try:
        import torch
    except ImportError:
        return False
    with _lock:
        if _on:
            return True
        _on = True
        if not torch.are_deterministic_algorithms_enabled():
            _det_before = (False, False)
            _set_deterministic(torch, True)
            _det_set = True
        if warnings.showwarning is not _showwarning:
            _prev_showwarning = warnings.showwarning
            warnings.showwarning = _showwarning
        _wrap_sdpa(torch)
        if not _atexit_set:
            atexit.register(_refresh)  # a run with no finding still reports its settings
            _atexit_set = True
    if torch.cuda.is_initialized():
        _refresh()  # else at the first finding: the program has picked its device then
    return True


def stop() -> None:
    """Turn the runtime findings off: deterministic algorithms as before
    the audit, torch's SDPA and Python's showwarning restored."""
    global _on, _det_set, _sdpa_orig, _prev_showwarning
    with _lock:
        if not _on:
            return
        _on = False
        import torch

        if _ours(torch):  # not a flag the program set since
            _set_deterministic(torch, False)
        _det_set = False
        if warnings.showwarning is _showwarning:
            warnings.showwarning = _prev_showwarning or _ORIG_SHOWWARNING
        _prev_showwarning = None
        if _sdpa_orig is not None:
            torch.nn.functional.scaled_dot_product_attention = _sdpa_orig
            _sdpa_orig = None
