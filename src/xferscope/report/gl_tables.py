"""What `xferscope gl` prints: the GL it ran on, every scenario's rate and verification against
CUDA pinned memcpy, the asynchronous mode as the paper's Table 1, what was refused, and the
findings in sentences."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from ..core.units import format_bytes, format_rate, format_seconds
from ..gl.records import GlResult, ScenarioResult, hidden
from .style import print_findings, print_simulated

MOST_REFUSALS_SHOWN = 8


def _verified(s: ScenarioResult) -> str:
    v = s.verification
    if v is None:
        return ""
    if v["ok"]:
        return "ok"
    return f"[red]FAILED[/red] ({v['actual_internal_format']})"


def _status(s: ScenarioResult) -> str:
    if s.status == "estimated":
        return f"estimated ({format_seconds(s.estimated_s or 0.0)} in full)"
    if s.status == "failed":
        return "[red]failed[/red]"
    return s.status


def print_gl(result: GlResult, console: Console) -> None:
    if result.simulated:
        print_simulated(console)
    gl = result.gl
    console.print(
        f"OpenGL on GPU {result.device}: {gl.get('renderer', '?')}, {gl.get('version', '?')} "
        f"(EGL {gl.get('egl_version', '?')} device {gl.get('egl_device', '?')}); each scenario "
        f"moves {format_bytes(float(result.options.get('bytes', 0)))} frame by frame"
    )
    table = Table(title="scenarios", title_justify="left")
    for name in ("scenario", "rate", "x CUDA pinned", "verified", "status", "call", "map"):
        table.add_column(
            name, justify="left" if name in ("scenario", "verified", "status") else "right"
        )
    for s in result.scenarios:
        t = s.timing
        base = result.baseline(s.op, s.frame_bytes)
        ratio = f"{t.rate / base.rate:.2f}" if t and base and base.rate else ""
        table.add_row(
            s.label,
            format_rate(t.rate) if t else "",
            ratio,
            _verified(s),
            _status(s) if s.status != "failed" else f"[red]failed[/red]: {s.error}",
            format_seconds(t.call_s / t.frames) if t else "",
            format_seconds(t.map_s / t.frames) if t else "",
        )
    console.print(table)
    console.print("call and map: time blocked per frame in the transfer call and in mapping")
    if result.baselines:
        console.print(
            "CUDA pinned cudaMemcpy of the same bytes: "
            + ", ".join(
                f"{b.op} {format_bytes(b.bytes)} {format_rate(b.rate) if b.rate else b.error}"
                for b in result.baselines
            )
        )
    for s in result.scenarios:
        if s.asynchronous and s.timing:
            _print_async(s, console)
    if result.refused:
        console.print(f"{len(result.refused)} combination(s) cannot run and were skipped:")
        for r in result.refused[:MOST_REFUSALS_SHOWN]:
            console.print(f"  {r.label}: {r.reason}")
        if len(result.refused) > MOST_REFUSALS_SHOWN:
            console.print(f"  ... and {len(result.refused) - MOST_REFUSALS_SHOWN} more (JSON)")
    print_findings(result.findings, console)


def _print_async(s: ScenarioResult, console: Console) -> None:
    """Seed 000's Table 1, one row per amount of CPU work per frame."""
    assert s.timing is not None
    table = Table(title=f"asynchronous: {s.label}", title_justify="left")
    columns = ("work/frame", "map blocking", "read blocking", "map+read", "dummy work")
    for name in (*columns, "bytes", "transfer time", "rate", "work hidden"):
        table.add_column(name, justify="right")
    for p in s.asynchronous:
        share = hidden(s.timing, p)
        table.add_row(
            format_seconds(p.work_per_frame_s),
            format_seconds(p.map_s),
            format_seconds(p.call_s),
            format_seconds(p.blocking_s),
            format_seconds(p.work_s),
            format_bytes(p.bytes),
            format_seconds(p.seconds),
            format_rate(p.rate),
            "" if share is None else f"{share:.0%}",
        )
    console.print(table)
