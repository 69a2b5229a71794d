"""Which idle of a GPU is its wait for the next input (starving): the largest idle cause in which
the host was away from CUDA until it copied a batch up at the same line every step, or in which
most looks at the main thread found it waiting in a loader's next, or, where the framework's
own threads copied the input (JAX's PJRT), making it at the program's lines (made: the idle
of every call the host came back with, at the line seen most, together); less the share of it
the looks found inside the framework that runs the step (its launches, its optimizer). The finding
that names it is input_starved.py's, or repeated.py's where the input is the same data made and
uploaded again each step (repeated.constant)."""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from ...core.frameworks import FRAMEWORKS
from ...core.units import format_seconds
from ..costs import idle_ns
from ..idle import IdleCause, joined, loader_waited
from ..ranks import ranks
from ..records import LOADER_WHERE, Copy, Trace
from ..timeline import GpuTimeline, clipped
from .base import Context
from .runs import small_runs

WORTH = 0.05  # idle this share of the span, or more, is a finding
BEYOND = 0.01  # a price this share over the idle waited in is said to be beyond it
# an idle cause with no line is the input's where this many looks fell in it, at least half
# of them in a loader's next; one at a copy's line with no loader seen, where this many fell in
# it at all (sampled)
MIN_LOOKS = 5


@dataclass(frozen=True, slots=True)
class Starved:
    """A GPU's wait for its next input: the idle cause, its GPU's timeline, the share of it the
    input's making was, and the input's uploads (at the cause's line, or the loader's)."""

    cause: IdleCause
    gpu: GpuTimeline
    share: float
    copies: list[Copy]
    # what the input made ahead would save in the time judged (_made_ahead): step by step, the
    # host's time making it there, at most its part of the step's idle that no wait left
    ahead_s: float = 0.0
    # whether it is priced as made ahead (idle_s), not where the host's time away was its
    # uploads' issuing (_issued)
    ahead: bool = True

    @property
    def scale(self) -> float:
        """What scales the judged idle to the span (1 where every kernel was recorded)."""
        return self.gpu.scale or 1.0

    @property
    def waited_s(self) -> float:
        """The GPU's idle in the cause's gaps that was the input's making, scaled to the span."""
        return self.cause.seconds * self.scale * self.share

    @property
    def idle_s(self) -> float:
        """What the input made ahead would save, scaled to the span: the host's time making it
        (its whole stretches away, the share of them the input's), in each step up to the
        GPU's idle there that no wait for the GPU left (ahead_s), and never less than the idle
        it waited in. A host
        that makes its input after it queued the step is away longer than the GPU idles: the
        GPU runs what was queued first. Made ahead, the step takes the longer of the host's
        other work and the GPU's, so it saves the making where the host then bounds the step
        and all the GPU's idle where the GPU does (DDP ranks each augmenting 128 images a step:
        13.4 ms away, 8.2 ms of it idle, 6.5 ms of that before the copy; the fix saved 8.3
        ms)."""
        if not self.ahead:
            return self.waited_s
        return max(self.waited_s, self.ahead_s * self.scale)

    @property
    def making_s(self) -> float:
        """The host's time away making the input, scaled to the span."""
        return self.cause.host_s * self.share * self.scale


def ahead(each: Sequence[Starved]) -> str:
    """The words for a price beyond the idle the GPU waited in (Starved.idle_s), "" where none
    is: the host's making, or all the GPU's idle, with what bounds the step once made ahead."""
    price, waited = sum(s.idle_s for s in each), sum(s.waited_s for s in each)
    if price <= waited * (1 + BEYOND):
        return ""
    host = sum(s.making_s for s in each)
    if price < host * (1 - BEYOND):
        bound = (
            "all the GPU's idle but that after its waits, as the host's other work in a step "
            "is less than the GPU's: made ahead, the host queues the next step before the GPU "
            "ends one"
        )
    else:
        bound = "the host's time making it, as the host's other work then bounds the step"
    return (
        f"; priced at {format_seconds(price)}: the host spent {format_seconds(host)} away making "
        f"it (the GPU ran what was queued meanwhile), and the price is {bound}"
    )


def waits(context: Context) -> list[Starved]:
    """Every wait for an input of any GPU but a straggler's (its idle is the straggler
    finding's), the largest first (its idle, less the share the framework's own code had).
    Found once a context: the input's and the repeated uploads' findings both ask."""
    return context.once("waits", lambda: _waits(context))


def _waits(context: Context) -> list[Starved]:
    trace = context.trace
    found = []
    late = ranks(trace, context.gpus)[1]
    in_runs = {id(c) for run in small_runs(context) for c in run}
    uploads: dict[tuple[int, str | None], list[Copy]] = defaultdict(list)  # by GPU and line
    handed: dict[int, list[Copy]] = defaultdict(list)  # by GPU: the framework's threads' own
    for c in trace.copies:
        if c.direction == "h2d":
            uploads[(c.device, trace.where(c.frames, c.python))].append(c)
            if c.by_framework_thread:
                handed[c.device].append(c)
    for g in context.gpus.gpus:
        if g.scale is None or (late is not None and g.device == late.device):
            continue
        looked = sampled(trace, g.device)
        making_at: dict[str, list[IdleCause]] = defaultdict(list)  # made: by the line seen most
        mine: list[Starved] = []  # this GPU's
        for cause in g.idle:
            if not at_copy(cause) and not _fed(cause) and not made(cause):
                continue
            if looked and not loader(cause) and cause.looks < MIN_LOOKS:
                continue  # too few looks to tell the input's work from the step's own
            if cause.kind == "after_wait" and not loader(cause):
                continue  # the wait's idle: the waits' finding
            if not loader(cause) and _computing(cause):
                continue  # the step's own launches (a host-bound step), not its input
            fed, by_copy = _fed(cause), at_copy(cause)  # neither: made
            if by_copy:
                copies = uploads.get((g.device, cause.where), [])
            elif fed:
                copies = uploads.get((g.device, LOADER_WHERE), [])
            else:
                copies = handed[g.device]
            if not fed and len(copies) < 2:  # one copy is a start-up's, not a loop's
                continue
            if not by_copy and not fed:  # made: the call the host came back with says nothing
                making_at[cause.seen_at[0][0]].append(cause)
                continue
            mine.append(Starved(cause, g, 1.0 if loader(cause) else making(cause), copies))
        for causes in making_at.values():
            cause = joined(causes)
            mine.append(Starved(cause, g, making(cause), handed[g.device]))
        mine = [replace(s, ahead=not _issued(s.copies, in_runs)) for s in mine]
        pid = next((c.pid for s in mine for c in s.copies), None)
        loop = context.loop_of(pid) if pid is not None else None
        found += _made_ahead(mine, g, context.gpus.busy, loop.marks if loop else ())
    # a start-up's wait aside
    return sorted(found, key=lambda s: s.cause.steady_s * s.share, reverse=True)


def _made_ahead(
    mine: list[Starved],
    g: GpuTimeline,
    busy: dict[int, tuple[list[int], list[int]]],
    marks: Sequence[int],
) -> list[Starved]:
    """Each of GPU `g`'s inputs priced as made ahead (Starved.ahead_s), in the time judged: in
    each step of its loop (`marks`; no loop found: the GPU's span as one step), the host's
    time making it there, at most its part (its share of that step's making) of the step's
    idle that no wait for the GPU left, as the host cannot run ahead past a wait (the waits'
    finding prices that idle). Step by step, an input made in some steps takes none of the
    idle of the others (an epoch's evaluation, a launch-bound phase)."""
    if len(marks) < 2:
        marks = (g.start_ns, g.end_ns)
    making = [s for s in mine if s.ahead]
    inputs = {id(s.cause) for s in mine}  # (made ones are never after a wait)
    waited = [ab for c in g.idle if c.kind == "after_wait" and id(c) not in inputs
              for ab in c.idle_at]  # fmt: skip
    each = [{k: ns * s.share for k, ns in _in_steps(s.cause.host_at, marks).items()}
            for s in making]  # fmt: skip
    total: dict[int, float] = defaultdict(float)
    for per in each:
        for k, ns in per.items():
            total[k] += ns
    free = _in_steps(clipped([(marks[k], marks[k + 1]) for k in sorted(total)], list(g.judged)),
                     marks, lambda a, b: idle_ns(busy, g.device, a, b))  # fmt: skip
    for k, ns in _in_steps(waited, marks).items():
        free[k] -= ns
    priced = {id(s): sum(min(ns, max(free[k], 0) * ns / total[k]) for k, ns in per.items() if ns)
              for s, per in zip(making, each, strict=True)}  # fmt: skip
    return [replace(s, ahead_s=priced[id(s)] * 1e-9) if id(s) in priced else s for s in mine]


def _in_steps(
    stretches: Sequence[tuple[int, int]],
    marks: Sequence[int],
    measure: Callable[[int, int], int] = lambda a, b: b - a,
) -> dict[int, int]:
    """What `measure` finds of the stretches in each step between `marks` (by step; their
    length by default), none outside them."""
    out: dict[int, int] = defaultdict(int)
    for a, b in stretches:
        k = max(bisect.bisect_right(marks, a) - 1, 0)
        while k + 1 < len(marks) and marks[k] < b:
            lo, hi = max(a, marks[k]), min(b, marks[k + 1])
            if hi > lo:
                out[k] += measure(lo, hi)
            k += 1
    return out


def _issued(copies: list[Copy], in_runs: set[int]) -> bool:
    """Whether most of an input's uploads are in runs of many small copies (runs.small_runs):
    the host's time away is then theirs to issue, one at a time (a list of 256 samples put
    with `jax.device_put`, 5.6 s away of which 2.2 s idle), the small copies' finding's, and
    the input is priced by the idle it waited in only."""
    return sum(id(c) in in_runs for c in copies) * 2 > len(copies)


def starving(context: Context, kept: Callable[[Starved], bool] = lambda _: True) -> Starved | None:
    """The largest wait for an input that `kept` keeps, if it is WORTH a finding."""
    best = next((s for s in waits(context) if kept(s)), None)
    if best is None or best.cause.seconds * best.share < WORTH * best.gpu.judged_s:
        return None
    return best


def sampled(trace: Trace, device: int) -> bool:
    """Whether the main thread of a process that copied to GPU `device` was looked at (a Python
    process, the looks on): then an input the host made itself, with no loader seen, is named
    only where MIN_LOOKS looks or more fell in its time. Fewer cannot tell the input's work
    from the step's own host work before its first copy: a launch-bound recommender's optimizer
    and loop, 165 us before each step's 27 small uploads, 3 looks in 97 ms of such gaps."""
    pids = {c.pid for c in trace.copies if c.device == device}
    return any(pid in trace.samples for pid in pids)


def _computing(cause: IdleCause) -> bool:
    """Whether most looks in the cause's time found the main thread inside the framework that
    runs the step (its forward, backward, optimizer: PyTorch's, CuPy's, JAX's own code): the
    host busy launching the step, not making its input."""
    return cause.looks > 0 and inside(cause) * 2 >= cause.looks


def making(cause: IdleCause) -> float:
    """The share of the cause's idle the host spent making its input itself: that of the looks
    in it that found the main thread outside the framework that runs the step (1 with none).
    A recommender's step, away from CUDA until its batch's first copy: 5 of 14 looks in
    PyTorch's optimizer, the step's own launches, which the input made ahead would not save."""
    return 1.0 - inside(cause) / cause.looks if cause.looks else 1.0


def inside(cause: IdleCause) -> int:
    """The looks in the cause's time inside the framework that runs the step."""
    return sum(n for doing, n in cause.seen_doing if doing.endswith(FRAMEWORK_PACKAGES))


FRAMEWORK_PACKAGES = tuple(f" ({p})" for f in FRAMEWORKS for p in f.packages)


def loader(cause: IdleCause) -> bool:
    """Whether the looks in the cause's time found the main thread waiting in a loader's next
    (idle.loader_waited): the loader's knobs are the fix."""
    return loader_waited(cause.input_looks, cause.looks)


AWAY = ("away", "after_wait")  # the kinds of idle the host spent away from CUDA


def at_copy(cause: IdleCause) -> bool:
    """Away from CUDA until a copy at a line of the program."""
    return cause.kind in AWAY and bool(cause.where) and not cause.where.startswith("(")


def made(cause: IdleCause) -> bool:
    """Away from CUDA with no call to name the GPU's return (JAX hands a jitted call's NumPy
    arguments to PJRT's threads, which copy them), where MIN_LOOKS looks or more fell, most of
    them outside the framework at the program's lines and none of most in a loader's next: the
    host making the step's input itself, then the framework copying it (a 4 MiB mask
    rasterized with NumPy every step: 67% of the looks in the idle at the rasterizing lines, the
    GPU idle 76% of its steps). Its uploads are those the framework's threads made."""
    return (
        cause.kind == "away"
        and not at_copy(cause)
        and cause.looks >= MIN_LOOKS
        and not loader(cause)
        and making(cause) > 0.5
        and bool(cause.seen_at and cause.seen_at[0][0])
    )


def _fed(cause: IdleCause) -> bool:
    """Away from CUDA, the looks at the main thread mostly in a loader's next, at a line."""
    return (
        cause.kind in AWAY
        and cause.looks >= MIN_LOOKS
        and cause.input_looks * 2 >= cause.looks
        and bool(cause.seen_at and cause.seen_at[0][0])
    )
