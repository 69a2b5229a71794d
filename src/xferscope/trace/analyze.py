"""What a traced program's copies cost and what each finding would save on this machine.

The summary is nvprof's table (Time%, total, calls, avg, min, max per kind of copy),
then per direction and host memory kind: bytes, GPU time, achieved GB/s and its share of what
this machine reaches for copies of those sizes, host time blocked in copy calls, and the share
of copy time that overlapped kernels. The findings (trace/findings/, one module each) are
priced with this machine's measured curves (trace/reference.py) and sorted here by the time
they would save."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import ClassVar

from ..core.units import format_seconds
from ..documents.records import KEY, Derived
from .costs import expected, merged, overlap_ns, with_kernels
from .findings import Context, TraceFinding, find_all
from .findings.base import CHANGES
from .phases import Startup, startup, steady, windows
from .records import NVPROF_NAMES, Copy, Trace
from .reference import Reference
from .steps import Steps, loops, steady_span
from .timeline import Timelines

WORTH = 0.01  # a fix saving this share of the steady state or more is one to act on


@dataclass(frozen=True, slots=True)
class KindRow:
    """One line of nvprof's table of GPU activities."""

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
class Analysis:
    table: tuple[KindRow, ...]
    groups: tuple[Group, ...]
    findings: tuple[TraceFinding, ...]
    wall_s: float
    reference: str | None
    copy_gpu_s: float
    gpus: Timelines  # each GPU's timeline, as the findings saw it
    notes: tuple[str, ...] = field(default=())
    # the loop's steps, marked by the line `region` named (else found), or None: made once, for
    # the summary and the run's figures alike; of the process with the most GPU work
    loop: Steps | None = None
    loops: tuple[Steps, ...] = ()  # each looping process's steps, the primary first
    startup: tuple[Startup, ...] = ()  # each looping process's start-up
    view: Trace | None = None  # the trace cut to its steady state (phases.steady)

    @property
    def saving_s(self) -> float:
        """What the priced findings save together."""
        return sum(f.saving_s or 0.0 for f in self.findings)

    @property
    def steady_s(self) -> float:
        """The steady state every share is of: the loop's steps, else the GPUs' span."""
        return steady_span(self.loop, self.gpus)

    @property
    def headline(self) -> TraceFinding | None:
        """The first thing to change: the finding that saves the most, where it saves WORTH of
        the steady state or more; None: nothing to fix in the steady state."""
        steady = self.steady_s
        first = next((f for f in self.findings if f.saving_s is not None), None)
        if first is None or not steady or (first.saving_s or 0.0) < WORTH * steady:
            return None
        return first


# ---- the summary --------------------------------------------------------------------------------


def kind_table(trace: Trace) -> list[KindRow]:
    """Per kind of copy and memset: nvprof's Time%, Time, Calls, Avg, Min, Max. The totals are
    the injection library's exact ones when records beyond the limit were only counted."""
    busy = sum(c.seconds for c in trace.copies) + sum(i.seconds for i in trace.intervals)
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


def groups(trace: Trace, reference: Reference | None) -> list[Group]:
    kernels = merged(trace.kernels())
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
                expected(reference, copies) if copies[0].crosses_link else None,
                sum(c.blocked_s for c in copies),
                None if scale is None else sum(overlap_ns(c, kernels) for c in seen) * 1e-9 * scale,
            )
        )
    return out


def _cost_notes(trace: Trace) -> list[str]:
    """What the tracing left out to stay light, and what it cost the program's threads."""
    notes = []
    coverage = trace.kernel_coverage
    if coverage == "sampled":
        process = next((p for p in trace.processes if p.get("kernel_window_ms")), {})
        on, period, *first = process.get("kernel_window_ms", (None, None))
        seen = len(trace.seen_with_kernels(trace.copies))
        opened = f", the first open {first[0]} ms" if first and first[0] else ""
        if opened and process.get("first_kernels"):
            opened += f" or until it held {process['first_kernels']:,} kernels"
        count = len(trace.kernel_windows)
        if count == 1 and opened and seen == len(trace.copies):  # the run ended inside it
            notes.append(
                f"every kernel from the first copy on was recorded: the run ended inside the "
                f"first window (open {first[0]} ms"
                + (f" or until it held {process['first_kernels']:,} kernels"
                   if process.get("first_kernels") else "")
                + f"); past it, kernels are recorded {on} ms in every {period} ms, as each "
                "recorded kernel costs its launch time; `--kernels all` records every kernel"
            )  # fmt: skip
        else:
            notes.append(
                f"kernels were recorded in {count} window{'' if count == 1 else 's'} of {on} "
                f"ms (one every {period} ms at most{opened}), as each recorded kernel costs "
                "its launch time: the GPUs' idle, the time beside kernels and the waits' cost "
                f"are judged inside them ({seen} of {len(trace.copies)} copies) and scaled to "
                "all; `--kernels all` records every kernel"
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


def one_price(found: Sequence[TraceFinding]) -> list[TraceFinding]:
    """One change, one price: where a finding's whole fix is a change of the program
    (findings.base.CHANGES) and other findings at its line name that change as theirs or as
    part of theirs (TraceFinding.change), it is priced with their parts (each part in
    `each_fix`); what remains of another (a DataLoader's restarts, for `persistent_workers`)
    stays its own finding. The parts are apart in time (pageable.py prices a copy's time,
    input_starved.py the idle before it), so nothing is counted twice; priced apart, the first
    thing to change said what a part of it saves (a DataLoader's pageable batches: 2.1 of the
    4.7 ms a step that `pin_memory=True` saved, on an H200)."""
    groups: dict[tuple[str, str], list[TraceFinding]] = defaultdict(list)
    for f in found:
        if f.change in CHANGES and f.saving_s is not None and f.places:
            groups[(f.change, f.places[0].where)].append(f)
    done: dict[int, TraceFinding | None] = {}  # id of a part -> what stands for it (None: gone)
    for (change, _), parts in groups.items():
        owner_code, label = CHANGES[change]
        owner = next((f for f in parts if f.code == owner_code), None)
        if owner is None:
            continue
        pieces = [(owner.title, owner.saving_s or 0.0)]
        for f in parts:
            if f is owner:
                continue
            moved = sum(s for fix, s in f.each_fix if fix == label) if f.each_fix else None
            taken = (f.saving_s or 0.0) if moved is None else min(moved, f.saving_s or 0.0)
            if taken <= 0:
                continue  # none of its saving is the change's
            pieces.append((f.title, taken))
            rest = (f.saving_s or 0.0) - taken
            done[id(f)] = (
                replace(f, saving_s=rest, cost_s=max(f.cost_s - taken, 0.0), change="",
                        each_fix=tuple(e for e in f.each_fix if e[0] != label))
                if rest > 0
                else None
            )  # fmt: skip
        if len(pieces) < 2:
            continue
        also = "; ".join(f"{title} ({format_seconds(s)})" for title, s in pieces[1:])
        done[id(owner)] = replace(
            owner,
            cost_s=owner.cost_s + sum(s for _, s in pieces[1:]),
            saving_s=sum(s for _, s in pieces),
            detail=f"{owner.detail}; the same change ({change}) also ends, at the same line: "
            f"{also}",
            each_fix=tuple(pieces),
        )
    standing = (done.get(id(f), f) for f in found)
    return [f for f in standing if f is not None]


def _order(f: TraceFinding) -> tuple[bool, float]:
    """Priced findings first, the largest saving first; then the others, the costliest first."""
    return (f.saving_s is None, -(f.cost_s if f.saving_s is None else f.saving_s))


def analyze(
    trace: Trace,
    wall_s: float,
    reference: Reference | None,
    region: str = "",
    started_ns: int = 0,
) -> Analysis:
    """The trace's table, groups, findings and timelines; `region`: the line that marks its
    steps (`trace --region`); `started_ns`: when the program was launched. Each process's
    loop is found on the whole trace; the findings, groups and timelines are judged on its
    steady state (phases.steady), its start-up apart (phases.startup)."""
    found_loops = loops(trace, region)
    within = windows(found_loops)
    view = steady(trace, within)
    context = Context(view, reference, found_loops, trace)
    found = find_all(context)
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
        tuple(kind_table(trace)),
        tuple(groups(view, reference)),
        tuple(sorted(one_price(found), key=_order)),
        wall_s,
        None if reference is None else reference.source,
        sum(c.seconds for c in view.copies),
        context.gpus,
        tuple(notes),
        found_loops[0] if found_loops else None,
        found_loops,
        startup(trace, within, reference, started_ns),
        view,
    )
