"""The findings of a trace, each priced with this machine's measured curves: pageable,
synchronous, small, unoverlapped, slow and repeated copies, and pinned memory never copied."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ..core import stats
from ..core.units import format_bytes
from .costs import _host_cost, _merged, expected, overlap_ns, with_kernels
from .records import Copy, Interval, Pin, Trace, user_frame
from .reference import Reference

SMALL_BYTES = 256 << 10  # copies this small pay their fixed cost more than their bytes
BATCH_MIN = 16  # this many small copies in a row make a batch worth merging
BATCH_GAP_NS = 100_000  # ... with no more than this between one's end and the next's call
SLOW_FACTOR = 2.0  # a copy this many times slower than the machine's curve is "far below"
ASYNC_ISSUE_S = 5e-6  # an asynchronous copy call costs the host about this (when none measured)


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
