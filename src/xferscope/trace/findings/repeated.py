"""Uploads of data already uploaded (the same bytes, from a sample of each source): priced at all
they cost, as keeping the device copy saves them."""

from __future__ import annotations

from .base import Context, TraceFinding, finding

ORDER = 5  # where it stands among findings of equal price
CODE = "repeated_uploads"
ADVICE: dict[str | None, str] = {
    None: "keep the data on the GPU and upload it once (cache the device copy)",
    "PyTorch": "move the tensor to the GPU once, outside the loop, and keep the device "
    "tensor (or register it as a module buffer)",
    "CuPy": "keep the `cupy.ndarray` instead of converting the NumPy array again",
}


def find(context: Context) -> TraceFinding | None:
    trace = context.trace
    seen: set[tuple[int, int]] = set()
    repeats = []
    for c in trace.copies:
        if c.direction != "h2d" or c.content is None:
            continue
        key = (c.content, c.bytes)
        if key in seen:
            repeats.append(c)
        seen.add(key)
    if not repeats:
        return None
    cost = sum(c.host_cost_s for c in repeats)
    return finding(
        CODE,
        "uploads of data already uploaded (same bytes, sampled)",
        ADVICE,
        trace,
        repeats,
        cost,
        cost,
        "identical content is judged from up to 256 words sampled across each buffer and its size",
    )
