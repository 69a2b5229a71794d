"""Each GPU's timeline in a trace: the span from its first GPU activity to its last (the steady
state every figure is judged on, not the process's wall time, which counts Python's start-up),
the time it was busy (kernels, copies and memsets, overlaps counted once) and the gaps where it
sat idle. A record whose times are missing or run backwards (CUPTI leaves some at 0) is left out
and counted, so one bad record cannot stretch a span back to the clock's epoch."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from .costs import merged, usable, valid
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
    busy_s: float  # kernels, copies and memsets, overlapping ones counted once
    gaps: tuple[tuple[int, int], ...]  # the longest idle gaps (start, end), longest first
    idle: tuple[IdleCause, ...] = ()  # why it sat idle, the largest cause first

    @property
    def span_s(self) -> float:
        return (self.end_ns - self.start_ns) * 1e-9

    @property
    def idle_s(self) -> float:
        return max(self.span_s - self.busy_s, 0.0)

    @property
    def idle_share(self) -> float:
        return self.idle_s / self.span_s if self.span_s > 0 else 0.0


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
        busy_ns = sum(e - s for s, e in zip(starts, ends, strict=True))
        gaps = list(zip(ends[:-1], starts[1:], strict=True))
        longest = sorted(gaps, key=lambda g: g[0] - g[1])[:MOST_GAPS]
        why = causes(trace, gaps, pids[device], lines)
        gpus.append(GpuTimeline(device, starts[0], ends[-1], busy_ns * 1e-9, tuple(longest), why))
    left_out = len(trace.copies) + len(trace.intervals) - len(work)
    return Timelines(tuple(gpus), left_out, busy)
