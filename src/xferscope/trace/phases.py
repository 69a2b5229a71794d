"""A traced program's phases, process by process: its start-up, from the process's start to its
loop's first step; its steady state, the steps (steps.py); and its end, after the last step. A
user acts on what recurs: every finding, share and prediction is judged on the steady state
(`steady`, the trace cut to each process's steps), and the start-up is reported apart, once,
with its own causes (`startup`): how long before the first step, the GPU's idle in it and where
the main thread was meanwhile (importing modules, the program's lines), the copies it made and
what one copy of them from pinned memory would save. A process with no loop is all steady
state, as it was before phases."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from .costs import covered_ns, disjoint, usable, valid
from .records import MainSamples, Trace
from .reference import Reference
from .samples import MOST_LINES, program_line
from .steps import Steps

Windows = dict[int, tuple[int, int]]  # each process's steady state: [first step, last step)
IMPORTING = "<frozen importlib._bootstrap"  # a look inside an import
MANY_UPLOADS = 16  # a start-up's uploads this many or more are worth making one copy


def windows(loops: Sequence[Steps]) -> Windows:
    """Each looping process's steady state: from its first step's mark to its last's."""
    return {s.pid: (s.start_ns, s.end_ns) for s in loops if s.end_ns > s.start_ns}


def steady(trace: Trace, within: Windows) -> Trace:
    """The trace cut to each process's steady state, from its first step's mark up to its last
    (a process with no loop kept whole): what every finding is judged on, each step's calls
    once. A copy is in by its call's start (its GPU start, without one),
    a kernel or memset by its start, a pin by its call's, a look by its time."""
    if not within:
        return trace

    def inside(pid: int, t: int) -> bool:
        span = within.get(pid)
        return span is None or span[0] <= t < span[1]

    samples = {pid: _looks_within(s, within.get(pid)) for pid, s in trace.samples.items()}
    return dataclasses.replace(
        trace,
        copies=tuple(c for c in trace.copies
                     if inside(c.pid, c.call.start_ns if c.call else c.start_ns)),
        intervals=tuple(i for i in trace.intervals if inside(i.pid, i.start_ns)),
        calls=tuple(c for c in trace.calls if inside(c.pid, c.start_ns)),
        pins=tuple(p for p in trace.pins if p.start_ns and inside(p.pid, p.start_ns)),
        kernel_windows=tuple(
            (pid, max(a, within[pid][0]), min(b, within[pid][1])) if pid in within else (pid, a, b)
            for pid, a, b in trace.kernel_windows
            if pid not in within or (a < within[pid][1] and b > within[pid][0])
        ),
        samples=samples,
    )  # fmt: skip


def _looks_within(s: MainSamples, span: tuple[int, int] | None) -> MainSamples:
    if span is None:
        return s
    kept = [(t, st) for t, st in zip(s.ts, s.stacks, strict=True) if span[0] <= t < span[1]]
    return MainSamples(s.period_s, tuple(t for t, _ in kept), tuple(st for _, st in kept))


@dataclass(frozen=True, slots=True)
class Startup:
    """One process's start-up: from its start to its loop's first step, once per run."""

    pid: int
    seconds: float  # from the process's start to its first step
    cuda_s: float  # from its start to CUDA's initialization in it
    first_work_s: float | None  # from its start to its GPUs' first work (None: none before)
    busy_s: float  # its GPUs' work before the first step
    idle_s: float  # its GPUs' idle from their first work to the first step
    uploads: int  # host-to-device copies before the first step
    upload_bytes: int
    upload_s: float  # what they cost the host (its calls' time where it waited)
    pageable_uploads: int
    pinned_bytes: int  # host memory pinned before the first step
    pin_s: float
    looks: int  # looks at its main thread in its start-up
    importing: int  # of them, inside an import
    # the program's lines the looks not importing saw, the most seen first
    seen_at: tuple[tuple[str, int], ...]
    # what uploading the start-up's copies as one copy from pinned memory would save (None:
    # too few of them, or this machine's rates not measured)
    saving_s: float | None = None


def startup(
    trace: Trace, within: Windows, reference: Reference | None, started_ns: int = 0
) -> tuple[Startup, ...]:
    """Each looping process's start-up, the process that started first first. A process starts
    when it began, where the injection library read that (its `began_ns`); else at its first
    look or CUDA's initialization in it, whichever came first, the one started first at
    `started_ns` (the program's launch) where that is known."""
    cuda = {int(p["pid"]): int(p.get("start_ns") or 0) for p in trace.processes if "pid" in p}
    own = {int(p["pid"]): int(p["began_ns"]) for p in trace.processes if p.get("began_ns")}
    starts = dict(cuda)
    for pid, s in trace.samples.items():
        if s.ts:
            starts[pid] = min(starts.get(pid) or s.ts[0], s.ts[0])
    starts |= own
    first = min((p for p in starts if p in within), key=lambda p: starts[p], default=None)
    out = []
    for pid, (step, _) in within.items():
        begun = starts.get(pid) or step
        if pid == first and started_ns and pid not in own:
            begun = min(started_ns, begun)
        out.append(_startup(trace, pid, begun, min(cuda.get(pid) or step, step), step, reference))
    return tuple(sorted(out, key=lambda s: starts.get(s.pid, 0)))


def _startup(
    trace: Trace, pid: int, begun: int, cuda: int, step: int, reference: Reference | None
) -> Startup:
    work = [(x.start_ns, x.end_ns) for x in usable(trace) if x.pid == pid and x.start_ns < step]
    starts, ends = disjoint((a, min(b, step)) for a, b in work)
    busy = covered_ns(starts, ends, starts[0], step) if starts else 0
    idle = (step - starts[0] - busy) if starts else 0
    uploads = [c for c in trace.copies if c.pid == pid and c.direction == "h2d"
               and (c.call.start_ns if c.call else c.start_ns) < step]  # fmt: skip
    pins = [p for p in trace.pins if p.pid == pid and 0 < p.start_ns < step]
    looks = trace.samples.get(pid)
    seen: dict[str, int] = {}
    importing = taken = 0
    if looks is not None:
        for t, stack in zip(looks.ts, looks.stacks, strict=True):
            if begun <= t < step:
                taken += 1
                if any(f.file.startswith(IMPORTING) for f in stack):
                    importing += 1  # said as importing, not at the import's line
                    continue
                line = program_line(stack)
                if line:
                    seen[line] = seen.get(line, 0) + 1
    upload_s = sum(c.host_cost_s for c in uploads)
    total = sum(c.bytes for c in uploads)
    one = None if reference is None else reference.seconds("h2d", "pinned", total)
    saving = upload_s - one if one is not None and len(uploads) >= MANY_UPLOADS else None
    return Startup(
        pid,
        max(step - begun, 0) * 1e-9,
        max(cuda - begun, 0) * 1e-9,
        (starts[0] - begun) * 1e-9 if starts and valid(begun, starts[0]) else None,
        busy * 1e-9,
        max(idle, 0) * 1e-9,
        len(uploads),
        total,
        upload_s,
        sum(1 for c in uploads if c.host_memory == "pageable"),
        sum(p.bytes for p in pins),
        sum(p.seconds or 0.0 for p in pins),
        taken,
        importing,
        tuple(sorted(seen.items(), key=lambda kv: -kv[1])[:MOST_LINES]),
        None if saving is None else max(saving, 0.0),
    )
