"""The self-contained HTML report of `xferscope run`.

Verdicts and warnings come first (worst first), then per GPU: its link, interactive plots of
bandwidth and latency against size, and tables of the headline figures, concurrent copies and
what pinning costs; then the peer-to-peer matrix and every GPU to the host at once.

The page opens with no network: plotly.js is inlined once in <head>, every figure is a div
drawn by a short inline script, and no font, style or image is fetched. Every string taken
from the result is escaped, in the page and in the figures (plotly reads its text as HTML).
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

import plotly.graph_objects as go
import plotly.io as pio
import plotly.offline

from ..core.findings import ERROR, INFO, OK, WARNING, Finding
from ..core.units import format_bytes, format_flops, format_rate, format_seconds
from ..documents.files import atomic_write
from ..gemm.check import GemmCheck
from ..gl.check import GlCheck
from ..run.metrics import HEADLINE_CURVES
from ..run.records import (
    Concurrent,
    GpuSection,
    OverlapPoint,
    PinningCost,
    RunResult,
)
from ..sweep.records import ESTIMATED, Curve, Point
from .plots import physical_limit
from .style import SIMULATED, curve_style, legend_label, panels
from .sweep_tables import wall_time

# Worst first: the order findings are listed in.
_SEVERITY_RANK = {ERROR: 0, WARNING: 1, INFO: 2, OK: 3}

_INVALID_COLOR = "#d00000"

_FONT = "system-ui, -apple-system, 'Segoe UI', Roboto, 'Helvetica Neue', Arial, sans-serif"
_PLOT_CONFIG = {"displaylogo": False, "responsive": True}


class _Html(str):
    """Markup built here, already escaped: table cells pass it through as it is."""


class _RowClass(str):
    """A CSS class for a table row, given as the row's first element."""


def _e(value: object) -> str:
    return html.escape(str(value))


def _cell(value: object) -> str:
    return value if isinstance(value, _Html) else _e(value)


def _table(
    headers: Sequence[str], rows: Iterable[Sequence[object]], classes: Sequence[str] = ()
) -> _Html:
    """A table; columns whose class is "num" are right-aligned. Row classes come from a
    leading _RowClass cell."""
    head = "".join(
        f'<th class="{c}">{_e(h)}</th>' if c else f"<th>{_e(h)}</th>"
        for h, c in zip(headers, _pad(classes, len(headers)), strict=True)
    )
    body = []
    for row in rows:
        row_class = ""
        if row and isinstance(row[0], _RowClass):
            row_class = f' class="{row[0]}"' if row[0] else ""
            row = row[1:]
        cells = "".join(
            f'<td class="{c}">{_cell(v)}</td>' if c else f"<td>{_cell(v)}</td>"
            for v, c in zip(row, _pad(classes, len(row)), strict=True)
        )
        body.append(f"<tr{row_class}>{cells}</tr>")
    return _Html(f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>")


def _pad(classes: Sequence[str], n: int) -> list[str]:
    return [*classes, *([""] * (n - len(classes)))][:n]


def _red(text: str) -> _Html:
    return _Html(f'<span class="bad">{_e(text)}</span>')


# ---- formatting ------------------------------------------------------------------------------


def _noise(rel: float) -> str:
    return "n/a" if math.isnan(rel) else f"{rel:.1%}"


def _finding_value(figure: str, value: float) -> str:
    """A finding's figure in its unit, guessed from the metric name (metrics.py names end in
    /bandwidth or /latency; pinning costs end in _per_gb and are seconds)."""
    if figure.endswith("bandwidth"):
        return format_rate(value)
    if figure.endswith(("latency", "_per_gb", "_s")):
        return format_seconds(value)
    if figure.endswith(" best"):  # a GEMM's best throughput
        return format_flops(value)
    return f"{value:.4g}"


# ---- page ------------------------------------------------------------------------------------


def render_html(result: RunResult, files: Sequence[str] = ()) -> str:
    """The report page of a run. `files` names the run's other output files (JSON, CSV, PNG),
    which sit beside the page: the footer links to them relatively."""
    body = [
        _header(result),
        _banners(result),
        _findings_section(result.findings),
        *(_gpu_section(result, gpu) for gpu in result.gpus),
        _multi_section(result),
        _footer(result, files),
    ]
    host = result.machine.get("host", {}).get("hostname", "")
    title = "xferscope run" + (f" on {host}" if host else "") + f", {result.created}"
    return page(title, body, result.simulated)


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
            f"<title>{_e(title)}</title>",
            f"<style>{_css()}</style>",
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
        template="plotly_white",
        xaxis={"type": "log", "minor": {"showgrid": True}},
        yaxis={"type": "log", "minor": {"showgrid": True}},
    )
    _plot_div("prepare", fig)


def write_html(result: RunResult, path: Path | str, files: Sequence[str] = ()) -> Path:
    """Writes the report page atomically; returns its path."""
    path = Path(path)
    atomic_write(path, render_html(result, files))
    return path


def _header(result: RunResult) -> str:
    machine = result.machine
    host: dict[str, Any] = machine.get("host", {}) or {}
    cpu = host.get("cpu", "unknown CPU")
    if host.get("cores"):
        cpu += f", {host['cores']} cores"
    if host.get("numa_nodes"):
        cpu += f", {host['numa_nodes']} NUMA node" + ("s" if host["numa_nodes"] != 1 else "")
    gpus = machine.get("gpus", []) or []
    names = sorted({str(g.get("name", "?")) for g in gpus})
    facts = [
        ("created", result.created),
        ("mode", result.mode),
        wall_time(result.simulated, result.wall_s, result.elapsed_s),
        ("host", host.get("hostname", "unknown")),
        ("CPU", cpu),
        ("OS", host.get("os", "unknown")),
        ("GPUs", f"{len(gpus)} × {', '.join(names)}" if gpus else "none"),
        ("driver", machine.get("driver") or "unknown"),
        ("CUDA runtime", machine.get("cuda_runtime") or "unknown"),
        ("CUDA driver API", machine.get("cuda_driver_api") or "unknown"),
        ("xferscope", result.tool_version),
        ("options", ", ".join(f"{k}={json.dumps(v)}" for k, v in result.options.items())),
    ]
    items = "".join(f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>" for k, v in facts)
    notes = "".join(f"<li>{_e(n)}</li>" for n in result.notes)
    return (
        "<header><h1>xferscope run</h1>"
        f'<dl class="facts">{items}</dl>'
        + (f'<ul class="notes">{notes}</ul>' if notes else "")
        + "</header>"
    )


def banners(simulated: bool, incomplete: Sequence[str]) -> str:
    """The page's warnings, every command's alike: SIMULATED, and INCOMPLETE with its reasons."""
    out = []
    if simulated:
        out.append(f'<div class="banner simulated">{_e(SIMULATED)}</div>')
    if incomplete:
        text = "INCOMPLETE: " + "; ".join(incomplete) + ". Missing figures are not zeros."
        out.append(f'<div class="banner incomplete">{_e(text)}</div>')
    return "".join(out)


def _banners(result: RunResult) -> str:
    reasons = []
    if result.interrupted:
        reasons.append("interrupted before every measurement ran")
    reasons += [f"GPU {g.index} {g.status}" for g in result.gpus if g.status != "complete"]
    return banners(result.simulated, reasons)


def _severity_class(severity: str) -> str:
    return severity if severity in _SEVERITY_RANK else "unknown"


def _findings_section(findings: Sequence[Finding]) -> str:
    ordered = sorted(findings, key=lambda f: _SEVERITY_RANK.get(f.severity, len(_SEVERITY_RANK)))
    counts = [
        f"{n} {s}"
        for s in (ERROR, WARNING, INFO, OK)
        if (n := sum(f.severity == s for f in ordered))
    ]
    parts = [f'<h2>Findings</h2><p class="summary">{_e(", ".join(counts) or "none")}</p>']
    for f in ordered:
        where = f"GPU {f.gpu}" if f.gpu is not None else "all GPUs"
        figure = f.figure
        if f.value is not None:
            figure += f" = {_finding_value(f.figure, f.value)}"
        if f.reference is not None:
            figure += f" (reference {_finding_value(f.figure, f.reference)})"
        details = "".join(
            f"<dt>{label}</dt><dd>{_e(text)}</dd>"
            for label, text in (("cause", f.cause), ("fix", f.fix))
            if text
        )
        parts.append(
            f'<div class="finding {_severity_class(f.severity)}">'
            f'<div class="finding-head"><span class="badge">{_e(f.severity.upper())}</span>'
            f'<span class="where">{_e(where)}</span>'
            f'<span class="message">{_e(f.message)}</span></div>'
            + (f"<dl>{details}</dl>" if details else "")
            + f'<div class="figure">{_e(f.code)} · {_e(figure)}</div></div>'
        )
    return '<section id="findings">' + "".join(parts) + "</section>"


# ---- per GPU ---------------------------------------------------------------------------------


def _gpu_info(result: RunResult, index: int) -> dict[str, Any]:
    return next((g for g in result.machine.get("gpus", []) or [] if g.get("index") == index), {})


def _gpu_section(result: RunResult, gpu: GpuSection) -> str:
    info = _gpu_info(result, gpu.index)
    status_class = "ok" if gpu.status == "complete" else "bad"
    parts = [
        f'<section class="gpu" id="gpu{gpu.index}">',
        f"<h2>GPU {gpu.index}: {_e(info.get('name', 'unknown GPU'))} "
        f'<span class="status {status_class}">{_e(gpu.status)}</span></h2>',
        _link_line(info),
    ]
    if gpu.error:
        parts.append(f'<p class="gpu-error">{_e(gpu.error)}</p>')
    if gpu.status == "failed":
        parts.append("</section>")
        return "".join(parts)

    groups = panels(gpu.curves)
    if groups:
        parts.append('<div class="plots">')
        for title, curves in groups:
            direction = curves[0].config.direction
            limit = physical_limit({"gpus": [info]}, direction)
            for what, y_title, value, unit in (
                ("bandwidth", "bandwidth (GB/s, 10⁹ B/s)", _bandwidth, "GB/s"),
                ("latency", "latency per copy (µs)", _latency, "µs"),
            ):
                figure = _curve_figure(
                    curves,
                    f"{title}: {what} vs size",
                    y_title,
                    value,
                    unit,
                    limit if what == "bandwidth" else None,
                )
                parts.append(_plot_div(f"gpu{gpu.index}-{direction}-{what}", figure))
        parts.append("</div>")
    if not gpu.curves:
        parts.append('<p class="muted">No curves were measured on this GPU.</p>')
    if gpu.curves:
        parts.append("<h3>Headline figures per curve</h3>")
        parts.append(_curves_table(info, gpu.curves))
    if gpu.concurrent:
        parts.append("<h3>Concurrent copies</h3>")
        parts.append(_concurrent_table(gpu.concurrent))
    if gpu.pinning is not None:
        parts.append("<h3>What pinning costs</h3>")
        parts.append(_pinning_table(gpu.pinning))
    if gpu.overlap:
        parts.append("<h3>Can the CPU work during a copy?</h3>")
        parts.append(_overlap_table(gpu.overlap))
    if gpu.gl is not None:
        parts.append("<h3>OpenGL</h3>")
        parts.append(_gl_table(gpu.gl))
    if gpu.gemm is not None:
        parts.append("<h3>GEMM</h3>")
        parts.append(_gemm_table(gpu.gemm))
    parts.append("</section>")
    return "".join(parts)


def _link_line(info: dict[str, Any]) -> str:
    if not info:
        return '<p class="muted">No machine record for this GPU.</p>'
    facts: list[str] = []
    gen, width = info.get("pcie_generation"), info.get("pcie_width")
    gen_max, width_max = info.get("pcie_generation_max"), info.get("pcie_width_max")
    if gen is not None and width is not None:
        link = f"PCIe Gen{gen} x{width} (max Gen{gen_max} x{width_max})"
        below = (gen_max is not None and gen < gen_max) or (
            width_max is not None and width < width_max
        )
        facts.append(
            f'<span class="bad">{_e(link)}: running below its maximum</span>' if below else _e(link)
        )
    if info.get("pcie_peak_bps"):
        facts.append(_e(f"limit {format_rate(info['pcie_peak_bps'])} per direction"))
    if info.get("numa_node") is not None:
        facts.append(_e(f"NUMA node {info['numa_node']}"))
    if info.get("cpu_affinity"):
        facts.append(_e(f"CPUs {info['cpu_affinity']}"))
    if info.get("pci_bus_id"):
        facts.append(_e(f"bus {info['pci_bus_id']}"))
    if info.get("compute_capability"):
        facts.append(_e(f"sm_{str(info['compute_capability']).replace('.', '')}"))
    return f'<p class="link">{" · ".join(facts)}</p>'


def _bandwidth(p: Point) -> float:
    return p.bandwidth / 1e9


def _latency(p: Point) -> float:
    return p.median_s * 1e6


def _point_status(p: Point) -> str:
    if p.verification is not None and not p.verification.ok:
        return f"INVALID: verification failed ({p.verification.mismatched_bytes} bytes wrong)"
    if p.blocking_timed_out:
        return "INVALID: the blocking kernel timed out"
    return p.status.replace("_", " ") + (", cache resident" if p.cache_resident else "")


def _size_ticks(sizes: Sequence[int]) -> tuple[list[int], list[str], list[int]]:
    """Major ticks at powers of 1024 (1 B, 1 KiB, 1 MiB, 1 GiB) where the sizes span three of
    them, else at every 2nd, 4th or 8th power of two; minor ticks at every power of two."""
    lo = math.floor(math.log2(min(sizes)))
    hi = math.ceil(math.log2(max(sizes)))
    exponents = range(lo, hi + 1)
    step = 10
    if sum(e % 10 == 0 for e in exponents) < 3:
        step = next((s for s in (1, 2, 4, 8) if len(exponents) / s <= 9), 10)
    major = [1 << e for e in exponents if e % step == 0]
    return major, [format_bytes(v) for v in major], [1 << e for e in exponents]


def _curve_figure(
    curves: Sequence[Curve],
    title: str,
    y_title: str,
    value: Callable[[Point], float],
    unit: str,
    limit: tuple[float, str] | None,
) -> go.Figure:
    """One line per curve against transfer size, both axes log, each drawn as report.style
    says; `value` gives a point's y in `unit`; `limit` (bytes per second, what it is), where
    given, is drawn as a dashed line (the y unit must be GB/s)."""
    fig = go.Figure()
    sizes = [p.bytes for c in curves for p in c.points]
    limit_bps = limit[0] if limit else None
    for curve in curves:
        style = curve_style(curve.config)
        color, symbol = style.colour, style.plotly_symbol
        symbols, colors, custom = [], [], []
        for p in curve.points:
            invalid = not p.valid
            symbols.append("x" if invalid else symbol + ("-open" if p.status == ESTIMATED else ""))
            colors.append(_INVALID_COLOR if invalid else color)
            custom.append(
                [format_bytes(p.bytes), _noise(p.rel_noise), len(p.samples_s), _point_status(p)]
            )
        fig.add_trace(
            go.Scatter(
                x=[p.bytes for p in curve.points],
                y=[value(p) for p in curve.points],
                name=_e(legend_label(curve.config)),
                mode="lines+markers",
                line={"color": color, "dash": style.plotly_dash, "width": 1.6},
                marker={"symbol": symbols, "color": colors, "size": 7},
                customdata=custom,
                hovertemplate=(
                    f"<b>{_e(curve.config.label)}</b><br>size %{{customdata[0]}}<br>"
                    f"%{{y:.4g}} {unit}<br>noise %{{customdata[1]}}, "
                    "%{customdata[2]} trials<br>%{customdata[3]}<extra></extra>"
                ),
            )
        )
    if limit is not None:
        fig.add_trace(
            go.Scatter(
                x=[min(sizes), max(sizes)],
                y=[limit[0] / 1e9] * 2,
                name=f"{limit[1]} {format_rate(limit[0])}",
                mode="lines",
                line={"color": "#555555", "dash": "dash", "width": 1.5},
                hovertemplate=f"{limit[1]}: {format_rate(limit[0])}<extra></extra>",
            )
        )
    major, labels, minor = _size_ticks(sizes)
    pad = 0.15
    values = [value(p) for c in curves for p in c.points]
    if limit_bps:
        values.append(limit_bps / 1e9)
    decades = math.log10(max(values)) - math.log10(min(values))
    fig.update_layout(
        title={"text": title, "x": 0.01, "xanchor": "left"},
        template="plotly_white",
        font={"family": _FONT, "size": 12},
        height=max(480, 24 * len(curves) + 80),
        margin={"l": 70, "r": 20, "t": 50, "b": 55},
        legend={"font": {"size": 11}, "tracegroupgap": 0},
        hovermode="closest",
        xaxis={
            "type": "log",
            "title": "transfer size",
            "tickvals": major,
            "ticktext": labels,
            "range": [math.log10(min(sizes)) - pad, math.log10(max(sizes)) + pad],
            "minor": {"tickvals": minor, "showgrid": True, "gridcolor": "#f2f2f2"},
            "showline": True,
            "linecolor": "#888",
            "mirror": True,
        },
        yaxis={
            "type": "log",
            "title": y_title,
            "tickformat": "~g",
            # Every power of ten over a wide range; plotly's 2 and 5 between them crowd it.
            **({"dtick": 1} if decades >= 2 else {}),
            "showline": True,
            "linecolor": "#888",
            "mirror": True,
            "minor": {"showgrid": True, "gridcolor": "#f2f2f2"},
        },
    )
    return fig


def _share_of_limit(info: dict[str, Any], curve: Curve, bandwidth: float) -> str:
    """The bandwidth as a share of the physical limit: the PCIe link per direction for host
    transfers; HBM for device-to-device copies, whose traffic is a read and a write per byte."""
    if curve.config.direction == "d2d":
        peak, traffic, name = info.get("memory_peak_bps"), 2 * bandwidth, "HBM"
    else:
        peak, traffic, name = info.get("pcie_peak_bps"), bandwidth, "PCIe"
    return f"{traffic / peak:.0%} of {name}" if peak else ""


def _verified(curve: Curve) -> object:
    checks = [p.verification for p in curve.points if p.verification is not None]
    if not checks:
        return "skipped"
    failed = sum(not v.ok for v in checks)
    return "ok" if not failed else _red(f"FAILED at {failed} sizes")


def _curves_table(info: dict[str, Any], curves: Sequence[Curve]) -> str:
    rows: list[list[object]] = []
    for curve in curves:
        c = curve.config
        headline = HEADLINE_CURVES.get((c.direction, c.memory, c.mechanism, c.timing))
        status: object = curve.status if curve.error is None else _red(f"failed: {curve.error}")
        row: list[object] = [_RowClass("headline" if headline else ""), c.label]
        if not curve.points:
            rows.append([*row, "", "", "", "", "", status])
            continue
        largest = max(curve.points, key=lambda p: p.bytes)
        smallest = min(curve.points, key=lambda p: p.bytes)
        rows.append(
            [
                *row,
                f"{format_rate(largest.bandwidth)} @ {format_bytes(largest.bytes)}",
                _share_of_limit(info, curve, largest.bandwidth),
                f"{format_seconds(smallest.median_s)} @ {format_bytes(smallest.bytes)}",
                _noise(max(p.rel_noise for p in curve.points)),
                _verified(curve),
                status,
            ]
        )
    table = _table(
        [
            "curve",
            "bandwidth (largest size)",
            "of limit",
            "latency (smallest size)",
            "noise (worst)",
            "verified",
            "status",
        ],
        rows,
        ["", "num", "num", "num", "num", "", ""],
    )
    return (
        table + '<p class="caption">Bold: the headline curves. Bandwidth at the median time; '
        "device-to-device traffic counts a read and a write per byte against HBM.</p>"
    )


def _concurrent_rows(c: Concurrent, share: bool = False) -> list[list[object]]:
    """One row per stream and a total; with `share`, each stream's share of the total."""
    name = f"{c.label} ({c.mechanism})"
    if c.status != "complete" or not c.streams:
        return [[name, "", "", "", "", "", _red(f"{c.status}: {c.error or 'no streams'}")]]
    total = c.total_bandwidth
    rows: list[list[object]] = []
    for i, s in enumerate(c.streams):
        alone = s.alone_bandwidth
        rows.append(
            [
                name if i == 0 else "",
                s.label,
                format_bytes(s.bytes),
                format_rate(s.bandwidth),
                format_rate(alone) if alone else "not measured",
                f"{s.bandwidth / total:.0%} of total"
                if share
                else (f"{s.bandwidth / alone:.0%}" if alone else ""),
                _noise(s.rel_noise),
            ]
        )
    alones = [s.alone_bandwidth for s in c.streams]
    alone_sum = sum(a for a in alones if a) if all(alones) else None
    rows.append(
        [
            _RowClass("total"),
            "",
            "total",
            "",
            format_rate(total),
            format_rate(alone_sum) if alone_sum else "",
            "" if share or not alone_sum else f"{total / alone_sum:.0%}",
            "",
        ]
    )
    return rows


def _concurrent_table(measurements: Sequence[Concurrent], share: bool = False) -> str:
    rows = [row for c in measurements for row in _concurrent_rows(c, share)]
    return _table(
        [
            "measurement",
            "stream",
            "size per copy",
            "concurrent",
            "alone",
            "share" if share else "concurrent / alone",
            "noise",
        ],
        rows,
        ["", "", "num", "num", "num", "num", "num"],
    )


def _pinning_table(p: PinningCost) -> str:
    per_gb = 1e9 / p.bytes
    size = format_bytes(p.bytes)
    rows: list[list[object]] = [
        [f"{call} ({size})", format_seconds(seconds), format_seconds(seconds * per_gb)]
        for call, seconds in (
            ("cudaMallocHost", p.host_alloc_s),
            ("cudaFreeHost", p.host_free_s),
            ("cudaHostRegister", p.register_s),
            ("cudaHostUnregister", p.unregister_s),
        )
    ]
    for memory, seconds in (
        ("pageable", p.pageable_copy_s),
        ("pinned", p.pinned_copy_s),
        ("registered", p.registered_copy_s),
    ):
        rows.append(
            [
                f"H2D copy of {size} from {memory} memory",
                format_seconds(seconds),
                f"{format_seconds(seconds * per_gb)} ({format_rate(p.bytes / seconds)})",
            ]
        )
    costs = _table(["operation", "time", "per GB"], rows, ["", "num", "num"])

    def pays(n: float | None, what: str) -> list[object]:
        if n is None:
            return [what, _red("never: these copies are not faster than pageable ones")]
        return [what, f"{n:,.1f} transfers of {size}"]

    even = _table(
        ["pinning by", "pays for itself after"],
        [
            pays(p.alloc_break_even, "cudaMallocHost + cudaFreeHost"),
            pays(p.register_break_even, "cudaHostRegister + cudaHostUnregister"),
        ],
        ["", "num"],
    )
    return (
        f'<div class="pair">{costs}{even}</div><p class="caption">Break-even: the setup and '
        "teardown time divided by the time each copy saves against a pageable copy.</p>"
    )


def _overlap_table(points: Sequence[OverlapPoint]) -> str:
    rows = [
        [
            f"{o.direction} {o.memory}, {format_bytes(o.bytes)}",
            format_seconds(o.alone_s),
            format_seconds(o.work_s),
            format_seconds(o.issue_s),
            format_seconds(o.total_s),
            f"{o.hidden:.0%}",
        ]
        for o in points
    ]
    table = _table(
        ["readback", "alone", "CPU work", "blocked in the call", "total", "work hidden"],
        rows,
        ["", "num", "num", "num", "num", "num"],
    )
    return (
        f'{table}<p class="caption">The copy is issued, the CPU works for half the copy\'s time, '
        "then waits (seed 000's asynchronous readback). Hidden: the share of the work that cost "
        "no extra time. `xferscope overlap cpu` sweeps the work.</p>"
    )


def _gl_table(check: GlCheck) -> str:
    if check.status == "unavailable":
        return f'<p class="muted">No OpenGL here: {_e(check.reason)}</p>'
    rows = [
        [op, label.removeprefix(op + " ") if label else "none verified", rate_text]
        for op, label, rate_text in (
            ("upload", check.upload_label, format_rate(check.upload_rate or 0.0)),
            ("readback", check.readback_label, format_rate(check.readback_rate or 0.0)),
        )
    ]
    table = _table(["op", "best path", "rate"], rows, ["", "", "num"])
    notes = ""
    if check.unverified:
        notes += f"<p>Test frame changed (rates unreliable): {_e(', '.join(check.unverified))}</p>"
    if check.reason:
        notes += f'<p class="gpu-error">{_e(check.reason)}</p>'
    return (
        f'{table}{notes}<p class="caption">{_e(check.renderer or "")}: the best of a few '
        "2048x2048 RGBA8 paths (client memory, PBOs, a persistent mapping, CUDA interop), "
        "each verified. `xferscope gl --survey` explores every state.</p>"
    )


def _gemm_table(check: GemmCheck) -> str:
    rows: list[list[object]] = []
    for g in check.points:
        share = g.get("share_of_peak")
        verified = {None: "", True: "yes", False: _red("NO: wrong result")}[g.get("verified")]
        rows.append(
            [
                g["precision"],
                f"{g['size']}³",
                format_flops(g["tflops"] * 1e12) if g.get("tflops") else g["status"],
                "" if share is None else f"{share:.0%}",
                verified,
                g.get("error") or "",
            ]
        )
    table = _table(
        ["precision", "size", "throughput", "of peak", "verified", "note"],
        rows,
        ["", "num", "num", "num", "", ""],
    )
    b = check.break_even
    offload = ""
    if b:

        def _size(size: object) -> str:
            return "never, up to the largest size tried" if size is None else f"from N = {size}"

        offload = (
            f"<p>{_e(b['precision'])}, its transfers from pinned memory included, beats one CPU "
            f"thread {_e(_size(b.get('one_thread')))} and the CPU on {_e(b['threads'])} threads "
            f"{_e(_size(b.get('all_threads')))}.</p>"
        )
    return (
        f'{table}{offload}<p class="caption">cuBLASLt, inputs random, timed with CUDA events, '
        "a sample of outputs checked in double precision; peak from the GPU's datasheet or an "
        "estimate from SMs and clock. `xferscope gemm` runs the whole study.</p>"
    )


# ---- several GPUs ----------------------------------------------------------------------------


def _p2p_key(c: Concurrent) -> tuple[str, str, str]:
    """(mechanism, peer access, one_way or both) of a p2p measurement; its label reads like
    `0-1/async/peer/one_way`, but the record's fields win where they say it."""
    parts = c.label.split("/")
    mode = parts[3] if len(parts) > 3 else ("both" if len(c.streams) > 1 else "one_way")
    if c.peer_access is None:
        access = parts[2] if len(parts) > 2 else "unknown access"
    else:
        access = "peer" if c.peer_access else "no peer"
    return c.mechanism, access, mode


def _p2p_pair(c: Concurrent) -> tuple[int, int] | None:
    head = c.label.split("/")[0]
    src, sep, dst = head.partition("-")
    if sep and src.isdigit() and dst.isdigit():
        return int(src), int(dst)
    if c.streams and c.streams[0].peer is not None:
        return c.streams[0].device, c.streams[0].peer
    return None


def _p2p_title(key: tuple[str, str, str]) -> str:
    mechanism, access, mode = key
    how = {"async": "copy engines", "kernel": "SM copy kernel"}.get(mechanism, mechanism)
    access_text = {"peer": "peer access on", "no peer": "peer access off"}.get(access, access)
    mode_text = {"one_way": "one way", "both": "both directions at once (total)"}.get(
        mode, mode.replace("_", " ")
    )
    return f"Peer to peer, {how}, {access_text}, {mode_text}"


def _p2p_cell(src: int, dst: int, c: Concurrent | None) -> tuple[float | None, str, str]:
    """A matrix cell: GB/s (None where there is no figure), the text drawn in it, its hover."""
    if c is None:
        return None, "—" if src == dst else "", f"GPU {src} → GPU {dst}: not measured"
    if c.status != "complete" or not c.streams:
        return None, c.status, _e(f"GPU {src} → GPU {dst}: {c.status}: {c.error or ''}")
    streams = "".join(
        "<br>" + _e(f"{s.label}: {format_rate(s.bandwidth)}, noise {_noise(s.rel_noise)}")
        for s in c.streams
    )
    total = c.total_bandwidth
    return total / 1e9, f"{total / 1e9:.1f}", _e(f"{c.label}: {format_rate(total)}") + streams


def _p2p_figure(indices: Sequence[int], cells: dict[tuple[int, int], Concurrent]) -> go.Figure:
    names = [f"GPU {i}" for i in indices]
    grid = [[_p2p_cell(src, dst, cells.get((src, dst))) for dst in indices] for src in indices]
    z = [[cell[0] for cell in row] for row in grid]
    text = [[cell[1] for cell in row] for row in grid]
    hover = [[cell[2] for cell in row] for row in grid]
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=names,
            y=names,
            text=text,
            texttemplate="%{text}",
            customdata=hover,
            hovertemplate="%{customdata}<extra></extra>",
            colorscale="Blues",
            zmin=0,
            zmax=max((v for row in z for v in row if v is not None), default=1.0),
            colorbar={"title": {"text": "GB/s"}},
            xgap=2,
            ygap=2,
        )
    )
    size = 90 * len(indices)
    fig.update_layout(
        template="plotly_white",
        font={"family": _FONT, "size": 12},
        plot_bgcolor="#eef0f3",  # unmeasured cells
        height=size + 100,
        width=size + 240,
        margin={"l": 80, "r": 20, "t": 30, "b": 60},
        xaxis={"title": "to (destination)", "side": "bottom", "constrain": "domain"},
        yaxis={"title": "from (source)", "autorange": "reversed", "scaleanchor": "x"},
    )
    return fig


def _multi_section(result: RunResult) -> str:
    if not result.multi:
        return ""
    parts = ['<section id="multi"><h2>Several GPUs</h2>']
    p2p = [c for c in result.multi if c.kind == "p2p"]
    groups: dict[tuple[str, str, str], dict[tuple[int, int], Concurrent]] = {}
    for c in p2p:  # one whose GPUs cannot be told is only in the table below
        if (pair := _p2p_pair(c)) is not None:
            groups.setdefault(_p2p_key(c), {})[pair] = c
    indices = sorted(
        {g.index for g in result.gpus} | {i for cells in groups.values() for p in cells for i in p}
    )
    for n, (key, cells) in enumerate(sorted(groups.items())):
        parts.append(f"<h3>{_e(_p2p_title(key))}</h3>")
        parts.append(
            '<p class="caption">GB/s (10⁹ B/s); rows are the source GPU, columns the '
            "destination.</p>"
        )
        parts.append(_plot_div(f"p2p-{n}", _p2p_figure(indices, cells), matrix=True))
    if p2p:
        parts.append("<h3>Peer-to-peer measurements</h3>")
        parts.append(_concurrent_table(p2p))
    host = [c for c in result.multi if c.kind == "all_gpus_host"]
    if host:
        parts.append("<h3>All GPUs to and from the host at once</h3>")
        parts.append(_concurrent_table(host, share=True))
    others = [c for c in result.multi if c.kind not in ("p2p", "all_gpus_host")]
    if others:
        parts.append("<h3>Other concurrent measurements</h3>")
        parts.append(_concurrent_table(others))
    parts.append("</section>")
    return "".join(parts)


# ---- footer ----------------------------------------------------------------------------------


def files_beside(files: Sequence[str], what: str = "run") -> str:
    """The links to a result's other files, which sit beside its page."""
    if not files:
        return ""
    links = "".join(f'<li><a href="{_e(quote(name))}">{_e(name)}</a></li>' for name in files)
    return f"<p>The other files of this {what} sit beside this page:</p><ul>{links}</ul>"


def _footer(result: RunResult, files: Sequence[str]) -> str:
    where = files_beside(files)
    return (
        f"<footer>{where}<p>Written by xferscope {_e(result.tool_version)}. GB/s means 10⁹ "
        "bytes per second; KiB, MiB and GiB are 2¹⁰, 2²⁰ and 2³⁰ bytes. Hover a plot for "
        "each point's figures; click a legend entry to hide its curve.</p></footer>"
    )


# ---- figures ---------------------------------------------------------------------------------


def _plot_div(name: str, fig: go.Figure, matrix: bool = False) -> str:
    """A figure as a div and the inline script that draws it with the plotly.js in <head>."""
    markup = pio.to_html(
        fig,
        full_html=False,
        include_plotlyjs=False,
        div_id=f"plot-{name}",
        # A matrix is small and fixed: its mode bar (zoom, pan) would only cover it.
        config=_PLOT_CONFIG | ({"displayModeBar": False} if matrix else {}),
        default_width=f"{fig.layout.width}px" if fig.layout.width else "100%",
        default_height=f"{fig.layout.height}px",
    )
    return f'<div class="{"matrix" if matrix else "plot"}">{markup}</div>'


def _css() -> str:
    """html.css, with the plots' font, to inline into the page."""
    return (
        Path(__file__)
        .with_name("html.css")
        .read_text(encoding="utf-8")
        .replace("FONT_STACK", _FONT)
    )
