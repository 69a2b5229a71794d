"""Which line of a program marks its loop's steps, process by process. Every line of the main
thread's recorded calls (copies, waits) made at least MIN_STEPS times is a candidate, each burst
of its calls closer than a burst counted once (a batch's tensors; a pageable copy and the wait
PyTorch makes after it), as are xferscope.torch.DeviceLoader's batches and each NVTX range the
program or its framework pushes under one name (`torch.cuda.nvtx.range("step")`). The step
line is the one that recurs with the loop's period and coincides with the GPU's work:
1. it spans most of its process's GPU work: at least MIN_COVERS of it, and at least COVERS of
   the share the best candidate spans (a model's upload, or a start-up that loads tensors one
   by one, spans none of the loop; a line run once an epoch spans it but recurs less often);
2. of those, the lines that recur as often as one another are the loop's period: the count of
   steps the most lines share (a loop's batch copy and its `.item()` run once a step each,
   their counts within AGREE), then a count with an upload in it, then the larger count;
3. of those lines, an NVTX range (the program said what a step is), an upload (where a step's
   input arrives), then a wait, then the main thread's other copies, then the one spanning the
   most GPU work.
The others that spanned the loop are kept as runners-up, so the output can say what else
recurred. `--region FILE:LINE` (or an NVTX range's name) names the line instead."""

from __future__ import annotations

import bisect
import itertools
import math
from collections import defaultdict
from dataclasses import dataclass, replace

from .costs import covered_between, cumulative, disjoint, less, process_busy
from .records import LOADER_WHERE, RUN_GAP_NS, Call, Copy, Trace, split_runs

MIN_STEPS = 5  # a line called fewer times marks no loop
# A call of a line this soon after its last one ended is the same mark: where its gaps break
# in two (burst_gap_ns), at least BURST_MIN_S and at most BURST_S; gaps below BURST_FLOOR_S
# count as that (a ratio to a gap of nothing means nothing); a break is a ratio of BREAK or more
# between the two sides' geometric means
BURST_MIN_S, BURST_S, BURST_FLOOR_S, BREAK = 50e-6, 1e-3, 1e-6, 10.0
COVERS = 0.5  # a candidate spans at least this share of what the best one spans
# ... and at least this share of its process's GPU work: a line that recurs in one part of a
# program that has no loop (a run of copies) marks no steady state
MIN_COVERS = 0.3
SAME_PERIOD = 0.1  # counts of steps within this share of each other are one period
AGREE = 0.01  # ... and within this share, lines run as often as one another
MOST_RUNNERS_UP = 4
# a step line's kinds, preferred first; a kernel's only where no call or range spans the loop
KINDS = ("nvtx", "upload", "wait", "copy", "loader", "kernel")
NVTX = "NVTX range "  # an NVTX range's candidate is named NVTX + its name
KERNEL = "kernel "  # a kernel's candidate is named KERNEL + its name
# NVTX domains of libraries, whose ranges are their own calls, not the program's steps: CUB and
# Thrust (CCCL), NCCL, XLA's profiler (TSL), cuDNN, cuBLAS; but XLA's range around each run of a
# compiled program (`XlaModule:#hlo_module=jit_train_step,...`) is a JAX program's step
XLA_PROGRAM = "XlaModule:"
# ... and its range around each compilation (`XlaCompile:#module=jit_train_step#`): the GPU work
# inside it is the autotuning's, start-up that no step line has to span
XLA_COMPILE = "XlaCompile:"
LIBRARY_DOMAINS = frozenset(
    ("CCCL", "CUB", "Thrust", "NCCL", "TSL", "XLA", "cuDNN", "cudnn", "cuBLAS", "cuBLASLt",
     "NVSHMEM", "cuFFT", "cuSPARSE", "TensorRT")
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Candidate:
    """A line that recurs: its process, place, kind of call and each mark (a burst's start,
    ns); `covers`, the share of its process's GPU work between its first mark and its last."""

    pid: int
    where: str
    kind: str  # KINDS
    marks: tuple[int, ...]
    covers: float = 0.0
    # an XLA program's range: the share of its process's GPU work from each of its runs to the
    # next run of any of the process's programs (_leads): the step's program leads the most
    leads: float = 0.0

    @property
    def steps(self) -> int:
        return len(self.marks) - 1


@dataclass(frozen=True, slots=True)
class RunnerUp:
    """A candidate that was not chosen, as the document keeps it."""

    where: str
    pid: int
    kind: str
    steps: int
    covers: float


def at_region(where: str, region: str) -> bool:
    """Whether a call's line (`/path/train.py:41 (train)`) is the line `region` names
    (`train.py:41`, or its whole path), or an NVTX range the name `region` names."""
    if where.startswith(NVTX):
        return where[len(NVTX) :] == region
    line = where.split(" (", 1)[0]
    return line == region or line.endswith("/" + region)


def _marking(call: Call, pid: int, where: str | None) -> str:
    """The line a call may mark steps by: the main thread's, or DeviceLoader's thread's wait at
    the end of each batch it moves (one batch a step, `ahead` steps early: where the step makes
    no CUDA call of its own that the trace records, its batches mark it); "" for any other."""
    if call.thread == pid:
        return where or ""
    if where == LOADER_WHERE and call.synchronizes:
        return where
    return ""


def candidates(trace: Trace) -> dict[int, list[Candidate]]:
    """Each process's lines made MIN_STEPS times or more, with their marks and the share of
    the process's GPU work they span."""
    calls: dict[tuple[int, str], list[tuple[int, int, str]]] = defaultdict(list)
    run_starts = _unwound_runs(trace)
    for c in trace.copies:  # a copy's call is no wait: only the main thread's mark (_marking)
        if c.call is not None and c.call.thread == c.pid and (c.python or c.frames):
            where = _marking(c.call, c.pid, trace.where(c.frames, c.python))
            kind = "upload" if c.direction == "h2d" else "copy"
            if where:
                start, end = run_starts.get(id(c.call), (c.call.start_ns, c.call.end_ns))
                calls[(c.pid, where)].append((start, end, kind))
    for call in trace.calls:
        if call.synchronizes and (call.python or call.frames):
            where = _marking(call, call.pid, trace.where(call.frames, call.python))
            if where:
                calls[(call.pid, where)].append((call.start_ns, call.end_ns, "wait"))
    for r in trace.ranges:  # NVTX: each name's ranges, their starts the marks
        if r.domain not in LIBRARY_DOMAINS or r.name.startswith(XLA_PROGRAM):
            calls[(r.pid, NVTX + r.name)].append((r.start_ns, r.end_ns, "nvtx"))
    busy = _compiled_aside(trace, process_busy(trace))
    found = _recurring(calls, busy)
    for pid, cs in found.items():
        found[pid] = _leads(cs, busy.get(pid, ([], [])))
    # a process none of whose calls or ranges spans its loop (everything queued ahead, no
    # read back, no NVTX): the kernels that recur mark its steps, as a line would
    looped = {pid for pid, cs in found.items() if any(c.covers >= MIN_COVERS for c in cs)}
    kernels: dict[tuple[int, str], list[tuple[int, int, str]]] = defaultdict(list)
    for k in trace.kernels():
        if k.pid not in looped:
            kernels[(k.pid, k.name)].append((k.start_ns, k.end_ns, "kernel"))
    for pid, more in _recurring(kernels, busy).items():  # each instance apart, named short
        found[pid].extend(replace(c, where=KERNEL + kernel_name(c.where)) for c in more)
    return found


def _unwound_runs(trace: Trace) -> dict[int, tuple[int, int]]:
    """For each copy call made from native code whose callers were unwound (the engine unwinds
    one such call in 64 after its first ones), the start of its run, as a span of nothing: the
    run is the main thread's copies of its direction and host memory, each called within
    RUN_GAP_NS of the last one's end with no kernel of its process started between them (where
    its kernels were recorded), cut where its line changes (_by_line). Its line's mark is the
    run's, not the sample's: a CUDA C++ loop's 128 rows a step, each its own cudaMemcpy, had
    two unwound a step, and its steps were marked twice as many as it made (1 x H200)."""
    kernels: dict[int, list[int]] = defaultdict(list)
    for k in trace.kernels():
        kernels[k.pid].append(k.start_ns)
    for starts in kernels.values():
        starts.sort()
    seen = {id(c) for c in trace.seen_with_kernels(trace.copies)}
    main = sorted(
        (c for c in trace.copies if c.call is not None and c.call.thread == c.pid and not c.python),
        key=lambda c: (c.pid, c.call.start_ns if c.call else 0),
    )

    def joins(last: Copy, c: Copy) -> bool:
        starts = kernels.get(c.pid, [])
        between = bisect.bisect_left(starts, c.start_ns) - bisect.bisect_right(starts, last.end_ns)
        return (
            (last.pid, last.direction, last.host_memory) == (c.pid, c.direction, c.host_memory)
            and id(last) in seen
            and id(c) in seen
            and c.call is not None
            and c.call.start_ns - last.end_ns <= RUN_GAP_NS
            and between <= 0
        )

    out: dict[int, tuple[int, int]] = {}
    for run in split_runs(main, joins):
        for part in _by_line(trace, run):
            lines = {trace.where(c.frames, ()) for c in part if c.frames}
            if len(part) > 1 and len(lines) == 1:  # its start: runs follow one another close
                start = min(c.call.start_ns for c in part if c.call)
                out.update((id(c.call), (start, start)) for c in part if c.frames)
    return out


def _by_line(trace: Trace, run: list[Copy]) -> list[list[Copy]]:
    """A run cut where its copies' line changes (Trace.line_of: a call left without callers
    takes its run's unwound line of its size), one whose line is not known joining the part
    it is in: a renderer's 128 instances' structs from one line, then 64 lights' from
    another, in one run, each line's part marked once, not each sample (two marks a step)."""
    parts: list[list[Copy]] = []
    line: str | None = None
    for c in run:
        here = trace.line_of(c)
        if parts and (here is None or line is None or here == line):
            parts[-1].append(c)
            line = line or here
        else:
            parts.append([c])
            line = here
    return parts


def kernel_name(name: str) -> str:
    """A kernel's name as a person reads it: a C++ kernel's qualified name without its template
    and parameters (`_ZN5cudnn6kernelI...` -> `cudnn::kernel`), any other name as it is."""
    if not name.startswith("_Z"):
        return name
    nested = name.startswith("_ZN")  # N...E: a qualified name, its parts one after another
    parts, i = [], 3 if nested else 2
    while i < len(name) and name[i].isdigit():
        j = i
        while j < len(name) and name[j].isdigit():
            j += 1
        parts.append(name[j : j + int(name[i:j])])
        i = j + int(name[i:j])
        if not nested:
            break
    return "::".join(parts) or name


def _recurring(
    spans_of: dict[tuple[int, str], list[tuple[int, int, str]]],
    busy: dict[int, tuple[list[int], list[int]]],
) -> dict[int, list[Candidate]]:
    """The candidates of (process, place) -> (start, end, kind) spans that recur MIN_STEPS
    times or more, with their marks and the share of the process's GPU work they span."""
    found: dict[int, list[Candidate]] = defaultdict(list)
    summed = {pid: cumulative(*parts) for pid, parts in busy.items()}
    totals = {pid: lengths[-1] for pid, lengths in summed.items()}
    for (pid, where), spans in spans_of.items():
        spans.sort()
        # a range is its step (its gaps are the rest of the step, however short): only one
        # inside another is the same mark; calls close together are one (bursts)
        ranged = where.startswith(NVTX)
        marks = bursts([(a, b) for a, b, _ in spans], within_ns=1 if ranged else None)
        if len(marks) < MIN_STEPS:
            continue
        kinds = {k for _, _, k in spans}
        kind = "loader" if where == LOADER_WHERE else next(k for k in KINDS if k in kinds)
        starts, ends = busy.get(pid, ([], []))
        total = totals.get(pid, 0)
        covered = covered_between(starts, ends, summed.get(pid, [0]), marks[0], marks[-1])
        covers = covered / total if total else 0.0
        found[pid].append(Candidate(pid, where, kind, tuple(marks), covers))
    return found


def choose(found: list[Candidate], region: str = "") -> tuple[Candidate | None, list[RunnerUp]]:
    """The step line of one process's candidates (the module's rule), and the runners-up."""
    if region:
        found = [c for c in found if at_region(c.where, region)]
    else:
        found = [c for c in found if c.covers >= MIN_COVERS]
    if not found:
        return None, []
    best = max(c.covers for c in found)
    near = [c for c in found if c.covers >= COVERS * best]
    period = max(_periods(near), key=lambda g: (_agreeing(g), any(c.kind == "upload" for c in g),
                                                 g[0].steps))  # fmt: skip
    chosen = max(period, key=_preferred)
    others = sorted((c for c in found if c is not chosen), key=lambda c: (-c.covers, -c.steps))
    return chosen, [RunnerUp(c.where, c.pid, c.kind, c.steps, c.covers)
                    for c in others[:MOST_RUNNERS_UP]]  # fmt: skip


def _preferred(c: Candidate) -> tuple[int, bool, float, float, int]:
    """Of the lines of one period, the step line first: by its kind (KINDS), an NVTX range the
    program pushed before XLA's, the XLA program that leads the most, the most GPU work
    spanned, the earliest."""
    return (-KINDS.index(c.kind), not _xla(c), c.leads, c.covers, -c.marks[0])


def _xla(c: Candidate) -> bool:
    return c.where.startswith(NVTX + XLA_PROGRAM)


def _leads(found: list[Candidate], busy: tuple[list[int], list[int]]) -> list[Candidate]:
    """The candidates, each XLA program's with the share of the process's GPU work from each of
    its runs to the next run of any of its programs. A step of several jitted programs (the
    batch's columns stacked by one, then the training step) runs each once: their ranges recur
    with one period and span the same work, and the step is the program whose runs the most
    work follows, not the one that readies its input."""
    xla = [i for i, c in enumerate(found) if _xla(c)]
    starts, ends = busy
    if len(xla) < 2 or not starts:
        return found
    summed = cumulative(starts, ends)
    runs = sorted((m, i) for i in xla for m in found[i].marks)
    work: dict[int, int] = defaultdict(int)
    for (a, i), (b, _) in itertools.pairwise(runs):
        work[i] += covered_between(starts, ends, summed, a, b)
    total = summed[-1]
    return [replace(c, leads=work[i] / total) if i in work else c for i, c in enumerate(found)]


def _compiled_aside(
    trace: Trace, busy: dict[int, tuple[list[int], list[int]]]
) -> dict[int, tuple[list[int], list[int]]]:
    """Each process's GPU work less what ran inside XLA's compilations (XLA_COMPILE): its
    autotuning runs each candidate kernel at start-up, and can outweigh a short loop's work
    (a JAX recommender on 1 x H200: 87% of its process's GPU work in `jit_train_step`'s 2.9 s
    compilation), which no step line spans."""
    compiling: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for r in trace.ranges:
        if r.name.startswith(XLA_COMPILE) and r.end_ns > r.start_ns:
            compiling[r.pid].append((r.start_ns, r.end_ns))
    out = dict(busy)
    for pid, spans in compiling.items():
        if pid in busy:
            out[pid] = less(busy[pid], disjoint(spans))
    return out


def _periods(found: list[Candidate]) -> list[list[Candidate]]:
    """The candidates grouped by their count of steps, counts within SAME_PERIOD of the group's
    first one together."""
    groups: list[list[Candidate]] = []
    for c in sorted(found, key=lambda c: c.steps):
        if groups and c.steps <= groups[-1][0].steps * (1 + SAME_PERIOD) + 1:
            groups[-1].append(c)
        else:
            groups.append([c])
    return groups


def _agreeing(group: list[Candidate]) -> int:
    """The most lines of a period whose counts of steps agree (within AGREE): a step's batch
    copy and its `.item()` run once a step each, as often as one another; an evaluation's lines
    once an epoch, each a few times more or less (its first epoch, its last)."""
    return max(sum(1 for d in group if abs(d.steps - c.steps) <= AGREE * c.steps) for c in group)


def bursts(spans: list[tuple[int, int]], within_ns: float | None = None) -> list[int]:
    """The start of each burst of one line's calls (sorted (start, end) pairs): a call this
    soon after the last one ended (`within_ns`, else burst_gap_ns) is the same mark."""
    threshold = within_ns
    if threshold is None:
        threshold = burst_gap_ns(sorted(b[0] - a[1] for a, b in itertools.pairwise(spans)))
    starts, ended = [spans[0][0]], spans[0][1]
    for start, end in spans[1:]:
        if start - ended >= threshold:
            starts.append(start)
        ended = max(ended, end)
    return starts


def burst_gap_ns(gaps: list[int]) -> float:
    """Where a line's gaps (sorted) break in two: the gaps inside a step (a batch's tensors, a
    copy and its wait) and those between steps. The split of their logarithms that leaves the
    two sides most apart (Otsu's threshold); a break where the sides' geometric means are
    BREAK or more apart, the threshold in the widest step between two gaps next to each other
    between those means, within [BURST_MIN_S, BURST_S]. With no such break every call is its
    own mark, calls closer than BURST_MIN_S aside."""
    logs = [math.log(max(g, BURST_FLOOR_S * 1e9)) for g in gaps]
    n = len(logs)
    if n < 2:
        return BURST_MIN_S * 1e9
    total = sum(logs)
    best, split, below = -1.0, 0, 0.0
    for i in range(1, n):  # logs[:i] below the threshold, logs[i:] above
        below += logs[i - 1]
        low, high = below / i, (total - below) / (n - i)
        apart = i * (n - i) * (high - low) ** 2
        if apart > best:
            best, split = apart, i
    low, high = sum(logs[:split]) / split, sum(logs[split:]) / (n - split)
    if high - low < math.log(BREAK):
        return BURST_MIN_S * 1e9
    # between the sides' means, the widest step from one gap to the next (a side's stragglers,
    # a wait held up by another thread, stay on their side)
    # (the means themselves bound it: gaps all alike on a side may round off their own mean)
    between = [low, *(x for x in logs if low < x < high), high]
    lo, hi = max(itertools.pairwise(between), key=lambda p: p[1] - p[0])
    return min(max(math.exp((lo + hi) / 2), BURST_MIN_S * 1e9), BURST_S * 1e9)
