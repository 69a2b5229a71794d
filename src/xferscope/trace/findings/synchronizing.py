"""Waits for the GPU at the program's lines: explicit synchronizations (cudaStreamSynchronize,
cudaDeviceSynchronize, cudaEventSynchronize and the driver's; PyTorch's `.item()` waits in one),
device frees (cudaFree waits for the whole GPU: `torch.cuda.empty_cache()` in a loop) and
copies down that block the host (`.cpu()` and `.tolist()` to pageable memory, CuPy's
`.get()`): Trace.waits. What they cost is the GPU idle that followed each until the next work
arrived; the host time each blocked is said beside it. The fix, reading results once, lets the
host go on without waiting: the work it does after a wait (its bookkeeping, its next input, its
launches) then runs while the GPU computes what the host waited for. In a loop that is priced
step by step, as the step's dependencies give it: a step loses the idle after its waits, and
without them it loses at most what its host did meanwhile, so each step saves the smaller of
the GPU's idle after its waits and the time the host spent blocked in them (two waits a step,
the second right after the first, are one). Outside a loop, each wait alone."""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence

from ...core.units import format_seconds
from ..costs import process_busy
from ..idle import SEEN_SHARE, IdleCause
from ..records import Call, Trace, on_loader_thread
from ..samples import lines_in
from ..steps import moves_data
from .base import Context, TraceFinding, framework, in_words, places, seen_place

ORDER = 2  # where it stands among findings of equal price
CODE = "synchronizations"
MIN_LOOKS = 5  # an idle cause is a wait the looks saw where this many found it reading a value
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
    "JAX": "keep each step's values as device arrays (append `loss` to a list) and read them "
    "once after the loop or every N steps, stacked into one array "
    "(`jax.device_get(jnp.stack(losses))`: a list read as it is pays a transfer an array): "
    "`float(x)`, `x.item()`, `np.asarray(x)` and `print(x)` each wait for the device",
}
# where most of the waiting whose callers were unwound is in a count of a mask's elements
# (PyTorch's nonzero: a boolean index, masked_select, unique), made to size a result
MASK_ADVICE: dict[str | None, str] = {
    None: ADVICE[None],
    "PyTorch": "keep the tensors' sizes fixed: a boolean index (`x[mask]`), `masked_select`, "
    "`nonzero()` and `torch.unique` make a result whose size the GPU must count first, so the "
    "host waits for it every time (a backward that uses the mask waits again); use "
    "`torch.where(mask, x, 0)` with a sum over the mask, or indices of a fixed size made with "
    "the batch and `gather`",
}
COUNTS = "nonzero"  # the native function that counts a mask's elements (at::native::nonzero...)
# where most of the waiting is in downloads of data (steps.moves_data: a serving loop's results,
# a frame read back), which the host needs: the copy started without waiting, read a step later
DATA_ADVICE: dict[str | None, str] = {
    None: "copy the results into pinned host memory with cudaMemcpyAsync and record an event "
    "after the copy; queue the next step's work, then wait on the event only where the host "
    "reads them, so the GPU computes the next step while the host handles this one",
    "PyTorch": "copy each result into a pinned host tensor made once (`torch.empty(..., "
    "pin_memory=True)`) with `.copy_(x, non_blocking=True)` and record a `torch.cuda.Event()` "
    "after it; queue the next step's work, then `event.synchronize()` and read the result, so "
    "the GPU computes the next step while the host handles this one",
    "CuPy": "copy each result into pinned host memory (`cupyx.empty_pinned`) with "
    "`x.get(out=pinned, blocking=False)` and record an event; queue the next step's work, then "
    "synchronize the event and read it, so the GPU computes while the host handles the result",
    "JAX": "start each result's copy with `x.copy_to_host_async()` as soon as it is queued and "
    "read it (`np.asarray(x)`) only after the next step is dispatched, so the device computes "
    "while the host handles the result",
}
# where most of the waiting is in device frees (Call.frees): memory given back in the loop
FREE_ADVICE: dict[str | None, str] = {
    None: "keep device buffers for the next step instead of freeing them in the loop: "
    "cudaFree waits for the whole GPU before it frees (a pool, or cudaFreeAsync on the "
    "stream, does not)",
    "PyTorch": "do not call `torch.cuda.empty_cache()` in the loop: it gives the caching "
    "allocator's free blocks back with cudaFree, which waits for the whole GPU, and the next "
    "step asks the driver for them again; the allocator reuses freed blocks by itself (where "
    "memory runs short, `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True` fragments less)",
    "CuPy": "do not call the memory pool's `free_all_blocks()` in the loop: it gives its blocks "
    "back with cudaFree, which waits for the whole GPU; the pool reuses freed blocks by itself",
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


def by_step(
    context: Context,
    waits: list[Call],
    idle: list[float],
    allocs: Sequence[Call] = (),
    faster: Mapping[tuple[int, int], float] | None = None,
) -> float:
    """What reading results once saves: per step of its process's loop that waits, the smaller
    of the GPU's idle in that step and the host's time blocked in its waits (a step takes the
    host's time plus its waits, and without the waits the larger of the host's time and the
    GPU's: the difference is the smaller of the two); each wait alone, the smaller of the idle
    after it and its time, where its process has no loop. In a step that frees device memory,
    its device allocations (`allocs`) are the frees' too: kept, the blocks are not asked for
    again. `faster`: GPU time the same fix takes off each (pid, step) besides (pinned copies in
    place of pageable ones), which the freed host can then use too."""
    blocked: dict[tuple[int, int], float] = {}  # (pid, step) -> time blocked in its waits
    freed: set[tuple[int, int]] = set()
    alone = 0.0
    for w, after in zip(waits, idle, strict=True):
        step = context.step_at(w.pid, w.start_ns)
        if step is None:
            alone += min(after, w.seconds)
        else:
            blocked[(w.pid, step)] = blocked.get((w.pid, step), 0.0) + w.seconds
            if w.frees:
                freed.add((w.pid, step))
    for a in allocs:
        step = context.step_at(a.pid, a.start_ns)
        if step is not None and (a.pid, step) in freed:
            blocked[(a.pid, step)] += a.seconds
    more = faster or {}
    return alone + sum(
        min(context.step_idle_s(pid, step) + more.get((pid, step), 0.0), waited)
        for (pid, step), waited in blocked.items()
    )


def find(context: Context) -> TraceFinding | None:
    trace = context.trace
    # the DeviceLoader's thread and xferscope's engine threads wait for their own copies, which
    # the program's step waits for apart, if at all
    syncs = [
        c
        for c in trace.waits()
        if not on_loader_thread(c.python) and not trace.engine_thread(c.frames, c.python)
    ]
    seen = trace.seen_with_kernels(syncs)
    idle = idle_after(trace, seen)
    followed = sum(1 for t in idle if t > 0)
    looked = looked_waits(context)
    if not followed and not looked:
        return None  # no waits, or none with GPU work after them: the program's end
    scale = len(syncs) / len(seen) if seen else 1.0
    looked_s = sum(idle_s for _, idle_s, _ in looked)
    idle_s = scale * sum(idle) + looked_s
    freed_s = sum(s.seconds for s in syncs if s.frees)
    unwound = [(s.seconds, trace.native(s.frames) or "") for s in syncs if s.frames]
    counted = sum(seconds for seconds, name in unwound if COUNTS in name)
    # the advice for the waits most of the time blocked went to: frees, counts of a mask, else
    blocked_s = sum(s.seconds for s in syncs)
    advice = ADVICE
    if freed_s > blocked_s / 2:
        advice = FREE_ADVICE
    elif counted > sum(seconds for seconds, _ in unwound) / 2:
        advice = MASK_ADVICE
    elif _downloading_s(trace, syncs) > blocked_s / 2:
        advice = DATA_ADVICE
    # the device allocations (any thread's: a backward allocates on autograd's) asked again
    allocs = [c for c in trace.calls if c.allocates] if freed_s else []
    saving_s = scale * by_step(context, seen, idle, allocs) + read_saving(context, looked)
    used = framework(trace, syncs) or next((c.seen_framework for c, *_ in looked), None)
    sampled = (
        f"; kernels were recorded in windows, so the idle is judged on the {len(seen)} waits "
        f"inside them and scaled to all {len(syncs)} (`trace --kernels all` records every "
        "kernel)"
        if scale != 1.0
        else ""
    )
    frees = sum(1 for s in syncs if s.frees)
    said = (
        f"the host waited {format_seconds(blocked_s)} in {len(syncs)} calls that wait"
        + (f" ({frees} of them device frees, cudaFree, {format_seconds(freed_s)})" if frees else "")
        + (
            f", then {format_seconds(sum(a.seconds for a in allocs))} in {len(allocs)} device "
            "allocations (cudaMalloc) that ask for the freed memory again"
            if allocs
            else ""
        )
        + f", and after {followed} of them the GPU sat idle "
        f"{format_seconds(idle_s - looked_s)} in all until the host gave it its next work"
        if syncs
        else ""
    )
    for cause, cause_idle, _ in looked:
        said += "; " if said else ""
        said += (
            f"the GPU sat idle {format_seconds(cause_idle)} in {cause.gaps} gaps while the "
            f"looks found the main thread waiting for a value from the device ({cause.value_looks}"
            f" of {cause.looks} looks) at {cause.seen_at[0][0] if cause.seen_at else '?'}"
        )
    # the looks' lines made no recorded call: their gaps are in the detail, not counted as calls
    own = tuple(seen_place(c.seen_at[0][0], 0, i) for c, i, _ in looked if c.seen_at)
    return TraceFinding(
        CODE,
        "waits for the GPU that leave it idle",
        len(syncs),
        0,
        "",
        tuple(sorted((*places(trace, syncs), *own), key=lambda p: -p.cost_s)),
        idle_s,
        saving_s,
        in_words(advice, used),
        said + "; without the waits the host does its work while the GPU computes: each step "
        "saves the smaller of the GPU's idle in it for its host (beyond the gap it keeps between "
        f"queued kernels) and the time its waits blocked{sampled}",
        "",
        used,
    )


def _downloading_s(trace: Trace, syncs: list[Call]) -> float:
    """The time the waits blocked in downloads of data (moves_data: more than a value)."""
    data = {
        (c.call.thread, c.call.start_ns)
        for c in trace.copies
        if c.call is not None and c.direction == "d2h" and c.blocks_host and moves_data(c)
    }
    return sum(s.seconds for s in syncs if (s.thread, s.start_ns) in data)


def read_saving(context: Context, looked: list[tuple[IdleCause, float, float]]) -> float:
    """What reading values once saves where the looks found the waits: each cause's idle (at
    most its GPU's busy time), and in all at most the time the main threads spent reading,
    as the looks give it (the share of the looks in their steps that found a read, times the
    steps' span): without the reads the host's other work still takes its time, as by_step
    prices a recorded wait."""
    if not looked:
        return 0.0
    saving = sum(s for *_, s in looked)
    reading, seen_any = 0.0, False
    for loop in context.loops:
        if len(loop.marks) < 2:
            continue
        span = (loop.marks[0], loop.marks[-1])
        seen = lines_in(context.trace.samples, [loop.pid], [span])
        if seen.looks:
            seen_any = True
            reading += seen.value_looks / seen.looks * (span[1] - span[0]) * 1e-9
    return min(saving, reading) if seen_any else saving


def looked_waits(context: Context) -> list[tuple[IdleCause, float, float]]:
    """The GPUs' idle in which the looks found the main thread waiting for a value from the
    device, at least SEEN_SHARE of them (samples.VALUE_READS: JAX reads one through its
    runtime's threads, so no CUDA call of the main thread waits), each with its idle and what
    reading values once would save: the idle, at most the GPU's busy time (the host's work can
    hide behind no more)."""
    out = []
    for g in context.gpus.gpus:
        scale = g.scale or 0.0
        for cause in g.idle:
            if (
                cause.kind == "away"
                and cause.value_looks >= MIN_LOOKS
                and cause.value_looks >= SEEN_SHARE * cause.looks
            ):
                idle = cause.seconds * scale
                out.append((cause, idle, min(idle, g.busy_s * scale)))
    return out
