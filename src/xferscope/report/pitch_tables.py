"""What `xferscope pitch` prints: per direction, host memory, device layout and host pitch, the
rate of each method at each row width (GB/s, host time), the winner marked, the contiguous
copy of the same bytes as the reference; then the findings (cliffs, methods that beat the 2D
copy)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from ..core.units import format_bytes
from ..pitch.measure import METHODS, PitchResult, group_label
from .style import print_findings, print_simulated


def _gbps(bps: float | None) -> str:
    if not bps:
        return ""
    gbps = bps / 1e9
    return f"{gbps:.3g}" if gbps >= 0.01 else f"{gbps:.1e}"


def print_pitch(result: PitchResult, console: Console) -> None:
    if result.simulated:
        print_simulated(console)
    winners = result.winners()
    for group in result.groups():
        cells = [c for c in result.cells if c.group == group]
        methods = [m for m in METHODS if m != "contiguous" and any(c.method == m for c in cells)]
        reference = result.reference(group)
        title = f"{group_label(group)}: GB/s by row width (bold: fastest)"
        if reference is not None:
            title += f"; one contiguous copy: {_gbps(reference.rate)} GB/s"
        table = Table(title=title, title_justify="left")
        table.add_column("width", justify="right")
        table.add_column("rows", justify="right")
        for m in methods:
            table.add_column(m, justify="right")
        for width in sorted({c.width for c in cells}):
            row = {c.method: c for c in cells if c.width == width}
            best = winners.get((*group, width))
            values = []
            for m in methods:
                c = row.get(m)
                if c is None or c.status == "skipped":
                    values.append("-")
                elif c.status != "complete":
                    values.append(f"[red]{c.status}[/red]")
                else:
                    text = _gbps(c.rate)
                    values.append(f"[bold]{text}[/bold]" if best is c else text)
            rows = next(iter(row.values())).rows
            table.add_row(format_bytes(width), f"{rows:,}", *values)
        console.print(table)
    skipped = dict.fromkeys(f"{c.method}: {c.error}" for c in result.cells if c.status == "skipped")
    if skipped:
        console.print("not measured where refused:")
        for reason in list(skipped)[:8]:
            console.print(f"  {reason}")
    for c in [c for c in result.cells if c.status in ("failed", "unverified")][:10]:
        console.print(
            f"[red]{group_label(c.group)} {format_bytes(c.width)} {c.method}: {c.error}[/red]"
        )
    print_findings(result.findings, console)
    if result.simulated:
        print_simulated(console)
