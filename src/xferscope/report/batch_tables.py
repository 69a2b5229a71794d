"""What `xferscope batch` prints: per direction and host memory, the winning method for each
count and size with how many times as fast as the loop it is, and the findings."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from ..batch.measure import BatchResult
from .style import print_findings, print_simulated


def print_batch(result: BatchResult, console: Console) -> None:
    if result.simulated:
        print_simulated(console)
    winners = result.winners()
    sizes = sorted({k[3] for k in winners})
    for direction, memory in dict.fromkeys((k[0], k[1]) for k in winners):
        table = Table(
            title=f"{direction} from {memory} memory: fastest method (x: against a loop of "
            "cudaMemcpyAsync)",
            title_justify="left",
        )
        table.add_column("copies", justify="right")
        for s in sizes:
            table.add_column(result.size_label(s), justify="right")
        for n in sorted({k[2] for k in winners if k[:2] == (direction, memory)}):
            cells = []
            for s in sizes:
                entry = winners.get((direction, memory, n, s))
                if entry is None:
                    cells.append("")
                    continue
                best, gain = entry
                cells.append(best.method + ("" if gain is None else f" {gain:.1f}x"))
            table.add_row(str(n), *cells)
        console.print(table)
    skipped = dict.fromkeys(f"{c.method}: {c.error}" for c in result.cells if c.status == "skipped")
    if skipped:
        console.print("not measured here:")
        for reason in skipped:
            console.print(f"  {reason}")
    bad = [c for c in result.cells if c.status in ("failed", "unverified")]
    for c in bad[:10]:
        console.print(f"[red]{c.direction} {c.memory} {c.what} {c.method}: {c.error}[/red]")
    print_findings(result.findings, console)
