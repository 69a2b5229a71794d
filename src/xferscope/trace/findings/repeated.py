"""Uploads of data already uploaded (the same bytes, from a sample of each source): priced at all
they cost, as keeping the device copy saves them. In a loop, only data uploaded again within
WITHIN steps of its last upload (a constant: a mask, a table, every step): a dataset that a
loop revisits each epoch, or batches taken in turn, are data the loop moves, not a constant to
keep."""

from __future__ import annotations

from ..records import Copy
from .base import Context, TraceFinding, finding

ORDER = 5  # where it stands among findings of equal price
CODE = "repeated_uploads"
ADVICE: dict[str | None, str] = {
    None: "keep the data on the GPU and upload it once (cache the device copy)",
    "PyTorch": "move the tensor to the GPU once, outside the loop, and keep the device "
    "tensor (or register it as a module buffer)",
    "CuPy": "keep the `cupy.ndarray` instead of converting the NumPy array again",
}


WITHIN = 2.0  # in a loop, data uploaded again within this many steps is a constant


def repeats(context: Context) -> list[Copy]:
    """The uploads of data already uploaded: in a process with a loop, those within WITHIN of
    its steps of the last upload of the same data; elsewhere every upload after the first."""
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


def find(context: Context) -> TraceFinding | None:
    trace = context.trace
    again = repeats(context)
    if not again:
        return None
    cost = sum(c.host_cost_s for c in again)
    return finding(
        CODE,
        "uploads of data already uploaded (same bytes, sampled)",
        ADVICE,
        trace,
        again,
        cost,
        cost,
        "identical content is judged from up to 256 words sampled across each buffer and its size",
    )
