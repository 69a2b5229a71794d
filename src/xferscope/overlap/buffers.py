"""`overlap buffers`: a stream of chunks through N pinned buffers used in rotation while the
CPU consumes (readback) or produces (upload) the others: seed 000's pixel buffer objects."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar, NamedTuple

from ..core import plan
from ..core.engine import Engine, check_device
from ..core.errors import OptionError
from ..core.findings import Finding, corrupted, failed
from ..core.progress import QUIET, Progress
from ..core.units import format_bytes
from ..documents.records import NON_EMPTY, Column, Derived, dumps_columns
from .common import (
    HEAD,
    Measuring,
    OverlapResult,
    Points,
    Trials,
    as_is,
    check_count,
    check_device_memory,
    check_direction,
    check_host_memory,
    check_values,
    figure,
    figures,
    from_engine,
    with_findings,
)

BUFFERS_SCHEMA = "xferscope-overlap-buffers"


@dataclass(frozen=True, slots=True)
class RotationSample:
    total_s: float  # the whole stream of chunks
    copy_s: float  # one chunk's copy alone
    consume_s: float  # the CPU's work on one chunk alone (checksum, or writing it for an upload)
    wait_s: float  # time the CPU spent waiting for copies
    mismatched_chunks: int


@dataclass(frozen=True, slots=True)
class RotationPoint(Trials[RotationSample]):
    direction: str  # d2h: readback, the CPU checksums; h2d: upload, the CPU writes each chunk
    buffers: int
    chunk_bytes: int
    chunks: int
    samples: tuple[RotationSample, ...] = field(metadata={NON_EMPTY: True})
    # Derived, for readers that do not want to recompute; ignored when loading.
    DERIVED: ClassVar[tuple[Derived, ...]] = (
        Derived(
            "summary",
            lambda p: {
                "total_s": p.total_s,
                "ideal_s": p.ideal_s,
                "efficiency": p.efficiency,
                "rate_gbps": p.rate / 1e9,
                "pinned_bytes": p.pinned_bytes,
                "rel_noise": p.rel_noise,
                "valid": p.valid,
            },
        ),
    )

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
    def mismatched_chunks(self) -> int:
        return max(s.mismatched_chunks for s in self.samples)

    @property
    def valid(self) -> bool:
        return self.mismatched_chunks == 0


@dataclass(frozen=True, slots=True, kw_only=True)
class RotationResult(OverlapResult, Points):
    chunks: int
    points: tuple[RotationPoint, ...]
    SCHEMA = BUFFERS_SCHEMA

    def to_csv(self) -> str:
        return dumps_columns(_CSV, (_Row(self, p) for p in self.points))


class _Row(NamedTuple):
    result: RotationResult
    point: RotationPoint


_CSV: tuple[Column[_Row], ...] = (
    *HEAD,
    *as_is("point", "direction", "buffers", "chunk_bytes", "chunks", "pinned_bytes"),
    Column("trials", lambda r: len(r.point.samples)),
    *figures("point.typical", "total_s", "copy_s", "consume_s", "wait_s"),
    *figures("point", "ideal_s", "efficiency"),
    Column("rate_gbps", lambda r: figure(r.point.rate / 1e9)),
    *figures("point", "rel_noise"),
    *as_is("point", "mismatched_chunks"),
    Column("valid", lambda r: int(r.point.valid)),
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
        check_direction(direction)
    if not directions:
        raise OptionError("--direction", "give d2h, h2d or both")
    check_values("--buffers", buffers_list, 1, "buffer counts of at least 1")
    check_values("--chunk-sizes", chunk_sizes, 8, "chunk sizes of at least 8 bytes")
    check_count("--chunks", chunks)
    check_count("--trials", trials)
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

    run = Measuring(engine, device)
    points: list[RotationPoint] = []
    with run.until_interrupted():
        for direction in dict.fromkeys(directions):
            for chunk_bytes in sorted(set(chunk_sizes)):
                for buffers in sorted(set(buffers_list)):
                    label = f"{direction} {buffers} x {format_bytes(chunk_bytes)}"
                    upload = direction == "h2d"

                    def stream(
                        upload: bool = upload, buffers: int = buffers, chunk: int = chunk_bytes
                    ) -> RotationSample:
                        raw = engine.rotate_buffers(device, upload, buffers, chunk, chunks)
                        return from_engine(RotationSample, raw)

                    samples = run.attempt(label, plan.run_trials, stream, trials)
                    if samples is None:
                        continue
                    point = RotationPoint(direction, buffers, chunk_bytes, chunks, tuple(samples))
                    points.append(point)
                    progress.step(f"{label}: efficiency {point.efficiency:.2f}")
    options = {
        "device": device,
        "directions": list(directions),
        "buffers": list(buffers_list),
        "chunk_sizes": list(chunk_sizes),
        "chunks": chunks,
        "trials": trials,
        "max_pinned": max_pinned,
    }
    result = run.result(RotationResult, options, chunks=chunks, points=tuple(points))
    return with_findings(result, _rotation_findings(result))


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
