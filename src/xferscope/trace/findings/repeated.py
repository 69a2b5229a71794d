"""Uploads of data already uploaded (the same bytes, from a sample of each source): priced at all
they cost, as keeping the device copy saves them. In a loop, only data uploaded again within
WITHIN steps of its last upload (a constant: a mask, a table, every step): a dataset that a
loop revisits each epoch, or batches taken in turn, are data the loop moves, not a constant to
keep.

Where the GPU's waits for its next input (starving.py) end at uploads of the same data again
(constant): a table, a mask, built on the host and uploaded each step, each at its line. Made
once, before the loop, neither the host's making of it nor the upload is spent, so the waits
are this finding's: priced with it, and the lines where the host made the data named.

A table built with NumPy and uploaded each step (position_table_each_step: 12 MiB a step, the
GPU idle 1.45 s of 3.88 s while the host built it) was told to make it "ahead of the step"."""

from __future__ import annotations

from dataclasses import replace

from ...core.units import format_seconds
from ..records import Copy
from .base import Context, TraceFinding, finding, seen_place, with_seen
from .starving import ahead, at_copy, waits

ORDER = 5  # where it stands among findings of equal price
CODE = "repeated_uploads"
ADVICE: dict[str | None, str] = {
    None: "keep the data on the GPU and upload it once (cache the device copy)",
    "PyTorch": "move the tensor to the GPU once, outside the loop, and keep the device "
    "tensor (or register it as a module buffer)",
    "CuPy": "keep the `cupy.ndarray` instead of converting the NumPy array again",
    "JAX": "put the array on the device once, before the loop (`jax.device_put`), and pass "
    "the device array to the jitted step instead of the NumPy one",
}


WITHIN = 2.0  # in a loop, data uploaded again within this many steps is a constant


def repeats(context: Context) -> list[Copy]:
    """The uploads of data already uploaded: in a process with a loop, those within WITHIN of
    its steps of the last upload of the same data; elsewhere every upload after the first.
    Found once a context: several findings ask."""
    return context.once("repeats", lambda: _repeats(context))


def _repeats(context: Context) -> list[Copy]:
    last: dict[tuple[int, int, int], int] = {}
    out = []
    for c in context.trace.copies:
        if c.direction != "h2d" or c.content is None:
            continue
        key = (c.pid, c.content, c.bytes)
        loop = context.loop_of(c.pid)
        if key in last and (loop is None or c.start_ns - last[key] <= WITHIN * loop.step_s * 1e9):
            out.append(c)
        last[key] = c.start_ns
    return out


def repeated_ids(context: Context) -> set[int]:
    """The ids of the uploads of data already uploaded (repeats), to ask of once."""
    return context.once("repeated_ids", lambda: {id(c) for c in repeats(context)})


def constant(again: set[int], copies: list[Copy]) -> bool:
    """Whether most of these uploads upload data already uploaded (`again`: repeated_ids)."""
    return bool(copies) and sum(id(c) in again for c in copies) * 2 > len(copies)


def find(context: Context) -> TraceFinding | None:
    trace = context.trace
    again = repeats(context)
    if not again:
        return None
    cost = sum(c.host_cost_s for c in again)
    found = finding(
        CODE,
        "uploads of data already uploaded (same bytes, sampled)",
        ADVICE,
        trace,
        again,
        cost,
        cost,
        "identical content is judged from up to 256 words sampled across each buffer and its size",
    )
    ids = {id(c) for c in again}
    made = [s for s in waits(context) if constant(ids, s.copies)]
    if not made:
        return found
    waited, price = sum(s.waited_s for s in made), sum(s.idle_s for s in made)
    places = found.places
    for s in reversed(made):  # each line where the host made them again, the largest first
        line = s.cause.seen_at[0][0] if s.cause.seen_at else ""
        if line and line != s.cause.where:
            places = with_seen(places, seen_place(line, s.cause.seen_at[0][1], s.idle_s))
    first = made[0].cause
    line = first.seen_at[0][0] if first.seen_at else ""
    n = len(made) - 1
    more = f" (and at {n} more line{'s' if n > 1 else ''})" if n else ""
    return replace(
        found,
        cost_s=cost + price,
        saving_s=cost + price,
        places=places,
        detail=f"{found.detail}; the GPU waited {format_seconds(waited)} in "
        f"{sum(s.cause.gaps for s in made)} gaps until they were uploaded again"
        + (f" at {first.where}{more}" if at_copy(first) else f" by the framework's threads{more}")
        + (f", the host meanwhile making them again at {line}" if line else "")
        + ahead(made)
        + ": made once, neither is spent",
    )
