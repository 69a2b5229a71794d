"""CSV: one row per measured point, the columns a spreadsheet or pandas wants."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from ..run.metrics import run_metrics
from ..run.records import RunResult
from ..sweep.records import Curve, SweepResult
from .envelope import dumps_table

COLUMNS = (
    "simulated",
    "device",
    "direction",
    "memory",
    "mechanism",
    "timing",
    "bytes",
    "trials",
    "iterations",
    "copies_per_iteration",
    "min_s",
    "median_s",
    "max_s",
    "rel_noise",
    "latency_us",
    "bandwidth_gbps",
    "peak_bandwidth_gbps",
    "status",
    "stopped_by",
    "target_s",
    "blocking_kernel",
    "blocking_timed_out",
    "cache_resident",
    "verified",
    "mismatched_bytes",
    "host_offset",
    "device_offset",
)


def _number(value: float) -> str:
    return f"{value:.9g}"


def dumps(result: SweepResult) -> str:
    return points_csv(result.curves, result.simulated)


def points_csv(curves: Iterable[Curve], simulated: bool) -> str:
    """One row per point of every curve."""

    def rows() -> Iterator[Sequence[object]]:
        for curve in curves:
            c = curve.config
            for p in curve.points:
                v = p.verification
                yield (
                    (
                        int(simulated),
                        c.device,
                        c.direction,
                        c.memory,
                        c.mechanism,
                        c.timing,
                        p.bytes,
                        len(p.samples_s),
                        p.iterations,
                        p.copies_per_iteration,
                        _number(p.min_s),
                        _number(p.median_s),
                        _number(p.max_s),
                        _number(p.rel_noise),
                        _number(p.median_s * 1e6),
                        _number(p.bandwidth / 1e9),
                        _number(p.peak_bandwidth / 1e9),
                        p.status,
                        p.stopped_by,
                        _number(p.target_s),
                        int(p.blocking_kernel),
                        int(p.blocking_timed_out),
                        int(p.cache_resident),
                        "skipped" if v is None else ("ok" if v.ok else "FAILED"),
                        "" if v is None else v.mismatched_bytes,
                        c.host_offset,
                        c.device_offset,
                    )
                )

    return dumps_table(COLUMNS, rows())


def write_csv(result: SweepResult, path: Path) -> None:
    from .files import atomic_write

    atomic_write(path, dumps(result))


def run_points_csv(result: RunResult) -> str:
    return points_csv((c for g in result.gpus for c in g.curves), result.simulated)


def run_metrics_csv(result: RunResult) -> str:
    """Every named figure of a run: one row each, SI units."""

    def rows() -> Iterator[Sequence[object]]:
        for m in run_metrics(result).values():
            yield (
                (
                    int(result.simulated),
                    m.name,
                    _number(m.value),
                    m.unit,
                    int(m.higher_is_better),
                    _number(m.rel_noise),
                    int(m.headline),
                )
            )

    return dumps_table(
        ("simulated", "metric", "value", "unit", "higher_is_better", "rel_noise", "headline"),
        rows(),
    )
