"""Copies that ran while no kernel did, in a program that runs kernels: time that copies on another
stream could have hidden behind them, at most the kernels' own time free of copies."""

from __future__ import annotations

from ..costs import merged, overlap_ns, with_kernels
from ..records import Interval, on_loader_thread
from .base import Context, TraceFinding, finding

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
    transfers = [c for c in trace.copies if c.crosses_link and not on_loader_thread(c.python)]
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
    cost = scale * sum(c.seconds for c in alone)
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
        min(cost, free_kernel_s),
        "at most: the saving is bounded by the kernels' time free of copies, and needs work "
        "that does not depend on the copy" + sampled,
    )
