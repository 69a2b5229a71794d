"""A loop's steps, in each process that repeats one (the line that marks them: loops.py): per
step, its length and the share of it the busiest GPU sat idle, waited for its input or only
copied. The steps from the first mark to the last are the process's steady state: every
finding, share and prediction is judged there (phases.py), start-up and the end apart."""

from __future__ import annotations

import bisect
import itertools
import statistics
from collections import defaultdict
from dataclasses import dataclass, field

from ..documents.records import OMIT_WHEN
from .costs import covered_ns, gpu_busy, merged, process_busy
from .idle import (
    LAUNCH_GAP_S,
    LONG_GAP,
    RESUMED_WITHIN_S,
    loader_waited,
    main_calls,
    split,
    waits_of,
)
from .loops import Candidate, RunnerUp, candidates, choose
from .records import Call, Copy, Trace
from .samples import lines_in
from .timeline import Timelines, clipped, judged


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
    # steps over LONG_GAP times the usual one after the first usual one (an epoch's start,
    # where the DataLoader starts its workers; an evaluation): counted in the mean step and the
    # shares, and their waits priced apart (idle.IdleCause.long_excess_s). Long steps before the
    # first usual one are the loop's warm-up (compilation, autotuning, a first epoch's workers
    # starting): the start-up's, before the steps (warm_up counts them)
    long_steps: int = 0
    # the share of the steps' time the GPU waited for its input: idle while the host was
    # blocked in a call that moved data (an upload, a download of more than a value) or away
    # until one (a DataLoader's next batch, a pageable copy's staging, many small uploads), and
    # copy-only time; the idle every step has besides (launches, the step's own Python) is not
    # the input's, and stays with data on the GPU
    input_share: float | None = None
    # the mean of the steps that are not long ones: the loop's usual step (step_s with them)
    steady_step_s: float | None = None
    pid: int = 0  # its process
    kind: str = ""  # the marking calls' kind (loops.KINDS)
    covers: float = 0.0  # the share of its process's GPU work its steps span
    # the other lines that recurred, the most GPU work spanned first
    runners_up: tuple[RunnerUp, ...] = ()
    warm_up: int = 0  # the long steps before the first usual one: the start-up's
    # each step's mark (ns), the first at start_ns and the last at end_ns: for the findings
    # that price by step; not in the document
    marks: tuple[int, ...] = field(default=(), metadata={OMIT_WHEN: lambda _: True})

    @property
    def span_s(self) -> float:
        """From the first step's mark to the last's."""
        return (self.end_ns - self.start_ns) * 1e-9


def loops(
    trace: Trace,
    region: str = "",
    busy: dict[int, tuple[list[int], list[int]]] | None = None,
    kernels: dict[int, tuple[list[int], list[int]]] | None = None,
) -> tuple[Steps, ...]:
    """Each process's loop (loops.choose's line, or the line `region` names), the process with
    the most GPU work first; none where no line repeats MIN_STEPS times. `busy` and `kernels`:
    each GPU's busy parts and its kernels' (merged), where the caller has them."""
    busy = gpu_busy(trace) if busy is None else busy
    kernels = merged(trace.kernels()) if kernels is None else kernels
    work = process_busy(trace)
    out = []
    for found in candidates(trace).values():
        chosen, runners_up = choose(found, region)
        if chosen is not None:
            out.append(measured(trace, chosen, runners_up, busy, kernels))
    return tuple(sorted(out, key=lambda s: -_total(work.get(s.pid, ([], [])))))


def _total(parts: tuple[list[int], list[int]]) -> int:
    return sum(e - s for s, e in zip(*parts, strict=True))


def measured(
    trace: Trace,
    chosen: Candidate,
    runners_up: list[RunnerUp],
    busy: dict[int, tuple[list[int], list[int]]],
    kernels: dict[int, tuple[list[int], list[int]]],
) -> Steps:
    """The steps the candidate's marks make, measured on the GPUs of its process."""
    pid, where, at = chosen.pid, chosen.where, list(chosen.marks)
    mine = {x.device for x in trace.copies if x.pid == pid}  # the GPUs its process used
    mine |= {x.device for x in trace.intervals if x.pid == pid}
    busy = {d: parts for d, parts in busy.items() if d in mine} or busy
    usual = statistics.median(b - a for a, b in itertools.pairwise(at))
    # steps over LONG_GAP times the usual one: a warm-up's before the first usual step (its
    # marks go to the start-up), an epoch's start or an evaluation after it (counted)
    warm = next((i for i, (a, b) in enumerate(itertools.pairwise(at))
                 if b - a <= LONG_GAP * usual), 0)  # fmt: skip
    at = at[warm:]
    count = len(at) - 1
    long_at = [b - a > LONG_GAP * usual for a, b in itertools.pairwise(at)]
    judged_ns = covered = computed = 0  # ns of the steps judged, busy in them, kernels in them
    # where every kernel of its process was recorded: a step inside one of them is judged
    parts = judged(trace, {pid}, at[0], at[-1])
    long = sum(long_at)
    on: dict[int, list[tuple[int, int]]] = defaultdict(list)  # judged steps by busiest GPU
    for a, b in itertools.pairwise(at):
        if any(p0 <= a and b <= p1 for p0, p1 in parts):
            judged_ns += b - a
            # the busiest GPU of the step
            most, device = max(((covered_ns(*busy[d], a, b), d) for d in busy), default=(0, 0))
            covered += most
            computed += covered_ns(*kernels.get(device, ([], [])), a, b)
            on[device].append((a, b))
    steady_ns = sum(b - a for (a, b), is_long in zip(itertools.pairwise(at), long_at, strict=True)
                    if not is_long)  # fmt: skip
    idle = 1 - covered / judged_ns if judged_ns else None
    alone = (covered - computed) / judged_ns if judged_ns else None
    step_s = (at[-1] - at[0]) * 1e-9 / count
    waited = input_ns(trace, pid, busy, on) / judged_ns if judged_ns else None
    return Steps(
        where, count, step_s, idle, at[0], at[-1], alone, long,
        None if waited is None or alone is None else waited + alone,
        steady_ns * 1e-9 / (count - long) if count > long else None,
        pid, chosen.kind, chosen.covers, tuple(runners_up), warm, tuple(at),
    )  # fmt: skip


# A download this small reads a value (`.item()`, `.tolist()` of a few numbers): a wait for the
# GPU, the waits' finding's; a larger one is data the step moves, as its uploads are
VALUE_BYTES = 4096


def moves_data(copy: Copy) -> bool:
    """Whether a copy moves a step's data between host and GPU: an upload, or a download larger
    than a value (VALUE_BYTES). A step with its data resident makes neither: a frame read back
    with CuPy's `.get()` each step costs the GPU the download and, as the host waits in it, the
    next step's launches and input after it (cupy_filter on 1 x H200: the steps' share 0.354
    with uploads alone, 0.419 with the downloads, against 0.417 from its resident form)."""
    return copy.direction == "h2d" or (copy.direction == "d2h" and copy.bytes > VALUE_BYTES)


def input_ns(
    trace: Trace,
    pid: int,
    busy: dict[int, tuple[list[int], list[int]]],
    on: dict[int, list[tuple[int, int]]],
) -> int:
    """The idle of each GPU in the steps `on` it while process `pid`'s main thread was blocked
    in a call that moved data (moves_data: an upload, a download of more than a value) or away
    until one (idle.split's rule, each call named by whether it issued such a copy). A gap
    shorter than a launch's is the input's only where such a call lies in it (one of many small
    uploads), not where one follows it (the last kernels' launches before a step's upload)."""
    uploads = {
        (c.call.thread, c.call.start_ns)
        for c in trace.copies
        if c.pid == pid and c.call is not None and moves_data(c)
    }
    main, starts = main_calls(trace, {pid})
    waits = waits_of(trace)  # as idle.causes reads them
    # an upload's own wait: made at its line (`.to(device)` from pageable memory waits for its
    # copy), so the idle after it, the batch's release, is the input's as the upload is
    lines = {trace.where(c.frames, c.python) for c in trace.copies
             if c.pid == pid and c.direction == "h2d" and c.call is not None
             and c.call.thread == pid}  # fmt: skip

    uploads |= {(c.thread, c.start_ns) for c in main
                if waits(c) and trace.where(c.frames, c.python) in lines}  # fmt: skip

    def label(call: Call) -> tuple[str, str]:  # named, so that a wait before a gap is seen
        return ("upload" if (call.thread, call.start_ns) in uploads else "call", "")

    total = 0
    away: dict[tuple[str, str, str, str], list[tuple[int, int]]] = defaultdict(list)
    worker = _worker_fed(trace, pid)
    handed = _handed_ends(trace, pid)
    for device, steps_on in on.items():
        s, e = busy[device]
        for g0, g1 in clipped(list(zip(e[:-1], s[1:], strict=True)), steps_on):
            if (device, g1) in worker or (device, g0) in handed:  # a worker's copy, or after
                total += g1 - g0  # a framework thread's: the step dispatched once it was in
                continue
            within = int(RESUMED_WITHIN_S * 1e9) if g1 - g0 >= LAUNCH_GAP_S * 1e9 else 0
            parts = split(main, starts, g0, g1, label, ("", ""), within, away, waits)
            # the idle after a wait is the wait's (idle.split), not the input's, unless the
            # looks found the host waiting for its next batch then (input_starved's rule)
            seen = (lines_in(trace.samples, [pid], [(g0, g1)])
                    if any(kind == "after_wait" for kind, *_ in parts) else None)  # fmt: skip
            fed = seen is not None and loader_waited(seen.input_looks, seen.looks)
            total += sum(ns for (kind, what, _, wait), ns in parts.items()
                         if (what == "upload" and (kind != "after_wait" or fed))
                         or (kind == "after_wait" and wait == "upload"))  # fmt: skip
    # away stretches that no upload ended: the input's in the share of their looks that found
    # the main thread in a call made at an upload's line itself (a batch's release after its
    # copy), not in the framework below it (`model(x.to(device))`'s forward)
    other = [ab for (kind, what, _, _), abs_ in away.items() if kind == "away" and what != "upload"
             for ab in abs_]  # fmt: skip
    looks, at_input = _at_lines(trace, pid, other, lines)
    if looks:
        total += int(sum(b - a for a, b in other) * at_input / looks)
    return total


def _worker_fed(trace: Trace, pid: int) -> set[tuple[int, int]]:
    """(GPU, start) of each copy that moved process `pid`'s data, issued by a thread other than
    its main one (JAX's `device_put`: PJRT's threads copy the arrays). The GPU idle that such a
    copy ends waited for the input: the main thread's calls cannot say so, as none made it."""
    return {
        (c.device, c.start_ns)
        for c in trace.copies
        if c.pid == pid and c.off_main_thread and moves_data(c)
    }


def _handed_ends(trace: Trace, pid: int) -> set[tuple[int, int]]:
    """(GPU, end) of each copy that moved process `pid`'s data, issued by a framework's own
    thread with no Python stack (PJRT's, for a `jax.device_put` or a jitted call's NumPy
    arguments; not a loader's thread, whose copies run ahead of the step). The GPU idle from
    such a copy's end to the next kernel waited for the input too: the main thread, handing
    the arrays over, dispatched the step only then, where with them resident it would have
    been queued behind the step before (jax_sample_list_puts on 1 x H200: the steps' input
    share 0.883 with the idle each such copy ends alone, 0.951 with this, against 0.980 from
    its resident form)."""
    return {
        (c.device, c.end_ns)
        for c in trace.copies
        if c.pid == pid and c.by_framework_thread and moves_data(c)
    }


def _at_lines(
    trace: Trace, pid: int, stretches: list[tuple[int, int]], lines: set[str | None]
) -> tuple[int, int]:
    """The looks at process `pid`'s main thread within the stretches, and those whose innermost
    frame is the program's own at one of `lines` (a call made there, no library's frame below)."""
    seen = trace.samples.get(pid)
    if seen is None:
        return 0, 0
    looks = at = 0
    for a, b in stretches:
        for i in range(bisect.bisect_left(seen.ts, a), bisect.bisect_left(seen.ts, b)):
            stack = seen.stacks[i]
            looks += 1
            at += bool(stack) and not stack[0].is_library and str(stack[0]) in lines
    return looks, at


def steady_span(loop: Steps | None, gpus: Timelines) -> float:
    """The steady state every share is of: the span of the loop's steps, else (no loop) from the
    first GPU activity to the last (`gpus`)."""
    return loop.span_s if loop is not None else gpus.span_s
