"""Canonical strings: configs, autotune keys and kernel identities.

Everything here is pure string and number work on plain Python values
(mappings, tuples, numbers, strings); it imports only the standard library
and never sees a Triton object: :mod:`detd._triton` reads the values from
Triton's objects and calls these functions.  The results depend only on the
values given, never on the process, host, rank or device index: agreement
across ranks is the point.

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

Search keys
    A tuner that walks a space too large to list (Inductor's coordinate
    descent) names the search instead: the key's candidates are the start
    config and a descriptor ``search:<method>;tune=<F>:<lo>-<hi>,...;
    <name>=<value>...`` (the fields the search may change and their
    ranges, then what identifies the search: its settings). A config of
    the search is the start config with only tuned fields changed, each to
    an integer in its range (``search_values``; the daemon applies the
    same rule, ``daemon/core/search.h``).

Kernel identity
    ``module:qualname@guard`` of the innermost Python function, the guard
    being the first 16 hex digits of SHA-256 over ``cache_key:`` and the
    JIT function's ``cache_key`` when it has one (compiled mode), else over
    ``source:`` and its source (the interpreter has no ``cache_key``).
"""

from __future__ import annotations

import hashlib
import json
import math
import numbers
from collections.abc import Mapping

__all__ = [
    "FIELDS",
    "EXTRA_FIELDS",
    "config_string",
    "config_cost",
    "key_string",
    "megatron_key",
    "kernel_name",
    "code_guard",
    "kernel_identity",
    "SEARCH_PREFIX",
    "is_search",
    "search_descriptor",
    "search_values",
]

# The documented fields after the kwargs, in this order, when set.
FIELDS = ("num_warps", "num_stages", "num_ctas", "maxnreg")

# Fields appended after the documented ones only when not neutral.
EXTRA_FIELDS = (
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


def config_string(kwargs, fields=None) -> str:
    """The canonical string of a config given as plain data: ``kwargs`` (a
    mapping of meta-parameter names to values) and ``fields`` (a mapping of
    the config's other fields present, by name: ``num_warps``,
    ``num_stages``, ``num_ctas``, ``maxnreg`` and :data:`EXTRA_FIELDS`;
    absent names count as unset). ``_triton.config_string`` reads these
    from a live ``triton.Config``."""
    if not isinstance(kwargs, Mapping):
        raise TypeError("_canon.config_string takes plain data (kwargs, fields); "
                        "_triton.config_string reads them from a config object")
    fields = fields or {}
    parts = [f"{k}={_value(v)}" for k, v in sorted(kwargs.items())]
    for name in FIELDS:
        v = fields.get(name)
        if v is not None:
            parts.append(f"{name}={_value(v)}")
    for name, neutral in EXTRA_FIELDS:
        v = fields.get(name, neutral)
        if v is not None and v != neutral:
            parts.append(f"{name}={_value(v)}")
    return ",".join(parts)


def config_cost(kwargs, num_warps, num_stages, num_ctas, string) -> tuple:
    """The sort key of the ``cheapest`` rule: the product of the positive
    integer meta-parameters (the tile volume), then ``num_warps``,
    ``num_stages``, ``num_ctas`` (None as 0), then the canonical string."""
    vol = 1
    for v in kwargs.values():
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            vol *= v
    return (vol, num_warps or 0, num_stages or 0, num_ctas or 0, string)


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


def megatron_key(named, dtypes) -> str:
    """The key in Megatron-LM's ``tuning_key`` form (``N=128|torch.float32``):
    ``name=str(value)`` for each ``(name, value)`` of ``named`` (the
    autotuner's ``key`` argument names present in the call, in ``key``
    order), then each of ``dtypes`` (``str(dtype)`` of every tensor
    argument, in argument order), joined by ``|``. Megatron's tables use
    it; detd's table lookup tries it after the canonical key."""
    return "|".join([f"{n}={v}" for n, v in named] + [str(d) for d in dtypes])


def kernel_name(module: str, qualname: str) -> str:
    """``module:qualname`` of the innermost Python function."""
    return f"{module}:{qualname}"


def code_guard(kind: str, material: str) -> str:
    """16 hex digits of SHA-256 over ``kind:material``: ``kind`` is
    ``cache_key`` (the JIT function's ``cache_key``) or ``source`` (its
    source text, or the hex of its bytecode)."""
    return hashlib.sha256(f"{kind}:{material}".encode("utf-8")).hexdigest()[:16]


def kernel_identity(name: str, guard: str) -> str:
    """``module:qualname@guard`` (see the module docstring)."""
    return f"{name}@{guard}"


SEARCH_PREFIX = "search:"


def is_search(candidate: str) -> bool:
    """Whether a candidate string is a search descriptor (never a config)."""
    return candidate.startswith(SEARCH_PREFIX)


def search_descriptor(method: str, tune, **parts) -> str:
    """The descriptor of a search (module docstring): ``tune`` is a sequence
    of ``(field, lo, hi)`` (identifiers; integers, ``1 <= lo <= hi``);
    ``parts`` the settings that identify it, rendered ``name=value`` in
    name order (no ``;`` in a value)."""
    out = [SEARCH_PREFIX + method, "tune=" + ",".join(f"{f}:{lo}-{hi}" for f, lo, hi in tune)]
    out += [f"{k}={_value(v)}" for k, v in sorted(parts.items())]
    text = ";".join(out)
    if text.count(";") != len(out) - 1:
        raise ValueError(f"a search's settings hold ';': {text!r}")
    return text


def _tune_of(descriptor: str) -> dict:
    for part in descriptor.split(";")[1:]:
        name, _, value = part.partition("=")
        if name == "tune":
            out = {}
            for entry in value.split(","):
                field, _, rng = entry.partition(":")
                lo, _, hi = rng.partition("-")
                out[field] = (int(lo), int(hi))
            return out
    return {}


def search_values(descriptor: str, start: str, config: str):
    """The tuned fields' values of ``config`` (``{field: int}``) when it is
    a config of the search ``descriptor`` started at ``start`` (the rule
    of the module docstring), else None."""
    tune = _tune_of(descriptor)
    s_parts, c_parts = start.split(","), config.split(",")
    if len(s_parts) != len(c_parts):
        return None
    out = {}
    for s, c in zip(s_parts, c_parts):
        name, _, _ = s.partition("=")
        if name in tune:
            cname, _, v = c.partition("=")
            lo, hi = tune[name]
            if cname != name or not (v.isascii() and v.isdigit()) or v != str(int(v)) or not lo <= int(v) <= hi:
                return None
            out[name] = int(v)
        elif s != c:
            return None
    return out
