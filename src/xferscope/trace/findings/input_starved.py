"""The GPU waiting for its next input: the largest idle of a GPU is time the host spent away
from CUDA until it copied a batch up, at the same line every step (a DataLoader's next batch,
then `.to(device)`). Priced by that idle: with the next batch ready when the step ends, the GPU
would not wait for it."""

from __future__ import annotations

from dataclasses import replace

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


# The fixes priced apart, in the framework's words: (the long gaps' fix, the steady wait's fix)
KNOBS: dict[str | None, tuple[str, str]] = {
    None: (
        "keep the input pipeline's threads between epochs",
        "make inputs faster or further ahead (more threads, more buffers)",
    ),
    "PyTorch": (
        "make the DataLoader once, with `persistent_workers=True`",
        "more `num_workers` (or a larger `prefetch_factor`), or a lighter dataset and collate",
    ),
}


def find(context: Context) -> TraceFinding | None:
    trace = context.trace
    best = None  # the largest cause that ends at a line, and its GPU's timeline
    for g in context.gpus.gpus:
        for cause in g.idle:
            if cause.kind != "away" or not cause.where or cause.where.startswith("("):
                continue
            if best is None or cause.steady_s > best[0].steady_s:  # a start-up's wait aside
                best = (cause, g)
    if best is None:
        return None
    cause, gpu = best
    scale = gpu.scale
    if scale is None or cause.seconds < WORTH * gpu.judged_s:
        return None
    copies = [
        c
        for c in trace.copies
        if c.direction == "h2d"
        and c.device == gpu.device
        and trace.where(c.frames, c.python) == cause.where
    ]
    if len(copies) < 2:  # one copy is a start-up's, not a loop's input
        return None
    idle = cause.seconds * scale
    span = gpu.span_s
    copy_s = sum(c.seconds for c in copies)
    sampled = (
        ""
        if gpu.judged_s >= span
        else f" (judged in the {format_seconds(gpu.judged_s)} whose kernels were all recorded, "
        "and scaled to the span: `trace --kernels all` records every kernel)"
    )
    found = finding(
        CODE,
        "the GPU waited for its next input",
        ADVICE,
        trace,
        copies,
        idle,
        idle,
        f"GPU {gpu.device} sat idle {format_seconds(idle)} ({cause.seconds / gpu.judged_s:.0%} "
        f"of the span from its first work to its last{sampled}) in {cause.gaps} gaps while the "
        f"host was away from CUDA, until it copied the next input at {cause.where}, "
        f"{format_seconds(cause.usual_s)} a usual gap; those copies took "
        f"{format_seconds(copy_s)} on the GPU ({copy_s / span:.1%})",
    )
    restart, steady = KNOBS.get(found.framework, KNOBS[None])
    long_s = cause.long_excess_s * scale
    each = ((restart, long_s),) if cause.long_gaps else ()
    return replace(found, each_fix=(*each, (steady, idle - long_s)))
