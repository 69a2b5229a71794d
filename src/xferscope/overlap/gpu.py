"""`overlap gpu`: H2D, a kernel and D2H over one large array, sequential against split into
chunks over K streams, against the bound the stage times allow."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from ..core import machine
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
class GpuOverlapResult(Envelope):
    device: int
    bytes: int
    chunks_per_stream: int
    points: tuple[GpuPoint, ...]
    failures: tuple[Failure, ...] = ()

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
                    **to_plain(p),
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
            points=tuple(from_plain(GpuPoint, p) for p in r["points"].items()),
        )

    def to_csv(self) -> str:
        def rows() -> Iterator[Sequence[object]]:
            for p in self.points:
                yield (
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

        return dumps_table(
            (
                "simulated",
                "device",
                "bytes",
                "work",
                "streams",
                "chunks",
                "h2d_s",
                "kernel_s",
                "d2h_s",
                "sequential_s",
                "pipelined_s",
                "speedup",
                "bound",
                "fraction",
                "limiting_stage",
                "verified",
            ),
            rows(),
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
    progress: Progress = QUIET,
) -> GpuOverlapResult:
    """For each kernel work (FMAs per element) and stream count K: the array sequentially on one
    stream, then in K x chunks_per_stream chunks round-robin over K streams. Pipelined runs that
    do not reproduce the sequential run's bytes are kept, marked invalid, and warned about.

    On an H200, 1 GiB with 1 FMA per element: H2D 19.3 ms, kernel 0.76 ms, D2H 19.4 ms;
    sequential 39.5 ms; K=1 39.5, K=2 23.5, K=4 22.7, K=8 22.5 ms against a bound of 2.04x.
    """
    check_gpu_plan(engine, device, bytes, streams_list, chunks_per_stream, works)

    created = now()
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
                progress.step(f"{label}: speedup {point.speedup:.2f}x of {point.bound:.2f}x")
    except KeyboardInterrupt:
        interrupted = True
    result = GpuOverlapResult(
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
