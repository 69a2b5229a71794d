"""`overlap buffers`: a stream of chunks through N pinned buffers used in rotation while the
CPU consumes (readback) or produces (upload) the others: seed 000's pixel buffer objects."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from ..core import engine, machine, plan, stats
from ..core.engine import Engine, check_device
from ..core.errors import AllocationError, EngineError, OptionError
from ..core.findings import Finding, corrupted, failed
from ..core.progress import QUIET, Progress
from ..core.units import format_bytes
from ..documents.envelope import Envelope, dumps_table, now
from ..documents.reader import Field
from ..documents.records import from_plain, to_plain
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
from .cpu import CPU_DIRECTIONS

BUFFERS_SCHEMA = "xferscope-overlap-buffers"


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
        return stats.typical(self.samples, lambda s: s.total_s)

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
class RotationResult(Envelope):
    device: int
    chunks: int
    points: tuple[RotationPoint, ...]
    failures: tuple[Failure, ...] = ()

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
                    **to_plain(p),
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
            points=tuple(from_plain(RotationPoint, p) for p in r["points"].items()),
        )

    def to_csv(self) -> str:
        def rows() -> Iterator[Sequence[object]]:
            for p in self.points:
                s = p.typical
                yield (
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

        return dumps_table(
            (
                "simulated",
                "device",
                "direction",
                "buffers",
                "chunk_bytes",
                "chunks",
                "pinned_bytes",
                "trials",
                "total_s",
                "copy_s",
                "consume_s",
                "wait_s",
                "ideal_s",
                "efficiency",
                "rate_gbps",
                "rel_noise",
                "mismatched_chunks",
                "valid",
            ),
            rows(),
        )


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
    progress: Progress = QUIET,
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

    created = now()
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
                        upload = direction == "h2d"

                        def stream(
                            upload: bool = upload, buffers: int = buffers, chunk: int = chunk_bytes
                        ) -> RotationSample:
                            raw = engine.rotate_buffers(device, upload, buffers, chunk, chunks)
                            return _rotation_sample(raw)

                        samples = tuple(plan.run_trials(stream, trials))
                    except (AllocationError, EngineError) as exc:
                        failures.append(Failure(label, str(exc)))
                        continue
                    point = RotationPoint(direction, buffers, chunk_bytes, chunks, samples)
                    points.append(point)
                    progress.step(f"{label}: efficiency {point.efficiency:.2f}")
    except KeyboardInterrupt:
        interrupted = True
    result = RotationResult(
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
    return with_findings(result, _rotation_findings(result))


def _rotation_sample(raw: engine.RotationResult) -> RotationSample:
    return RotationSample(
        total_s=raw.total_s,
        copy_s=raw.copy_s,
        consume_s=raw.consume_s,
        wait_s=raw.wait_s,
        mismatched_chunks=raw.mismatched_chunks,
    )


def _rotation_findings(result: RotationResult) -> list[Finding]:
    """Codes: failed, verification_failed."""
    found = [failed(f.what, f.error) for f in result.failures]
    bad = [p for p in result.points if not p.valid]
    if bad:
        first = bad[0]
        found.append(
            corrupted(
                f"{first.direction} {first.buffers} x {format_bytes(first.chunk_bytes)}",
                f"verification FAILED at {len(bad)} of {len(result.points)} points (first "
                f"{first.direction} {first.buffers} x {format_bytes(first.chunk_bytes)}: "
                f"{first.mismatched_chunks} of {first.chunks} chunks arrived wrong); those figures "
                "are invalid",
                first.mismatched_chunks,
            )
        )
    return found


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
