"""What traced copies cost: how long the host waited in their calls, how long kernels ran on
their GPU meanwhile, and what this machine takes for the same copies (trace/reference.py)."""

from __future__ import annotations

import bisect
import itertools
from collections import defaultdict
from collections.abc import Iterable, Sequence

from .records import Copy, Interval, Trace
from .reference import Reference


def disjoint(spans: Iterable[tuple[int, int]]) -> tuple[list[int], list[int]]:
    """[start, end) spans as sorted, disjoint parts (starts, ends): overlapping ones counted
    once."""
    starts: list[int] = []
    ends: list[int] = []
    for s, e in sorted(spans):
        if ends and s <= ends[-1]:
            ends[-1] = max(ends[-1], e)
        else:
            starts.append(s)
            ends.append(e)
    return starts, ends


def merged(intervals: Iterable[Copy | Interval]) -> dict[int, tuple[list[int], list[int]]]:
    """The time of kernels (or copies, or both) per device as sorted, disjoint [start, end)
    parts."""
    per: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for i in intervals:
        per[i.device].append((i.start_ns, i.end_ns))
    return {device: disjoint(spans) for device, spans in per.items()}


def cumulative(starts: list[int], ends: list[int]) -> list[int]:
    """The parts' (starts, ends, sorted and disjoint) lengths summed: the i-th, the first i's."""
    return [0, *itertools.accumulate(e - s for s, e in zip(starts, ends, strict=True))]


def covered_between(starts: list[int], ends: list[int], summed: list[int], a: int, b: int) -> int:
    """covered_ns of [a, b) from the parts' lengths summed (cumulative): for a stretch that
    holds many parts (a loop's first step to its last), without walking them."""
    i = max(bisect.bisect_right(starts, a) - 1, 0)
    j = bisect.bisect_left(starts, b)  # the parts from i to j - 1 start before b
    if j <= i:
        return 0
    total = summed[j] - summed[i]
    total -= max(0, min(ends[i], a) - starts[i])  # the first one's part before a
    total -= max(0, ends[j - 1] - max(b, starts[j - 1]))  # the last one's after b
    return max(total, 0)


def covered_ns(starts: list[int], ends: list[int], a: int, b: int) -> int:
    """How much of [a, b) the sorted, disjoint parts (starts, ends) cover."""
    i = max(bisect.bisect_right(starts, a) - 1, 0)
    total = 0
    while i < len(starts) and starts[i] < b:
        total += max(0, min(ends[i], b) - max(starts[i], a))
        i += 1
    return total


def overlap_ns(span: Copy | Interval, merged: dict[int, tuple[list[int], list[int]]]) -> int:
    """How long the merged intervals (kernels, or copies) ran on the span's GPU during it."""
    starts, ends = merged.get(span.device, ([], []))
    return covered_ns(starts, ends, span.start_ns, span.end_ns)


def expected(
    reference: Reference | None, copies: Iterable[Copy], memory: str | None = None
) -> float | None:
    """What this machine takes for these copies, from `memory` (default: their own)."""
    if reference is None:
        return None
    total = 0.0
    for c in copies:
        t = reference.seconds(c.direction, memory or c.host_memory, c.bytes)
        if t is None:
            return None
        total += t
    return total


def with_kernels(trace: Trace, copies: Sequence[Copy]) -> tuple[list[Copy], float | None]:
    """The copies whose neighbouring kernels were recorded, and the factor that scales what
    they show to all `copies` (all copies' GPU time over theirs; 1 where every kernel was
    recorded); None where none of them was seen."""
    seen = trace.seen_with_kernels(copies)
    seen_s = sum(c.seconds for c in seen)
    if not seen:
        return seen, None
    if len(seen) == len(copies):
        return seen, 1.0
    return seen, sum(c.seconds for c in copies) / seen_s if seen_s > 0 else None


def exposed(
    trace: Trace, copies: Sequence[Copy], kernels: dict[int, tuple[list[int], list[int]]]
) -> tuple[list[tuple[Copy, float]], float]:
    """What each copy cost the program beyond the kernels its GPU ran meanwhile: its cost
    (Copy.host_cost_s: the call's time where the host waited) less the kernels' time on its
    GPU during it. A blocking call made while the step before still computes waits for those
    kernels first (a pageable copy waits in its call for the whole stream); that wait is not
    the copy's, and a faster copy cannot save it. The copies whose kernels were recorded
    (with_kernels), each with that time, and the factor that scales them to all (1 where every
    kernel was recorded); where no kernel was recorded at all, every copy at its cost.
    `kernels`: each GPU's kernel time (merged)."""
    seen, scale = with_kernels(trace, copies)
    if scale is None or not kernels:
        return [(c, c.host_cost_s) for c in copies], 1.0
    out = []
    for c in seen:
        call = c.call if c.call is not None and c.blocks_host else None
        a, b = (call.start_ns, call.end_ns) if call else (c.start_ns, c.end_ns)
        starts, ends = kernels.get(c.device, ([], []))
        out.append((c, max(c.host_cost_s - covered_ns(starts, ends, a, b) * 1e-9, 0.0)))
    return out, scale


def valid(start_ns: int, end_ns: int) -> bool:
    """Whether an activity's times can be placed on a timeline: both set, in order (CUPTI leaves
    some at 0)."""
    return start_ns > 0 and end_ns >= start_ns


def usable(trace: Trace) -> list[Copy | Interval]:
    """The trace's GPU work (copies, kernels, memsets) whose times are usable."""
    activity: list[Copy | Interval] = [*trace.copies, *trace.intervals]
    return [x for x in activity if valid(x.start_ns, x.end_ns)]


def gpu_busy(trace: Trace) -> dict[int, tuple[list[int], list[int]]]:
    """Each GPU's busy time (its usable work) as disjoint parts."""
    return merged(usable(trace))


def process_busy(trace: Trace) -> dict[int, tuple[list[int], list[int]]]:
    """Each process's GPU work as disjoint parts, all its GPUs as one timeline."""
    per: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for x in usable(trace):
        per[x.pid].append((x.start_ns, x.end_ns))
    return {pid: disjoint(spans) for pid, spans in per.items()}


def idle_ns(busy: dict[int, tuple[list[int], list[int]]], device: int, a: int, b: int) -> int:
    """How long GPU `device` sat idle within [a, b)."""
    starts, ends = busy.get(device, ([], []))
    return max(b - a - covered_ns(starts, ends, a, b), 0)


def work_ended(busy: dict[int, tuple[list[int], list[int]]], device: int, at: int) -> int:
    """When GPU `device`'s last work before `at` ended (`at` where it was busy then or had
    none before)."""
    starts, ends = busy.get(device, ([], []))
    i = bisect.bisect_left(starts, at) - 1
    return ends[i] if i >= 0 and ends[i] < at else at


def less(
    parts: tuple[list[int], list[int]], cut: tuple[list[int], list[int]]
) -> tuple[list[int], list[int]]:
    """Disjoint sorted parts less the disjoint sorted spans `cut`."""
    starts, ends = [], []
    j = 0
    for a, b in zip(*parts, strict=True):
        while j < len(cut[0]) and cut[1][j] <= a:
            j += 1
        k = j
        while k < len(cut[0]) and cut[0][k] < b:
            if cut[0][k] > a:
                starts.append(a)
                ends.append(cut[0][k])
            a = max(a, cut[1][k])
            k += 1
        if a < b:
            starts.append(a)
            ends.append(b)
    return starts, ends
