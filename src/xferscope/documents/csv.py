"""CSV: one row per measured point, the columns a spreadsheet or pandas wants."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, NamedTuple

from ..run.metrics import Metric, run_metrics
from ..run.records import RunResult
from ..sweep.records import Curve, CurveConfig, Point, SweepResult
from .records import Column, dumps_columns

CONFIG_COLUMNS = ("device", "direction", "memory", "mechanism", "timing")


class _Row(NamedTuple):
    simulated: bool
    config: CurveConfig
    point: Point


def _number(value: float) -> str:
    return f"{value:.9g}"


def _config_column(name: str) -> Column[_Row]:
    return Column(name, lambda r: getattr(r.config, name))


def _point_column(name: str, form: Callable[[Any], object] = lambda v: v) -> Column[_Row]:
    """A column of a point's attribute (`trials`: its number of samples), in `form`."""
    if name == "trials":
        return Column(name, lambda r: form(len(r.point.samples_s)))
    return Column(name, lambda r: form(getattr(r.point, name)))


def _verified(p: Point) -> str:
    v = p.verification
    return "skipped" if v is None else ("ok" if v.ok else "FAILED")


_COLUMNS: tuple[Column[_Row], ...] = (
    Column("simulated", lambda r: int(r.simulated)),
    *(_config_column(n) for n in CONFIG_COLUMNS),
    *(_point_column(n) for n in ("bytes", "trials", "iterations", "copies_per_iteration")),
    *(_point_column(n, _number) for n in ("min_s", "median_s", "max_s", "rel_noise")),
    Column("latency_us", lambda r: _number(r.point.median_s * 1e6)),
    Column("bandwidth_gbps", lambda r: _number(r.point.bandwidth / 1e9)),
    Column("peak_bandwidth_gbps", lambda r: _number(r.point.peak_bandwidth / 1e9)),
    *(_point_column(n) for n in ("status", "stopped_by")),
    _point_column("target_s", _number),
    *(_point_column(n, int) for n in ("blocking_kernel", "blocking_timed_out", "cache_resident")),
    Column("verified", lambda r: _verified(r.point)),
    Column(
        "mismatched_bytes",
        lambda r: "" if r.point.verification is None else r.point.verification.mismatched_bytes,
    ),
    Column("host_offset", lambda r: r.config.host_offset),
    Column("device_offset", lambda r: r.config.device_offset),
)


COLUMNS = tuple(c.name for c in _COLUMNS)


def dumps(result: SweepResult) -> str:
    return points_csv(result.curves, result.simulated)


def points_csv(curves: Iterable[Curve], simulated: bool) -> str:
    """One row per point of every curve."""
    rows = (_Row(simulated, c.config, p) for c in curves for p in c.points)
    return dumps_columns(_COLUMNS, rows)


def write_csv(result: SweepResult, path: Path) -> None:
    from .files import atomic_write

    atomic_write(path, dumps(result))


def run_points_csv(result: RunResult) -> str:
    return points_csv((c for g in result.gpus for c in g.curves), result.simulated)


def run_metrics_csv(result: RunResult) -> str:
    """Every named figure of a run: one row each, SI units."""
    simulated = int(result.simulated)
    columns: tuple[Column[Metric], ...] = (
        Column("simulated", lambda m: simulated),
        Column("metric", lambda m: m.name),
        Column("value", lambda m: _number(m.value)),
        Column("unit", lambda m: m.unit),
        Column("higher_is_better", lambda m: int(m.higher_is_better)),
        Column("rel_noise", lambda m: _number(m.rel_noise)),
        Column("headline", lambda m: int(m.headline)),
    )
    return dumps_columns(columns, run_metrics(result).values())
