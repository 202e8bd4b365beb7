"""The determinism audit: kernels whose outputs change under a fixed config.

A config decided once for every rank makes the reduction order the same
everywhere, but some kernels are nondeterministic by construction (float
``tl.atomic_add`` accumulations whose order follows the hardware's
scheduling, split-K reductions through atomics, ...): no config choice
fixes them, and they are the ones left when identical runs still differ.

With the audit on (``DETD_AUDIT=1``, or :func:`detd.audit`), the hook
replays the first launch of every governed kernel and key it resolves, just
before that launch, on clones of the call's tensor arguments, ``replays``
times (``DETD_AUDIT_REPLAYS``, default 3) with the config the key resolved
to, each replay from fresh clones of the same inputs, and compares every
tensor argument's bytes across the replays.  Kernels whose bytes differ are
named, with the arguments that differ, in :func:`detd.autotuners` (each
key's ``audit`` entry) and in the ``detd`` logger (a warning; deterministic
keys are logged at INFO).  With ``DETD_AUDIT_CONTENTION=1`` on a GPU each
replay runs while a side stream keeps the device busy with matrix products,
which perturbs the scheduling that atomics depend on.

Cost: per (kernel, key), once per process: ``replays`` extra launches, one
clone of every tensor argument per replay (memory: the call's tensor
arguments once more, freed after each replay), a copy of each to the host
and a SHA-256 over its bytes; while the audit is on, governed autotuners
stay on the hook's full path (a lock and a set lookup per launch) so that
keys resolved before it was turned on are audited at their next launch.
Off by default.  The replays run the config's ``pre_hook`` and the kernel
only (as Triton's launch does), never the autotuner's ``reset_to_zero`` /
``restore_value`` hooks; arguments that alias each other are cloned apart.

Layers: this module reaches Triton only through :mod:`detd._triton`
(:func:`~detd._triton.replay`, :func:`~detd._triton.named_args`); tensors
are handled through their torch methods, torch imported lazily.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from typing import Dict, List, Optional

from . import _triton

__all__ = ["enabled", "enable", "check", "results", "replays", "pending"]

log = logging.getLogger("detd")


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "on", "yes")


def _env_replays() -> int:
    v = os.environ.get("DETD_AUDIT_REPLAYS", "").strip()
    if not v:
        return 3
    try:
        n = int(v)
    except ValueError:
        raise ValueError(f"detd: invalid DETD_AUDIT_REPLAYS={v!r}: expected an integer >= 2") from None
    if n < 2:
        raise ValueError(f"detd: invalid DETD_AUDIT_REPLAYS={v!r}: expected an integer >= 2")
    return n


class _Config:
    def __init__(self):
        self.on = _env_flag("DETD_AUDIT")
        self.replays = _env_replays() if self.on else 3
        self.contention = _env_flag("DETD_AUDIT_CONTENTION")


_cfg = _Config()
_lock = threading.Lock()
# kernel identity -> key string -> result dict
_results: Dict[str, Dict[str, dict]] = {}


def enabled() -> bool:
    """Whether launches are audited."""
    return _cfg.on


def pending(tuner) -> bool:
    """Whether ``tuner`` must stay on the hook's full path (audit on)."""
    return _cfg.on


def replays() -> int:
    return _cfg.replays


def enable(on: bool = True, replays: Optional[int] = None, contention: Optional[bool] = None):
    """Turn the audit on or off for this process. ``replays`` (>= 2) and
    ``contention`` override ``DETD_AUDIT_REPLAYS`` / ``DETD_AUDIT_CONTENTION``."""
    if replays is not None:
        if int(replays) < 2:
            raise ValueError("detd.audit: replays must be at least 2")
        _cfg.replays = int(replays)
    if contention is not None:
        _cfg.contention = bool(contention)
    _cfg.on = bool(on)


def results() -> Dict[str, Dict[str, dict]]:
    """A copy of the results: kernel identity -> key string -> result."""
    with _lock:
        return {k: {ks: dict(r) for ks, r in v.items()} for k, v in _results.items()}


def audited(kernel: str, key_str: str) -> bool:
    with _lock:
        return key_str in _results.get(kernel, {})


def _is_tensor(v) -> bool:
    return hasattr(v, "data_ptr") and hasattr(v, "clone") and hasattr(v, "element_size")


def _clone(v):
    return v.clone() if _is_tensor(v) else v


def _digest(t) -> str:
    import torch

    raw = t.detach().contiguous().view(-1).view(torch.uint8)
    return hashlib.sha256(raw.cpu().numpy().tobytes()).hexdigest()


def _contend(device):
    """Keep ``device`` busy on a side stream (GPU only): a chain of matrix
    products queued right before a replay."""
    import torch

    s = torch.cuda.Stream(device=device)
    with torch.cuda.stream(s):
        a = torch.randn(2048, 2048, device=device)
        for _ in range(6):
            a = torch.tanh(a @ a)
    return s, a


def check(tuner, kernel: str, name: str, key, key_str: str, config, args, kwargs) -> Optional[dict]:
    """Audit one (kernel, key) once per process: replay the launch of
    ``config`` on clones of ``args``/``kwargs`` and compare every tensor
    argument's bytes. Never raises: a replay that fails is recorded and
    logged as such, and the real launch goes on. Returns the result (None
    when this key was audited already)."""
    with _lock:
        if key_str in _results.get(kernel, {}):
            return None
        _results.setdefault(kernel, {})[key_str] = {"status": "running"}
    cfg = _triton.config_string(config)
    result = dict(kernel=kernel, name=name, key=key_str, config=cfg, replays=_cfg.replays, differing=[],
                  deterministic=None, error=None)
    try:
        names = [n for n, v in _triton.named_args(tuner, args, kwargs).items() if _is_tensor(v)]
        digests: List[Dict[str, str]] = []
        device = None
        for v in list(args) + list(kwargs.values()):
            if _is_tensor(v) and getattr(v, "is_cuda", False):
                device = v.device
                break
        for _ in range(_cfg.replays):
            cargs = tuple(_clone(a) for a in args)
            ckw = {k: _clone(v) for k, v in kwargs.items()}
            side = _contend(device) if (_cfg.contention and device is not None) else None
            _triton.replay(tuner, config, cargs, ckw)
            if device is not None:
                import torch

                torch.cuda.synchronize(device)
            del side
            named = _triton.named_args(tuner, cargs, ckw)
            digests.append({n: _digest(named[n]) for n in names})
        result["differing"] = sorted(n for n in names if len({d[n] for d in digests}) > 1)
        result["deterministic"] = not result["differing"]
        result["status"] = "deterministic" if result["deterministic"] else "nondeterministic"
    except Exception as e:  # noqa: BLE001 - the audit never breaks the run
        result["status"] = "error"
        result["error"] = f"{type(e).__name__}: {str(e).strip()[:300]}"
    with _lock:
        _results.setdefault(kernel, {})[key_str] = result
    if result["status"] == "nondeterministic":
        log.warning("detd audit: kernel %s key %s is nondeterministic under the fixed config %s: "
                    "argument(s) %s differ across %d replays", kernel, key_str, cfg,
                    ", ".join(result["differing"]), _cfg.replays)
    elif result["status"] == "error":
        log.warning("detd audit: kernel %s key %s: replay failed: %s", kernel, key_str, result["error"])
    else:
        log.info("detd audit: kernel %s key %s: deterministic over %d replays (config %s)", kernel, key_str,
                 _cfg.replays, cfg)
    return result
