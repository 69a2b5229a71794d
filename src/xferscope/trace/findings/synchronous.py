"""Synchronous copies from pinned memory that stall the host. Issued asynchronously, a copy
costs the host what this program's asynchronous calls cost it, and the host goes on while the
GPU copies: priced as the waits are (synchronizing.by_step), step by step, what the host spent
blocked beyond that issue cost, at most the GPU's idle in the step (a step whose GPU is busy
throughout gains nothing from a freed host); each copy alone outside a loop."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace

from ...core import stats
from ..records import Copy
from .base import Context, TraceFinding, finding
from .synchronizing import by_step, idle_after

ORDER = 1  # where it stands among findings of equal price
CODE = "synchronous_copies"
ASYNC_ISSUE_S = 5e-6  # an asynchronous copy call costs the host about this (when none measured)
ADVICE: dict[str | None, str] = {
    None: "issue them with cudaMemcpyAsync on a stream and synchronize only where the data "
    "is needed; the host works meanwhile",
    "PyTorch": "copy with `.to(device, non_blocking=True)` from pinned memory, and read "
    "results back with `.to('cpu', non_blocking=True)` into pinned memory, synchronizing "
    "(`torch.cuda.current_stream().synchronize()`) only where the value is used: `.item()`, "
    "`.cpu()` and `.tolist()` each wait for the GPU",
    "CuPy": "copy on a stream (`cupy.cuda.Stream(non_blocking=True)`) with "
    "`ndarray.set(..., stream=s)` and `ndarray.get(stream=s, out=pinned)`, then "
    "`s.synchronize()` only where the data is needed",
}


def find(context: Context) -> TraceFinding | None:
    trace = context.trace
    copies = [
        c
        for c in trace.copies
        if c.call is not None and not c.call_is_async and c.host_memory == "pinned"
    ]
    if not copies:
        return None
    cost = sum(c.call.seconds for c in copies if c.call)
    return finding(
        CODE,
        "synchronous copies that stall the host",
        ADVICE,
        trace,
        copies,
        cost,
        freed(context, copies),
        "issued asynchronously, the host goes on while the GPU copies: each step saves the "
        "smaller of the GPU's idle in it for its host (beyond the gap it keeps between queued "
        "kernels) and the time its copies blocked the host",
    )


def freed(
    context: Context,
    copies: list[Copy],
    faster: Mapping[tuple[int, int], float] | None = None,
    kept: Callable[[Copy], float] = lambda _: 0.0,
) -> float:
    """What the copies issued asynchronously save (by_step): the host's time blocked in their
    calls beyond what this program's asynchronous calls from pinned memory cost it to issue
    and what the fix keeps on the host for each (`kept`, seconds), against the GPU's idle after
    each (and `faster`, what the same fix saves the GPU)."""
    trace = context.trace
    issued = [
        c.call.seconds
        for c in trace.copies
        if c.call is not None and c.call_is_async and c.host_memory == "pinned"
    ]
    issue = stats.median(issued) if issued else ASYNC_ISSUE_S
    held = [c for c in copies if c.call is not None]
    calls = [c.call for c in held if c.call is not None]
    # blocked beyond an asynchronous call's issue, against the GPU's idle after each
    beyond = [
        replace(call, end_ns=max(call.end_ns - int((issue + kept(c)) * 1e9), call.start_ns))
        for c, call in zip(held, calls, strict=True)
    ]
    return by_step(context, beyond, idle_after(trace, calls), faster=faster)
