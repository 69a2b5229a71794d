"""How far a figure made of a few noisy runs can be trusted: a percentile bootstrap over the
runs of two kinds (untraced and traced, before and fixed), each resampled with replacement,
seeded so that a record judged again gives the same interval."""

from __future__ import annotations

import random
import statistics
from collections.abc import Callable, Sequence

RESAMPLES = 4000


def interval(
    a: Sequence[float],
    b: Sequence[float],
    figure: Callable[[float, float], float],
    resamples: int = RESAMPLES,
    seed: int = 0,
) -> list[float]:
    """A 95% interval of figure(median(a), median(b)), `a` and `b` resampled."""
    rng = random.Random(seed)
    found = sorted(
        figure(statistics.median(rng.choices(a, k=len(a))),
               statistics.median(rng.choices(b, k=len(b))))
        for _ in range(resamples)
    )  # fmt: skip
    return [found[int(0.025 * resamples)], found[int(0.975 * resamples) - 1]]


def median_interval(a: Sequence[float], resamples: int = RESAMPLES, seed: int = 0) -> list[float]:
    """A 95% interval of median(a), `a` resampled (one kind of run: each its own ratio)."""
    return interval(a, [0.0], lambda m, _: m, resamples, seed)


def round_savings(before: Sequence[float], after: Sequence[float]) -> list[float]:
    """Each round's own saving, `before` less `after`, where each round ran the two back to
    back (the variants alternated): their median is what the change saved, which a host's drift
    from round to round (a quarter, between processes of a host-bound loop) leaves out, as
    the difference of each kind's median does not."""
    return [b - a for b, a in zip(before, after, strict=False)]
