"""`overlap cpu`: seed 000's asynchronous readback: issue one copy asynchronously, run W seconds
of calibrated CPU work, then wait. Ideally the time blocked waiting falls by every second of work
added, until the work outlasts the copy."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from ..core import cases, engine, machine, plan, stats
from ..core.cases import DEFAULT_SEED
from ..core.engine import Engine, check_device
from ..core.errors import AllocationError, EngineError, OptionError
from ..core.findings import INFO, Finding, corrupted, failed, finding
from ..core.progress import QUIET, Progress
from ..core.units import format_bytes, format_seconds
from ..documents.envelope import Envelope, dumps_table, now
from ..documents.reader import Field
from ..documents.records import from_plain, to_plain
from ..sweep.records import Verification, verification_of
from .common import (
    Failure,
    _check_schema,
    _header,
    _header_fields,
    _number,
    check_device_memory,
    check_host_memory,
    with_findings,
)

CPU_SCHEMA = "xferscope-overlap-cpu"
CPU_DIRECTIONS = ("h2d", "d2h")
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
class CpuPoint:
    requested_work_s: float  # W asked for; the calibrated loop's measured time is in samples
    samples: tuple[CpuSample, ...]

    @property
    def typical(self) -> CpuSample:
        """The trial with the median total (the lower middle one of an even count), so that
        its issue + work + wait add up to its total as in seed 000's table."""
        return stats.typical(self.samples, lambda s: s.total_s)

    @property
    def issue_s(self) -> float:
        return self.typical.issue_s

    @property
    def work_s(self) -> float:
        return self.typical.work_s

    @property
    def wait_s(self) -> float:
        return self.typical.wait_s

    @property
    def total_s(self) -> float:
        return self.typical.total_s

    @property
    def rel_noise(self) -> float:
        return stats.relative_noise([s.total_s for s in self.samples])


@dataclass(frozen=True, slots=True)
class CpuSeries:
    """One host memory kind: the copy alone (W = 0, whose total is T0), then each W."""

    memory: str
    points: tuple[CpuPoint, ...]  # points[0] is the copy alone
    warmup: CpuSample | None  # the first call, kept apart: it faults in the pages
    verification: Verification | None
    status: str  # complete, interrupted, failed
    error: str | None = None

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


@dataclass(frozen=True, slots=True)
class OverlapCpuResult(Envelope):
    device: int
    direction: str
    mechanism: str
    bytes: int
    series: tuple[CpuSeries, ...]
    failures: tuple[Failure, ...] = ()

    @property
    def measured(self) -> bool:
        return any(s.points for s in self.series)

    @property
    def valid(self) -> bool:
        return all(s.valid for s in self.series)

    def rate(self, point: CpuPoint) -> float:
        """Bytes per second over the whole iteration, work included, as seed 000's rate."""
        return self.bytes / point.total_s

    def to_dict(self) -> dict[str, Any]:
        return {
            **_header(CPU_SCHEMA, self),
            "device": self.device,
            "direction": self.direction,
            "mechanism": self.mechanism,
            "bytes": self.bytes,
            "series": [_series_to_dict(self, s) for s in self.series],
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> OverlapCpuResult:
        _check_schema(d, CPU_SCHEMA)
        r = Field(d)
        return cls(
            **_header_fields(r),
            device=r["device"].integer(),
            direction=r["direction"].string(),
            mechanism=r["mechanism"].string(),
            bytes=r["bytes"].integer(),
            series=tuple(_series_from(s) for s in r["series"].items()),
        )

    def to_csv(self) -> str:
        def rows() -> Iterator[Sequence[object]]:
            for s in self.series:
                verified = _verified(s.verification)
                for p in s.points:
                    yield (
                        (
                            int(self.simulated),
                            self.device,
                            self.direction,
                            s.memory,
                            self.mechanism,
                            self.bytes,
                            _number(p.requested_work_s),
                            len(p.samples),
                            _number(p.issue_s),
                            _number(p.work_s),
                            _number(p.wait_s),
                            _number(p.total_s),
                            _number(self.rate(p) / 1e9),
                            _number(s.efficiency(p)),
                            _number(s.ideal(p)),
                            _number(p.rel_noise),
                            verified,
                        )
                    )

        return dumps_table(
            (
                "simulated",
                "device",
                "direction",
                "memory",
                "mechanism",
                "bytes",
                "requested_work_s",
                "trials",
                "issue_s",
                "work_s",
                "wait_s",
                "total_s",
                "rate_gbps",
                "efficiency",
                "ideal_efficiency",
                "rel_noise",
                "verified",
            ),
            rows(),
        )


def _verified(v: Verification | None) -> str:
    return "skipped" if v is None else ("ok" if v.ok else "FAILED")


def _sample(raw: engine.OverlapSample) -> CpuSample:
    return CpuSample(issue_s=raw.issue_s, work_s=raw.work_s, wait_s=raw.wait_s, total_s=raw.total_s)


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
    if direction not in CPU_DIRECTIONS:
        raise OptionError("--direction", f"'{direction}' is not one of {', '.join(CPU_DIRECTIONS)}")
    if trials < 1:
        raise OptionError("--trials", f"{trials} is not a count of at least 1")
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

    created = now()
    meta = machine.collect(engine, [device])
    start = engine.clock()
    series: list[CpuSeries] = []
    failures: list[Failure] = []
    interrupted = False
    for memory in runnable:
        one, failure, interrupted = _cpu_series(
            engine,
            device,
            direction,
            memory,
            mechanism,
            size,
            works,
            trials,
            seed,
            verify,
            progress,
        )
        series.append(one)
        if failure is not None:
            failures.append(failure)
        if interrupted:
            break
    result = OverlapCpuResult(
        created=created,
        simulated=engine.simulated,
        machine=meta,
        options={
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
        },
        device=device,
        direction=direction,
        mechanism=mechanism,
        bytes=size,
        series=tuple(series),
        interrupted=interrupted,
        wall_s=engine.clock() - start,
        failures=tuple(failures),
    )
    return with_findings(result, _cpu_findings(result, skipped))


def _cpu_series(
    engine: Engine,
    device: int,
    direction: str,
    memory: str,
    mechanism: str,
    size: int,
    works: Sequence[float] | None,
    trials: int,
    seed: int,
    verify: bool,
    progress: Progress,
) -> tuple[CpuSeries, Failure | None, bool]:
    label = f"{direction} {memory} {mechanism}"
    points: list[CpuPoint] = []
    warmup: CpuSample | None = None
    verification: Verification | None = None
    status, error, interrupted = "complete", None, False
    try:
        transfer = engine.open_transfer(device, direction, memory, mechanism, size, 0, rotate=False)
        try:
            transfer.fill(seed)
            warmup = _sample(transfer.overlap_cpu(size, 0.0))

            def point(work: float) -> CpuPoint:
                samples = tuple(
                    plan.run_trials(lambda: _sample(transfer.overlap_cpu(size, work)), trials)
                )
                progress.step(f"{label}  W = {format_seconds(work)}")
                return CpuPoint(work, samples)

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
        status, interrupted = "interrupted", True
    except (AllocationError, EngineError) as exc:
        status, error = "failed", str(exc)
    series = CpuSeries(memory, tuple(points), warmup, verification, status, error)
    failure = None if error is None else Failure(label, error)
    return series, failure, interrupted


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
                    f"({v.mismatched_bytes} wrong bytes, the first at offset "
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


def _series_to_dict(result: OverlapCpuResult, s: CpuSeries) -> dict[str, Any]:
    v = s.verification
    return {
        "memory": s.memory,
        "status": s.status,
        "error": s.error,
        "warmup": None if s.warmup is None else to_plain(s.warmup),
        "verification": None if v is None else to_plain(v),
        "t0_s": s.t0_s,  # derived
        "points": [
            {
                "requested_work_s": p.requested_work_s,
                "samples": [to_plain(x) for x in p.samples],
                # Derived, for readers that do not want to recompute; ignored when loading.
                "summary": {
                    **to_plain(p.typical),
                    "trials": len(p.samples),
                    "rate_gbps": result.rate(p) / 1e9,
                    "efficiency": s.efficiency(p),
                    "ideal_efficiency": s.ideal(p),
                    "rel_noise": p.rel_noise,
                },
            }
            for p in s.points
        ],
    }


def _series_from(d: Field) -> CpuSeries:
    warmup = d.get("warmup")
    return CpuSeries(
        memory=d["memory"].string(),
        points=tuple(from_plain(CpuPoint, p) for p in d["points"].items()),
        warmup=None if warmup.null else from_plain(CpuSample, warmup),
        verification=None
        if d.get("verification").null
        else from_plain(Verification, d["verification"]),
        status=d["status"].string(),
        error=d.get("error").optional_string(),
    )
