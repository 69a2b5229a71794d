"""The HTML page of `xferscope batch`: per direction and memory, a heat map of counts against
sizes coloured by the method that won (how many times the loop it was in the cell, every
method's time on hover) with the line up to which cudaMemcpyBatchAsync beats the loop, then the
findings and every measurement in a table. Built from html.py's parts, so it looks like the
run's report; self-contained."""

from __future__ import annotations

import json
from collections.abc import Sequence

import plotly.graph_objects as go

from ..batch.measure import METHODS, BatchResult, Cell, crossover_line
from ..core.units import format_rate, format_seconds
from .page import TEMPLATE, banners, escape, files_beside, findings_section, page, plot_div, table
from .style import category_colour


def render_batch_html(result: BatchResult, files: Sequence[str] = ()) -> str:
    title = f"xferscope batch on GPU {result.options.get('device', 0)}, {result.created}"
    body = [
        _header(result),
        banners(
            result.simulated,
            ["interrupted before every batch ran"] if result.interrupted else [],
        ),
        _maps(result),
        findings_section(result.findings),
        _cells(result),
        f"<footer>{files_beside(files, 'study')}<p>Written by xferscope "
        f"{escape(result.tool_version)}. Times are per batch, host time from the first call to the "
        "batch's completion (the median of the trials); GB/s means 10⁹ bytes per second.</p>"
        "</footer>",
    ]
    return page(title, body, result.simulated)


def _header(result: BatchResult) -> str:
    gpus = result.machine.get("gpus") or [{}]
    host = result.machine.get("host", {}) or {}
    facts = [
        ("created", result.created),
        ("GPU", f"{result.options.get('device', 0)}: {gpus[0].get('name', '?')}"),
        ("host", host.get("hostname", "unknown")),
        ("CPU", host.get("cpu", "unknown")),
        ("driver", result.machine.get("driver") or "unknown"),
        ("xferscope", result.tool_version),
        ("wall time", format_seconds(result.wall_s)),
        ("options", ", ".join(f"{k}={json.dumps(v)}" for k, v in result.options.items())),
    ]
    items = "".join(f"<dt>{escape(k)}</dt><dd>{escape(v)}</dd>" for k, v in facts)
    return (
        f'<header><h1>xferscope batch</h1><dl class="facts">{items}</dl>'
        "<p>N copies of S bytes by every method the engine has, each verified byte for byte, "
        "then timed; a method wins a cell when it beats the loop of cudaMemcpyAsync by more "
        "than 3%.</p></header>"
    )


def _hover(cells: Sequence[Cell]) -> str:
    timed = sorted((c for c in cells if c.seconds), key=lambda c: c.seconds or 0.0)
    if not timed:
        return "not measured"
    best = timed[0].seconds or 1.0
    return "<br>".join(
        f"{c.method}: {format_seconds(c.seconds or 0.0)}"
        + ("" if c is timed[0] else f" ({(c.seconds or 0.0) / best:.2f}x)")
        for c in timed
    )


def _maps(result: BatchResult) -> str:
    winners = result.winners()
    by_cell: dict[tuple[str, str, int, int], list[Cell]] = {}
    for c in result.cells:
        by_cell.setdefault((c.direction, c.memory, c.count, c.size), []).append(c)
    mixed = any(c.mix for c in result.cells)
    n = len(METHODS)
    # one colour per method, in METHODS' order, as batch.png has them
    scale = [[(i + j) / n, category_colour(i)] for i in range(n) for j in (0, 1)]
    parts = []
    for direction, memory in dict.fromkeys((k[0], k[1]) for k in winners):
        keys = [k for k in winners if k[:2] == (direction, memory)]
        counts = sorted({k[2] for k in keys})
        sizes = sorted({k[3] for k in keys})
        z: list[list[float | None]] = []
        text: list[list[str]] = []
        hover: list[list[str]] = []
        for count in counts:
            z_row: list[float | None] = []
            t_row, h_row = [], []
            for size in sizes:
                entry = winners.get((direction, memory, count, size))
                if entry is None:
                    z_row.append(None)
                    t_row.append("")
                else:
                    best, gain = entry
                    z_row.append(METHODS.index(best.method))
                    t_row.append(best.method + ("" if gain is None else f"<br>{gain:.1f}x"))
                h_row.append(_hover(by_cell.get((direction, memory, count, size), [])))
            z.append(z_row)
            text.append(t_row)
            hover.append(h_row)
        fig = go.Figure(
            go.Heatmap(
                z=z,
                x=list(range(len(sizes))),
                y=list(range(len(counts))),
                text=text,
                texttemplate="%{text}",
                customdata=hover,
                hovertemplate="%{customdata}<extra></extra>",
                colorscale=scale,
                zmin=-0.5,
                zmax=n - 0.5,
                colorbar={
                    "title": "winner",
                    "tickvals": list(range(n)),
                    "ticktext": list(METHODS),
                },
                xgap=1,
                ygap=1,
            )
        )
        xs, ys = crossover_line(result, direction, memory, counts, sizes)
        if xs:
            fig.add_trace(
                go.Scatter(
                    x=xs,
                    y=ys,
                    mode="lines",
                    line={"color": "black", "width": 3, "dash": "dash"},
                    name="cudaMemcpyBatchAsync beats the loop left of this line",
                    hoverinfo="skip",
                    showlegend=False,
                )
            )
        fig.update_layout(
            template=TEMPLATE,
            height=140 + 60 * len(counts),
            margin={"l": 70, "r": 20, "t": 30, "b": 60},
            xaxis={
                "title": "bytes per copy",
                "tickvals": list(range(len(sizes))),
                "ticktext": [result.size_label(s) for s in sizes],
            },
            yaxis={
                "title": "copies per batch",
                "tickvals": list(range(len(counts))),
                "ticktext": [str(c) for c in counts],
            },
        )
        parts.append(
            f"<h3>{escape(direction)} from {escape(memory)} memory</h3>"
            + plot_div(f"batch-{direction}-{memory}", fig)
        )
    if not parts:
        return ""
    line = (
        ""
        if mixed
        else '<p class="caption">Dashed line: cudaMemcpyBatchAsync (any source order) beats the '
        "loop in every cell to its left, row by row. Hover a cell for every method's time.</p>"
    )
    return (
        "<section><h2>Fastest method (x: against a loop of cudaMemcpyAsync)</h2>"
        + line
        + "".join(parts)
        + "</section>"
    )


def _cells(result: BatchResult) -> str:
    rows = []
    for c in result.cells:
        seconds = c.seconds
        rows.append(
            [
                c.direction,
                c.memory,
                c.count,
                result.size_label(c.size),
                c.method,
                c.status,
                "" if seconds is None else format_seconds(seconds),
                "" if seconds is None else format_rate(c.bytes / seconds),
                c.error or "",
            ]
        )
    return (
        "<section><h2>Every batch</h2>"
        + table(
            ["direction", "memory", "copies", "size", "method", "status", "time", "rate", "note"],
            rows,
            ["", "", "num", "num", "", "", "num", "num", ""],
        )
        + "</section>"
    )
