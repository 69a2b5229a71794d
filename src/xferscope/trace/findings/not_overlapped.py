"""Copies that ran while no kernel did, in a program that runs kernels: time that copies on another
stream could have hidden behind them, at most the kernels' own time free of copies. A copy that
need not be made at all (the same data again: repeated.py) is that finding's, not this one's;
a copy from pageable memory cannot overlap a kernel until it is pinned, and what pinning saves
is the pageable finding's, so it is counted here at a pinned copy's time (this machine's
curve), the part a side stream could hide once it is pinned."""

from __future__ import annotations

from collections import defaultdict

from ..costs import merged, overlap_ns, with_kernels
from ..records import Copy, Interval, on_loader_thread
from .base import Context, TraceFinding, finding
from .repeated import repeats

ORDER = 3  # where it stands among findings of equal price
CODE = "copies_not_overlapped"
ADVICE: dict[str | None, str] = {
    None: "issue the copies of the next batch on their own stream from pinned memory while "
    "the current batch's kernels run (double buffering)",
    "PyTorch": "copy the next batch on a side stream while this one computes: `s = "
    "torch.cuda.Stream()`; `with torch.cuda.stream(s): nxt = batch.to(device, "
    "non_blocking=True)` (from pinned memory), then "
    "`torch.cuda.current_stream().wait_stream(s)` before using it",
    "CuPy": "copy the next batch on its own stream (`cupy.cuda.Stream(non_blocking=True)`) "
    "from pinned memory (`cupyx.empty_pinned`) while the current one computes",
}


def _hidden(context: Context, c: Copy) -> float:
    """What a side stream could hide of a copy: its time, or from pageable memory the time of
    a pinned copy of its size (pinning is the pageable finding's fix), where this machine's
    curve gives one."""
    if c.host_memory != "pageable" or context.reference is None:
        return c.seconds
    pinned = context.reference.seconds(c.direction, "pinned", c.bytes)
    return c.seconds if pinned is None else min(pinned, c.seconds)


def find(context: Context) -> TraceFinding | None:
    """Copies that ran while no kernel did, in a program that runs kernels: time that copies on
    another stream could have hidden behind them (at most the kernels' own time free of copies).
    Where kernels were recorded in windows, judged on the copies inside them and scaled to all."""
    trace = context.trace
    kernels = trace.kernels()
    if not kernels:
        return None
    # the DeviceLoader's copies already run ahead on a side stream: alone, they found the GPU
    # waiting for its input (a finding of its own), which a side stream does not change
    again = {id(c) for c in repeats(context)}
    transfers = [
        c
        for c in trace.copies
        if c.crosses_link and not on_loader_thread(c.python) and id(c) not in again
    ]
    seen, scale = with_kernels(trace, transfers)
    if scale is None:
        return None
    busy = context.kernels
    alone = [c for c in seen if overlap_ns(c, busy) == 0]
    if not alone:
        return None
    copies_merged = merged(
        Interval(c.pid, "copy", "", c.start_ns, c.end_ns, c.device, c.stream) for c in trace.copies
    )
    free_kernel_s = scale * sum(
        (k.end_ns - k.start_ns - overlap_ns(k, copies_merged)) * 1e-9 for k in kernels
    )
    cost = scale * sum(_hidden(context, c) for c in alone)
    saving = min(scale * _step_bound(context, alone), free_kernel_s)
    sampled = (
        f"; kernels were recorded in windows, so this is judged on the {len(seen)} copies "
        f"that ran in them ({len(alone)} alone) and scaled to all {len(transfers)} "
        "(`trace --kernels all` records every kernel)"
        if scale != 1.0
        else ""
    )
    return finding(
        CODE,
        "copies that ran while no kernel did",
        ADVICE,
        trace,
        alone,
        cost,
        saving,
        "at most: the saving is bounded by the kernels' time free of copies, and needs work "
        "that does not depend on the copy; in a loop, a step whose GPU waits for its host "
        "anyway saves only what its copies take beyond that idle" + sampled,
    )


def _step_bound(context: Context, alone: list[Copy]) -> float:
    """What hiding the copies saves: per step of its process's loop, what the step's copies
    could hide beyond the GPU's idle in that step (a step bound by its host loses nothing to
    its copies: the GPU would wait for the host anyway); each copy alone outside a loop."""
    per: dict[tuple[int, int], float] = defaultdict(float)
    total = 0.0
    for c in alone:
        step = context.step_at(c.pid, c.start_ns)
        if step is None:
            total += _hidden(context, c)
        else:
            per[(c.pid, step)] += _hidden(context, c)
    return total + sum(
        max(hidden - context.step_idle_s(pid, step), 0.0) for (pid, step), hidden in per.items()
    )
