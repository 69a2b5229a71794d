"""What every finding of a trace is made of: the lines of the program that made its calls, the
framework they went through, its sizes in words, and the finding itself (TraceFinding), priced with
this machine's measured curves or saying why it is not."""

from __future__ import annotations

import bisect
import re
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any, TypeVar

from ...core import stats
from ...core.units import format_bytes
from ...documents.records import KEY
from ..costs import covered_ns, merged, process_busy
from ..idle import LAUNCH_GAP_S
from ..records import NO_CALLER, Call, Copy, Pin, PyFrame, Trace, in_dataloader, user_frame
from ..reference import Reference
from ..samples import lines_in
from ..steps import Steps
from ..timeline import Timelines, timelines

LOOK_NEAR_S = 0.01  # a look this close to a call, or within its period, saw where it was made


Found = TypeVar("Found")


@dataclass(frozen=True)
class Context:
    """What a finding is found in: the trace (its steady state: phases.steady), and this
    machine's copy rates (None: not measured); the whole trace and each process's loop, where
    known; each GPU's timeline and its kernels' time, made once for every finding that asks."""

    trace: Trace
    reference: Reference | None
    loops: tuple[Steps, ...] = ()
    whole: Trace | None = None  # start-up and end included (None: `trace` is whole)
    # what findings ask of it more than once (the repeated uploads, the waits for an input)
    _found: dict[str, Any] = field(default_factory=dict, init=False, repr=False, compare=False)

    def once(self, key: str, make: Callable[[], Found]) -> Found:
        """What `make` finds, found the first time `key` is asked for and kept for the rest."""
        if key not in self._found:
            self._found[key] = make()
        found: Found = self._found[key]
        return found

    @cached_property
    def uses_loader(self) -> bool:
        """Whether the program used PyTorch's DataLoader: a look at a main thread, or a call's
        Python stack, passed through it (its knobs are advised only then)."""
        trace = self.whole or self.trace
        stacks = [s for looks in trace.samples.values() for s in looks.stacks]
        stacks += [c.python for c in trace.copies if c.python]
        stacks += [p.python for p in trace.pins if p.python]
        stacks += [c.python for c in trace.calls if c.python]
        return any(in_dataloader(stack) for stack in stacks)

    def loop_of(self, pid: int) -> Steps | None:
        """Process `pid`'s loop, or None."""
        return next((s for s in self.loops if s.pid == pid), None)

    @cached_property
    def process_busy(self) -> dict[int, tuple[list[int], list[int]]]:
        """Each process's GPU work as disjoint parts (costs.process_busy)."""
        return process_busy(self.trace)

    def step_at(self, pid: int, t_ns: int) -> int | None:
        """The step of process `pid`'s loop that time `t_ns` falls in, or None (no loop, or
        outside its steps)."""
        loop = self.loop_of(pid)
        if loop is None or len(loop.marks) < 2:
            return None
        step = bisect.bisect_right(loop.marks, t_ns) - 1
        return step if 0 <= step < len(loop.marks) - 1 else None

    def step_idle_s(self, pid: int, step: int) -> float:
        """How long process `pid`'s GPUs sat idle in step `step` of its loop (step_at) waiting
        for their host: the step's idle less the gap they keep after each piece of work even
        when the next is queued (back_to_back_s), which no change to the host takes away."""
        loop = self.loop_of(pid)
        if loop is None:
            return 0.0
        a, b = loop.marks[step], loop.marks[step + 1]
        starts, ends = self.process_busy.get(pid, ([], []))
        pieces = bisect.bisect_left(starts, b) - bisect.bisect_left(starts, a)
        kept = pieces * self.back_to_back_s.get(pid, 0.0)
        return max((b - a - covered_ns(starts, ends, a, b)) * 1e-9 - kept, 0.0)

    @cached_property
    def back_to_back_s(self) -> dict[int, float]:
        """Per process with a loop, the gap its GPUs keep between one piece of work and the
        next queued one: the lower quartile of its gaps shorter than LAUNCH_GAP_S in its steps
        (a fed H200 keeps about 1-1.5 us after each kernel)."""
        out = {}
        for loop in self.loops:
            starts, ends = self.process_busy.get(loop.pid, ([], []))
            i, j = (bisect.bisect_left(starts, t) for t in (loop.marks[0], loop.marks[-1]))
            gaps = [(starts[k + 1] - ends[k]) * 1e-9 for k in range(i, max(j - 1, i))]
            short = sorted(g for g in gaps if 0 < g < LAUNCH_GAP_S)
            out[loop.pid] = short[len(short) // 4] if short else 0.0
        return out

    @cached_property
    def gpus(self) -> Timelines:
        return timelines(self.trace)

    @cached_property
    def kernels(self) -> dict[int, tuple[list[int], list[int]]]:
        """Each GPU's kernel time as disjoint parts (costs.merged)."""
        return merged(self.trace.kernels())


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
    looks: int = 0  # a line the looks found (seen_place): how many of them, no call of its own


WHERE = re.compile(r"^(?P<file>.+):(?P<line>\d+) \(")  # `file:line (function)`


def seen_place(where: str, looks: int, cost_s: float) -> Place:
    """A line `looks` looks at the main thread found (`file:line (function)`, no call of its
    own recorded there), with its source text where its file can be read."""
    return Place(where, 0, 0, cost_s, code=source_of(where), looks=looks)


def with_seen(places: tuple[Place, ...], seen: Place) -> tuple[Place, ...]:
    """The places with a line the looks found (seen_place) first; where calls of the finding
    were made at that line too, one place of both, its calls and looks, their costs summed (a
    JAX program's mask made at a line whose copies PJRT's threads made are placed there too)."""
    same = next((p for p in places if p.where == seen.where), None)
    if same is None:
        return (seen, *places)
    both = replace(same, cost_s=same.cost_s + seen.cost_s, looks=same.looks + seen.looks)
    return (both, *(p for p in places if p is not same))


def source_of(where: str) -> str:
    """The source text of a program's line (`file:line (function)`), "" where it is not one
    or its file cannot be read."""
    found = WHERE.match(where)
    return PyFrame(found["file"], int(found["line"]), "").source() if found else ""


@dataclass(frozen=True, slots=True)
class TraceFinding:
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
    advice: str = field(metadata={KEY: "fix"})  # what to do, in the framework's words
    detail: str = ""
    unpriced: str = ""
    framework: str | None = None  # PyTorch, CuPy, JAX, Numba: the advice is said in its words
    # where the advice is several fixes, what each saves: (the fix, seconds)
    each_fix: tuple[tuple[str, float], ...] = ()
    # the change of the program its fix is, where another finding's fix can be the very same
    # change at the same line (analyze.one_price prices them as one); "" where none can
    change: str = ""


# The changes two findings can share (TraceFinding.change). Pinning a DataLoader's batches
# (`pin_memory=True`) ends their copies' staging through the driver's buffer (pageable.py) and
# moves the receipt of the workers' batches off the main thread to the pin-memory thread, which
# then hands them over ready (input_starved.py's steady wait, where the main thread received
# them itself): one change, both prices.
PIN_LOADER = "pin_memory=True in the DataLoader"
PINNED = (
    "`pin_memory=True`: the DataLoader's pin-memory thread then receives the workers' batches "
    "and pins them, and the main thread takes them ready"
)
# each change: the finding whose whole fix it is (a merge keeps it: its code, title, advice),
# and how another finding's each_fix names the part of its saving that the change takes away
CHANGES: dict[str, tuple[str, str]] = {PIN_LOADER: ("pageable_copies", PINNED)}


# Why a finding could not be priced without this machine's curves, and how to price it.
NO_CURVES = (
    "this machine's copy rates were not measured (--reference none, or no curve in the "
    "history); trace with --reference measure (a 10 s sweep after the program), or run "
    "`xferscope run` once so the history has them"
)
MOST_PLACES = 12  # lines kept per finding, the costliest


def counted(calls: int, sizes: str) -> str:
    """A finding's calls and their sizes as every output says them: "12 calls, 4 KiB", "1 call",
    "4 KiB", or "" (a finding that counts no calls, as the straggler's)."""
    said = [f"{calls} call{'s' if calls != 1 else ''}"] if calls else []
    return ", ".join([*said, *([sizes] if sizes else [])])


def sizes_text(copies: Sequence[Copy]) -> str:
    sizes = sorted(c.bytes for c in copies)
    if not sizes:
        return ""
    if sizes[0] == sizes[-1]:
        return format_bytes(sizes[0])
    middle = format_bytes(int(stats.median(sizes)))
    return f"{format_bytes(sizes[0])} to {format_bytes(sizes[-1])} (median {middle})"


def _cost(x: Copy | Pin | Call) -> float:
    """What one call cost the host: a copy's host cost, a pin's or another call's own time."""
    if isinstance(x, Copy):
        return x.host_cost_s
    return (x.seconds or 0.0) if isinstance(x, Pin) else x.seconds


def _off_main(x: Copy | Pin | Call) -> Call | None:
    """The call, where it was made by a thread other than its process's main one with no
    Python of its own (PyTorch's autograd thread in a backward pass, a runtime's own threads);
    else None."""
    call = x if isinstance(x, Call) else x.call if isinstance(x, Copy) else None
    return None if x.python or call is None or call.thread in (0, x.pid) else call


def seen_near(trace: Trace, made: Sequence[tuple[int, int]]) -> str:
    """The program's line the looks at the main threads saw most often within a look's period
    of calls made at (pid, ns) (samples.lines_in, each process's calls against its own looks),
    "" where they saw none."""
    votes: Counter[str] = Counter()
    for pid in {pid for pid, _ in made}:
        seen = trace.samples.get(pid)
        if seen is not None:
            near = int(max(seen.period_s, LOOK_NEAR_S) * 1e9)
            spans = [(ns - near, ns + near) for p, ns in made if p == pid]
            votes.update(dict(lines_in(trace.samples, (pid,), spans).lines))
    return next((line for line, _ in votes.most_common() if line), "")


def places(trace: Trace, items: Iterable[Copy | Pin | Call]) -> tuple[Place, ...]:
    """The calls grouped by the line that made them, the costliest first. Calls of one process
    made where no line of the program is (a library's native frame, or none) on threads other
    than the main one (_off_main) are placed, all alike, at the line the main thread was seen at
    most often near them (seen_near): a backward pass's waits at its `loss.backward()`."""
    made: dict[str, list[Copy | Pin | Call]] = defaultdict(list)
    for x in items:
        where = trace.where(x.frames, x.python) if isinstance(x, Pin) else trace.line_of(x)
        made[where or NO_CALLER].append(x)
    by: dict[str, list[Copy | Pin | Call]] = defaultdict(list)
    for where, xs in made.items():
        off = [(x.pid, call.start_ns) for x in xs if (call := _off_main(x)) is not None]
        by[(seen_near(trace, off) if len(off) == len(xs) else "") or where].extend(xs)
    found = []
    for where, xs in by.items():
        with_stack = next((x for x in xs if x.python), None)
        frame = user_frame(with_stack.python) if with_stack else None
        code = frame.source() if frame else source_of(where)
        found.append(
            Place(
                where,
                len(xs),
                sum(0 if isinstance(x, Call) else x.bytes for x in xs),
                sum(_cost(x) for x in xs),
                tuple(str(f) for f in with_stack.python) if with_stack else (),
                next((n for x in xs if (n := trace.native(x.frames))), None),
                code,
            )
        )
    return tuple(sorted(found, key=lambda p: (-p.cost_s, -p.calls))[:MOST_PLACES])


def framework(trace: Trace, items: Iterable[Copy | Pin | Call]) -> str | None:
    """The framework most of the calls that tell went through; where none of them tells (a
    `.to()` from the program's own line, its native callers not unwound), the one most of the
    program's copies went through, else its other calls (JAX's copies, made on PJRT's threads,
    carry no stack; its waits do); None where none tells."""
    for told in (items, trace.copies[:4096], trace.calls[:4096]):
        counts = Counter(f for x in told if (f := trace.framework(x.frames, x.python)))
        if counts:
            return counts.most_common(1)[0][0]
    return None


Said = TypeVar("Said")


def in_words(table: Mapping[str | None, Said], used: str | None, loader: bool = False) -> Said:
    """A table's entry for the framework `used` (advice, knobs), CUDA's own (None) where it has
    none for it; where the program uses a DataLoader (`loader`), the entry "<framework>
    DataLoader" first, which may name its knobs (no other entry does)."""
    if loader and f"{used} DataLoader" in table:
        return table[f"{used} DataLoader"]
    return table.get(used, table[None])


def finding(
    code: str,
    title: str,
    advice: Mapping[str | None, str],
    trace: Trace,
    copies: Sequence[Copy],
    cost: float,
    saving: float | None,
    detail: str = "",
    unpriced: str = "",
    loader: bool = False,
) -> TraceFinding:
    """A finding of `copies`: their count, bytes, sizes and lines, and the advice in the words
    of the framework they went through (None: CUDA's own) and of its DataLoader where the
    program uses one (`loader`)."""
    used = framework(trace, copies)
    return TraceFinding(
        code,
        title,
        len(copies),
        sum(c.bytes for c in copies),
        sizes_text(copies),
        places(trace, copies),
        cost,
        None if saving is None else max(0.0, saving),
        in_words(advice, used, loader),
        detail,
        unpriced,
        used,
    )
