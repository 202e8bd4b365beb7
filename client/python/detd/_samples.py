"""Timing samples as the benchmarkers return them: a float, or a list of
them (quantiles or repeats). Plain values only; shared by the hook's
timing pass (:mod:`detd._hook`) and the benchmark split
(:mod:`detd._split`)."""

from typing import Any, List, Sequence, Tuple


def normalize(t) -> Tuple[List[float], bool]:
    """(the samples as floats, failed): failed when there is none, or one
    is NaN or infinite (how Triton's benchmarker marks a failed config)."""
    ms = [float(x) for x in t] if isinstance(t, (list, tuple)) else [float(t)]
    return ms, not ms or any(x != x or x == float("inf") for x in ms)


def as_list(t) -> List[Any]:
    """The samples of t as a list, values as they are."""
    return list(t) if isinstance(t, (list, tuple)) else [t]


def median(ms: Sequence[float]) -> float:
    """The median (the mean of the middle two for an even count)."""
    v = sorted(ms)
    n = len(v)
    return v[n // 2] if n % 2 else v[n // 2 - 1] / 2 + v[n // 2] / 2
