"""The tables printed at the end of a sweep."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..core.units import format_bytes, format_seconds
from ..sweep.alignment import COSTLY, misalignments
from ..sweep.chase import ChasePoint
from ..sweep.records import CUT_SHORT, ESTIMATED, Curve, CurveConfig, Point, SweepResult
from .fit import cell_width, packed
from .style import print_findings, print_simulated, titled_table


def format_duration(seconds: float) -> str:
    """12.5 s, 3 min 07 s."""
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest:02d} s"


def wall_time(simulated: bool, wall_s: float, elapsed_s: float | None) -> tuple[str, str]:
    """A label and a value for how long a run took. A simulated run's clock is the model's, so
    it is called modelled, with the real time beside it where known."""
    if not simulated:
        return "wall time", format_duration(wall_s)
    real = "" if elapsed_s is None else f" (the simulation took {format_duration(elapsed_s)})"
    return "modelled time", format_duration(wall_s) + real


def _flag(p: Point) -> str:
    if not p.valid:
        return "!"
    if p.status == ESTIMATED:
        return "~"
    if p.status == CUT_SHORT:
        return "*"
    return ""


def _latency_cell(seconds: float) -> str:
    us = seconds * 1e6
    return f"{us:.2f}" if us < 1000 else f"{us:,.0f}"


def _rate_cell(bytes_per_second: float) -> str:
    gbps = bytes_per_second / 1e9
    if gbps >= 100:
        return f"{gbps:.0f}"
    if gbps >= 1:
        return f"{gbps:.3g}"
    return f"{gbps:.2g}"


def _header(config: CurveConfig) -> str:
    gpu = f" gpu{config.device}" if config.device else ""
    return (
        f"{config.direction} {config.memory}{gpu}\n{config.mechanism} {config.timing}"
        + config.offset_label
    )


def _share_of_limit(result: SweepResult, curve: Curve, bandwidth: float) -> str:
    """The bandwidth as a share of the physical limit: the PCIe link per direction for host
    transfers; HBM for device-to-device copies, whose traffic is a read and a write per byte."""
    gpu: dict[str, Any] = next(
        (g for g in result.machine.get("gpus", []) if g.get("index") == curve.config.device), {}
    )
    if curve.config.direction == "d2d":
        peak, traffic, name = gpu.get("memory_peak_bps"), 2 * bandwidth, "HBM"
    else:
        peak, traffic, name = gpu.get("pcie_peak_bps"), bandwidth, "PCIe"
    return f"{traffic / peak:.0%} {name}" if peak else ""


def summary_table(result: SweepResult) -> Table:
    columns = ("curve", "latency (smallest)", "best bandwidth", "of limit", "noise", "verified",
               "status")  # fmt: skip
    table = titled_table("Summary", columns, ("curve",))
    for curve in result.curves:
        if not curve.points:
            table.add_row(
                curve.config.label,
                "",
                "",
                "",
                "",
                "",
                escape(curve.status if curve.error is None else f"failed: {curve.error}"),
            )
            continue
        smallest = curve.points[0]
        best = max(curve.points, key=lambda p: p.bandwidth)
        verified = [p.verification for p in curve.points if p.verification is not None]
        failed = sum(1 for v in verified if not v.ok)
        table.add_row(
            placed_label(result.machine, curve),
            f"{format_seconds(smallest.median_s)} @ {format_bytes(smallest.bytes)}",
            f"{best.bandwidth / 1e9:.2f} GB/s @ {format_bytes(best.bytes)}",
            _share_of_limit(result, curve, best.bandwidth),
            f"{max(p.rel_noise for p in curve.points):.1%}",
            "skipped" if not verified else ("ok" if not failed else f"[red]FAILED {failed}[/red]"),
            curve.status if curve.error is None else escape(f"failed: {curve.error}"),
        )
    return table


def placed_label(machine: Mapping[str, Any], curve: Curve) -> str:
    """The curve's label; for memory placed on a NUMA node, whether that node is the GPU's own
    (its PCIe root's, machine record) and where the pages were found."""
    c = curve.config
    if c.numa_node is None:
        return c.label
    gpus = {g.get("index"): g for g in machine.get("gpus", [])}
    own = (gpus.get(c.device) or {}).get("numa_node")
    mark = " (the GPU's node)" if own == c.numa_node else ""
    if curve.host_node is not None and curve.host_node not in (-1, c.numa_node):
        mark += f" [pages found on node {curve.host_node}]"
    return c.label + mark


def _point_cells(curve: Curve, size: int) -> list[str]:
    p = curve.point(size)
    if p is None:
        return ["", ""]
    return [_latency_cell(p.median_s), _rate_cell(p.bandwidth) + _flag(p)]


def points_tables(result: SweepResult, width: int) -> list[Table]:
    """The per-size tables: as many curves to a table as fit `width` characters, no number
    cut."""
    curves = [c for c in result.curves if c.points]
    sizes = sorted({p.bytes for c in curves for p in c.points})
    cells = [[_point_cells(c, s) for s in sizes] for c in curves]  # per curve, per size
    size_width = max([4, *(len(format_bytes(s)) for s in sizes)])
    groups = [
        [
            max([cell_width(f"{_header(c.config)}\nµs"), *(len(x[0]) for x in rows)]),
            max([4, *(len(x[1]) for x in rows)]),
        ]
        for c, rows in zip(curves, cells, strict=True)
    ]
    tables, start = [], 0
    for n in packed([size_width], groups, width):
        tables.append(points_table(sizes, cells[start : start + n], curves[start : start + n]))
        start += n
    return tables


def points_table(sizes: list[int], cells: list[list[list[str]]], curves: list[Curve]) -> Table:
    """One per-size table of these curves, their cells per size as points_tables made them."""
    table = Table(title="Median latency (µs) and bandwidth (GB/s) per size", title_justify="left")
    table.add_column("size", justify="right", no_wrap=True)
    for curve in curves:
        table.add_column(f"{_header(curve.config)}\nµs", justify="right", no_wrap=True)
        table.add_column("\n\nGB/s", justify="right", no_wrap=True)
    for i, size in enumerate(sizes):
        row = [x for per_curve in cells for x in per_curve[i]]
        if any(row):
            table.add_row(format_bytes(size), *row)
    table.caption = (
        "* cut short by the budget   ~ estimated   ! invalid (verification failed or blocked)"
    )
    table.caption_justify = "left"
    return table


def alignment_table(result: SweepResult) -> Table | None:
    """What misalignment costs: per misaligned curve and size, its time over the aligned
    curve's; None without misaligned curves."""
    rows = misalignments(result.curves)
    if not rows:
        return None
    table = Table(
        title="Misalignment: time against page-aligned buffers, per size", title_justify="left"
    )
    table.add_column("case")
    table.add_column("offsets")
    sizes = sorted({size for m in rows for size, _ in m.costs})
    for size in sizes:
        table.add_column(format_bytes(size), justify="right")
    for m in rows:
        costs = dict(m.costs)
        cells = []
        for size in sizes:
            cost = costs.get(size)
            if cost is None:
                cells.append("")
                continue
            text = f"{cost:+.0%}" + ("" if size in m.clear else "~")
            cells.append(f"[red]{text}[/red]" if m.costly(size, cost) else text)
        table.add_row(m.case, m.config.offset_label.strip(), *cells)
    table.caption = (
        f"red: more than {COSTLY:.0%} slower, beyond the noise   ~: the trials of the two "
        "curves overlap (within the noise)"
    )
    return table


def chase_table(points: Sequence[ChasePoint]) -> Table:
    """Latency seen from the GPU: ns per dependent read of each memory chased."""
    table = titled_table(
        "Latency seen from the GPU (one thread's dependent reads)",
        ("memory read", "one read", "chain through", "verified"),
        ("memory read",),
    )
    for c in points:
        if c.median_ns is None:
            table.add_row(c.label, "", "", escape(f"not measured: {c.error}"))
            continue
        chain = f"{format_bytes(c.bytes)} by {format_bytes(c.stride)}"
        table.add_row(
            c.label,
            format_seconds(c.median_ns * 1e-9),
            chain,
            "ok" if c.verified else "[red]WRONG CHAIN[/red]",
        )
    return table


def print_report(result: SweepResult, console: Console) -> None:
    if result.simulated:
        print_simulated(console)
    for table in points_tables(result, console.width):
        console.print(table)
    console.print(summary_table(result))
    if result.chases:
        console.print(chase_table(result.chases))
    misaligned = alignment_table(result)
    if misaligned is not None:
        console.print(misaligned)
    print_findings(result.findings, console)
    if result.simulated:
        print_simulated(console)
