"""Statistics over the per-copy times of a point's trials."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

T = TypeVar("T")

# 1.4826 * MAD estimates the standard deviation of normally distributed samples while ignoring
# outliers (a robust coefficient of variation once divided by the median).
_MAD_TO_SIGMA = 1.4826


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


def typical(samples: Sequence[T], key: Callable[[T], float]) -> T:
    """The sample of median `key` (the lower middle one of an even count): a real trial, whose
    parts add up as measured, where an average of each part would not."""
    ordered = sorted(samples, key=key)
    return ordered[(len(ordered) - 1) // 2]


def relative_noise(values: Sequence[float]) -> float:
    """Robust relative spread: 1.4826 * MAD / median. 0 for fewer than two samples."""
    if len(values) < 2:
        return 0.0
    mid = median(values)
    if mid <= 0:
        return 0.0
    mad = median([abs(v - mid) for v in values])
    return _MAD_TO_SIGMA * mad / mid


def relative_range(values: Sequence[float]) -> float:
    """(max - min) / median: the plain spread, reported beside the robust one."""
    if len(values) < 2:
        return 0.0
    mid = median(values)
    return (max(values) - min(values)) / mid if mid > 0 else 0.0


# A method must beat a simpler one by more than this to be called the winner over it: the median
# seconds of methods this close swap places from one run to the next.
CLEAR_WIN = 0.03


def settle(seconds: Mapping[str, float], simplest_first: Sequence[str]) -> str:
    """The winner among methods timed alike (median seconds by name): the first in
    `simplest_first` within CLEAR_WIN of the fastest, else the fastest. A method that takes more
    of the machine (the host's threads, the GPU's SMs, a second copy) wins only where it clearly
    wins; names missing from `simplest_first` come after it, fastest first."""
    fastest = min(seconds, key=lambda m: seconds[m])
    limit = seconds[fastest] * (1 + CLEAR_WIN)
    for method in simplest_first:
        if method in seconds and seconds[method] <= limit:
            return method
    return fastest
