"""Canonical strings: configs, autotune keys and kernel identities.

Everything here is pure and depends only on the values given, never on the
process, host, rank or device index: agreement across ranks is the point.

Config strings
    ``kwargs`` sorted by name (``NAME=value``), then ``num_warps``,
    ``num_stages``, ``num_ctas``, ``maxnreg`` when set (not None), e.g.
    ``BLOCK=1024,num_ctas=1,num_stages=3,num_warps=4``.  ``str(Config)``
    changes between Triton releases, so it is never used.  Fields some
    releases add (3.3's warp-specialization fields, ``ir_override``) are
    appended after those, sorted by name, only when they differ from their
    neutral value (0 / None), so two live configs that Triton would launch
    differently never share a string while ordinary configs keep the
    documented form.

Key strings
    Triton's autotune key is a tuple of the ``key=`` argument values plus
    ``str(dtype)`` of every tensor argument.  It is serialized as a list of
    type-tagged values: ``[i:128,s:"torch.float32"]``.  Tags: ``n`` None,
    ``b`` bool, ``i`` integer, ``f`` float (``repr``), ``s`` string (JSON
    escaped, ASCII), ``t[...]`` tuple, ``l[...]`` list, ``o:<type>:"<str>"``
    anything else.  ``True`` and ``1`` (and ``1.0``) never collide.

Megatron-form keys
    Megatron-LM's ``megatron.core.tuning`` tables key entries by
    ``name=str(value)`` for each of the autotuner's ``key`` argument names
    present in the call, then ``str(dtype)`` of every tensor argument in
    argument order, all joined by ``|``: ``N=128|torch.float32``.  The hook
    sends it along (``DecisionKey.table_key``) so such tables answer; it
    never enters the decision id.

Kernel identity
    ``module:qualname@guard`` of the innermost Python function, the guard
    being the first 16 hex digits of SHA-256 over the JIT function's
    ``cache_key`` when it has one (compiled mode), else over its source
    (the interpreter has no ``cache_key``).
"""

from __future__ import annotations

import hashlib
import inspect
import json
import math
import numbers

__all__ = [
    "config_string",
    "key_string",
    "kernel_identity",
    "kernel_name",
    "code_guard",
    "triton_key",
    "megatron_key",
]

# Fields appended after the documented ones only when not neutral.
_EXTRA_FIELDS = (
    ("ir_override", None),
    ("num_buffers_warp_spec", 0),
    ("num_consumer_groups", 0),
    ("reg_dec_producer", 0),
    ("reg_inc_consumer", 0),
)


def _value(v) -> str:
    """Render a config value: plain for numbers/strings, tagged otherwise."""
    if isinstance(v, bool):
        return "True" if v else "False"
    if isinstance(v, numbers.Integral):
        return str(int(v))
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, str):
        return v
    if v is None:
        return "None"
    return key_string((v,))[1:-1]


def config_string(config) -> str:
    """The canonical string of a ``triton.Config`` (any supported release)."""
    parts = [f"{k}={_value(v)}" for k, v in sorted(config.kwargs.items())]
    for name in ("num_warps", "num_stages", "num_ctas", "maxnreg"):
        v = getattr(config, name, None)
        if v is not None:
            parts.append(f"{name}={_value(v)}")
    for name, neutral in _EXTRA_FIELDS:
        v = getattr(config, name, neutral)
        if v is not None and v != neutral:
            parts.append(f"{name}={_value(v)}")
    return ",".join(parts)


def _tag(v) -> str:
    if v is None:
        return "n:null"
    if isinstance(v, bool):
        return "b:true" if v else "b:false"
    # numpy.bool_ is not a bool subclass; treat it as one.
    if type(v).__name__ in ("bool_", "bool") and hasattr(v, "item"):
        return "b:true" if bool(v) else "b:false"
    if isinstance(v, numbers.Integral):
        return f"i:{int(v)}"
    if isinstance(v, numbers.Real) and not isinstance(v, numbers.Integral):
        f = float(v)
        if math.isnan(f):
            return "f:nan"
        return f"f:{f!r}"
    if isinstance(v, str):
        return "s:" + json.dumps(v, ensure_ascii=True)
    if isinstance(v, tuple):
        return "t[" + ",".join(_tag(x) for x in v) + "]"
    if isinstance(v, list):
        return "l[" + ",".join(_tag(x) for x in v) + "]"
    t = type(v)
    return f"o:{t.__module__}.{t.__qualname__}:" + json.dumps(str(v), ensure_ascii=True)


def key_string(key) -> str:
    """The canonical, type-tagged string of an autotune key tuple."""
    return "[" + ",".join(_tag(x) for x in tuple(key)) + "]"


def triton_key(tuner, args, kwargs) -> tuple:
    """Triton's own autotune key, rebuilt the way ``Autotuner.run`` does
    (3.3 to 3.9). Used only where Triton computes none (single-config
    tuners) so that they can still be listed."""
    nargs = dict(zip(tuner.arg_names, args))
    all_args = {**nargs, **kwargs}
    _args = {k: v for (k, v) in all_args.items() if k in tuner.arg_names}
    key = [_args[k] for k in tuner.keys if k in _args]
    for _, arg in _args.items():
        if hasattr(arg, "dtype"):
            key.append(str(arg.dtype))
    return tuple(key)


def megatron_key(tuner, args, kwargs) -> str:
    """The key in Megatron-LM's ``tuning_key`` form (``N=128|torch.float32``):
    ``name=str(value)`` for each of the autotuner's ``key`` argument names
    present in the call, then ``str(dtype)`` of every tensor argument in
    argument order, joined by ``|``. Megatron's tables use it; detd's table
    lookup tries it after the canonical key."""
    named = dict(zip(tuner.arg_names, args))
    named.update(kwargs)
    return "|".join([f"{n}={named[n]}" for n in tuner.keys if n in named] +
                    [str(v.dtype) for v in named.values() if hasattr(v, "dtype")])


def kernel_name(tuner) -> str:
    """``module:qualname`` of the innermost Python function."""
    fn = tuner.base_fn
    return f"{fn.__module__}:{fn.__qualname__}"


def _jit_function(tuner):
    fn = tuner.fn
    seen = 0
    while hasattr(fn, "fn") and not inspect.isfunction(fn) and seen < 32:
        if hasattr(fn, "cache_key") or type(fn).__name__ in ("JITFunction", "InterpretedFunction"):
            return fn
        fn = fn.fn
        seen += 1
    return None


def code_guard(tuner) -> str:
    """16 hex digits that change when the kernel's code changes."""
    jit = _jit_function(tuner)
    material = None
    if jit is not None and type(jit).__name__ != "InterpretedFunction":
        try:
            ck = jit.cache_key
        except Exception:  # dependencies that cannot be resolved yet
            ck = None
        if isinstance(ck, str) and ck:
            material = "cache_key:" + ck
    if material is None:
        src = getattr(jit, "src", None) if jit is not None else None
        if not isinstance(src, str):
            try:
                src = inspect.getsource(tuner.base_fn)
            except (OSError, TypeError):
                src = getattr(tuner.base_fn.__code__, "co_code", b"").hex()
        material = "source:" + src
    return hashlib.sha256(material.encode("utf-8")).hexdigest()[:16]


def kernel_identity(tuner) -> str:
    """``module:qualname@guard`` (see the module docstring)."""
    return f"{kernel_name(tuner)}@{code_guard(tuner)}"
