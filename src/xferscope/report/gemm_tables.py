"""What `xferscope gemm` prints: every GEMM's throughput, verification and algorithm, seed 003's
Table III (mean throughput per alignment class) for each precision, and the findings."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from ..core.units import format_seconds
from ..gemm.records import GemmResult, classes
from .style import print_findings, print_simulated


def print_gemm(result: GemmResult, console: Console) -> None:
    if result.simulated:
        print_simulated(console)
    gpu = next((g.get("name") for g in result.machine.get("gpus", [])), "?")
    version = result.blas.get("version")
    console.print(
        f"GEMM on GPU {result.device} ({gpu}) through {result.blas.get('library')}"
        f"{f' {version}' if version else ''}: C = alpha op(A) op(B) + beta C, inputs random, "
        "timed with CUDA events, a sample of outputs checked in double precision"
    )
    table = Table(title="GEMMs", title_justify="left")
    memories = list(dict.fromkeys(t["memory"] for p in result.points for t in p.transfers))
    moved = [f"{m} {form}" for m in memories for form in ("seq", "tiled")]
    padding = any(p.padded for p in result.points)
    columns = (
        "precision",
        "shape",
        "align",
        "TFLOP/s",
        "of peak",
        "of best",
        "time",
        "spread",
        "verified",
        "algo",
        *(("padded", "gain") if padding else ()),
    )
    for name in (*columns, *moved):
        table.add_column(
            name, justify="left" if name in ("precision", "shape", "verified") else "right"
        )
    for p in result.points:
        if p.status == "skipped":
            continue
        a = p.algorithm or {}
        of_peak, of_best = result.shares(p)
        padded = p.padded or {}
        gain = p.pad_gain
        pad_cells = (
            (
                f"{padded['m']}x{padded['n']}x{padded['k']}" if padded else "",
                ("" if gain is None else f"{gain:.2f}x")
                if not padded.get("error")
                else "[red]failed[/red]",
            )
            if padding
            else ()
        )
        verified = "" if p.verified is None else ("ok" if p.verified else "[red]FAILED[/red]")
        table.add_row(
            p.precision,
            p.shape.label
            + (
                ""
                if (p.trans_a, p.trans_b) == (False, False)
                else f" {'T' if p.trans_a else 'N'}{'T' if p.trans_b else 'N'}"
            ),
            str(p.alignment),
            f"{p.flops / 1e12:.1f}" if p.flops else f"[red]{p.status}[/red]",
            "" if of_peak is None else f"{of_peak:.0%}",
            "" if of_best is None else f"{of_best:.0%}",
            format_seconds(p.median_s) if p.median_s else (p.error or ""),
            f"{p.spread:.1%}" if p.seconds else "",
            verified,
            f"{a.get('id', '')}/{a.get('tile', '')}" if a else "",
            *pad_cells,
            *(
                "" if (rate := p.transfer_flops(m, tiled)) is None else f"{rate / 1e12:.1f}"
                for m in memories
                for tiled in (False, True)
            ),
        )
    console.print(table)
    if memories:
        console.print(
            "seq and tiled: TFLOP/s with A and B uploaded and C downloaded, in sequence and in "
            "column tiles over streams (copies overlapping the GEMMs)"
        )
    if padding:
        console.print(
            "padded: the shape run as this larger one, its A and B copied in and C copied out; "
            "gain: how many times as fast as the shape itself (above 1, padding pays)"
        )
    peaks = {p: top for p in result.precisions if (top := result.peak(p)) is not None}
    for precision, top in peaks.items():
        console.print(f"peak {precision}: {top.flops / 1e12:.1f} TFLOP/s ({top.source})")
    for precision in dict.fromkeys(p.precision for p in result.points):
        rows = classes(result, precision)
        if len(rows) < 2:
            continue
        t = Table(title=f"{precision}: mean throughput per alignment class", title_justify="left")
        for name in ("divisible by", "mean TFLOP/s", "shapes"):
            t.add_column(name, justify="right")
        for c, flops, n in rows:
            t.add_row(str(c), f"{flops / 1e12:.1f}", str(n))
        console.print(t)
    _print_cpu(result, console)
    _print_ladder(result, console)
    skipped = [p for p in result.points if p.status == "skipped"]
    if skipped:
        reasons = dict.fromkeys(f"{p.precision}: {p.error}" for p in skipped)
        console.print(f"{len(skipped)} GEMM(s) cannot run here and were skipped:")
        for reason in reasons:
            console.print(f"  {reason}")
    print_findings(result.findings, console)


def _print_cpu(result: GemmResult, console: Console) -> None:
    """Seed 003's Figure 9: GFLOP/s on the CPU against threads, per precision and shape."""
    done = [c for c in result.cpu if c.flops and c.role == "scaling"]
    if not done:
        return
    threads = sorted({c.threads for c in done})
    blas = result.cpu_blas or {}
    table = Table(
        title=f"CPU GFLOP/s ({blas.get('internal_api')} {blas.get('version')}, threads pinned)",
        title_justify="left",
    )
    table.add_column("precision")
    table.add_column("shape")
    for t in threads:
        table.add_column(f"{t} thr", justify="right")
    rows = dict.fromkeys((c.precision, c.shape) for c in done)
    for precision, shape in rows:
        cells = {c.threads: c for c in done if (c.precision, c.shape) == (precision, shape)}
        table.add_row(
            precision,
            shape.label,
            *(
                f"{(cells[t].flops or 0) / 1e9:.0f}" + ("" if cells[t].verified else " [red]!")
                if t in cells
                else ""
                for t in threads
            ),
        )
    console.print(table)


def _print_ladder(result: GemmResult, console: Console) -> None:
    """The offload ladder: GFLOP/s of the GPU with its transfers against the CPU, per size."""
    for precision in result.precisions:
        gpu = {p.shape: p for p in result.ladder if p.precision == precision}
        cpu = [c for c in result.cpu if c.role == "ladder" and c.precision == precision]
        if not gpu or not cpu:
            continue
        threads = sorted({c.threads for c in cpu})
        table = Table(
            title=f"{precision}: offload ladder, GFLOP/s (the GPU's with transfers from pinned "
            "memory included)",
            title_justify="left",
        )
        for name in ("size", "GPU", "GPU compute", *(f"CPU {t} thr" for t in threads)):
            table.add_column(name, justify="right")
        for shape, p in gpu.items():
            cells = {c.threads: c.flops for c in cpu if c.shape == shape}
            rate = p.transfer_flops("pinned")
            table.add_row(
                shape.label,
                "" if rate is None else f"{rate / 1e9:.1f}",
                "" if p.flops is None else f"{p.flops / 1e9:.1f}",
                *(f"{(cells[t] or 0) / 1e9:.1f}" if t in cells else "" for t in threads),
            )
        console.print(table)
