"""The GPU waiting for its next input: the largest idle of a GPU is time the host spent away
from CUDA until it copied a batch up, at the same line every step (a DataLoader's next batch,
then `.to(device)`); or, where the GPU resumed with no CUDA call to name (the batch already on
the GPU, copied by xferscope.torch.DeviceLoader's thread), time in which most looks at the
main thread found it waiting in a loader's next, at the program's line. Priced by that idle:
with the next batch ready when the step ends, the GPU would not wait for it.

The advice is for what the program uses: a DataLoader's knobs only where the looks found the
main thread waiting in a loader's next; otherwise the line the host was at and what it was
doing there (the program's own input code, a tokenizer), to be done ahead of the step. Idle
that follows a wait for the GPU is the wait's (idle.py), unless the looks found the host
waiting for a batch then; the straggler of a job of several GPUs is its own finding. Which
idle is the input's: starving.py."""

from __future__ import annotations

import re
from dataclasses import replace

from ...core.units import format_seconds
from ..idle import IdleCause
from ..records import LOADER_WHERE, Copy
from .base import (
    PIN_LOADER,
    PINNED,
    Context,
    TraceFinding,
    finding,
    in_words,
    seen_place,
    with_seen,
)
from .repeated import constant, repeated_ids
from .starving import ahead, at_copy, inside, loader, made, starving

ORDER = 0  # where it stands among findings of equal price
CODE = "input_starved"
ADVICE: dict[str | None, str] = {
    None: "make the next input while the GPU computes (more loader threads, double buffering "
    "of pinned host buffers) so that its copy can start as soon as a step ends",
    "PyTorch": "have the next batch ready before the step needs it: raise the DataLoader's "
    "`num_workers` (each worker makes whole batches at once), keep them between epochs with "
    "`persistent_workers=True`, queue more batches with `prefetch_factor`, pin with "
    "`pin_memory=True` and copy with `.to(device, non_blocking=True)`; move heavy per-sample "
    "work (decoding, augmentation) to the GPU",
}


# Where no loader's next was seen: the host made the input itself, at its line
OWN_INPUT = (
    "make the next input before the step needs it: do the host's work at {line}{doing} ahead "
    "of the step (on another thread or process, once before the loop, or on the GPU), so that "
    "its copy can start as soon as a step ends"
)

# A cause whose gaps fall in at most one step of this many is no step's wait but the loader's
# start at each epoch (loader_per_epoch: 9 gaps of 113 ms in 122 steps, all alike, so none is
# long beside the others): its fix is the long gaps' one. Its long gaps in more than one step
# of this many are the steady wait, long only beside the gaps before a step's other copies
# (DDP ranks copying x then y: 117 long gaps in 164 steps, the usual gap y's 70 us)
EPOCHLY = 4
# Why the long gaps' fix leads the advice where they are most of the price
RESTARTED = (
    "the loader's workers start anew at each epoch, and the GPU waits for their first batches"
)
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
    # the same data made and uploaded again each step is repeated.py's
    again = repeated_ids(context)
    starved = starving(context, lambda s: not constant(again, s.copies))
    if starved is None:
        return None
    cause, gpu, share, copies = starved.cause, starved.gpu, starved.share, starved.copies
    scale = starved.scale
    idle = starved.idle_s
    span = gpu.span_s
    copy_s = sum(c.seconds for c in copies)
    sampled = (
        ""
        if gpu.judged_s >= span
        else f" (judged in the {format_seconds(gpu.judged_s)} whose kernels were all recorded, "
        "and scaled to the span: `trace --kernels all` records every kernel)"
    )
    if at_copy(cause):
        why = f"host was away from CUDA, until it copied the next input at {cause.where}"
    elif made(cause):
        why = (
            "host was away from CUDA, making the next input itself, until the framework's "
            "threads copied it"
        )
    else:
        why = (
            f"host's main thread waited for its next batch at {cause.seen_at[0][0]} "
            f"({cause.input_looks} of the {cause.looks} looks at it in that time found it in a "
            "loader's next; the copies: " + (LOADER_WHERE if copies else "none seen") + ")"
        )
    copied = (
        f"; those copies took {format_seconds(copy_s)} on the GPU ({copy_s / span:.1%})"
        if copies
        else ""
    )
    found = finding(
        CODE,
        "the GPU waited for its next input",
        ADVICE,
        trace,
        copies,
        idle,
        idle,
        f"GPU {gpu.device} sat idle {format_seconds(cause.seconds * scale)} "
        f"({cause.seconds / gpu.judged_s:.0%} of the span from its first work to its "
        f"last{sampled}) in {cause.gaps} gaps while the {why}, "
        f"{format_seconds(cause.usual_s)} a usual gap{copied}{_shared(share, cause)}"
        + ahead([starved]),
    )
    if not at_copy(cause) and not made(cause):  # the line that waited, then the copies' own
        framework = cause.seen_framework or found.framework
        line = seen_place(cause.seen_at[0][0], cause.input_looks, idle)
        found = replace(found, places=(line, *found.places), framework=framework,
                        advice=in_words(ADVICE, framework))  # fmt: skip
    if not loader(cause):  # no loader seen: the host's own work before the copy, named
        return _own_input(found, cause, idle)
    framework = cause.seen_framework or found.framework  # the loader's
    found = replace(found, framework=framework, advice=in_words(ADVICE, framework))
    restart, steady = in_words(KNOBS, framework)
    change = PIN_LOADER if _receives_pageable(cause, copies) else ""
    steady = PINNED if change else steady
    long_s = cause.long_excess_s * scale
    loop = context.loop_of(copies[0].pid) if copies else None
    if loop is not None and cause.gaps * scale * EPOCHLY <= loop.count:
        long_s = idle  # every gap an epoch's start: the loader's workers started anew
    elif loop is not None and cause.long_gaps * scale * EPOCHLY > loop.count:
        # long gaps in most steps: the steady wait (the short ones another copy's), and only
        # the longest of them an epoch's start
        long_s = cause.longer_excess_s * scale
    each = [(fix, s) for fix, s in ((restart, long_s), (steady, idle - long_s)) if s > 0]
    if long_s * 2 > idle:  # mostly the epochs' starts: their fix first, in the headline's words
        found = replace(found, advice=f"{restart}: {RESTARTED}")
    return replace(found, each_fix=tuple(each), change=change)


# What a look found the main thread doing while it received a batch from the workers' queue
# (samples.doing): reading it from the pipe, or rebuilding its tensors from shared memory
RECEIVING = re.compile(r"^_?recv\w* \(multiprocessing\)$|^rebuild_\w+ \(torch\)$")


def _doing(line: str, what: str) -> str:
    """What the looks found the main thread doing (`_clip (numpy)`), "" where that is only the
    line's own function again (`sample (train.py)` at `/path/train.py:53 (sample)`)."""
    function, _, module = what.partition(" (")
    return "" if line.endswith(f" ({function})") and module[:-1] in line else what


def _receives_pageable(cause: IdleCause, copies: list[Copy]) -> bool:
    """Whether the main thread received its batches from a DataLoader's workers itself (at
    least half the looks that found it in the loader's next found it reading the workers'
    queue, not waiting for them) and copied them from pageable memory: with `pin_memory=True`
    the pin-memory thread receives them instead (base.PIN_LOADER)."""
    received = sum(n for doing, n in cause.seen_doing if RECEIVING.match(doing))
    return (
        bool(copies)
        and all(c.host_memory == "pageable" for c in copies)
        and received > 0
        and received * 2 >= cause.input_looks
    )


def _own_input(found: TraceFinding, cause: IdleCause, idle: float) -> TraceFinding:
    """The finding where the host made its input itself: the line it was at and what it was
    doing there, and the advice to do that ahead of the step, in no loader's words."""
    line = cause.seen_at[0][0] if cause.seen_at and cause.seen_at[0][0] else cause.where
    what = _doing(line, cause.seen_doing[0][0] if cause.seen_doing else "")
    seen = (
        f"; the looks at the main thread found it at {line}"
        + (f" in {what}" if what else "")
        + f" ({cause.seen_at[0][1]} of {cause.looks})"
        if cause.looks and cause.seen_at
        else ""
    )
    places = found.places
    if line and line != cause.where:
        places = with_seen(
            places, seen_place(line, cause.seen_at[0][1] if cause.seen_at else 0, idle)
        )
    advice = OWN_INPUT.format(line=line or "the line before the copy",
                              doing=f" ({what})" if what else "")  # fmt: skip
    return replace(found, places=places, advice=advice, detail=found.detail + seen,
                   each_fix=(("do the input's work ahead of the step", idle),))  # fmt: skip


def _shared(share: float, cause: IdleCause) -> str:
    """The price's words where only part of the idle was the input's making (starving.making)."""
    if share >= 1.0:
        return ""
    seen_inside = inside(cause)
    return (
        f"; the input's making was {share:.0%} of the host's time away: {seen_inside} of the "
        f"{cause.looks} looks at the main thread then found it in the framework's own code (the "
        "step's launches, its optimizer), which the input made ahead would not save"
    )
