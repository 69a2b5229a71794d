"""A loop's steps, where the program repeats one: of the lines of the main thread's recorded
calls (copies, waits), and of xferscope.torch.DeviceLoader's thread's, made at least MIN_STEPS
times, each burst of calls closer than BURST_S counted once, the line whose calls spread over
the longest time (the main thread's on a tie) marks a step at each burst (a model's upload at
start-up is a burst of many calls in a moment; a loop's batch copy recurs to its end); between
two marks is one step. Per step, its length and the share of it the busiest GPU sat idle: the
steady state of a training loop without its start-up (the model's upload, the workers' first
batch), which the span from the first GPU activity to the last includes."""

from __future__ import annotations

import itertools
import statistics
from collections import defaultdict
from dataclasses import dataclass

from .costs import covered_ns, gpu_busy, merged
from .idle import LAUNCH_GAP_S, LONG_GAP, RESUMED_WITHIN_S, split
from .records import LOADER_WHERE, Call, Trace
from .timeline import Timelines, clipped, judged

MIN_STEPS = 5  # a line called fewer times marks no loop
# A call of a line this soon after its last one ended is the same mark (a batch's tensors; a
# pageable copy and the wait PyTorch makes after it): ten times the line's usual short gap
# (its gaps' first quartile), at least BURST_MIN_S and at most BURST_S.
BURST_MIN_S, BURST_S = 50e-6, 1e-3
RARE = 10  # long steps are set apart where at most one step in this many is one


@dataclass(frozen=True, slots=True)
class Steps:
    """The loop's steps: the line that marks them, how many, a step's mean length and the share
    of the steps' time the busiest GPU sat idle (means, not medians: a loader that has batches
    queued makes some steps short and others wait; None where no step's kernels were all
    recorded: `trace --kernels all`)."""

    where: str
    count: int
    step_s: float
    idle_share: float | None
    start_ns: int = 0  # the first step's mark
    end_ns: int = 0  # the last step's mark
    # the share of the steps' time that GPU ran copies or memsets and no kernel (HTA's
    # non-compute time): with idle_share, the time the step waited on its input beyond compute
    copy_share: float | None = None
    # steps over LONG_GAP times the usual one (a warm-up's, an epoch's start, where the
    # DataLoader starts its workers), where at most one step in RARE is one: counted in the
    # mean step, left out of the shares, which are of the steady steps (the long waits are
    # priced apart: idle.IdleCause.long_excess_s)
    long_steps: int = 0
    # the share of the steady steps the GPU waited for its input: idle while the host was
    # blocked in an upload's call or away until one (a DataLoader's next batch, a pageable
    # copy's staging, many small uploads), and copy-only time; the idle every step has besides
    # (launches, the step's own Python) is not the input's, and stays with data on the GPU
    input_share: float | None = None
    # the mean of the steps that are not long ones: the loop's steady step (step_s with them)
    steady_step_s: float | None = None

    @property
    def span_s(self) -> float:
        """From the first step's mark to the last's."""
        return (self.end_ns - self.start_ns) * 1e-9


def at_region(where: str, region: str) -> bool:
    """Whether a call's line (`/path/train.py:41 (train)`) is the line `region` names
    (`train.py:41`, or its whole path)."""
    line = where.split(" (", 1)[0]
    return line == region or line.endswith("/" + region)


def _marking(call: Call, pid: int, where: str | None) -> str:
    """The line a call may mark steps by: the main thread's, or DeviceLoader's thread's wait at
    the end of each batch it moves (one batch a step, `ahead` steps early: where the step makes
    no CUDA call of its own that the trace records, its batches mark it; a batch's copies come
    in runs a copy apart, more than a burst); "" for any other call."""
    if call.thread == pid:
        return where or ""
    if where == LOADER_WHERE and call.synchronizes:
        return where
    return ""


def steps(
    trace: Trace,
    region: str = "",
    busy: dict[int, tuple[list[int], list[int]]] | None = None,
    kernels: dict[int, tuple[list[int], list[int]]] | None = None,
) -> Steps | None:
    """The loop's steps, or None where no line repeats MIN_STEPS times; marked by the line
    `region` names where one is named (`trace --region train.py:41`), else by the line whose
    calls spread over the longest time. `busy` and `kernels`: each GPU's busy parts and its
    kernels' (merged), where the caller has them (Timelines.busy, findings.Context.kernels)."""
    marks: list[tuple[int, int, int, str]] = []  # (start, end, process, line) of each call
    for c in trace.copies:
        if c.call is not None and (c.python or c.frames):
            where = _marking(c.call, c.pid, trace.where(c.frames, c.python))
            marks.append((c.call.start_ns, c.call.end_ns, c.pid, where))
    for call in trace.calls:
        if call.python or call.frames:
            where = _marking(call, call.pid, trace.where(call.frames, call.python))
            marks.append((call.start_ns, call.end_ns, call.pid, where))
    # (start, end) by process and line: each rank of a job marks its own steps
    calls: dict[tuple[int, str], list[tuple[int, int]]] = defaultdict(list)
    for start, end, pid, where in sorted(marks):
        if where:
            calls[(pid, where)].append((start, end))
    by_line = {key: _bursts(spans) for key, spans in calls.items()}
    loops = [
        (at[-1] - at[0], len(at), key[1] != LOADER_WHERE, key)
        for key, at in by_line.items()
        if len(at) >= MIN_STEPS and (not region or at_region(key[1], region))
    ]
    if not loops:
        return None
    pid, where = max(loops)[3]
    at = by_line[(pid, where)]
    busy = gpu_busy(trace) if busy is None else busy
    mine = {x.device for x in trace.copies if x.pid == pid}  # the GPUs its process used
    mine |= {x.device for x in trace.intervals if x.pid == pid}
    busy = {d: parts for d, parts in busy.items() if d in mine} or busy
    kernels = merged(trace.kernels()) if kernels is None else kernels
    judged_ns = covered = computed = 0  # ns of the steps judged, busy in them, kernels in them
    # where every kernel of its process was recorded: a step inside one of them is judged
    parts = judged(trace, {pid}, at[0], at[-1])
    usual = statistics.median(b - a for a, b in itertools.pairwise(at))
    # steps over LONG_GAP times the usual one: a warm-up's, an epoch's start; where they are
    # more than one step in RARE, they are the loop's own (a DataLoader whose workers each
    # hand over a batch at once: three steps find one ready, the fourth waits), kept in
    count = len(at) - 1
    long_at = [b - a > LONG_GAP * usual for a, b in itertools.pairwise(at)]
    if sum(long_at) * RARE > count:
        long_at = [False] * count
    long = steady_ns = 0
    on: dict[int, list[tuple[int, int]]] = defaultdict(list)  # judged steps by busiest GPU
    for (a, b), is_long in zip(itertools.pairwise(at), long_at, strict=True):
        if is_long:
            long += 1
            continue
        steady_ns += b - a
        if any(p0 <= a and b <= p1 for p0, p1 in parts):
            judged_ns += b - a
            # the busiest GPU of the step
            most, device = max(((covered_ns(*busy[d], a, b), d) for d in busy), default=(0, 0))
            covered += most
            computed += covered_ns(*kernels.get(device, ([], [])), a, b)
            on[device].append((a, b))
    idle = 1 - covered / judged_ns if judged_ns else None
    alone = (covered - computed) / judged_ns if judged_ns else None
    step_s = (at[-1] - at[0]) * 1e-9 / count
    waited = input_ns(trace, pid, busy, on) / judged_ns if judged_ns else None
    return Steps(
        where, count, step_s, idle, at[0], at[-1], alone, long,
        None if waited is None or alone is None else waited + alone,
        steady_ns * 1e-9 / (count - long) if count > long else None,
    )  # fmt: skip


def input_ns(
    trace: Trace,
    pid: int,
    busy: dict[int, tuple[list[int], list[int]]],
    on: dict[int, list[tuple[int, int]]],
) -> int:
    """The idle of each GPU in the steps `on` it while process `pid`'s main thread was blocked
    in an upload's call or away until one (idle.split's rule, each call named by whether it
    issued a host-to-device copy). A gap shorter than a launch's is the input's only where an
    upload's call lies in it (one of many small uploads), not where one follows it (the last
    kernels' launches before a step's upload)."""
    uploads = {
        (c.call.thread, c.call.start_ns)
        for c in trace.copies
        if c.pid == pid and c.call is not None and c.direction == "h2d"
    }
    main = sorted((c for c in trace.calls if c.pid == pid and c.thread == pid),
                  key=lambda c: c.start_ns)  # fmt: skip
    starts = [c.start_ns for c in main]

    def label(call: Call) -> tuple[str, str]:
        return ("upload" if (call.thread, call.start_ns) in uploads else "", "")

    total = 0
    for device, steps_on in on.items():
        s, e = busy[device]
        for g0, g1 in clipped(list(zip(e[:-1], s[1:], strict=True)), steps_on):
            within = int(RESUMED_WITHIN_S * 1e9) if g1 - g0 >= LAUNCH_GAP_S * 1e9 else 0
            parts = split(main, starts, g0, g1, label, ("", ""), within)
            total += sum(ns for (_, what, _), ns in parts.items() if what == "upload")
    return total


def steady_span(loop: Steps | None, gpus: Timelines, region: str = "") -> float:
    """The steady state every share is of: the span of the steps `loop` where `region` named
    the line that marks them, else from the first GPU activity to the last (`gpus`)."""
    return loop.span_s if region and loop is not None else gpus.span_s


def _bursts(spans: list[tuple[int, int]]) -> list[int]:
    """The start of each burst of one line's calls (sorted (start, end) pairs)."""
    gaps = sorted(b[0] - a[1] for a, b in itertools.pairwise(spans))
    usual = gaps[len(gaps) // 4] if gaps else 0
    threshold = min(BURST_S * 1e9, max(BURST_MIN_S * 1e9, 10 * usual))
    starts, ended = [spans[0][0]], spans[0][1]
    for start, end in spans[1:]:
        if start - ended >= threshold:
            starts.append(start)
        ended = max(ended, end)
    return starts
