"""What a traced program's copies cost and what each fix would save on this machine.

The summary is seed 001's nvprof table (Time%, total, calls, avg, min, max per kind of copy),
then per direction and host memory kind: bytes, GPU time, achieved GB/s and its share of what
this machine reaches for copies of those sizes, host time blocked in copy calls, and the share
of copy time that overlapped kernels. Findings are priced with this machine's measured curves
(trace/reference.py) and sorted by the time they would save."""

from __future__ import annotations

import bisect
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from ..core import stats
from ..core.units import format_bytes, format_seconds
from ..documents.records import KEY, Derived
from .records import NVPROF_NAMES, Copy, Interval, Pin, Trace, user_frame
from .reference import Reference

SMALL_BYTES = 256 << 10  # copies this small pay their fixed cost more than their bytes
BATCH_MIN = 16  # this many small copies in a row make a batch worth merging
BATCH_GAP_NS = 100_000  # ... with no more than this between one's end and the next's call
SLOW_FACTOR = 2.0  # a copy this many times slower than the machine's curve is "far below"
ASYNC_ISSUE_S = 5e-6  # an asynchronous copy call costs the host about this (when none measured)


@dataclass(frozen=True, slots=True)
class KindRow:
    """One line of seed 001's table."""

    name: str = field(metadata={KEY: "kind"})
    calls: int
    total_s: float
    avg_s: float
    min_s: float
    max_s: float
    # of the GPU time of every copy, memset and kernel
    share: float = field(metadata={KEY: "time_share"})


@dataclass(frozen=True, slots=True)
class Group:
    """The copies of one direction from (or to) one kind of host memory."""

    direction: str
    memory: str
    calls: int
    bytes: int
    gpu_s: float
    expected_s: float | None  # what this machine takes for the same copies
    blocked_s: float  # host time inside the calls that waited for their copy
    # copy time during which a kernel ran on the same GPU (estimated from the copies inside the
    # kernel windows where kernels were sampled; None where no copy of the group was)
    overlapped_s: float | None
    # Derived, for readers that do not want to recompute.
    DERIVED: ClassVar[tuple[Derived, ...]] = (
        Derived("rate_bps", lambda g: g.rate, "gpu_s"),
        Derived("of_reach", lambda g: g.of_reach, "expected_s"),
    )

    @property
    def rate(self) -> float:
        return self.bytes / self.gpu_s if self.gpu_s > 0 else 0.0

    @property
    def of_reach(self) -> float | None:
        return self.expected_s / self.gpu_s if self.expected_s and self.gpu_s > 0 else None


@dataclass(frozen=True, slots=True)
class Place:
    """A line of the program that made some of a finding's calls: the innermost frame of its
    own Python code (`file:line (function)`), else its native caller."""

    where: str
    calls: int
    bytes: int
    cost_s: float
    stack: tuple[str, ...] = ()  # the Python stack there, innermost first
    native: str | None = None  # the native caller, where one was unwound
    code: str = ""  # the line's source text, where the file could be read


@dataclass(frozen=True, slots=True)
class Fix:
    """A finding, priced: what the calls are, what they cost, what to do and what it saves; or,
    where it cannot be priced, why not and how to price it."""

    code: str
    title: str
    calls: int
    bytes: int
    sizes: str  # the sizes, in words
    places: tuple[Place, ...]  # the lines that made the calls, the costliest first
    cost_s: float
    saving_s: float | None  # None: not priced (`unpriced` says why)
    fix: str
    detail: str = ""
    unpriced: str = ""
    framework: str | None = None  # PyTorch, CuPy, JAX, Numba: the fix is said in its words

    @property
    def where(self) -> tuple[str, ...]:
        """The places, the costliest first, with their calls."""
        return tuple(f"{p.where} ({p.calls}x)" for p in self.places)


@dataclass(frozen=True, slots=True)
class Analysis:
    table: tuple[KindRow, ...]
    groups: tuple[Group, ...]
    fixes: tuple[Fix, ...]
    wall_s: float
    reference: str | None
    copy_gpu_s: float
    notes: tuple[str, ...] = field(default=())

    @property
    def saving_s(self) -> float:
        """What the priced fixes save together."""
        return sum(f.saving_s or 0.0 for f in self.fixes)


# ---- the summary --------------------------------------------------------------------------------


def seed001_table(trace: Trace) -> list[KindRow]:
    """Per kind of copy and memset: nvprof's Time%, Time, Calls, Avg, Min, Max. The totals are
    the injection library's exact ones when records beyond the limit were only counted."""
    busy = sum(c.seconds for c in trace.copies) + sum(
        i.seconds for i in trace.intervals if i.what != "sync"
    )
    by_kind: dict[str, list[float]] = defaultdict(list)
    for c in trace.copies:
        by_kind[c.direction].append(c.seconds)
    for i in trace.intervals:
        if i.what == "memset":
            by_kind["memset"].append(i.seconds)
    rows = []
    for kind, times in by_kind.items():
        total = sum(times)
        rows.append(
            KindRow(
                NVPROF_NAMES.get(kind, f"[CUDA {kind}]"),
                len(times),
                total,
                total / len(times),
                min(times),
                max(times),
                total / busy if busy else 0.0,
            )
        )
    return sorted(rows, key=lambda r: -r.total_s)


def _merged(intervals: Iterable[Interval]) -> dict[int, tuple[list[int], list[int]]]:
    """Kernel time per device as sorted, disjoint [start, end) intervals."""
    per: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for i in intervals:
        per[i.device].append((i.start_ns, i.end_ns))
    out = {}
    for device, spans in per.items():
        spans.sort()
        starts: list[int] = []
        ends: list[int] = []
        for s, e in spans:
            if ends and s <= ends[-1]:
                ends[-1] = max(ends[-1], e)
            else:
                starts.append(s)
                ends.append(e)
        out[device] = (starts, ends)
    return out


def overlap_ns(span: Copy | Interval, merged: dict[int, tuple[list[int], list[int]]]) -> int:
    """How long the merged intervals (kernels, or copies) ran on the span's GPU during it."""
    starts, ends = merged.get(span.device, ([], []))
    i = max(bisect.bisect_right(starts, span.start_ns) - 1, 0)
    total = 0
    while i < len(starts) and starts[i] < span.end_ns:
        total += max(0, min(ends[i], span.end_ns) - max(starts[i], span.start_ns))
        i += 1
    return total


def _blocking(c: Copy) -> bool:
    """The host waited for this copy inside its call: a synchronous call, or a pageable copy
    (which the driver stages through its own buffer)."""
    return c.call is not None and ("Async" not in c.call.function or c.host_memory == "pageable")


def blocked_s(c: Copy) -> float:
    """Host time blocked in the copy's call: the call's time where the host waited for the
    copy, else none."""
    return c.call.seconds if c.call is not None and _blocking(c) else 0.0


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


def groups(trace: Trace, reference: Reference | None) -> list[Group]:
    kernels = _merged(trace.kernels())
    by: dict[tuple[str, str], list[Copy]] = defaultdict(list)
    for c in trace.copies:
        by[(c.direction, c.host_memory)].append(c)
    out = []
    for (direction, memory), copies in sorted(by.items()):
        seen, scale = with_kernels(trace, copies)
        out.append(
            Group(
                direction,
                memory,
                len(copies),
                sum(c.bytes for c in copies),
                sum(c.seconds for c in copies),
                expected(reference, copies) if direction in ("h2d", "d2h") else None,
                sum(blocked_s(c) for c in copies),
                None if scale is None else sum(overlap_ns(c, kernels) for c in seen) * 1e-9 * scale,
            )
        )
    return out


# ---- findings, priced ----------------------------------------------------------------------------


def sizes_text(copies: Sequence[Copy]) -> str:
    sizes = sorted(c.bytes for c in copies)
    if not sizes:
        return ""
    if sizes[0] == sizes[-1]:
        return format_bytes(sizes[0])
    middle = format_bytes(int(stats.median(sizes)))
    return f"{format_bytes(sizes[0])} to {format_bytes(sizes[-1])} (median {middle})"


MOST_PLACES = 12  # lines kept per finding, the costliest


def _places(trace: Trace, items: Iterable[Copy | Pin]) -> tuple[Place, ...]:
    """The calls grouped by the line that made them, the costliest first."""
    by: dict[str, list[Copy | Pin]] = defaultdict(list)
    for x in items:
        by[trace.where(x.frames, x.python) or "(no caller recorded)"].append(x)
    places = []
    for where, xs in by.items():
        with_stack = next((x for x in xs if x.python), None)
        frame = user_frame(with_stack.python) if with_stack else None
        code = frame.source() if frame else ""
        places.append(
            Place(
                where,
                len(xs),
                sum(x.bytes for x in xs),
                sum(_host_cost(x) if isinstance(x, Copy) else x.seconds or 0.0 for x in xs),
                tuple(str(f) for f in with_stack.python) if with_stack else (),
                next((n for x in xs if (n := trace.native(x.frames))), None),
                code,
            )
        )
    return tuple(sorted(places, key=lambda p: (-p.cost_s, -p.calls))[:MOST_PLACES])


def _framework(trace: Trace, items: Iterable[Copy | Pin]) -> str | None:
    """The framework most of the calls that tell went through, if any."""
    counts = Counter(f for x in items if (f := trace.framework(x.frames, x.python)))
    return counts.most_common(1)[0][0] if counts else None


# What to do, in the words of the framework the calls went through (None: CUDA's own).
ADVICE: dict[str, dict[str | None, str]] = {
    "pageable_copies": {
        None: "pin the host buffers once (cudaHostRegister or cudaMallocHost), or copy through "
        "xferscope's staged copy (xferscope.copy_to_device)",
        "PyTorch": "pin the host tensors once: `pin_memory=True` in the DataLoader, or "
        "`tensor.pin_memory()` for a tensor made once; then `.to(device, non_blocking=True)`",
        "CuPy": "allocate the host arrays pinned, with `cupyx.empty_pinned` (or "
        "`cupyx.zeros_pinned`), and copy them with `cupy.asarray` or `ndarray.set`",
        "JAX": "put the host arrays in pinned host memory (`jax.device_put(x, "
        "sharding.with_memory_kind('pinned_host'))`) before moving them to the device",
        "Numba": "allocate the host arrays pinned (`cuda.pinned_array`, or `with "
        "cuda.pinned(array):`) before `cuda.to_device`",
    },
    "synchronous_copies": {
        None: "issue them with cudaMemcpyAsync on a stream and synchronize only where the data "
        "is needed; the host works meanwhile",
        "PyTorch": "copy with `.to(device, non_blocking=True)` from pinned memory, and read "
        "results back with `.to('cpu', non_blocking=True)` into pinned memory, synchronizing "
        "(`torch.cuda.current_stream().synchronize()`) only where the value is used: `.item()`, "
        "`.cpu()` and `.tolist()` each wait for the GPU",
        "CuPy": "copy on a stream (`cupy.cuda.Stream(non_blocking=True)`) with "
        "`ndarray.set(..., stream=s)` and `ndarray.get(stream=s, out=pinned)`, then "
        "`s.synchronize()` only where the data is needed",
    },
    "small_copies": {
        None: "gather them into one buffer and copy once (cudaMemcpyBatchAsync on CUDA 12.8+, or "
        "a pinned staging buffer and one copy), then scatter on the GPU; xferscope.copy_many "
        "makes the batch by the method measured fastest here",
        "PyTorch": "make small constant tensors once, on the GPU, outside the loop "
        "(`torch.tensor(values, device=device)` copies from the host each time it runs); copy "
        "many small tensors as one (`torch.cat` on the host, one `.to(device)`, then split), or "
        "with xferscope.copy_many",
        "CuPy": "build small arrays once, or concatenate them on the host and copy once "
        "(`cupy.asarray(numpy.concatenate(...))`), or use xferscope.copy_many",
    },
    "copies_not_overlapped": {
        None: "issue the copies of the next batch on their own stream from pinned memory while "
        "the current batch's kernels run (double buffering)",
        "PyTorch": "copy the next batch on a side stream while this one computes: `s = "
        "torch.cuda.Stream()`; `with torch.cuda.stream(s): nxt = batch.to(device, "
        "non_blocking=True)` (from pinned memory), then "
        "`torch.cuda.current_stream().wait_stream(s)` before using it",
        "CuPy": "copy the next batch on its own stream (`cupy.cuda.Stream(non_blocking=True)`) "
        "from pinned memory (`cupyx.empty_pinned`) while the current one computes",
    },
    "repeated_uploads": {
        None: "keep the data on the GPU and upload it once (cache the device copy)",
        "PyTorch": "move the tensor to the GPU once, outside the loop, and keep the device "
        "tensor (or register it as a module buffer)",
        "CuPy": "keep the `cupy.ndarray` instead of converting the NumPy array again",
    },
    "slow_copies": {
        None: "look for copies that run at once with others (same direction), a buffer on the "
        "far NUMA node (`xferscope run` says), or a GPU link trained down",
    },
    "pinned_unused": {
        None: "do not pin it (pinned memory is taken from the OS for as long as it lives)",
        "PyTorch": "do not pin tensors that are never copied (`pin_memory()`, or "
        "`pin_memory=True` for a DataLoader whose batches stay on the host)",
    },
}
# Why a fix could not be priced without this machine's curves, and how to price it.
NO_CURVES = (
    "this machine's copy rates were not measured (--reference none, or no curve in the "
    "history); trace with --reference measure (a 10 s sweep after the program), or run "
    "`xferscope run` once so the history has them"
)


def _host_cost(c: Copy) -> float:
    """What the copy cost the program: its call's time where the host waited, else its GPU time."""
    return c.call.seconds if c.call is not None and _blocking(c) else c.seconds


def _fix(
    code: str,
    title: str,
    trace: Trace,
    copies: Sequence[Copy],
    cost: float,
    saving: float | None,
    detail: str = "",
    unpriced: str = "",
) -> Fix:
    used = _framework(trace, copies)
    advice = ADVICE[code]
    return Fix(
        code,
        title,
        len(copies),
        sum(c.bytes for c in copies),
        sizes_text(copies),
        _places(trace, copies),
        cost,
        None if saving is None else max(0.0, saving),
        advice.get(used, advice[None]),
        detail,
        unpriced,
        used,
    )


def pageable_fix(trace: Trace, reference: Reference | None) -> Fix | None:
    copies = [
        c for c in trace.copies if c.direction in ("h2d", "d2h") and c.host_memory == "pageable"
    ]
    if not copies:
        return None
    cost = sum(_host_cost(c) for c in copies)
    pinned = expected(reference, copies, "pinned")
    return _fix(
        "pageable_copies",
        "copies from or to pageable memory",
        trace,
        copies,
        cost,
        None if pinned is None else cost - pinned,
        "" if pinned is None else "priced by this machine's pinned copies of the same sizes",
        "" if pinned is not None else f"not priced: {NO_CURVES}",
    )


def sync_fix(trace: Trace) -> Fix | None:
    copies = [
        c
        for c in trace.copies
        if c.call is not None and "Async" not in c.call.function and c.host_memory == "pinned"
    ]
    if not copies:
        return None
    issued = [
        c.call.seconds
        for c in trace.copies
        if c.call is not None and "Async" in c.call.function and c.host_memory == "pinned"
    ]
    issue = stats.median(issued) if issued else ASYNC_ISSUE_S
    cost = sum(c.call.seconds for c in copies if c.call)
    return _fix(
        "synchronous_copies",
        "synchronous copies that stall the host",
        trace,
        copies,
        cost,
        cost - issue * len(copies),
        "the saving is host time freed for other work while the copies run",
    )


def batch_fix(trace: Trace, reference: Reference | None) -> Fix | None:
    """Runs of many small copies, one after another, that one copy of their bytes would replace."""
    runs: list[list[Copy]] = []
    current: list[Copy] = []
    for c in trace.copies:
        key = (c.pid, c.direction, c.host_memory, c.stream)
        if (
            c.bytes <= SMALL_BYTES
            and c.direction in ("h2d", "d2h")
            and current
            and (
                current[-1].pid,
                current[-1].direction,
                current[-1].host_memory,
                current[-1].stream,
            )
            == key
            and (c.call.start_ns if c.call else c.start_ns) - current[-1].end_ns <= BATCH_GAP_NS
        ):
            current.append(c)
            continue
        if len(current) >= BATCH_MIN:
            runs.append(current)
        current = [c] if c.bytes <= SMALL_BYTES and c.direction in ("h2d", "d2h") else []
    if len(current) >= BATCH_MIN:
        runs.append(current)
    if not runs:
        return None
    copies = [c for run in runs for c in run]
    title = f"runs of many small copies ({len(runs)} runs of {BATCH_MIN} or more)"
    if reference is None:
        cost = sum(_host_cost(c) for c in copies)
        return _fix(
            "small_copies", title, trace, copies, cost, None, unpriced=f"not priced: {NO_CURVES}"
        )
    # what they cost: as traced, or what this machine takes for them untraced if less (a
    # traced call carries the tracing's own microsecond or so)
    cost = min(sum(_host_cost(c) for c in copies), expected(reference, copies) or float("inf"))
    one = 0.0
    for run in runs:
        t = reference.seconds(run[0].direction, run[0].host_memory, sum(c.bytes for c in run))
        one += t or 0.0
    return _fix(
        "small_copies",
        title,
        trace,
        copies,
        cost,
        cost - one,
        "the saving prices each run as one copy of all its bytes on this machine; `xferscope "
        "batch --size-mix file:copies.csv` compares the ways of batching on these very sizes",
    )


def overlap_fix(trace: Trace) -> Fix | None:
    """Copies that ran while no kernel did, in a program that runs kernels: time that copies on
    another stream could have hidden behind them (at most the kernels' own time free of copies).
    Where kernels were recorded in windows, judged on the copies inside them and scaled to all."""
    kernels = trace.kernels()
    if not kernels:
        return None
    transfers = [c for c in trace.copies if c.direction in ("h2d", "d2h")]
    seen, scale = with_kernels(trace, transfers)
    if scale is None:
        return None
    merged = _merged(kernels)
    alone = [c for c in seen if overlap_ns(c, merged) == 0]
    if not alone:
        return None
    copies_merged = _merged(
        Interval(c.pid, "copy", "", c.start_ns, c.end_ns, c.device, c.stream) for c in trace.copies
    )
    free_kernel_s = scale * sum(
        (k.end_ns - k.start_ns - overlap_ns(k, copies_merged)) * 1e-9 for k in kernels
    )
    cost = scale * sum(c.seconds for c in alone)
    sampled = (
        f"; kernels were recorded in windows, so this is judged on the {len(seen)} copies "
        f"that ran in them ({len(alone)} alone) and scaled to all {len(transfers)} "
        "(`trace --kernels all` records every kernel)"
        if scale != 1.0
        else ""
    )
    return _fix(
        "copies_not_overlapped",
        "copies that ran while no kernel did",
        trace,
        alone,
        cost,
        min(cost, free_kernel_s),
        "at most: the saving is bounded by the kernels' time free of copies, and needs work "
        "that does not depend on the copy" + sampled,
    )


def slow_fix(trace: Trace, reference: Reference | None) -> Fix | None:
    if reference is None:
        return None
    slow = []
    excess = 0.0
    for c in trace.copies:
        if c.direction not in ("h2d", "d2h") or c.host_memory not in ("pinned", "pageable"):
            continue
        t = reference.seconds(c.direction, c.host_memory, c.bytes)
        taken = _host_cost(c) if c.host_memory == "pageable" else c.seconds
        if t and taken > SLOW_FACTOR * t:
            slow.append(c)
            excess += taken - t
    if not slow:
        return None
    return _fix(
        "slow_copies",
        "copies at less than half the rate this machine reaches for their size",
        trace,
        slow,
        sum(_host_cost(c) for c in slow),
        excess,
    )


def repeat_fix(trace: Trace) -> Fix | None:
    seen: set[tuple[int, int]] = set()
    repeats = []
    for c in trace.copies:
        if c.direction != "h2d" or c.content is None:
            continue
        key = (c.content, c.bytes)
        if key in seen:
            repeats.append(c)
        seen.add(key)
    if not repeats:
        return None
    cost = sum(_host_cost(c) for c in repeats)
    return _fix(
        "repeated_uploads",
        "uploads of data already uploaded (same bytes, sampled)",
        trace,
        repeats,
        cost,
        cost,
        "identical content is judged from up to 256 words sampled across each buffer and its size",
    )


def unused_pin_fix(trace: Trace) -> Fix | None:
    used = [
        (c.pid, p)
        for c in trace.copies
        for p, side in ((c.src_ptr, c.src), (c.dst_ptr, c.dst))
        if p is not None and side in ("pinned", "pageable")
    ]
    idle = [
        pin
        for pin in trace.pins
        if pin.bytes
        and not any(
            pid == pin.pid and pin.address <= p < pin.address + pin.bytes for pid, p in used
        )
    ]
    if not idle or any(c.src_ptr is None for c in trace.copies if c.call):
        return None  # without every copy's pointers, an unused buffer cannot be told
    cost = sum(p.seconds or 0.0 for p in idle)
    used_framework = _framework(trace, idle)
    advice = ADVICE["pinned_unused"]
    return Fix(
        "pinned_unused",
        "host memory pinned but never copied from or to",
        len(idle),
        sum(p.bytes for p in idle),
        ", ".join(sorted({format_bytes(p.bytes) for p in idle})),
        _places(trace, idle),
        cost,
        cost,
        advice.get(used_framework, advice[None]),
        f"{format_bytes(sum(p.bytes for p in idle))} held pinned",
        framework=used_framework,
    )


def _cost_notes(trace: Trace) -> list[str]:
    """What the tracing left out to stay light, and what it cost the program's threads."""
    notes = []
    coverage = trace.kernel_coverage
    if coverage == "sampled":
        on, period = next(
            (p["kernel_window_ms"] for p in trace.processes if p.get("kernel_window_ms")),
            (None, None),
        )
        seen = len(trace.seen_with_kernels(trace.copies))
        notes.append(
            f"kernels were recorded in {len(trace.kernel_windows)} windows of {on} ms (one every "
            f"{period} ms at most), as each recorded kernel costs its launch time: the time "
            f"beside kernels and the overlap finding are estimated from the {seen} of "
            f"{len(trace.copies)} "
            "copies inside them; `--kernels all` records every kernel"
        )
    elif coverage == "none":
        notes.append(
            "kernels were not recorded (--kernels none): no time beside kernels, no overlap finding"
        )
    spent = [p["cost"]["callbacks"] for p in trace.processes if "callbacks" in p.get("cost", {})]
    if spent and sum(n for n, _ in spent):
        notes.append(
            f"the tracing's callbacks took {format_seconds(sum(ns for _, ns in spent) * 1e-9)} "
            f"of the program's threads in {sum(n for n, _ in spent)} callbacks"
        )
    return notes


def _order(f: Fix) -> tuple[bool, float]:
    """Priced fixes first, the largest saving first; then the others, the costliest first."""
    return (f.saving_s is None, -(f.cost_s if f.saving_s is None else f.saving_s))


def analyze(trace: Trace, wall_s: float, reference: Reference | None) -> Analysis:
    fixes = [
        f
        for f in (
            pageable_fix(trace, reference),
            sync_fix(trace),
            batch_fix(trace, reference),
            overlap_fix(trace),
            slow_fix(trace, reference),
            repeat_fix(trace),
            unused_pin_fix(trace),
        )
        if f is not None
    ]
    notes = []
    if trace.sampled:
        notes.append(
            "records beyond the limit were counted, not kept: the table's totals are exact, the "
            "findings price the records kept"
        )
    if trace.dropped:
        notes.append(f"CUPTI dropped {trace.dropped} records (its buffers were full)")
    notes += _cost_notes(trace)
    return Analysis(
        tuple(seed001_table(trace)),
        tuple(groups(trace, reference)),
        tuple(sorted(fixes, key=_order)),
        wall_s,
        None if reference is None else reference.source,
        sum(c.seconds for c in trace.copies),
        tuple(notes),
    )
