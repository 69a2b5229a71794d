"""What `xferscope overlap` prints: seed 000's Table 1 for cpu, efficiency against buffers for
buffers, speedup against streams for gpu, with the verdict and the warnings."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from ..core.units import format_bytes
from ..overlap import (
    AnyResult,
    GpuOverlapResult,
    OverlapCpuResult,
    RotationResult,
    cpu_verdict,
    gpu_verdict,
    rotation_verdict,
)
from .style import print_findings, print_simulated


def print_overlap(result: AnyResult, stdout: Console) -> None:
    """The tables, the verdict and the warnings of an experiment."""
    if isinstance(result, OverlapCpuResult):
        tables, verdict = cpu_tables(result), [cpu_verdict(result)]
    elif isinstance(result, RotationResult):
        tables, verdict = buffers_tables(result), rotation_verdict(result)
    else:
        tables, verdict = gpu_tables(result), gpu_verdict(result)
    if result.simulated:
        print_simulated(stdout)
    for table in tables:
        stdout.print(table)
    for line in verdict:
        stdout.print(Text.assemble(("verdict: ", "bold"), line))
    print_findings(result.findings, stdout)
    if result.simulated:
        print_simulated(stdout)


def _ms(seconds: float) -> str:
    ms = seconds * 1e3
    return f"{ms:.3f}" if ms < 10 else f"{ms:.2f}" if ms < 1000 else f"{ms:,.0f}"


def _table(title: str, columns: list[str]) -> Table:
    table = Table(title=title, title_justify="left")
    for i, name in enumerate(columns):
        table.add_column(name, justify="left" if i == 0 and not name.startswith("W") else "right")
    return table


def cpu_tables(result: OverlapCpuResult) -> list[Table]:
    tables = []
    for s in result.series:
        if not s.points:
            continue
        title = (
            f"{result.direction} {s.memory} {result.mechanism}, {format_bytes(result.bytes)}: "
            f"the copy alone takes T0 = {_ms(s.t0_s or 0.0)} ms"
        )
        if s.status != "complete":
            title += f" ({escape(s.status)})"
        table = _table(
            title,
            [
                "W asked (ms)",
                "issue (ms)",
                "work (ms)",
                "wait (ms)",
                "total (ms)",
                "bytes",
                "rate (GB/s)",
                "efficiency",
                "ideal",
                "noise",
            ],
        )
        for p in s.points:
            efficiency, ideal = s.efficiency(p), s.ideal(p)
            table.add_row(
                _ms(p.requested_work_s),
                _ms(p.issue_s),
                _ms(p.work_s),
                _ms(p.wait_s),
                _ms(p.total_s),
                str(result.bytes),
                f"{result.rate(p) / 1e9:.3g}",
                "" if efficiency is None else f"{efficiency:.2f}",
                "" if ideal is None else f"{ideal:.2f}",
                f"{p.rel_noise:.1%}",
            )
        v = s.verification
        table.caption = (
            "efficiency = (T0 + work - total) / work: the share of the work hidden under the copy"
            + ("" if v is None else "; verified ok" if v.ok else "; [red]verification FAILED[/red]")
        )
        tables.append(table)
    return tables


def buffers_tables(result: RotationResult) -> list[Table]:
    tables = []
    for direction in dict.fromkeys(p.direction for p in result.points):
        what = "readback: the CPU checksums" if direction == "d2h" else "upload: the CPU writes"
        table = _table(
            f"{direction} ({what}) {result.chunks} chunks through N pinned buffers",
            [
                "chunk",
                "N",
                "pinned",
                "total (ms)",
                "copy/chunk (ms)",
                "CPU/chunk (ms)",
                "wait (ms)",
                "ideal (ms)",
                "efficiency",
                "rate (GB/s)",
                "noise",
                "verified",
            ],
        )
        for p in (p for p in result.points if p.direction == direction):
            s = p.typical
            table.add_row(
                format_bytes(p.chunk_bytes),
                str(p.buffers),
                format_bytes(p.pinned_bytes),
                _ms(s.total_s),
                _ms(s.copy_s),
                _ms(s.consume_s),
                _ms(s.wait_s),
                _ms(p.ideal_s),
                f"{p.efficiency:.2f}",
                f"{p.rate / 1e9:.3g}",
                f"{p.rel_noise:.1%}",
                "ok" if p.valid else f"[red]FAILED {p.mismatched_chunks}[/red]",
            )
        table.caption = "efficiency = (chunks x max(copy, CPU) + min(copy, CPU)) / total"
        tables.append(table)
    return tables


def gpu_tables(result: GpuOverlapResult) -> list[Table]:
    tables = []
    for work in dict.fromkeys(p.work for p in result.points):
        table = _table(
            f"{format_bytes(result.bytes)}, kernel of {work} FMA per element: sequential against "
            f"K streams, {result.chunks_per_stream} chunks each",
            [
                "K",
                "chunks",
                "H2D (ms)",
                "kernel (ms)",
                "D2H (ms)",
                "sequential (ms)",
                "pipelined (ms)",
                "speedup",
                "bound",
                "of bound",
                "verified",
            ],
        )
        for p in (p for p in result.points if p.work == work):
            table.add_row(
                str(p.streams),
                str(p.chunks),
                _ms(p.h2d_s),
                _ms(p.kernel_s),
                _ms(p.d2h_s),
                _ms(p.sequential_s),
                _ms(p.pipelined_s),
                f"{p.speedup:.2f}x",
                f"{p.bound:.2f}x",
                f"{p.fraction:.0%}",
                "ok" if p.valid else "[red]FAILED[/red]",
            )
        table.caption = "bound = (H2D + kernel + D2H) / the largest of them"
        tables.append(table)
    return tables
