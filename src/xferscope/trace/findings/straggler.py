"""A rank that made the others wait: in a job of a process per GPU (torchrun), the GPU whose
time in NCCL's kernels is shortest arrived last at the collectives, and every other GPU spent
the difference waiting for it (ranks.py), step after step. Why it came late is its GPU's
largest steady idle: the host away from CUDA (its own extra work, its input) or blocked in a
call, at the program's line and, where the looks saw it, what the host was doing there. Priced
by the longest wait of the others, at most what made the straggler late (its GPU's idle for that
cause): with the straggler on time, no rank waits for it, and it can come no earlier than its
own GPU's idle allows."""

from __future__ import annotations

from ...core.units import format_seconds
from ..idle import IdleCause
from ..ranks import ranks
from .base import Context, TraceFinding, in_words, seen_place

ORDER = 1  # where it stands among findings of equal price
CODE = "straggler"
ADVICE: dict[str | None, str] = {
    None: "every rank waits at each collective for the last one to arrive: make the late "
    "rank's work at {line} lighter or move it off the step (to another thread, or every N "
    "steps), or share that work evenly among the ranks",
    "PyTorch": "every rank waits at each all-reduce of DistributedDataParallel's gradients for "
    "the last rank to arrive: make rank {rank}'s work at {line} lighter or move it off the step "
    "(to another thread, or every N steps, or on rank 0 alone after the all-reduce), or share "
    "that work evenly among the ranks",
}


def find(context: Context) -> TraceFinding | None:
    job, late = ranks(context.trace, context.gpus)
    if late is None:
        return None
    waited = max(r.waited_s for r in job)
    rank = sorted(r.pid for r in job).index(late.pid)  # torchrun starts rank 0 first
    cause = late.cause
    own = next((g for g in context.gpus.gpus if g.device == late.device), None)
    late_s = cause.seconds * (own.scale or 1.0) if cause is not None and own else waited
    line, what, said = _why(cause)
    looks = cause.seen_at[0][1] if cause is not None and cause.seen_at else 0
    places = (seen_place(line, looks, waited),) if cause is not None and line else ()
    framework = "PyTorch" if _pytorch(context) else None
    return TraceFinding(
        CODE,
        f"GPU {late.device} made the other ranks wait at every collective",
        0,  # no calls of its own: its price is the others' wait
        0,
        "",
        places,
        waited,
        min(waited, late_s),
        in_words(ADVICE, framework).format(rank=rank, line=line or "its line"),
        f"GPU {late.device} (pid {late.pid}) spent the least time in NCCL's kernels: it "
        f"arrived last, and the others spent up to {format_seconds(waited)} more there waiting "
        f"for it{said}" + (f"; the looks found its main thread in {what}" if what else ""),
        "",
        framework,
    )


def _why(cause: IdleCause | None) -> tuple[str, str, str]:
    """The straggler's line (where its looks saw the main thread, else the line it came back to
    CUDA at), what the looks found it doing, and why it came late in words."""
    if cause is None:
        return "", "", ""
    line = cause.seen_at[0][0] if cause.seen_at and cause.seen_at[0][0] else cause.where
    what = cause.seen_doing[0][0] if cause.seen_doing else ""
    how = {"blocked": f"blocked in {cause.function}", "launch": "between launches"}.get(
        cause.kind, "away from CUDA"
    )
    return line, what, f"; its GPU sat idle {format_seconds(cause.seconds)} {how} at {line}"


def _pytorch(context: Context) -> bool:
    """Whether the job's calls went through PyTorch (torch.distributed)."""
    return any(
        context.trace.framework(c.frames, c.python) == "PyTorch" for c in context.trace.copies[:64]
    )
