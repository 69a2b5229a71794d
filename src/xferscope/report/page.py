"""The HTML page toolkit every report page is built with: a whole page (title, style, plotly.js
inline, so it opens with no network), escaped text and tables, banners, the findings section,
plotly figures as divs, and the links to the files beside a page. The run page is run_html.py;
batch, gemm, trace and fleet have their own pages on the same toolkit.

Every string taken from a result is escaped, in the page and in the figures (plotly reads its
text as HTML)."""

from __future__ import annotations

import functools
import html
import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

import plotly.graph_objects as go
import plotly.io as pio
import plotly.offline

from ..core.findings import ERROR, INFO, OK, WARNING, Finding
from ..core.units import format_flops, format_rate, format_seconds
from .style import SIMULATED

# Worst first: the order findings are listed in.
SEVERITY_RANK = {ERROR: 0, WARNING: 1, INFO: 2, OK: 3}


INVALID_COLOR = "#d00000"


FONT = "system-ui, -apple-system, 'Segoe UI', Roboto, 'Helvetica Neue', Arial, sans-serif"


PLOT_CONFIG = {"displaylogo": False, "responsive": True}


TEMPLATE = "plotly_white"


class Html(str):
    """Markup built here, already escaped: table cells pass it through as it is."""


class RowClass(str):
    """A CSS class for a table row, given as the row's first element."""


def escape(value: object) -> str:
    return html.escape(str(value))


def cell(value: object) -> str:
    return value if isinstance(value, Html) else escape(value)


def table(
    headers: Sequence[str], rows: Iterable[Sequence[object]], classes: Sequence[str] = ()
) -> Html:
    """A table; columns whose class is "num" are right-aligned. Row classes come from a
    leading RowClass cell."""
    head = "".join(
        f'<th class="{c}">{escape(h)}</th>' if c else f"<th>{escape(h)}</th>"
        for h, c in zip(headers, pad(classes, len(headers)), strict=True)
    )
    body = []
    for row in rows:
        row_class = ""
        if row and isinstance(row[0], RowClass):
            row_class = f' class="{row[0]}"' if row[0] else ""
            row = row[1:]
        cells = "".join(
            f'<td class="{c}">{cell(v)}</td>' if c else f"<td>{cell(v)}</td>"
            for v, c in zip(row, pad(classes, len(row)), strict=True)
        )
        body.append(f"<tr{row_class}>{cells}</tr>")
    return Html(f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>")


def pad(classes: Sequence[str], n: int) -> list[str]:
    return [*classes, *([""] * (n - len(classes)))][:n]


def red(text: str) -> Html:
    return Html(f'<span class="bad">{escape(text)}</span>')


def noise(rel: float) -> str:
    return "n/a" if math.isnan(rel) else f"{rel:.1%}"


def finding_value(figure: str, value: float) -> str:
    """A finding's figure in its unit, guessed from the metric name (metrics.py names end in
    /bandwidth or /latency; pinning costs end in _per_gb and are seconds)."""
    if figure.endswith("bandwidth"):
        return format_rate(value)
    if figure.endswith(("latency", "_per_gb", "_s")):
        return format_seconds(value)
    if figure.endswith(" best"):  # a GEMM's best throughput
        return format_flops(value)
    return f"{value:.4g}"


def page(title: str, body: Sequence[str], simulated: bool = False) -> str:
    """A whole report page: its title (marked SIMULATED for the simulated engine's results), the
    style, plotly.js inline (the page works offline) and the body's parts."""
    if simulated:
        title = "SIMULATED " + title
    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en">',
            "<head>",
            '<meta charset="utf-8">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            f"<title>{escape(title)}</title>",
            f"<style>{css()}</style>",
            "<script>window.PlotlyConfig = {MathJaxConfig: 'local'};</script>",
            f"<script>{plotly.offline.get_plotlyjs()}</script>",
            "</head>",
            "<body>",
            '<main class="page">',
            *(part for part in body if part),
            "</main>",
            "</body>",
            "</html>",
            "",
        ]
    )


def prepare() -> None:
    """Loads now what plotly loads on first use (its validators and template, a few tenths of a
    second), so the report is drawn quickly after measuring and a Ctrl-C never lands inside an
    import. The CLI calls it before measuring."""
    fig = go.Figure(go.Scatter(x=[1, 2], y=[1, 2], mode="lines+markers", customdata=[[1], [2]]))
    fig.add_trace(go.Heatmap(z=[[1.0]], text=[["x"]]))
    fig.update_layout(
        template=TEMPLATE,
        xaxis={"type": "log", "minor": {"showgrid": True}},
        yaxis={"type": "log", "minor": {"showgrid": True}},
    )
    plot_div("prepare", fig)
    plot_div("prepare", figure([{"type": "scatter", "x": [1], "y": [1]}], height=100))


def banners(simulated: bool, incomplete: Sequence[str]) -> str:
    """The page's warnings, every command's alike: SIMULATED, and INCOMPLETE with its reasons."""
    out = []
    if simulated:
        out.append(f'<div class="banner simulated">{escape(SIMULATED)}</div>')
    if incomplete:
        text = "INCOMPLETE: " + "; ".join(incomplete) + ". Missing figures are not zeros."
        out.append(f'<div class="banner incomplete">{escape(text)}</div>')
    return "".join(out)


def severity_class(severity: str) -> str:
    return severity if severity in SEVERITY_RANK else "unknown"


def findings_section(findings: Sequence[Finding]) -> str:
    ordered = sorted(findings, key=lambda f: SEVERITY_RANK.get(f.severity, len(SEVERITY_RANK)))
    counts = [
        f"{n} {s}"
        for s in (ERROR, WARNING, INFO, OK)
        if (n := sum(f.severity == s for f in ordered))
    ]
    parts = [f'<h2>Findings</h2><p class="summary">{escape(", ".join(counts) or "none")}</p>']
    for f in ordered:
        where = f"GPU {f.gpu}" if f.gpu is not None else "all GPUs"
        figure = f.figure
        if f.value is not None:
            figure += f" = {finding_value(f.figure, f.value)}"
        if f.reference is not None:
            figure += f" (reference {finding_value(f.figure, f.reference)})"
        details = "".join(
            f"<dt>{label}</dt><dd>{escape(text)}</dd>"
            for label, text in (("cause", f.cause), ("fix", f.fix))
            if text
        )
        parts.append(
            f'<div class="finding {severity_class(f.severity)}">'
            f'<div class="finding-head"><span class="badge">{escape(f.severity.upper())}</span>'
            f'<span class="where">{escape(where)}</span>'
            f'<span class="message">{escape(f.message)}</span></div>'
            + (f"<dl>{details}</dl>" if details else "")
            + f'<div class="figure">{escape(f.code)} · {escape(figure)}</div></div>'
        )
    return '<section id="findings">' + "".join(parts) + "</section>"


def files_beside(files: Sequence[str], what: str = "run") -> str:
    """The links to a result's other files, which sit beside its page."""
    if not files:
        return ""
    links = "".join(
        f'<li><a href="{escape(quote(name))}">{escape(name)}</a></li>' for name in files
    )
    return f"<p>The other files of this {what} sit beside this page:</p><ul>{links}</ul>"


# A figure as plotly.js reads it, {"data": [trace, ...], "layout": {...}}, built as plain dicts:
# plotly.py's figure objects validate every property and copy the template into each figure,
# which took 0.2-0.3 s of the run page's drawing (six figures a GPU) after measuring.
Figure = dict[str, Any]


@functools.cache
def _template() -> dict[str, Any]:
    return dict(pio.templates[TEMPLATE].to_plotly_json())


def figure(data: list[dict[str, Any]], **layout: Any) -> Figure:
    """A figure of plain traces ({"type": "scatter", ...}) with the pages' template."""
    return {"data": data, "layout": {"template": _template(), **layout}}


def plot_div(name: str, fig: go.Figure | Figure, matrix: bool = False) -> str:
    """A figure as a div and the inline script that draws it with the plotly.js in <head>."""
    plain = isinstance(fig, dict)
    layout = fig["layout"] if isinstance(fig, dict) else fig.layout.to_plotly_json()
    width, height = layout.get("width"), layout.get("height")
    markup = pio.to_html(
        fig,
        full_html=False,
        include_plotlyjs=False,
        div_id=f"plot-{name}",
        # A matrix is small and fixed: its mode bar (zoom, pan) would only cover it.
        config=PLOT_CONFIG | ({"displayModeBar": False} if matrix else {}),
        default_width=f"{width}px" if width else "100%",
        default_height=f"{height}px",
        validate=not plain,
    )
    return f'<div class="{"matrix" if matrix else "plot"}">{markup}</div>'


def css() -> str:
    """html.css, with the plots' font, to inline into the page."""
    return (
        Path(__file__).with_name("html.css").read_text(encoding="utf-8").replace("FONT_STACK", FONT)
    )
