"""The GPU waiting for its next input: the largest idle of a GPU is time the host spent away
from CUDA until it copied a batch up, at the same line every step (a DataLoader's next batch,
then `.to(device)`). Priced by that idle: with the next batch ready when the step ends, the GPU
would not wait for it."""

from __future__ import annotations

from ...core.units import format_seconds
from .base import Context, TraceFinding, finding

ORDER = 0  # where it stands among findings of equal price
CODE = "input_starved"
WORTH = 0.05  # idle this share of the span, or more, is a finding
ADVICE: dict[str | None, str] = {
    None: "make the next input while the GPU computes (more loader threads, double buffering "
    "of pinned host buffers) so that its copy can start as soon as a step ends",
    "PyTorch": "have the next batch ready before the step needs it: raise the DataLoader's "
    "`num_workers` (each worker makes whole batches at once), keep them between epochs with "
    "`persistent_workers=True`, queue more batches with `prefetch_factor`, pin with "
    "`pin_memory=True` and copy with `.to(device, non_blocking=True)`; move heavy per-sample "
    "work (decoding, augmentation) to the GPU",
}


def find(context: Context) -> TraceFinding | None:
    trace = context.trace
    gpus = context.gpus
    span = gpus.span_s
    best = None  # (idle seconds, gaps, line, GPU)
    for g in gpus.gpus:
        for cause in g.idle:
            if cause.kind != "away" or not cause.where or cause.where.startswith("("):
                continue
            if best is None or cause.seconds > best[0]:
                best = (cause.seconds, cause.gaps, cause.where, g.device)
    if best is None or span <= 0 or best[0] < WORTH * span:
        return None
    idle, gaps, where, device = best
    copies = [
        c
        for c in trace.copies
        if c.direction == "h2d" and c.device == device and trace.where(c.frames, c.python) == where
    ]
    if len(copies) < 2:  # one copy is a start-up's, not a loop's input
        return None
    copy_s = sum(c.seconds for c in copies)
    return finding(
        CODE,
        "the GPU waited for its next input",
        ADVICE,
        trace,
        copies,
        idle,
        idle,
        f"GPU {device} sat idle {format_seconds(idle)} ({idle / span:.0%} of the span from its "
        f"first work to its last) in {gaps} gaps while the host was away from CUDA, until it "
        f"copied the next input at {where}; those copies took {format_seconds(copy_s)} on the "
        f"GPU ({copy_s / span:.1%})",
    )
