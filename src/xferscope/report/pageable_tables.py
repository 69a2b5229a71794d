"""What `xferscope pageable` prints: each way's costs, the total of k sends, and the crossovers."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from ..core.units import format_bytes, format_rate, format_seconds
from ..pageable.measure import PageableResult, cheaper_from, crossovers, fastest
from .style import print_findings, print_simulated, titled_table


def _sends(count: int | None) -> str:
    return "never" if count is None else f"{count} send" + ("" if count == 1 else "s")


def print_pageable(result: PageableResult, console: Console) -> None:
    if result.simulated:
        print_simulated(console)
    gpu = next((g.get("name") for g in result.machine.get("gpus", [])), "?")
    console.print(
        f"Sending a pageable buffer to GPU {result.device} ({gpu}) k times: total time of each "
        "way, every setup cost measured and counted (medians of "
        f"{result.options.get('repeats')})"
    )
    if result.staged_plan:
        p = result.staged_plan
        console.print(
            f"staged copier: {p['threads']} threads, {format_bytes(p['chunk_bytes'])} chunks, "
            f"{p['buffers_per_thread']} pinned buffers per thread; made and closed in "
            f"{format_seconds(result.staged_setup_median_s)}, counted here for each buffer (an "
            "application that keeps its copier, as copy_to_device does, pays it once)"
        )
    for size in result.sizes:
        strategies = result.strategies(size)
        pageable = strategies[0]
        columns = ("way", "once", "per send", "rate", "made of", "beats pageable from")
        costs = titled_table(f"{format_bytes(size.bytes)}: costs", columns, ("way", "made of"))
        for s in strategies:
            beats = cheaper_from(s, pageable)
            costs.add_row(
                s.name,
                format_seconds(s.setup_s) if s.setup_s else "0",
                format_seconds(s.per_send_s),
                format_rate(size.bytes / s.per_send_s),
                " + ".join(f"{what} {format_seconds(t)}" for what, t in s.parts),
                "" if s is pageable else _sends(beats),
            )
        console.print(costs)
        totals = Table(
            title=f"{format_bytes(size.bytes)}: total time of k sends", title_justify="left"
        )
        totals.add_column("k", justify="right")
        for s in strategies:  # those measured: a Ctrl-C may have left the staged copy out
            totals.add_column(s.name, justify="right")
        totals.add_column("fastest")
        for k in result.sends:
            best = fastest(strategies, k)
            cells = [
                f"[bold]{format_seconds(s.total_s(k))}[/bold]"
                if s is best
                else format_seconds(s.total_s(k))
                for s in strategies
            ]
            totals.add_row(str(k), *cells, best.name)
        console.print(totals)
        found = crossovers(strategies)
        if found:
            console.print("crossovers (where two ways cost the same):")
            for c in found:
                console.print(
                    f"  k* = {c.sends:.3g}: {c.after} is cheaper than {c.before} from "
                    f"{_sends(c.from_send)} on"
                )
    print_findings(result.findings, console)
