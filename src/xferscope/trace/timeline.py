"""Each GPU's timeline in a trace: the span from its first GPU activity to its last (the steady
state every figure is judged on, not the process's wall time, which counts Python's start-up),
the time it was busy (kernels, copies and memsets, overlaps counted once) and the gaps where it
sat idle. A record whose times are missing or run backwards (CUPTI leaves some at 0) is left out
and counted, so one bad record cannot stretch a span back to the clock's epoch.

Busy and idle time are judged where every kernel was recorded: the whole span with `trace
--kernels all`; with kernels recorded in windows (the default), inside the windows of the
GPU's processes only, where a kernel missing from the records cannot pass for idle time. The
idle found there stands for the whole span by the ratio of the span to the time judged
(GpuTimeline.scale); with no kernel recorded (`--kernels none`) nothing is judged."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from .costs import covered_ns, disjoint, merged, usable, valid
from .idle import IdleCause, Lines, causes
from .records import Trace

MOST_GAPS = 20  # the longest idle gaps kept per GPU


__all__ = ["GpuTimeline", "Timelines", "timelines", "valid"]


@dataclass(frozen=True, slots=True)
class GpuTimeline:
    """One GPU from its first activity to its last."""

    device: int
    start_ns: int
    end_ns: int
    busy_s: float  # kernels, copies and memsets in the time judged, overlaps counted once
    gaps: tuple[tuple[int, int], ...]  # the longest idle gaps (start, end), longest first
    idle: tuple[IdleCause, ...] = ()  # why it sat idle, the largest cause first
    # the time judged, as disjoint (start, end) parts: where every kernel was recorded
    judged: tuple[tuple[int, int], ...] = ()

    @property
    def span_s(self) -> float:
        return (self.end_ns - self.start_ns) * 1e-9

    @property
    def judged_s(self) -> float:
        return sum(b - a for a, b in self.judged) * 1e-9

    @property
    def idle_s(self) -> float:
        """Idle time in the time judged."""
        return max(self.judged_s - self.busy_s, 0.0)

    @property
    def idle_share(self) -> float | None:
        """The share of the time judged the GPU sat idle; None where nothing was judged."""
        judged = self.judged_s
        return self.idle_s / judged if judged > 0 else None

    @property
    def scale(self) -> float | None:
        """What turns time found in the time judged into time over the whole span."""
        judged = self.judged_s
        return self.span_s / judged if judged > 0 else None


@dataclass(frozen=True, slots=True)
class Timelines:
    """Every GPU's timeline, and what was left out."""

    gpus: tuple[GpuTimeline, ...]
    left_out: int  # activity records with no usable times
    # each GPU's busy time as disjoint parts (costs.gpu_busy), for what prices time against it
    busy: dict[int, tuple[list[int], list[int]]] = field(default_factory=dict)

    @property
    def span_s(self) -> float:
        """From the first GPU activity on any GPU to the last: the steady state."""
        if not self.gpus:
            return 0.0
        return (max(g.end_ns for g in self.gpus) - min(g.start_ns for g in self.gpus)) * 1e-9


def timelines(trace: Trace) -> Timelines:
    """Each GPU's timeline from the trace's copies, kernels and memsets."""
    work = usable(trace)
    pids: dict[int, set[int]] = defaultdict(set)  # the processes that ran work on each GPU
    for x in work:
        pids[x.device].add(x.pid)
    busy = merged(work)
    lines = Lines(trace)
    gpus = []
    for device, (starts, ends) in sorted(busy.items()):
        parts = judged(trace, pids[device], starts[0], ends[-1])
        busy_ns = sum(covered_ns(starts, ends, a, b) for a, b in parts)
        gaps = clipped(list(zip(ends[:-1], starts[1:], strict=True)), parts)
        longest = sorted(gaps, key=lambda g: g[0] - g[1])[:MOST_GAPS]
        why = causes(trace, gaps, pids[device], lines)
        gpus.append(
            GpuTimeline(
                device, starts[0], ends[-1], busy_ns * 1e-9, tuple(longest), why, tuple(parts)
            )
        )
    left_out = len(trace.copies) + len(trace.intervals) - len(work)
    return Timelines(tuple(gpus), left_out, busy)


def judged(trace: Trace, pids: set[int], start: int, end: int) -> list[tuple[int, int]]:
    """Where in [start, end) every kernel of the processes `pids` was recorded: all of it where
    each recorded every kernel; else their kernel windows within it (none with `--kernels
    none`)."""
    how = {p.get("pid"): str(p.get("kernels", "all")) for p in trace.processes}
    if all(how.get(pid, "all") == "all" for pid in pids):
        return [(start, end)] if end > start else []
    windows = [
        (max(a, start), min(b, end))
        for pid, a, b in trace.kernel_windows
        if pid in pids and min(b, end) > max(a, start)
    ]
    return list(zip(*disjoint(windows), strict=True))


def clipped(gaps: list[tuple[int, int]], parts: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The pieces of the (sorted) `gaps` inside the (sorted, disjoint) `parts`."""
    if len(parts) == 1 and gaps and parts[0][0] <= gaps[0][0] and gaps[-1][1] <= parts[0][1]:
        return gaps  # every kernel recorded: the gaps as they are
    out = []
    i = 0
    for g0, g1 in gaps:
        while i < len(parts) and parts[i][1] <= g0:
            i += 1
        j = i
        while j < len(parts) and parts[j][0] < g1:
            a, b = max(g0, parts[j][0]), min(g1, parts[j][1])
            if b > a:
                out.append((a, b))
            j += 1
    return out
