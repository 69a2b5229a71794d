"""`overlap gpu`: H2D, a kernel and D2H over one large array, sequential against split into
chunks over K streams, against the bound the stage times allow."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar, NamedTuple

from ..core.engine import Engine, check_device
from ..core.errors import OptionError
from ..core.findings import Finding, corrupted, failed
from ..core.progress import QUIET, Progress
from ..core.units import format_bytes
from ..documents.records import Column, Derived, dumps_columns
from .common import (
    HEAD,
    Measuring,
    OverlapResult,
    Points,
    as_is,
    check_count,
    check_device_memory,
    check_host_memory,
    check_values,
    figures,
    from_engine,
    with_findings,
)

GPU_SCHEMA = "xferscope-overlap-gpu"
DEFAULT_STREAMS = (1, 2, 3, 4, 5, 6, 7, 8)
DEFAULT_CHUNKS_PER_STREAM = 4


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
    # Derived, for readers that do not want to recompute; ignored when loading.
    DERIVED: ClassVar[tuple[Derived, ...]] = (
        Derived(
            "summary",
            lambda p: {
                "speedup": p.speedup,
                "bound": p.bound,
                "fraction": p.fraction,
                "limiting_stage": p.limiting_stage,
                "valid": p.valid,
            },
        ),
    )

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


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuOverlapResult(OverlapResult, Points):
    bytes: int
    chunks_per_stream: int
    points: tuple[GpuPoint, ...]
    SCHEMA = GPU_SCHEMA

    def to_csv(self) -> str:
        return dumps_columns(_CSV, (_Row(self, p) for p in self.points))


class _Row(NamedTuple):
    result: GpuOverlapResult
    point: GpuPoint


_STAGES = ("h2d_s", "kernel_s", "d2h_s", "sequential_s", "pipelined_s")
_CSV: tuple[Column[_Row], ...] = (
    *HEAD,
    *as_is("result", "bytes"),
    *as_is("point", "work", "streams", "chunks"),
    *figures("point", *_STAGES, "speedup", "bound", "fraction"),
    *as_is("point", "limiting_stage"),
    Column("verified", lambda r: "ok" if r.point.verified else "FAILED"),
)


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
    check_values("--streams", streams_list, 1, "stream counts of at least 1")
    check_count("--chunks-per-stream", chunks_per_stream)
    if max(streams_list) * chunks_per_stream > bytes // 4:
        raise OptionError(
            "--chunks-per-stream",
            f"{max(streams_list)} streams x {chunks_per_stream} chunks is more chunks than the "
            f"{bytes // 4} floats of --size",
        )
    check_values("--work", works, 0, "FMA counts per element, 0 or more")
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
    progress: Progress = QUIET,
) -> GpuOverlapResult:
    """For each kernel work (FMAs per element) and stream count K: the array sequentially on one
    stream, then in K x chunks_per_stream chunks round-robin over K streams. Pipelined runs that
    do not reproduce the sequential run's bytes are kept, marked invalid, and warned about.

    On an H200, 1 GiB with 1 FMA per element: H2D 19.3 ms, kernel 0.76 ms, D2H 19.4 ms;
    sequential 39.5 ms; K=1 39.5, K=2 23.5, K=4 22.7, K=8 22.5 ms against a bound of 2.04x.
    """
    check_gpu_plan(engine, device, bytes, streams_list, chunks_per_stream, works)

    run = Measuring(engine, device)
    points: list[GpuPoint] = []
    with run.until_interrupted():
        for work in dict.fromkeys(works):
            for streams in sorted(set(streams_list)):
                chunks = streams * chunks_per_stream
                label = f"work {work}, {streams} stream{'s' if streams > 1 else ''}"
                raw = run.attempt(label, engine.overlap_gpu, device, bytes, streams, chunks, work)
                if raw is None:
                    continue
                point = from_engine(GpuPoint, raw, work=work, streams=streams, chunks=chunks)
                points.append(point)
                progress.step(f"{label}: speedup {point.speedup:.2f}x of {point.bound:.2f}x")
    options = {
        "device": device,
        "bytes": bytes,
        "streams": list(streams_list),
        "chunks_per_stream": chunks_per_stream,
        "works": list(works),
    }
    result = run.result(
        GpuOverlapResult,
        options,
        bytes=bytes,
        chunks_per_stream=chunks_per_stream,
        points=tuple(points),
    )
    return with_findings(result, _gpu_findings(result))


def _gpu_findings(result: GpuOverlapResult) -> list[Finding]:
    """Codes: failed, verification_failed."""
    found = [failed(f.what, f.error) for f in result.failures]
    bad = [p for p in result.points if not p.verified]
    if bad:
        which = ", ".join(f"work {p.work} K={p.streams}" for p in bad)
        found.append(
            corrupted(
                which,
                "verification FAILED: the pipelined run's output differs from the sequential "
                f"run's ({which}); those rows are invalid",
            )
        )
    return found


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
