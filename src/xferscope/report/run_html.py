"""The self-contained HTML report of `xferscope run`, on the page toolkit (page.py).

Verdicts and warnings come first (worst first), then per GPU: its link, interactive plots of
bandwidth and latency against size, and tables of the headline figures, concurrent copies and
what pinning costs; then the peer-to-peer matrix and every GPU to the host at once.

The page opens with no network: plotly.js is inlined once in <head>, every figure is a div
drawn by a short inline script, and no font, style or image is fetched. Every string taken
from the result is escaped, in the page and in the figures (plotly reads its text as HTML).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..core.units import format_bytes, format_rate, format_seconds
from ..documents.files import atomic_write
from ..run.metrics import HEADLINE_CURVES
from ..run.records import (
    Concurrent,
    GpuSection,
    RunResult,
)
from ..sweep.records import ESTIMATED, Curve, Point
from .page import (
    FONT,
    INVALID_COLOR,
    Figure,
    RowClass,
    banners,
    escape,
    figure,
    files_beside,
    findings_section,
    noise,
    page,
    plot_div,
    red,
    table,
)
from .run_html_tables import (
    chase_table,
    concurrent_table,
    gemm_table,
    gl_table,
    numa_table,
    overlap_table,
    pinning_table,
)
from .style import bandwidth_view, curve_style, legend_label, panels, physical_limit
from .sweep_tables import wall_time


def render_html(result: RunResult, files: Sequence[str] = ()) -> str:
    """The report page of a run. `files` names the run's other output files (JSON, CSV, PNG),
    which sit beside the page: the footer links to them relatively."""
    body = [
        _header(result),
        _banners(result),
        findings_section(result.findings),
        *(_gpu_section(result, gpu) for gpu in result.gpus),
        _multi_section(result),
        _footer(result, files),
    ]
    host = result.machine.get("host", {}).get("hostname", "")
    title = "xferscope run" + (f" on {host}" if host else "") + f", {result.created}"
    return page(title, body, result.simulated)


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
    items = "".join(f"<dt>{escape(k)}</dt><dd>{escape(v)}</dd>" for k, v in facts)
    notes = "".join(f"<li>{escape(n)}</li>" for n in result.notes)
    return (
        "<header><h1>xferscope run</h1>"
        f'<dl class="facts">{items}</dl>'
        + (f'<ul class="notes">{notes}</ul>' if notes else "")
        + "</header>"
    )


def _banners(result: RunResult) -> str:
    reasons = []
    if result.interrupted:
        reasons.append("interrupted before every measurement ran")
    reasons += [f"GPU {g.index} {g.status}" for g in result.gpus if g.status != "complete"]
    return banners(result.simulated, reasons)


def _gpu_info(result: RunResult, index: int) -> dict[str, Any]:
    return next((g for g in result.machine.get("gpus", []) or [] if g.get("index") == index), {})


def _gpu_section(result: RunResult, gpu: GpuSection) -> str:
    info = _gpu_info(result, gpu.index)
    status_class = "ok" if gpu.status == "complete" else "bad"
    parts = [
        f'<section class="gpu" id="gpu{gpu.index}">',
        f"<h2>GPU {gpu.index}: {escape(info.get('name', 'unknown GPU'))} "
        f'<span class="status {status_class}">{escape(gpu.status)}</span></h2>',
        _link_line(info),
    ]
    if gpu.error:
        parts.append(f'<p class="gpu-error">{escape(gpu.error)}</p>')
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
                parts.append(plot_div(f"gpu{gpu.index}-{direction}-{what}", figure))
        parts.append("</div>")
    if not gpu.curves:
        parts.append('<p class="muted">No curves were measured on this GPU.</p>')
    if gpu.curves:
        parts.append("<h3>Headline figures per curve</h3>")
        parts.append(_curves_table(info, gpu.curves))
    if gpu.concurrent:
        parts.append("<h3>Concurrent copies</h3>")
        parts.append(concurrent_table(gpu.concurrent))
    if gpu.pinning is not None:
        parts.append("<h3>What pinning costs</h3>")
        parts.append(pinning_table(gpu.pinning))
    if gpu.overlap:
        parts.append("<h3>Can the CPU work during a copy?</h3>")
        parts.append(overlap_table(gpu.overlap))
    if gpu.numa:
        parts.append("<h3>Host memory on each NUMA node</h3>")
        parts.append(numa_table(result.machine, gpu.numa))
    if gpu.chase:
        parts.append("<h3>Latency seen from the GPU</h3>")
        parts.append(chase_table(gpu.chase))
    if gpu.gl is not None:
        parts.append("<h3>OpenGL</h3>")
        parts.append(gl_table(gpu.gl))
    if gpu.gemm is not None:
        parts.append("<h3>GEMM</h3>")
        parts.append(gemm_table(gpu.gemm))
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
            f'<span class="bad">{escape(link)}: running below its maximum</span>'
            if below
            else escape(link)
        )
    if info.get("pcie_peak_bps"):
        facts.append(escape(f"limit {format_rate(info['pcie_peak_bps'])} per direction"))
    if info.get("numa_node") is not None:
        facts.append(escape(f"NUMA node {info['numa_node']}"))
    if info.get("cpu_affinity"):
        facts.append(escape(f"CPUs {info['cpu_affinity']}"))
    if info.get("pci_bus_id"):
        facts.append(escape(f"bus {info['pci_bus_id']}"))
    if info.get("compute_capability"):
        facts.append(escape(f"sm_{str(info['compute_capability']).replace('.', '')}"))
    return f'<p class="link">{" · ".join(facts)}</p>'


def _bandwidth(p: Point) -> float:
    return p.bandwidth / 1e9


def _latency(p: Point) -> float:
    return p.median_s * 1e6


def _point_status(p: Point) -> str:
    if p.verification is not None and not p.verification.ok:
        wrong = format_bytes(p.verification.mismatched_bytes)
        return f"INVALID: verification failed ({wrong} wrong)"
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
) -> Figure:
    """One line per curve against transfer size, both axes log, each drawn as report.style
    says; `value` gives a point's y in `unit`; `limit` (bytes per second, what it is), where
    given, is drawn as a dashed line (the y unit must be GB/s)."""
    traces: list[dict[str, Any]] = []
    sizes = [p.bytes for c in curves for p in c.points]
    limit_bps = limit[0] if limit else None
    for curve in curves:
        style = curve_style(curve.config)
        color, symbol = style.colour, style.plotly_symbol
        symbols, colors, custom = [], [], []
        for p in curve.points:
            invalid = not p.valid
            symbols.append("x" if invalid else symbol + ("-open" if p.status == ESTIMATED else ""))
            colors.append(INVALID_COLOR if invalid else color)
            custom.append(
                [format_bytes(p.bytes), noise(p.rel_noise), len(p.samples_s), _point_status(p)]
            )
        traces.append(
            {
                "type": "scatter",
                "x": [p.bytes for p in curve.points],
                "y": [value(p) for p in curve.points],
                "name": escape(legend_label(curve.config)),
                "mode": "lines+markers",
                "line": {"color": color, "dash": style.plotly_dash, "width": style.width},
                "marker": {"symbol": symbols, "color": colors, "size": 7},
                "customdata": custom,
                "hovertemplate": (
                    f"<b>{escape(curve.config.label)}</b><br>size %{{customdata[0]}}<br>"
                    f"%{{y:.4g}} {unit}<br>noise %{{customdata[1]}}, "
                    "%{customdata[2]} trials<br>%{customdata[3]}<extra></extra>"
                ),
            }
        )
    if limit is not None:
        traces.append(
            {
                "type": "scatter",
                "x": [min(sizes), max(sizes)],
                "y": [limit[0] / 1e9] * 2,
                "name": f"{limit[1]} {format_rate(limit[0])}",
                "mode": "lines",
                "line": {"color": "#555555", "dash": "dash", "width": 1.5},
                "hovertemplate": f"{limit[1]}: {format_rate(limit[0])}<extra></extra>",
            }
        )
    major, labels, minor = _size_ticks(sizes)
    pad = 0.15
    values = [value(p) for c in curves for p in c.points]
    x_range = [math.log10(min(sizes)) - pad, math.log10(max(sizes)) + pad]
    y_range: dict[str, Any] = {}
    if limit_bps:  # a bandwidth figure: the range report.style's bandwidth_view gives
        view = bandwidth_view(limit_bps / 1e9, curves)
        values = [view.bottom, view.top]
        y_range = {"range": [math.log10(view.bottom), math.log10(view.top)]}
        if view.first is not None:
            x_range[0] = math.log10(view.first) - pad
            title = f"{title}<br><sup>{escape(view.note())}</sup>"
    decades = math.log10(max(values)) - math.log10(min(values))
    return figure(
        traces,
        title={"text": title, "x": 0.01, "xanchor": "left"},
        font={"family": FONT, "size": 12},
        height=max(480, 24 * len(curves) + 80),
        margin={"l": 70, "r": 20, "t": 50, "b": 55},
        legend={"font": {"size": 11}, "tracegroupgap": 0},
        hovermode="closest",
        xaxis={
            "type": "log",
            "title": "transfer size",
            "tickvals": major,
            "ticktext": labels,
            "range": x_range,
            "minor": {"tickvals": minor, "showgrid": True, "gridcolor": "#f2f2f2"},
            "showline": True,
            "linecolor": "#888",
            "mirror": True,
        },
        yaxis={
            "type": "log",
            "title": y_title,
            **y_range,
            "tickformat": "~g",
            # Every power of ten over a wide range; plotly's 2 and 5 between them crowd it.
            **({"dtick": 1} if decades >= 2 else {}),
            "showline": True,
            "linecolor": "#888",
            "mirror": True,
            "minor": {"showgrid": True, "gridcolor": "#f2f2f2"},
        },
    )


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
    return "ok" if not failed else red(f"FAILED at {failed} sizes")


def _curves_table(info: dict[str, Any], curves: Sequence[Curve]) -> str:
    rows: list[list[object]] = []
    for curve in curves:
        c = curve.config
        headline = HEADLINE_CURVES.get((c.direction, c.memory, c.mechanism, c.timing))
        status: object = curve.status if curve.error is None else red(f"failed: {curve.error}")
        row: list[object] = [RowClass("headline" if headline else ""), c.label]
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
                noise(max(p.rel_noise for p in curve.points)),
                _verified(curve),
                status,
            ]
        )
    markup = table(
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
        markup + '<p class="caption">Bold: the headline curves. Bandwidth at the median time; '
        "device-to-device traffic counts a read and a write per byte against HBM.</p>"
    )


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
        return None, c.status, escape(f"GPU {src} → GPU {dst}: {c.status}: {c.error or ''}")
    streams = "".join(
        "<br>" + escape(f"{s.label}: {format_rate(s.bandwidth)}, noise {noise(s.rel_noise)}")
        for s in c.streams
    )
    total = c.total_bandwidth
    return total / 1e9, f"{total / 1e9:.1f}", escape(f"{c.label}: {format_rate(total)}") + streams


def _p2p_figure(indices: Sequence[int], cells: dict[tuple[int, int], Concurrent]) -> Figure:
    names = [f"GPU {i}" for i in indices]
    grid = [[_p2p_cell(src, dst, cells.get((src, dst))) for dst in indices] for src in indices]
    z = [[cell[0] for cell in row] for row in grid]
    text = [[cell[1] for cell in row] for row in grid]
    hover = [[cell[2] for cell in row] for row in grid]
    heatmap = {
        "type": "heatmap",
        "z": z,
        "x": names,
        "y": names,
        "text": text,
        "texttemplate": "%{text}",
        "customdata": hover,
        "hovertemplate": "%{customdata}<extra></extra>",
        "colorscale": "Blues",
        "zmin": 0,
        "zmax": max((v for row in z for v in row if v is not None), default=1.0),
        "colorbar": {"title": {"text": "GB/s"}},
        "xgap": 2,
        "ygap": 2,
    }
    size = 90 * len(indices)
    return figure(
        [heatmap],
        font={"family": FONT, "size": 12},
        plot_bgcolor="#eef0f3",  # unmeasured cells
        height=size + 100,
        width=size + 240,
        margin={"l": 80, "r": 20, "t": 30, "b": 60},
        xaxis={"title": "to (destination)", "side": "bottom", "constrain": "domain"},
        yaxis={"title": "from (source)", "autorange": "reversed", "scaleanchor": "x"},
    )


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
        parts.append(f"<h3>{escape(_p2p_title(key))}</h3>")
        parts.append(
            '<p class="caption">GB/s (10⁹ B/s); rows are the source GPU, columns the '
            "destination.</p>"
        )
        parts.append(plot_div(f"p2p-{n}", _p2p_figure(indices, cells), matrix=True))
    if p2p:
        parts.append("<h3>Peer-to-peer measurements</h3>")
        parts.append(concurrent_table(p2p))
    host = [c for c in result.multi if c.kind == "all_gpus_host"]
    if host:
        parts.append("<h3>All GPUs to and from the host at once</h3>")
        parts.append(concurrent_table(host, share=True))
    others = [c for c in result.multi if c.kind not in ("p2p", "all_gpus_host")]
    if others:
        parts.append("<h3>Other concurrent measurements</h3>")
        parts.append(concurrent_table(others))
    parts.append("</section>")
    return "".join(parts)


def _footer(result: RunResult, files: Sequence[str]) -> str:
    where = files_beside(files)
    return (
        f"<footer>{where}<p>Written by xferscope {escape(result.tool_version)}. GB/s means 10⁹ "
        "bytes per second; KiB, MiB and GiB are 2¹⁰, 2²⁰ and 2³⁰ bytes. Hover a plot for "
        "each point's figures; click a legend entry to hide its curve.</p></footer>"
    )
