"""trace/costs.py's coverage of a stretch by sorted, disjoint parts: walked part by part
(covered_ns) and from the parts' lengths summed (covered_between), alike on any stretch."""

from __future__ import annotations

import random

from xferscope.trace.costs import covered_between, covered_ns, cumulative, disjoint


def test_the_summed_lengths_give_the_coverage_the_walk_gives():
    rng = random.Random(7)
    for _ in range(200):
        spans = []
        for _ in range(rng.randint(0, 30)):
            start = rng.randint(0, 1000)
            spans.append((start, start + rng.randint(0, 80)))
        starts, ends = disjoint(spans)
        summed = cumulative(starts, ends)
        assert summed[-1] == sum(e - s for s, e in zip(starts, ends, strict=True))
        for _ in range(20):
            a = rng.randint(-50, 1100)
            b = a + rng.randint(0, 600)
            assert covered_between(starts, ends, summed, a, b) == covered_ns(starts, ends, a, b)


def test_edges_inside_one_part_and_outside_every_part():
    starts, ends = [10, 40], [20, 60]
    summed = cumulative(starts, ends)
    assert covered_between(starts, ends, summed, 12, 15) == 3  # inside the first part
    assert covered_between(starts, ends, summed, 0, 100) == 30
    assert covered_between(starts, ends, summed, 20, 40) == 0  # between them
    assert covered_between(starts, ends, summed, 70, 90) == 0  # after them
    assert covered_between([], [], [0], 0, 10) == 0
