"""The HTML page of `xferscope trace`: the findings priced, nvprof's table of GPU activities, the
copies per direction and memory, and a zoomable timeline of copies and kernels per process and
stream (drag to zoom, double-click to reset). Built from html.py's parts."""

from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go

from ..core.units import format_bytes, format_rate, format_seconds
from ..trace.document import TraceResult
from ..trace.records import api_name, shown
from ..trace.timeline import valid
from .page import TEMPLATE, escape, files_beside, findings_section, page, plot_div, table
from .trace_tables import gpu_line, idle_lines, looks_said, phase_lines

MOST_SPANS = 20_000  # spans drawn; beyond, the longest are kept
COLORS = {
    "h2d": "#1f77b4",
    "d2h": "#ff7f0e",
    "d2d": "#2ca02c",
    "p2p": "#9467bd",
    "kernel": "#999999",
    "host waiting": "#d62728",
}


def render_trace_html(result: TraceResult, files: Sequence[str] = ()) -> str:
    command = " ".join(result.options.get("command", []))
    s = result.summary
    ended = f"ended on {result.signal}" if result.signal else f"exit status {result.returncode}"
    rates = (s.get("reference") or {}).get("source") or "no reference rates"
    body = [
        f"<header><h1>xferscope trace</h1><p><code>{escape(command)}</code>: "
        f"{result.wall_s:.3g} s, {escape(ended)}. This machine's rates: {escape(rates)}.</p>"
        + "".join(f"<p>{escape(line)}</p>" for line in phase_lines(s))
        + "</header>",
        findings_section(result.findings),
        _lines(result),
        _timeline(result),
        "<section><h2>GPU activities (nvprof's table)</h2>"
        + table(
            ["Time(%)", "Time", "Calls", "Avg", "Min", "Max", "Name"],
            [
                [
                    f"{r['time_share']:.2%}",
                    format_seconds(r["total_s"]),
                    r["calls"],
                    format_seconds(r["avg_s"]),
                    format_seconds(r["min_s"]),
                    format_seconds(r["max_s"]),
                    r["kind"],
                ]
                for r in s.get("table", [])
            ],
            ["num", "num", "num", "num", "num", "num", ""],
        )
        + "</section>",
        "<section><h2>Copies by direction and host memory</h2>"
        + table(
            ["copies", "calls", "bytes", "GPU time", "rate", "of this machine", "host blocked"],
            [
                [
                    f"{g['direction']} {g['memory']}",
                    g["calls"],
                    format_bytes(g["bytes"]),
                    format_seconds(g["gpu_s"]),
                    format_rate(g["rate_bps"]),
                    "" if g.get("of_reach") is None else f"{g['of_reach']:.0%}",
                    format_seconds(g["blocked_s"]) if g["blocked_s"] else "",
                ]
                for g in s.get("groups", [])
            ],
            ["", "num", "num", "num", "num", "num", "num"],
        )
        + "</section>",
        f"<footer>{files_beside(files, 'trace')}</footer>",
    ]
    return page(f"xferscope trace: {command}", body)


def _lines(result: TraceResult) -> str:
    """Per finding, the lines of the program that made its calls (a version 1 document has
    none to show)."""
    rows = [
        [
            f["title"],
            shown(p["where"]),
            p.get("code", ""),
            p["calls"] or looks_said(p) or 0,
            format_bytes(p["bytes"]),
            format_seconds(p["cost_s"]),
        ]
        for f in result.summary.get("fixes", [])
        for p in f.get("places", [])
    ]
    if not rows:
        return ""
    return (
        "<section><h2>Where the findings' calls were made</h2>"
        + table(
            ["finding", "line", "code", "calls", "bytes", "cost"],
            rows,
            ["", "", "", "num", "num", "num"],
        )
        + "</section>"
    )


def _timeline(result: TraceResult) -> str:
    spans = [
        (
            c["direction"],
            f"pid {c['pid']} stream {c['stream']}",
            c["start_ns"],
            c["end_ns"],
            f"{c['direction']} {c['src']}→{c['dst']} {format_bytes(c['bytes'])}",
        )
        for c in result.copies
    ]
    spans += [
        (
            "kernel",
            f"pid {k['pid']} stream {k['stream']}",
            k["start_ns"],
            k["end_ns"],
            k["name"][:80],
        )
        for k in result.summary.get("spans", [])
    ]
    spans += [  # the host's waits, on a row of the thread that waited
        (
            "host waiting",
            f"pid {w['pid']} thread {w['thread']}",
            w["start_ns"],
            w["end_ns"],
            f"{api_name(w['function'])} at {shown(w['where'] or '(no line recorded)')}",
        )
        for w in result.summary.get("waits", [])
    ]
    spans = [x for x in spans if valid(x[2], x[3])]  # a record without times stays off the axis
    if not spans:
        return ""
    if len(spans) > MOST_SPANS:
        spans = sorted(spans, key=lambda x: x[3] - x[2], reverse=True)[:MOST_SPANS]
    origin = min(x[2] for x in spans)
    fig = go.Figure()
    for kind in dict.fromkeys(x[0] for x in spans):
        mine = [x for x in spans if x[0] == kind]
        fig.add_trace(
            go.Bar(
                orientation="h",
                base=[(x[2] - origin) / 1e6 for x in mine],
                x=[max(x[3] - x[2], 1) / 1e6 for x in mine],
                y=[x[1] for x in mine],
                name=kind,
                marker_color=COLORS.get(kind, "#17becf"),
                text=[x[4] for x in mine],
                hovertemplate="%{text}<br>%{base:.3f} ms + %{x:.4f} ms<extra></extra>",
            )
        )
    loop = result.summary.get("steps") or {}
    if loop.get("start_ns") and loop["start_ns"] > origin:  # what came before the steps
        fig.add_vrect(
            x0=0, x1=(loop["start_ns"] - origin) / 1e6, fillcolor="#7f7f7f", opacity=0.12,
            line_width=0, annotation_text="start-up", annotation_position="top left",
        )  # fmt: skip
    rows = len({x[1] for x in spans})
    fig.update_layout(
        template=TEMPLATE,
        barmode="overlay",
        height=160 + 28 * rows,
        margin={"l": 140, "r": 20, "t": 30, "b": 50},
        xaxis_title="ms since the first GPU activity (drag to zoom, double-click to reset)",
    )
    caption = "".join(
        f'<p class="caption">{escape(line)}</p>'
        for g in result.summary.get("gpus", [])
        for line in (
            f"GPU {g['device']}: {gpu_line(g)}",
            *idle_lines(g),
        )
    )
    return "<section><h2>Timeline</h2>" + plot_div("timeline", fig) + caption + "</section>"
