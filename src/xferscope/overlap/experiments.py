"""Asynchrony: how much of a copy hides under other work, in three experiments.

  cpu      seed 000's asynchronous readback: issue one copy asynchronously, run W seconds of
           calibrated CPU work, then wait. Ideally the time blocked waiting falls by every second
           of work added, until the work outlasts the copy.
  buffers  a stream of chunks through N pinned buffers used in rotation while the CPU consumes
           (readback) or produces (upload) the others: seed 000's pixel buffer objects.
  gpu      H2D, a kernel and D2H over one large array: sequential against split into chunks over
           K streams, against the bound the stage times allow.

Python orchestrates; every timed loop runs inside the engine. The results are immutable records
with a versioned JSON form, like the sweep's.

Schema history (each document has its own name; bump SCHEMA_VERSION on any change a reader must
know about):
  1  first version: xferscope-overlap-cpu, xferscope-overlap-buffers, xferscope-overlap-gpu.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from .. import __version__
from ..core import cases, engine, machine, stats
from ..core.engine import Engine, check_device
from ..core.errors import AllocationError, EngineError, OptionError
from ..core.units import format_bytes, format_seconds
from ..documents.reader import Field
from ..sweep.records import (
    Verification,
    check_schema,
    document_header,
    header_fields,
    verification_from,
    verification_of,
)

CPU_SCHEMA = "xferscope-overlap-cpu"
BUFFERS_SCHEMA = "xferscope-overlap-buffers"
GPU_SCHEMA = "xferscope-overlap-gpu"
SCHEMA_VERSION = 1

CPU_DIRECTIONS = ("h2d", "d2h")
# Seed 000 swept the dummy work from none to beyond the transfer time: multiples of the time
# the copy takes alone (T0).
DEFAULT_WORK_FACTORS = (0.0, 0.125, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0)
DEFAULT_STREAMS = (1, 2, 3, 4, 5, 6, 7, 8)
DEFAULT_CHUNKS_PER_STREAM = 4
# Pinned pages cannot be swapped or moved: a plan that pins more than this share of the
# machine's memory is refused, whatever --max-pinned says.
PINNED_SHARE = 0.5

Step = Callable[[str], None]  # told a description after each measured step


def _nothing(_label: str) -> None:
    pass


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def _number(value: float | None) -> str:
    return "" if value is None else f"{value:.9g}"


@dataclass(frozen=True, slots=True)
class Failure:
    """A part of the experiment the engine could not run (allocation or CUDA error)."""

    what: str
    error: str


# ---- cpu: CPU work under one asynchronous copy -------------------------------------------------


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
        ordered = sorted(self.samples, key=lambda s: s.total_s)
        return ordered[(len(ordered) - 1) // 2]

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
class OverlapCpuResult:
    tool_version: str
    created: str  # ISO 8601, UTC
    simulated: bool
    machine: dict[str, Any]
    options: dict[str, Any]
    device: int
    direction: str
    mechanism: str
    bytes: int
    series: tuple[CpuSeries, ...]
    interrupted: bool
    wall_s: float
    failures: tuple[Failure, ...] = ()
    warnings: tuple[str, ...] = field(default=())

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
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(
            ("simulated", "device", "direction", "memory", "mechanism", "bytes",
             "requested_work_s", "trials", "issue_s", "work_s", "wait_s", "total_s",
             "rate_gbps", "efficiency", "ideal_efficiency", "rel_noise", "verified")
        )  # fmt: skip
        for s in self.series:
            verified = _verified(s.verification)
            for p in s.points:
                writer.writerow(
                    (int(self.simulated), self.device, self.direction, s.memory, self.mechanism,
                     self.bytes, _number(p.requested_work_s), len(p.samples), _number(p.issue_s),
                     _number(p.work_s), _number(p.wait_s), _number(p.total_s),
                     _number(self.rate(p) / 1e9), _number(s.efficiency(p)), _number(s.ideal(p)),
                     _number(p.rel_noise), verified)
                )  # fmt: skip
        return out.getvalue()


def _verified(v: Verification | None) -> str:
    return "skipped" if v is None else ("ok" if v.ok else "FAILED")


def _sample(raw: engine.OverlapSample) -> CpuSample:
    return CpuSample(issue_s=raw.issue_s, work_s=raw.work_s, wait_s=raw.wait_s, total_s=raw.total_s)


def check_host_memory(option: str, need: int, what: str, pinned: bool = True) -> None:
    """Refuses, before anything runs, host memory a plan cannot have: pinned memory beyond
    PINNED_SHARE of MemTotal, pageable memory beyond all of it."""
    total = machine.host_memory_total()
    if total is None:
        return
    limit = PINNED_SHARE * total if pinned else total
    if need > limit:
        share = f"half of this machine's {format_bytes(total)}" if pinned else format_bytes(total)
        kind = "pinned host memory" if pinned else "host memory"
        reason = "; pinned pages cannot be swapped, so the system would run short" if pinned else ""
        raise OptionError(
            option, f"{what}: {format_bytes(need)} of {kind} is more than {share}{reason}"
        )


def check_device_memory(engine: Engine, device: int, option: str, need: int, what: str) -> None:
    free, _ = engine.memory_info(device)
    if need > free:
        raise OptionError(
            option,
            f"{what} needs {format_bytes(need)} of device memory on GPU {device}, but "
            f"{format_bytes(free)} is free",
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
    seed: int = 0x5EED,
    verify: bool = True,
    step: Step = _nothing,
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

    created = _now()
    meta = machine.collect(engine, [device])
    start = engine.clock()
    series: list[CpuSeries] = []
    failures: list[Failure] = []
    interrupted = False
    for memory in runnable:
        one, failure, interrupted = _cpu_series(
            engine, device, direction, memory, mechanism, size, works, trials, seed, verify, step
        )
        series.append(one)
        if failure is not None:
            failures.append(failure)
        if interrupted:
            break
    result = OverlapCpuResult(
        tool_version=__version__,
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
    return _with_warnings(result, _cpu_warnings(result, skipped))


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
    step: Step,
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
                samples = tuple(_sample(transfer.overlap_cpu(size, work)) for _ in range(trials))
                step(f"{label}  W = {format_seconds(work)}")
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


def _cpu_warnings(result: OverlapCpuResult, skipped: list[str]) -> list[str]:
    warnings = [f"skipped {note}" for note in skipped]
    warnings += [f"{f.what}: failed: {f.error}" for f in result.failures]
    for s in result.series:
        v = s.verification
        if v is not None and not v.ok:
            warnings.append(
                f"{result.direction} {s.memory}: verification FAILED ({v.mismatched_bytes} wrong "
                f"bytes, the first at offset {v.first_mismatch}); its figures are invalid"
            )
    return warnings


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


# ---- buffers: a stream of chunks through N pinned buffers in rotation --------------------------


@dataclass(frozen=True, slots=True)
class RotationSample:
    total_s: float  # the whole stream of chunks
    copy_s: float  # one chunk's copy alone
    consume_s: float  # the CPU's work on one chunk alone (checksum, or writing it for an upload)
    wait_s: float  # time the CPU spent waiting for copies
    mismatched_chunks: int


@dataclass(frozen=True, slots=True)
class RotationPoint:
    direction: str  # d2h: readback, the CPU checksums; h2d: upload, the CPU writes each chunk
    buffers: int
    chunk_bytes: int
    chunks: int
    samples: tuple[RotationSample, ...]

    @property
    def typical(self) -> RotationSample:
        """The trial with the median total (the lower middle one of an even count)."""
        ordered = sorted(self.samples, key=lambda s: s.total_s)
        return ordered[(len(ordered) - 1) // 2]

    @property
    def total_s(self) -> float:
        return self.typical.total_s

    @property
    def ideal_s(self) -> float:
        """Perfect overlap: the slower of copy and CPU work sets the pace, and the other's first
        (or last) chunk cannot hide. Each side at the fastest it ran alone in any trial: one
        slow alone measurement (measured on an H200) would otherwise put efficiency above 1."""
        copy = min(s.copy_s for s in self.samples)
        consume = min(s.consume_s for s in self.samples)
        return self.chunks * max(copy, consume) + min(copy, consume)

    @property
    def efficiency(self) -> float:
        return self.ideal_s / self.total_s

    @property
    def rate(self) -> float:
        """Bytes per second through the whole stream, CPU work included."""
        return self.chunks * self.chunk_bytes / self.total_s

    @property
    def pinned_bytes(self) -> int:
        return self.buffers * self.chunk_bytes

    @property
    def rel_noise(self) -> float:
        return stats.relative_noise([s.total_s for s in self.samples])

    @property
    def mismatched_chunks(self) -> int:
        return max(s.mismatched_chunks for s in self.samples)

    @property
    def valid(self) -> bool:
        return self.mismatched_chunks == 0


@dataclass(frozen=True, slots=True)
class RotationResult:
    tool_version: str
    created: str
    simulated: bool
    machine: dict[str, Any]
    options: dict[str, Any]
    device: int
    chunks: int
    points: tuple[RotationPoint, ...]
    interrupted: bool
    wall_s: float
    failures: tuple[Failure, ...] = ()
    warnings: tuple[str, ...] = field(default=())

    @property
    def measured(self) -> bool:
        return bool(self.points)

    @property
    def valid(self) -> bool:
        return all(p.valid for p in self.points)

    def to_dict(self) -> dict[str, Any]:
        return {
            **_header(BUFFERS_SCHEMA, self),
            "device": self.device,
            "chunks": self.chunks,
            "points": [
                {
                    "direction": p.direction,
                    "buffers": p.buffers,
                    "chunk_bytes": p.chunk_bytes,
                    "chunks": p.chunks,
                    "samples": [_fields(s) for s in p.samples],
                    # Derived, for readers that do not want to recompute; ignored when loading.
                    "summary": {
                        "total_s": p.total_s,
                        "ideal_s": p.ideal_s,
                        "efficiency": p.efficiency,
                        "rate_gbps": p.rate / 1e9,
                        "pinned_bytes": p.pinned_bytes,
                        "rel_noise": p.rel_noise,
                        "valid": p.valid,
                    },
                }
                for p in self.points
            ],
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RotationResult:
        _check_schema(d, BUFFERS_SCHEMA)
        r = Field(d)
        return cls(
            **_header_fields(r),
            device=r["device"].integer(),
            chunks=r["chunks"].integer(),
            points=tuple(
                RotationPoint(
                    direction=p["direction"].string(),
                    buffers=p["buffers"].integer(),
                    chunk_bytes=p["chunk_bytes"].integer(),
                    chunks=p["chunks"].integer(),
                    samples=tuple(
                        RotationSample(
                            total_s=s["total_s"].number(),
                            copy_s=s["copy_s"].number(),
                            consume_s=s["consume_s"].number(),
                            wait_s=s["wait_s"].number(),
                            mismatched_chunks=s["mismatched_chunks"].integer(),
                        )
                        for s in p["samples"].items()
                    ),
                )
                for p in r["points"].items()
            ),
        )

    def to_csv(self) -> str:
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(
            ("simulated", "device", "direction", "buffers", "chunk_bytes", "chunks",
             "pinned_bytes", "trials", "total_s", "copy_s", "consume_s", "wait_s", "ideal_s",
             "efficiency", "rate_gbps", "rel_noise", "mismatched_chunks", "valid")
        )  # fmt: skip
        for p in self.points:
            s = p.typical
            writer.writerow(
                (
                    int(self.simulated),
                    self.device,
                    p.direction,
                    p.buffers,
                    p.chunk_bytes,
                    p.chunks,
                    p.pinned_bytes,
                    len(p.samples),
                    _number(s.total_s),
                    _number(s.copy_s),
                    _number(s.consume_s),
                    _number(s.wait_s),
                    _number(p.ideal_s),
                    _number(p.efficiency),
                    _number(p.rate / 1e9),
                    _number(p.rel_noise),
                    p.mismatched_chunks,
                    int(p.valid),
                )
            )
        return out.getvalue()


def check_rotation_plan(
    engine: Engine,
    device: int,
    directions: Sequence[str],
    buffers_list: Sequence[int],
    chunk_sizes: Sequence[int],
    chunks: int,
    trials: int,
    max_pinned: int | None,
) -> None:
    """Refuses, before anything runs, values measure_rotation cannot use and plans that pin more
    memory than --max-pinned or than PINNED_SHARE of the machine's."""
    for direction in directions:
        if direction not in CPU_DIRECTIONS:
            raise OptionError(
                "--direction", f"'{direction}' is not one of {', '.join(CPU_DIRECTIONS)}"
            )
    if not directions:
        raise OptionError("--direction", "give d2h, h2d or both")
    if not buffers_list or min(buffers_list) < 1:
        raise OptionError("--buffers", "give one or more buffer counts of at least 1")
    if not chunk_sizes or min(chunk_sizes) < 8:
        raise OptionError("--chunk-sizes", "give one or more chunk sizes of at least 8 bytes")
    if chunks < 1:
        raise OptionError("--chunks", f"{chunks} is not a count of at least 1")
    if trials < 1:
        raise OptionError("--trials", f"{trials} is not a count of at least 1")
    check_device(engine, device)
    most = max(buffers_list) * max(chunk_sizes)
    what = f"{max(buffers_list)} buffers of {format_bytes(max(chunk_sizes))}"
    if max_pinned is not None and most > max_pinned:
        raise OptionError(
            "--max-pinned",
            f"{what} pin {format_bytes(most)}, more than --max-pinned {format_bytes(max_pinned)}; "
            "use fewer --buffers or smaller --chunk-sizes",
        )
    check_host_memory("--buffers", most, what)
    # The engine keeps a device slot per buffer, and at least two.
    check_device_memory(
        engine, device, "--chunk-sizes", max(max(buffers_list), 2) * max(chunk_sizes), what
    )


def measure_rotation(
    engine: Engine,
    device: int,
    directions: Sequence[str],
    buffers_list: Sequence[int],
    chunk_sizes: Sequence[int],
    chunks: int = 64,
    trials: int = 3,
    max_pinned: int | None = None,
    step: Step = _nothing,
) -> RotationResult:
    """For each direction (d2h readback, h2d upload), chunk size and buffer count N: `chunks`
    chunks through N pinned buffers in rotation while the CPU consumes or produces them.
    Efficiency = ideal / total, with ideal = chunks x max(copy, consume) + min(copy, consume).

    On an H200, readback of 64 chunks of 8 MiB: copy 0.16 ms and checksum 0.86 ms a chunk; one
    buffer makes them take turns (66.5 ms, 11.4 ms of it waiting), two overlap them (56.6 ms,
    0.35 ms waiting).
    """
    check_rotation_plan(
        engine, device, directions, buffers_list, chunk_sizes, chunks, trials, max_pinned
    )

    created = _now()
    meta = machine.collect(engine, [device])
    start = engine.clock()
    points: list[RotationPoint] = []
    failures: list[Failure] = []
    interrupted = False
    try:
        for direction in dict.fromkeys(directions):
            for chunk_bytes in sorted(set(chunk_sizes)):
                for buffers in sorted(set(buffers_list)):
                    label = f"{direction} {buffers} x {format_bytes(chunk_bytes)}"
                    try:
                        samples = tuple(
                            _rotation_sample(
                                engine.rotate_buffers(
                                    device, direction == "h2d", buffers, chunk_bytes, chunks
                                )
                            )
                            for _ in range(trials)
                        )
                    except (AllocationError, EngineError) as exc:
                        failures.append(Failure(label, str(exc)))
                        continue
                    point = RotationPoint(direction, buffers, chunk_bytes, chunks, samples)
                    points.append(point)
                    step(f"{label}: efficiency {point.efficiency:.2f}")
    except KeyboardInterrupt:
        interrupted = True
    result = RotationResult(
        tool_version=__version__,
        created=created,
        simulated=engine.simulated,
        machine=meta,
        options={
            "device": device,
            "directions": list(directions),
            "buffers": list(buffers_list),
            "chunk_sizes": list(chunk_sizes),
            "chunks": chunks,
            "trials": trials,
            "max_pinned": max_pinned,
        },
        device=device,
        chunks=chunks,
        points=tuple(points),
        interrupted=interrupted,
        wall_s=engine.clock() - start,
        failures=tuple(failures),
    )
    return _with_warnings(result, _rotation_warnings(result))


def _rotation_sample(raw: engine.RotationResult) -> RotationSample:
    return RotationSample(
        total_s=raw.total_s,
        copy_s=raw.copy_s,
        consume_s=raw.consume_s,
        wait_s=raw.wait_s,
        mismatched_chunks=raw.mismatched_chunks,
    )


def _rotation_warnings(result: RotationResult) -> list[str]:
    warnings = [f"{f.what}: failed: {f.error}" for f in result.failures]
    bad = [p for p in result.points if not p.valid]
    if bad:
        first = bad[0]
        warnings.append(
            f"verification FAILED at {len(bad)} of {len(result.points)} points (first "
            f"{first.direction} {first.buffers} x {format_bytes(first.chunk_bytes)}: "
            f"{first.mismatched_chunks} of {first.chunks} chunks arrived wrong); those figures "
            "are invalid"
        )
    return warnings


def rotation_verdict(result: RotationResult) -> list[str]:
    """Per direction: efficiency with one buffer, with two, and the best plan."""
    lines: list[str] = []
    for direction in dict.fromkeys(p.direction for p in result.points):
        points = [p for p in result.points if p.direction == direction and p.valid]
        if not points:
            continue

        def span(n: int, points: list[RotationPoint] = points) -> str | None:
            values = [p.efficiency for p in points if p.buffers == n]
            if not values:
                return None
            low, high = min(values), max(values)
            return f"{low:.2f}" if f"{low:.2f}" == f"{high:.2f}" else f"{low:.2f}-{high:.2f}"

        what = "readback (the CPU checksums)" if direction == "d2h" else "upload (the CPU writes)"
        pieces = [
            f"{text} with {n} buffer{'s' if n > 1 else ''}"
            for n in (1, 2)
            if (text := span(n)) is not None
        ]
        best = max(points, key=lambda p: p.efficiency)
        pieces.append(
            f"best {best.efficiency:.2f} with {best.buffers} x {format_bytes(best.chunk_bytes)} "
            f"({best.rate / 1e9:.3g} GB/s)"
        )
        lines.append(f"{direction} {what}: efficiency " + ", ".join(pieces))
    return lines


# ---- gpu: H2D, kernel, D2H over K streams ------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GpuPoint:
    work: int  # FMAs per element
    streams: int
    chunks: int  # in all, round-robin over the streams
    h2d_s: float  # the stages of the sequential run
    kernel_s: float
    d2h_s: float
    sequential_s: float
    pipelined_s: float
    verified: bool  # the pipelined run produced the sequential run's bytes

    @property
    def speedup(self) -> float:
        return self.sequential_s / self.pipelined_s

    @property
    def bound(self) -> float:
        """The most overlap can give: the stages' sum over the largest stage (the pipeline
        runs at the pace of its slowest stage)."""
        slowest = max(self.h2d_s, self.kernel_s, self.d2h_s)
        return (self.h2d_s + self.kernel_s + self.d2h_s) / slowest if slowest > 0 else 1.0

    @property
    def fraction(self) -> float:
        return self.speedup / self.bound

    @property
    def limiting_stage(self) -> str:
        stages = {"h2d": self.h2d_s, "kernel": self.kernel_s, "d2h": self.d2h_s}
        return max(stages, key=lambda k: stages[k])

    @property
    def valid(self) -> bool:
        return self.verified


@dataclass(frozen=True, slots=True)
class GpuOverlapResult:
    tool_version: str
    created: str
    simulated: bool
    machine: dict[str, Any]
    options: dict[str, Any]
    device: int
    bytes: int
    chunks_per_stream: int
    points: tuple[GpuPoint, ...]
    interrupted: bool
    wall_s: float
    failures: tuple[Failure, ...] = ()
    warnings: tuple[str, ...] = field(default=())

    @property
    def measured(self) -> bool:
        return bool(self.points)

    @property
    def valid(self) -> bool:
        return all(p.valid for p in self.points)

    def to_dict(self) -> dict[str, Any]:
        return {
            **_header(GPU_SCHEMA, self),
            "device": self.device,
            "bytes": self.bytes,
            "chunks_per_stream": self.chunks_per_stream,
            "points": [
                {
                    **_fields(p),
                    # Derived, for readers that do not want to recompute; ignored when loading.
                    "summary": {
                        "speedup": p.speedup,
                        "bound": p.bound,
                        "fraction": p.fraction,
                        "limiting_stage": p.limiting_stage,
                        "valid": p.valid,
                    },
                }
                for p in self.points
            ],
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> GpuOverlapResult:
        _check_schema(d, GPU_SCHEMA)
        r = Field(d)
        return cls(
            **_header_fields(r),
            device=r["device"].integer(),
            bytes=r["bytes"].integer(),
            chunks_per_stream=r["chunks_per_stream"].integer(),
            points=tuple(
                GpuPoint(
                    work=p["work"].integer(),
                    streams=p["streams"].integer(),
                    chunks=p["chunks"].integer(),
                    h2d_s=p["h2d_s"].number(),
                    kernel_s=p["kernel_s"].number(),
                    d2h_s=p["d2h_s"].number(),
                    sequential_s=p["sequential_s"].number(),
                    pipelined_s=p["pipelined_s"].number(),
                    verified=p["verified"].boolean(),
                )
                for p in r["points"].items()
            ),
        )

    def to_csv(self) -> str:
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(
            ("simulated", "device", "bytes", "work", "streams", "chunks", "h2d_s", "kernel_s",
             "d2h_s", "sequential_s", "pipelined_s", "speedup", "bound", "fraction",
             "limiting_stage", "verified")
        )  # fmt: skip
        for p in self.points:
            writer.writerow(
                (
                    int(self.simulated),
                    self.device,
                    self.bytes,
                    p.work,
                    p.streams,
                    p.chunks,
                    _number(p.h2d_s),
                    _number(p.kernel_s),
                    _number(p.d2h_s),
                    _number(p.sequential_s),
                    _number(p.pipelined_s),
                    _number(p.speedup),
                    _number(p.bound),
                    _number(p.fraction),
                    p.limiting_stage,
                    "ok" if p.verified else "FAILED",
                )
            )
        return out.getvalue()


def check_gpu_plan(
    engine: Engine,
    device: int,
    bytes: int,
    streams_list: Sequence[int],
    chunks_per_stream: int,
    works: Sequence[int],
) -> None:
    """Refuses, before anything runs, values measure_overlap_gpu cannot use."""
    if bytes < 4 or bytes % 4:
        raise OptionError("--size", f"{bytes} bytes is not a whole number of 4-byte floats")
    if not streams_list or min(streams_list) < 1:
        raise OptionError("--streams", "give one or more stream counts of at least 1")
    if chunks_per_stream < 1:
        raise OptionError(
            "--chunks-per-stream", f"{chunks_per_stream} is not a count of at least 1"
        )
    if max(streams_list) * chunks_per_stream > bytes // 4:
        raise OptionError(
            "--chunks-per-stream",
            f"{max(streams_list)} streams x {chunks_per_stream} chunks is more chunks than the "
            f"{bytes // 4} floats of --size",
        )
    if not works or min(works) < 0:
        raise OptionError("--work", "give one or more FMA counts per element, 0 or more")
    check_device(engine, device)
    # Input, sequential output and pipelined output are pinned; the array lives on the GPU.
    check_host_memory("--size", 3 * bytes, f"an array of {format_bytes(bytes)} (3 pinned copies)")
    check_device_memory(engine, device, "--size", bytes, f"an array of {format_bytes(bytes)}")


def measure_overlap_gpu(
    engine: Engine,
    device: int,
    bytes: int,
    streams_list: Sequence[int] = DEFAULT_STREAMS,
    chunks_per_stream: int = DEFAULT_CHUNKS_PER_STREAM,
    works: Sequence[int] = (1,),
    step: Step = _nothing,
) -> GpuOverlapResult:
    """For each kernel work (FMAs per element) and stream count K: the array sequentially on one
    stream, then in K x chunks_per_stream chunks round-robin over K streams. Pipelined runs that
    do not reproduce the sequential run's bytes are kept, marked invalid, and warned about.

    On an H200, 1 GiB with 1 FMA per element: H2D 19.3 ms, kernel 0.76 ms, D2H 19.4 ms;
    sequential 39.5 ms; K=1 39.5, K=2 23.5, K=4 22.7, K=8 22.5 ms against a bound of 2.04x.
    """
    check_gpu_plan(engine, device, bytes, streams_list, chunks_per_stream, works)

    created = _now()
    meta = machine.collect(engine, [device])
    start = engine.clock()
    points: list[GpuPoint] = []
    failures: list[Failure] = []
    interrupted = False
    try:
        for work in dict.fromkeys(works):
            for streams in sorted(set(streams_list)):
                chunks = streams * chunks_per_stream
                label = f"work {work}, {streams} stream{'s' if streams > 1 else ''}"
                try:
                    raw = engine.overlap_gpu(device, bytes, streams, chunks, work)
                except (AllocationError, EngineError) as exc:
                    failures.append(Failure(label, str(exc)))
                    continue
                point = GpuPoint(
                    work=work,
                    streams=streams,
                    chunks=chunks,
                    h2d_s=raw.h2d_s,
                    kernel_s=raw.kernel_s,
                    d2h_s=raw.d2h_s,
                    sequential_s=raw.sequential_s,
                    pipelined_s=raw.pipelined_s,
                    verified=raw.verified,
                )
                points.append(point)
                step(f"{label}: speedup {point.speedup:.2f}x of {point.bound:.2f}x")
    except KeyboardInterrupt:
        interrupted = True
    result = GpuOverlapResult(
        tool_version=__version__,
        created=created,
        simulated=engine.simulated,
        machine=meta,
        options={
            "device": device,
            "bytes": bytes,
            "streams": list(streams_list),
            "chunks_per_stream": chunks_per_stream,
            "works": list(works),
        },
        device=device,
        bytes=bytes,
        chunks_per_stream=chunks_per_stream,
        points=tuple(points),
        interrupted=interrupted,
        wall_s=engine.clock() - start,
        failures=tuple(failures),
    )
    return _with_warnings(result, _gpu_warnings(result))


def _gpu_warnings(result: GpuOverlapResult) -> list[str]:
    warnings = [f"{f.what}: failed: {f.error}" for f in result.failures]
    bad = [p for p in result.points if not p.verified]
    if bad:
        which = ", ".join(f"work {p.work} K={p.streams}" for p in bad)
        warnings.append(
            f"verification FAILED: the pipelined run's output differs from the sequential run's "
            f"({which}); those rows are invalid"
        )
    return warnings


def gpu_verdict(result: GpuOverlapResult) -> list[str]:
    """Per work value: what bounds it, and the best speedup against the bound."""
    lines: list[str] = []
    for work in dict.fromkeys(p.work for p in result.points):
        points = [p for p in result.points if p.work == work and p.valid]
        if not points:
            continue
        best = max(points, key=lambda p: p.speedup)
        kind = "compute-bound" if best.limiting_stage == "kernel" else "transfer-bound"
        lines.append(
            f"work {work}: {kind} (H2D {best.h2d_s * 1e3:.3g} ms, kernel "
            f"{best.kernel_s * 1e3:.3g} ms, D2H {best.d2h_s * 1e3:.3g} ms); best speedup "
            f"{best.speedup:.2f}x with {best.streams} streams, {best.fraction:.0%} of the "
            f"{best.bound:.2f}x bound"
        )
    return lines


# ---- shared JSON parts -------------------------------------------------------------------------


AnyResult = OverlapCpuResult | RotationResult | GpuOverlapResult


def _header(schema: str, r: AnyResult) -> dict[str, Any]:
    return document_header(schema, SCHEMA_VERSION, r) | {
        "failures": [{"what": f.what, "error": f.error} for f in r.failures]
    }


def _header_fields(d: Field) -> dict[str, Any]:
    failures = tuple(
        Failure(f["what"].string(), f["error"].string()) for f in d.get("failures", []).items()
    )
    return header_fields(d) | {"failures": failures}


def _check_schema(d: dict[str, Any], name: str) -> None:
    check_schema(d, name, SCHEMA_VERSION)


def _fields(record: Any) -> dict[str, Any]:
    return {name: getattr(record, name) for name in record.__slots__}


def _series_to_dict(result: OverlapCpuResult, s: CpuSeries) -> dict[str, Any]:
    v = s.verification
    return {
        "memory": s.memory,
        "status": s.status,
        "error": s.error,
        "warmup": None if s.warmup is None else _fields(s.warmup),
        "verification": None if v is None else _fields(v),
        "t0_s": s.t0_s,  # derived
        "points": [
            {
                "requested_work_s": p.requested_work_s,
                "samples": [_fields(x) for x in p.samples],
                # Derived, for readers that do not want to recompute; ignored when loading.
                "summary": {
                    **_fields(p.typical),
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


def _sample_from(x: Field) -> CpuSample:
    return CpuSample(
        issue_s=x["issue_s"].number(),
        work_s=x["work_s"].number(),
        wait_s=x["wait_s"].number(),
        total_s=x["total_s"].number(),
    )


def _series_from(d: Field) -> CpuSeries:
    warmup = d.get("warmup")
    return CpuSeries(
        memory=d["memory"].string(),
        points=tuple(
            CpuPoint(
                p["requested_work_s"].number(), tuple(_sample_from(x) for x in p["samples"].items())
            )
            for p in d["points"].items()
        ),
        warmup=None if warmup.null else _sample_from(warmup),
        verification=verification_from(d.get("verification")),
        status=d["status"].string(),
        error=d.get("error").optional_string(),
    )


R = TypeVar("R", OverlapCpuResult, RotationResult, GpuOverlapResult)


def _with_warnings(result: R, warnings: list[str]) -> R:
    return replace(result, warnings=tuple(warnings))
