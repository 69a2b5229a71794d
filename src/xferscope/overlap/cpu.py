"""`overlap cpu`: seed 000's asynchronous readback: issue one copy asynchronously, run W seconds
of calibrated CPU work, then wait. Ideally the time blocked waiting falls by every second of work
added, until the work outlasts the copy."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, NamedTuple

from ..core import cases, plan
from ..core.cases import DEFAULT_SEED
from ..core.engine import Engine, check_device
from ..core.errors import AllocationError, EngineError, OptionError
from ..core.findings import INFO, Finding, corrupted, failed, finding
from ..core.progress import QUIET, Progress
from ..core.units import format_bytes, format_seconds
from ..documents.records import NON_EMPTY, Column, Derived, dumps_columns, to_plain
from ..sweep.records import Verification, verification_of
from .common import (
    HEAD,
    Failure,
    Measuring,
    OverlapResult,
    Trials,
    Typical,
    as_is,
    check_count,
    check_device_memory,
    check_direction,
    check_host_memory,
    figure,
    figures,
    from_engine,
    with_findings,
)

CPU_SCHEMA = "xferscope-overlap-cpu"
# Seed 000 swept the dummy work from none to beyond the transfer time: multiples of the time
# the copy takes alone (T0).
DEFAULT_WORK_FACTORS = (0.0, 0.125, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0)


@dataclass(frozen=True, slots=True)
class CpuSample:
    """One trial, in seed 000's Table 1 terms: blocked in the issuing call, in the dummy work,
    blocked waiting for the copy, and all of it."""

    issue_s: float
    work_s: float
    wait_s: float
    total_s: float


@dataclass(frozen=True, slots=True)
class CpuPoint(Trials[CpuSample]):
    """One W: its figures are its typical trial's, whose issue + work + wait add up to its total
    as in seed 000's table."""

    requested_work_s: float  # W asked for; the calibrated loop's measured time is in samples
    samples: tuple[CpuSample, ...] = field(metadata={NON_EMPTY: True})

    issue_s = Typical()
    work_s = Typical()
    wait_s = Typical()


@dataclass(frozen=True, slots=True, kw_only=True)
class CpuSeries:
    """One host memory kind: the copy alone (W = 0, whose total is T0), then each W."""

    memory: str
    status: str  # complete, interrupted, failed
    error: str | None = None
    warmup: CpuSample | None = None  # the first call, kept apart: it faults in the pages
    verification: Verification | None = None
    points: tuple[CpuPoint, ...]  # points[0] is the copy alone
    DERIVED: ClassVar[tuple[Derived, ...]] = (Derived("t0_s", lambda s: s.t0_s, "verification"),)

    @property
    def t0_s(self) -> float | None:
        return self.points[0].total_s if self.points else None

    def efficiency(self, point: CpuPoint) -> float | None:
        """The share of the added work that was hidden: (T0 + W - total) / W, with W the work's
        measured time. None for the copy alone."""
        t0 = self.t0_s
        if t0 is None or point.work_s <= 0 or point is self.points[0]:
            return None
        return (t0 + point.work_s - point.total_s) / point.work_s

    def ideal(self, point: CpuPoint) -> float | None:
        """All of the work hides until it outlasts the copy: min(1, T0 / W)."""
        t0 = self.t0_s
        if t0 is None or point.work_s <= 0 or point is self.points[0]:
            return None
        return min(1.0, t0 / point.work_s)

    @property
    def valid(self) -> bool:
        return self.verification is None or self.verification.ok


@dataclass(frozen=True, slots=True, kw_only=True)
class OverlapCpuResult(OverlapResult):
    direction: str
    mechanism: str
    bytes: int
    series: tuple[CpuSeries, ...]
    SCHEMA = CPU_SCHEMA

    @property
    def measured(self) -> bool:
        return any(s.points for s in self.series)

    @property
    def valid(self) -> bool:
        return all(s.valid for s in self.series)

    def rate(self, point: CpuPoint) -> float:
        """Bytes per second over the whole iteration, work included, as seed 000's rate."""
        return self.bytes / point.total_s

    def summary(self, series: CpuSeries, point: CpuPoint) -> dict[str, Any]:
        """A point's typical trial and figures, as its document adds them for readers that do
        not want to recompute (ignored when loading): its series' T0 and the result's size
        take part, so they are added to the document here rather than as the point's DERIVED."""
        return {
            **to_plain(point.typical),
            "trials": len(point.samples),
            "rate_gbps": self.rate(point) / 1e9,
            "efficiency": series.efficiency(point),
            "ideal_efficiency": series.ideal(point),
            "rel_noise": point.rel_noise,
        }

    def to_dict(self) -> dict[str, Any]:
        document = OverlapResult.to_dict(self)
        for s, series in zip(self.series, document["series"], strict=True):
            for p, point in zip(s.points, series["points"], strict=True):
                point["summary"] = self.summary(s, p)
        return document

    def to_csv(self) -> str:
        rows = (_Row(self, s, p) for s in self.series for p in s.points)
        return dumps_columns(_CSV, rows)


class _Row(NamedTuple):
    result: OverlapCpuResult
    series: CpuSeries
    point: CpuPoint


def _verified(v: Verification | None) -> str:
    return "skipped" if v is None else ("ok" if v.ok else "FAILED")


_CSV: tuple[Column[_Row], ...] = (
    *HEAD,
    *as_is("result", "direction"),
    *as_is("series", "memory"),
    *as_is("result", "mechanism", "bytes"),
    *figures("point", "requested_work_s"),
    Column("trials", lambda r: len(r.point.samples)),
    *figures("point", "issue_s", "work_s", "wait_s", "total_s"),
    Column("rate_gbps", lambda r: figure(r.result.rate(r.point) / 1e9)),
    Column("efficiency", lambda r: figure(r.series.efficiency(r.point))),
    Column("ideal_efficiency", lambda r: figure(r.series.ideal(r.point))),
    *figures("point", "rel_noise"),
    Column("verified", lambda r: _verified(r.series.verification)),
)


def default_works(t0_s: float) -> list[float]:
    return [t0_s * f for f in DEFAULT_WORK_FACTORS]


def check_cpu_plan(
    engine: Engine,
    device: int,
    direction: str,
    memories: Sequence[str],
    mechanism: str,
    size: int,
    works: Sequence[float] | None,
    trials: int,
) -> tuple[list[str], list[str]]:
    """Refuses, before anything runs, values measure_overlap_cpu cannot use. Returns the memory
    kinds that can run and a note for each combination that cannot."""
    check_direction(direction)
    check_count("--trials", trials)
    if size < 1:
        raise OptionError("--size", f"{size} is not a size of at least 1 byte")
    if works is not None:
        for w in works:
            if not math.isfinite(w) or w < 0:
                raise OptionError("--work", f"{w} is not a time of 0 s or more")
    runnable: list[str] = []
    skipped: list[str] = []
    for memory in dict.fromkeys(memories):
        reason = cases.refusal(direction, memory, mechanism)
        if reason:
            skipped.append(f"{cases.label(direction, memory, mechanism)}: {reason}")
        else:
            runnable.append(memory)
    if not runnable:
        raise OptionError("--mechanism", "nothing can run: " + "; ".join(skipped))
    check_device(engine, device)
    what = f"a copy of {format_bytes(size)}"
    check_host_memory("--size", size, what, pinned=runnable != ["pageable"])
    # The transfer's device buffer, and one more to check a host destination.
    check_device_memory(engine, device, "--size", 2 * size, what)
    return runnable, skipped


def measure_overlap_cpu(
    engine: Engine,
    device: int,
    direction: str,
    memories: Sequence[str],
    mechanism: str,
    size: int,
    works: Sequence[float] | None = None,
    trials: int = 5,
    seed: int = DEFAULT_SEED,
    verify: bool = True,
    progress: Progress = QUIET,
) -> OverlapCpuResult:
    """Per host memory kind: the copy alone at W = 0 (T0), then each W of CPU work issued after
    the copy and before waiting for it. `works` None sweeps T0 x DEFAULT_WORK_FACTORS; the copy
    alone is always measured first. Per W the row is the trial of median total; every trial is
    kept. Combinations that cannot run (pageable memory by an SM kernel, staged pinned memory)
    are skipped with a warning.

    On an H200, D2H of 256 MiB pinned async: issue 0.02 ms, wait 4.85 ms alone; 2 or 4 ms of work
    leave the total at 4.85 ms (all hidden); 8 ms of work make it 8.24. Pageable blocks 15 ms in
    the issuing call and the total is 15 ms + W: nothing hides.
    """
    runnable, skipped = check_cpu_plan(
        engine, device, direction, memories, mechanism, size, works, trials
    )

    run = Measuring(engine, device)
    series: list[CpuSeries] = []
    for memory in runnable:
        series.append(
            _cpu_series(
                run, direction, memory, mechanism, size, works, trials, seed, verify, progress
            )
        )
        if run.interrupted:
            break
    options = {
        "device": device,
        "direction": direction,
        "memories": list(memories),
        "mechanism": mechanism,
        "bytes": size,
        "works_s": None if works is None else list(works),
        "work_factors": list(DEFAULT_WORK_FACTORS) if works is None else None,
        "trials": trials,
        "seed": seed,
        "verify": verify,
    }
    result = run.result(
        OverlapCpuResult,
        options,
        direction=direction,
        mechanism=mechanism,
        bytes=size,
        series=tuple(series),
    )
    return with_findings(result, _cpu_findings(result, skipped))


def _cpu_series(
    run: Measuring,
    direction: str,
    memory: str,
    mechanism: str,
    size: int,
    works: Sequence[float] | None,
    trials: int,
    seed: int,
    verify: bool,
    progress: Progress,
) -> CpuSeries:
    """One memory kind's series; a failure is kept in `run`, a Ctrl-C marks `run` interrupted."""
    label = f"{direction} {memory} {mechanism}"
    points: list[CpuPoint] = []
    warmup: CpuSample | None = None
    verification: Verification | None = None
    status, error = "complete", None
    try:
        transfer = run.engine.open_transfer(
            run.device, direction, memory, mechanism, size, 0, rotate=False
        )
        try:
            transfer.fill(seed)
            warmup = from_engine(CpuSample, transfer.overlap_cpu(size, 0.0))

            def point(work: float) -> CpuPoint:
                samples = plan.run_trials(
                    lambda: from_engine(CpuSample, transfer.overlap_cpu(size, work)), trials
                )
                progress.step(f"{label}  W = {format_seconds(work)}")
                return CpuPoint(work, tuple(samples))

            points.append(point(0.0))
            t0 = points[0].total_s
            wanted = default_works(t0) if works is None else list(works)
            for work in sorted({w for w in wanted if w > 0}):
                points.append(point(work))
            if verify:
                verification = verification_of(transfer.verify(size))
        finally:
            transfer.close()
    except KeyboardInterrupt:
        status, run.interrupted = "interrupted", True
    except (AllocationError, EngineError) as exc:
        status, error = "failed", str(exc)
        run.failures.append(Failure(label, error))
    return CpuSeries(
        memory=memory,
        status=status,
        error=error,
        warmup=warmup,
        verification=verification,
        points=tuple(points),
    )


def _cpu_findings(result: OverlapCpuResult, skipped: list[str]) -> list[Finding]:
    """Codes: skipped, failed, verification_failed."""
    found = [finding("skipped", INFO, note.split(":")[0], f"skipped {note}") for note in skipped]
    found += [failed(f.what, f.error) for f in result.failures]
    for s in result.series:
        v = s.verification
        if v is not None and not v.ok:
            found.append(
                corrupted(
                    f"{result.direction} {s.memory} {result.mechanism}",
                    f"{result.direction} {s.memory}: verification FAILED "
                    f"({format_bytes(v.mismatched_bytes)} wrong, the first at offset "
                    f"{v.first_mismatch}); its figures are invalid",
                    v.mismatched_bytes,
                )
            )
    return found


def cpu_verdict(result: OverlapCpuResult) -> str:
    """One line: per memory kind, the share of the largest work the copy could hide that it did
    hide, and why a kind that hides nothing does not (it blocks in the issuing call)."""
    parts: list[str] = []
    for s in result.series:
        if len(s.points) < 2 or s.t0_s is None:
            continue
        t0 = s.t0_s
        within = [p for p in s.points[1:] if p.requested_work_s <= t0 * 1.0001]
        p = max(within, key=lambda q: q.work_s) if within else s.points[1]
        efficiency = s.efficiency(p)
        if efficiency is None:
            continue
        text = f"{s.memory} hides {efficiency:.0%} of {format_seconds(p.work_s)} of work"
        alone = s.points[0]
        if alone.issue_s > 0.5 * alone.total_s:
            text += f": the copy blocks in the issuing call for {format_seconds(alone.issue_s)}"
        elif efficiency < 0.5:
            text += f": the copy takes {format_seconds(t0)} alone but does not run under the work"
        parts.append(text)
    head = f"{result.direction} {format_bytes(result.bytes)} {result.mechanism}: "
    return head + ("; ".join(parts) if parts else "nothing was measured")
