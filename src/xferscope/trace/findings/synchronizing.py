"""Waits for the GPU at the program's lines: explicit synchronizations (cudaStreamSynchronize,
cudaDeviceSynchronize, cudaEventSynchronize and the driver's; PyTorch's `.item()`, `.cpu()` and
`.tolist()` wait in one): what they cost is the GPU idle that followed each until the next work
arrived; the host time each blocked is said beside it. The fix, reading results once, lets the
host go on without waiting: its next work reaches the GPU up to the time it waited sooner, so
each wait saves the idle after it, at most the time it blocked."""

from __future__ import annotations

import bisect

from ...core.units import format_seconds
from ..costs import process_busy
from ..records import Call, Trace, on_loader_thread
from .base import Context, TraceFinding, framework, in_words, places

ORDER = 2  # where it stands among findings of equal price
CODE = "synchronizations"
ADVICE: dict[str | None, str] = {
    None: "wait for the GPU once where a result is needed, not every iteration: keep each "
    "step's results on the GPU and read them back at the end (nsys's cuda_api_sync rule lists "
    "the waits)",
    "PyTorch": "keep per-step values on the GPU (`total += loss.detach()`) and read them once "
    "with `.item()` after the loop or every N steps: `.item()`, `.cpu()`, `.tolist()`, "
    "`print(tensor)` and `nonzero()` each wait for the GPU; "
    '`torch.cuda.set_sync_debug_mode("warn")` names every other wait',
    "CuPy": "keep results on the GPU and read them once (`.get()`, "
    "`cupy.cuda.get_current_stream().synchronize()`) where the value is needed",
}


def idle_after(trace: Trace, syncs: list[Call]) -> list[float]:
    """For each wait, how long its process's GPUs then sat idle until their next work: from
    the wait's end (or the end of the work still running then) to the next work's start; 0
    where no work followed (the program's last wait)."""
    busy = process_busy(trace)  # a wait on one stream leaves the process's others running
    out = []
    for s in syncs:
        starts, ends = busy.get(s.pid, ([], []))
        i = bisect.bisect_right(starts, s.end_ns)  # the first part starting after the wait
        if i >= len(starts):
            out.append(0.0)
            continue
        idle_from = max(s.end_ns, ends[i - 1]) if i > 0 else s.end_ns
        out.append(max(starts[i] - idle_from, 0) * 1e-9)
    return out


def find(context: Context) -> TraceFinding | None:
    trace = context.trace
    # the DeviceLoader's thread and xferscope's engine threads wait for their own copies, which
    # the program's step waits for apart, if at all
    syncs = [
        c
        for c in trace.calls
        if c.synchronizes
        and not on_loader_thread(c.python)
        and not trace.engine_thread(c.frames, c.python)
    ]
    seen = trace.seen_with_kernels(syncs)
    if not seen:
        return None
    idle = idle_after(trace, seen)
    followed = sum(1 for t in idle if t > 0)
    if not followed:
        return None  # waits with no GPU work after them: the program's end
    scale = len(syncs) / len(seen)
    idle_s = scale * sum(idle)
    saving_s = scale * sum(min(t, s.seconds) for t, s in zip(idle, seen, strict=True))
    blocked_s = sum(s.seconds for s in syncs)
    used = framework(trace, syncs)
    sampled = (
        f"; kernels were recorded in windows, so the idle is judged on the {len(seen)} waits "
        f"inside them and scaled to all {len(syncs)} (`trace --kernels all` records every "
        "kernel)"
        if scale != 1.0
        else ""
    )
    return TraceFinding(
        CODE,
        "waits for the GPU that leave it idle",
        len(syncs),
        0,
        "",
        places(trace, syncs),
        idle_s,
        saving_s,
        in_words(ADVICE, used),
        f"the host waited {format_seconds(blocked_s)} in {len(syncs)} synchronizations, and "
        f"after {followed} of them the GPU sat idle {format_seconds(idle_s)} in all until the "
        "host gave it its next work; without the waits the host gives it sooner, by at most "
        f"the time each wait blocked, which bounds the saving{sampled}",
        "",
        used,
    )
