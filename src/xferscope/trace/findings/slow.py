"""Copies far slower than this machine reaches for their size, of those over runs.SMALL_BYTES
(a smaller copy's time is its fixed cost, which no link or NUMA node explains): priced by the
time past its curve, of each copy's time beyond the kernels its GPU ran meanwhile
(costs.exposed: a blocking call that waits for the step before is slow by that wait, which a
faster copy cannot save)."""

from __future__ import annotations

from ..costs import exposed
from .base import Context, TraceFinding, finding
from .runs import SMALL_BYTES

ORDER = 4  # where it stands among findings of equal price
CODE = "slow_copies"
SLOW_FACTOR = 2.0  # a copy this many times slower than the machine's curve is "far below"
ADVICE: dict[str | None, str] = {
    None: "look for copies that run at once with others (same direction), a buffer on the "
    "far NUMA node (`xferscope run` says), or a GPU link trained down",
}


def find(context: Context) -> TraceFinding | None:
    trace, reference = context.trace, context.reference
    if reference is None:
        return None
    slow = []
    for c in trace.copies:
        if not c.crosses_link or c.host_memory not in ("pinned", "pageable"):
            continue
        if c.bytes <= SMALL_BYTES:  # its time is its fixed cost: its rate tells of no link
            continue
        t = reference.seconds(c.direction, c.host_memory, c.bytes)
        taken = c.host_cost_s if c.host_memory == "pageable" else c.seconds
        if t and taken > SLOW_FACTOR * t:
            slow.append(c)
    if not slow:
        return None
    judged, scale = exposed(trace, slow, context.kernels)
    excess = 0.0
    for c, taken in judged:
        t = reference.seconds(c.direction, c.host_memory, c.bytes) or 0.0
        excess += max(taken - t, 0.0) * scale
    return finding(
        CODE,
        "copies at less than half the rate this machine reaches for their size",
        ADVICE,
        trace,
        slow,
        sum(c.host_cost_s for c in slow),
        excess,
    )
