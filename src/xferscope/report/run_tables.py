"""What `xferscope run` prints at the end: the findings first, then the headline figures."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from ..core.units import format_bytes, format_flops, format_rate, format_seconds
from ..gemm.check import CHECK_LADDER
from ..run.metrics import HEADLINE_CURVES
from ..run.records import RunResult
from .style import print_findings, print_simulated
from .sweep_tables import placed_label


def headline_table(result: RunResult) -> Table:
    table = Table(title="Headline figures", title_justify="left")
    for column in ("GPU", "figure", "bandwidth", "at", "latency", "at"):
        table.add_column(column, justify="left" if column == "figure" else "right")
    for gpu in result.gpus:
        if gpu.status == "failed":
            table.add_row(str(gpu.index), Text(f"failed: {gpu.error}", style="red"), "", "", "", "")
            continue
        for curve in gpu.curves:
            c = curve.config
            headline = HEADLINE_CURVES.get((c.direction, c.memory, c.mechanism, c.timing))
            if headline is None or not curve.points:
                continue
            big, small = curve.points[-1], curve.points[0]
            table.add_row(
                str(gpu.index),
                f"{headline} ({c.mechanism}, {c.timing} time)",
                format_rate(big.bandwidth),
                format_bytes(big.bytes),
                format_seconds(small.median_s),
                format_bytes(small.bytes),
            )
        for conc in gpu.concurrent:
            for s in conc.streams:
                alone = f" (alone {format_rate(s.alone_bandwidth)})" if s.alone_bandwidth else ""
                figure = f"{s.label} while the other direction runs"
                rate = format_rate(s.bandwidth) + alone
                table.add_row(str(gpu.index), figure, rate, format_bytes(s.bytes), "", "")
        if gpu.pinning is not None:
            p = gpu.pinning
            pays = f"{p.register_break_even:.1f}" if p.register_break_even else "never"
            table.add_row(
                str(gpu.index),
                "cudaHostRegister + unregister, per GB",
                format_seconds((p.register_s + p.unregister_s) * 1e9 / p.bytes),
                f"pays after {pays} copies",
                "",
                "",
            )
        for o in gpu.overlap:
            table.add_row(
                str(gpu.index),
                f"CPU work hidden by a {o.memory} readback",
                f"{o.hidden:.0%} of {format_seconds(o.work_s)}",
                format_bytes(o.bytes),
                "",
                "",
            )
        for curve in gpu.numa:
            if curve.points:
                point = curve.points[-1]
                table.add_row(
                    str(gpu.index),
                    placed_label(result.machine, curve),
                    format_rate(point.bandwidth),
                    format_bytes(point.bytes),
                    "",
                    "",
                )
        for chase in gpu.chase:
            figure = f"one GPU read of {chase.label} (pointer chase)"
            if chase.median_ns is None:
                table.add_row(
                    str(gpu.index), figure, "", "", Text(f"failed: {chase.error}", style="red"), ""
                )
                continue
            latency = format_seconds(chase.median_ns * 1e-9)
            if chase.verified is False:
                latency = "[red]WRONG CHAIN[/red]"
            table.add_row(str(gpu.index), figure, "", "", latency, format_bytes(chase.bytes))
        if gpu.gl is not None:
            for op, path, gl_rate in (
                ("upload", gpu.gl.upload_label, gpu.gl.upload_rate),
                ("readback", gpu.gl.readback_label, gpu.gl.readback_rate),
            ):
                if path and gl_rate:
                    figure = f"OpenGL best {op}: {path.removeprefix(op + ' ')}"
                    table.add_row(str(gpu.index), figure, format_rate(gl_rate), "", "", "")
            if gpu.gl.status != "complete":
                reason = gpu.gl.reason or gpu.gl.status
                table.add_row(str(gpu.index), f"OpenGL: {gpu.gl.status}", reason, "", "", "")
        if gpu.gemm is not None:
            for g in gpu.gemm.points:
                what = f"GEMM {g['precision']} {g['size']}"
                if g["status"] == "skipped":
                    continue
                if not g.get("tflops"):
                    table.add_row(
                        str(gpu.index),
                        what,
                        f"[red]{g['status']}[/red]",
                        g.get("error") or "",
                        "",
                        "",
                    )
                    continue
                share = g.get("share_of_peak")
                note = "" if share is None else f"{share:.0%} of peak"
                if g.get("verified") is False:
                    note = "[red]WRONG RESULT[/red]"
                table.add_row(str(gpu.index), what, format_flops(g["tflops"] * 1e12), note, "", "")
            b = gpu.gemm.break_even
            if b:
                table.add_row(
                    str(gpu.index),
                    f"GEMM {b['precision']} beats the CPU (with transfers)",
                    _from_size(b.get("one_thread")) + " (1 thread)",
                    _from_size(b.get("all_threads")) + f" ({b['threads']} threads)",
                    "",
                    "",
                )
    for conc in result.multi:
        if conc.streams:
            table.add_row(
                "all",
                conc.label,
                format_rate(conc.total_bandwidth),
                format_bytes(conc.streams[0].bytes),
                "",
                "",
            )
    return table


def _from_size(size: int | None) -> str:
    return f"never up to N={CHECK_LADDER[-1]}" if size is None else f"from N={size}"


def print_run(result: RunResult, console: Console) -> None:
    if result.simulated:
        print_simulated(console)
    if not result.complete:
        console.print("[bold yellow]INCOMPLETE: not every GPU was fully measured[/bold yellow]")
    console.print(headline_table(result))
    for note in result.notes:
        console.print(f"note: {escape(note)}")
    print_findings(result.findings, console)
