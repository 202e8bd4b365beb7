"""Inductor's coordinate descent as detd names it, for the Inductor
adapter (:mod:`detd._inductor`, which uses it for its ``coordesc``
keys): :func:`space`, every config the descent can reach from its start
by canonical string, filtered by the tuner's ``is_valid_config``; over
:data:`MAX_CANDIDATES` the key names the search instead (:class:`Search`,
docs/inductor.md "Large searches"), and a config reported for it is
checked against the tuner's own reach. Like the adapter, it reads
attributes of Inductor's and Triton's objects (the tuner, its configs).
"""

from __future__ import annotations

import copy
import itertools
from typing import Any, Dict, Optional

from . import _canon, _triton

# detd/client.h: DETD_MAX_CANDIDATES.
MAX_CANDIDATES = 1024


def eligible(tuner) -> bool:
    """Whether Inductor would run its descent on this tuner (not a
    template, user-autotuned or fixed kernel)."""
    flag = getattr(type(tuner), "_should_coordesc_tune", None)
    if flag is not None:
        return bool(tuner._should_coordesc_tune)
    names = {"TEMPLATE", "USER_AUTOTUNE", "FIXED"}
    return getattr(tuner.heuristic_type, "name", "") not in names


def space(tuner, start) -> Optional[Dict[str, Any]]:
    """Every config the coordinate descent can reach from ``start``, by
    canonical string (module docstring), or None when there are more
    than :data:`MAX_CANDIDATES` (the key then names the search:
    :class:`Search`)."""
    from torch._inductor.runtime import coordinate_descent_tuner as cdt

    ct = tuner.coordesc_tuner
    axes, values = [], []
    for field in ct.tunable_fields:
        v = cdt.get_field(start, field)
        if v is None:
            continue
        # Block sizes and warps double or halve until out of bounds; stage
        # counts step by one with no upper bound: six steps either way
        # (a config the descent reaches beyond is not reported).
        radius = 6 if field.lower() == "num_stages" else 64
        reach = ct.get_neighbour_values(field, v, radius=radius, include_self=True)
        axes.append(field)
        values.append(sorted(set(reach)))
    total = 1
    for v in values:
        total *= len(v)
    if total > 4 * MAX_CANDIDATES:
        return None
    out: Dict[str, Any] = {}
    valid = getattr(ct, "is_valid_config", None)
    for combo in itertools.product(*values):
        cfg = copy.deepcopy(start)
        for field, v in zip(axes, combo):
            cdt.set_field(cfg, field, v)
        if valid is not None and not valid(cfg):
            continue
        out.setdefault(_triton.config_string(cfg), cfg)
        if len(out) > MAX_CANDIDATES:
            return None
    return out


# Inductor's descent changes a field by doubling or halving (one step for
# stage counts); the range a search key names is where this many steps
# from the start along each field can reach.
SEARCH_STEPS = 64


class Search:
    """Inductor's coordinate descent from ``start`` named as a search (a
    space over :data:`MAX_CANDIDATES`): ``descriptor`` (the candidate that
    names it: the fields the descent tunes with their ranges, its radius
    and whether it checks all directions) and ``config(string)``: the live
    config of a string of the search that this tuner's own rules accept
    (each field a value its descent can reach, ``is_valid_config``), else
    None."""

    def __init__(self, tuner, start):
        from torch._inductor.runtime import coordinate_descent_tuner as cdt

        self.cdt, self.ct, self.start = cdt, tuner.coordesc_tuner, start
        self.start_s = _triton.config_string(start)
        present = set(start.kwargs) | {"num_warps", "num_stages"}
        self.reach: Dict[str, set] = {}
        for field in self.ct.tunable_fields:
            v = cdt.get_field(start, field)
            if v is None or field not in present or isinstance(v, bool) or not isinstance(v, int) or v < 1:
                continue
            self.reach[field] = set(self.ct.get_neighbour_values(field, v, radius=SEARCH_STEPS, include_self=True))
        meta = tuner.inductor_meta or {}
        self.descriptor = _canon.search_descriptor(
            "inductor.coordesc", [(f, min(r), max(r)) for f, r in self.reach.items()],
            radius=int(meta.get("coordinate_descent_search_radius", 1)),
            all_directions=bool(meta.get("coordinate_descent_check_all_directions", False)))
        self._memo: Dict[str, Any] = {self.start_s: start}

    def config(self, string: str):
        if string in self._memo:
            return self._memo[string]
        values = _canon.search_values(self.descriptor, self.start_s, string)
        cfg = None
        if values is not None and all(v in self.reach[f] for f, v in values.items()):
            cfg = copy.deepcopy(self.start)
            for f, v in values.items():
                self.cdt.set_field(cfg, f, v)
            valid = getattr(self.ct, "is_valid_config", None)
            if _triton.config_string(cfg) != string or (valid is not None and not valid(cfg)):
                cfg = None
        self._memo[string] = cfg
        return cfg

    def from_hashable(self, h):
        """The string of a config Inductor's descent timed (its cache key:
        the kwargs, num_warps, num_stages), or None outside the search."""
        cfg = copy.deepcopy(self.start)
        for name, v in h:
            self.cdt.set_field(cfg, name, v)
        string = _triton.config_string(cfg)
        return string if self.config(string) is not None else None
