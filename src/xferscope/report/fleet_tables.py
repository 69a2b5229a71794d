"""What `xferscope fleet` prints on rank 0: the outliers first, with their likely cause; then
every GPU with its headline figures and its verdict against the thresholds."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..core.units import format_rate, format_seconds
from ..fleet.records import COMPLETE, FleetResult
from .style import print_simulated

COLUMNS = (
    ("H2D", "h2d/pinned/async/device/bandwidth"),
    ("D2H", "d2h/pinned/async/device/bandwidth"),
    ("D2D", "d2d/device/async/device/bandwidth"),
)


def _value(metric: str, value: float) -> str:
    return format_seconds(value) if metric.endswith("/latency") else format_rate(value)


def print_fleet(result: FleetResult, console: Console) -> None:
    if result.simulated:
        print_simulated(console)
    nodes = len({r.host for r in result.ranks})
    passed = sum(v.passed for v in result.verdicts)
    console.print(
        f"Fleet: {len(result.ranks)} GPU(s) on {nodes} node(s); {passed} passed, "
        f"{len(result.ranks) - passed} failed; reports gathered in {result.gather_s:.2f} s, "
        f"{result.wall_s:.1f} s in all"
    )
    if result.outliers:
        table = Table(title="Outliers (robust z-score beyond 3.5, bad side)", title_justify="left")
        for name in ("GPU", "uuid", "metric", "value", "fleet median", "z", "likely cause"):
            table.add_column(name, justify="right" if name in ("value", "z") else "left")
        shown: dict[int, int] = {}
        for o in result.outliers:  # the 3 furthest out per GPU; the JSON has every one
            shown[o.rank] = shown.get(o.rank, 0) + 1
            if shown[o.rank] > 3:
                continue
            r = result.report(o.rank)
            table.add_row(
                escape(r.label), r.gpu.get("uuid", ""), o.metric, _value(o.metric, o.value),
                _value(o.metric, o.median), f"{o.z:.1f}", escape(o.cause),
            )  # fmt: skip
        console.print(table)
    table = Table(title="Every GPU", title_justify="left")
    for name in ("rank", "GPU", "name", "link", *(c for c, _ in COLUMNS), "verdict"):
        table.add_column(name, justify="right" if name in ("rank", "H2D", "D2H", "D2D") else "left")
    verdicts = {v.rank: v for v in result.verdicts}
    for r in result.ranks:
        g = r.gpu
        link = (
            f"Gen{g.get('pcie_generation')} x{g.get('pcie_width')}" if g.get("pcie_width") else ""
        )
        values = [
            _value(metric, r.metrics[metric]) if metric in r.metrics else ""
            for _, metric in COLUMNS
        ]
        v = verdicts.get(r.rank)
        if r.status != COMPLETE:
            verdict = f"[red]{r.status.upper()}: {escape(r.error or '')}[/red]"
        elif v is not None and not v.passed:
            verdict = "[red]FAIL: " + escape("; ".join(v.failures)) + "[/red]"
        else:
            verdict = "[green]PASS[/green]"
        table.add_row(str(r.rank), escape(r.label), g.get("name", ""), link, *values, verdict)
    console.print(table)
    print_pairs(result, console)
    if result.simulated:
        print_simulated(console)


def print_pairs(result: FleetResult, console: Console) -> None:
    """The pair matrix: GB/s from each rank (rows) to each other (columns), and latency."""
    from ..fleet.pairs import slow_pairs

    if not result.pairs:
        if result.pairs_note:
            console.print(f"GPU to GPU through NCCL: {escape(result.pairs_note)}")
        return
    ranks = sorted({p.source for p in result.pairs} | {p.destination for p in result.pairs})
    cell = {(p.source, p.destination): p for p in result.pairs}
    table = Table(
        title="GPU to GPU through NCCL: GB/s from row to column (64 MiB messages), one-way "
        "latency in µs (8 B ping-pong)",
        title_justify="left",
    )
    table.add_column("from \\ to", justify="right")
    for r in ranks:
        table.add_column(f"rank {r}", justify="right")
    for a in ranks:
        row = []
        for b in ranks:
            p = cell.get((a, b))
            if p is None or p.bandwidth_bps is None:
                row.append("")
                continue
            text = f"{p.bandwidth_bps / 1e9:.0f}"
            if p.latency_s is not None:
                text += f" / {p.latency_s * 1e6:.1f}"
            row.append(text if p.verified else f"[red]{text} WRONG DATA[/red]")
        table.add_row(f"rank {a}", *row)
    console.print(table)
    for p, median in slow_pairs(list(result.pairs)):
        console.print(
            f"[yellow]slow pair: rank {p.source} -> {p.destination} "
            f"{(p.bandwidth_bps or 0) / 1e9:.0f} GB/s against the {p.kind} median "
            f"{median / 1e9:.0f}[/yellow]"
        )
    if result.pairs_note:
        console.print(f"GPU to GPU through NCCL: {escape(result.pairs_note)}")
