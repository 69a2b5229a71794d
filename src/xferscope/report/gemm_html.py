"""The HTML page of `xferscope gemm`: the machine, the findings, an interactive chart of
throughput against size (one line per precision, each point's alignment class and share of
peak on hover, the peaks dotted), every GEMM in a table, seed 003's Table III per precision,
the CPU's scaling and the offload ladder. Built from html.py's parts, so it looks like the
run's report."""

from __future__ import annotations

import json
from collections.abc import Sequence

import plotly.graph_objects as go

from ..core.units import format_flops
from ..gemm.records import GemmResult, classes
from .page import TEMPLATE, banners, escape, files_beside, findings_section, page, plot_div, table


def render_gemm_html(result: GemmResult, files: Sequence[str] = ()) -> str:
    gpu = result.gpu.get("name", "?")
    title = f"xferscope gemm on GPU {result.device} ({gpu}), {result.created}"
    body = [
        _header(result),
        banners(
            result.simulated,
            ["interrupted before every GEMM ran"] if result.interrupted else [],
        ),
        findings_section(result.findings),
        _throughput(result),
        _points(result),
        _classes(result),
        _cpu(result),
        _footer(result, files),
    ]
    return page(title, body, result.simulated)


def _header(result: GemmResult) -> str:
    host = result.machine.get("host", {}) or {}
    version = result.blas.get("version")
    facts = [
        ("created", result.created),
        ("GPU", f"{result.device}: {result.gpu.get('name', '?')}"),
        ("library", f"{result.blas.get('library')}{f' {version}' if version else ''}"),
        ("host", host.get("hostname", "unknown")),
        ("CPU", host.get("cpu", "unknown")),
        ("driver", result.machine.get("driver") or "unknown"),
        ("CUDA runtime", result.machine.get("cuda_runtime") or "unknown"),
        ("xferscope", result.tool_version),
        ("options", ", ".join(f"{k}={json.dumps(v)}" for k, v in result.options.items())),
    ]
    items = "".join(f"<dt>{escape(k)}</dt><dd>{escape(v)}</dd>" for k, v in facts)
    return (
        "<header><h1>xferscope gemm</h1>"
        f'<dl class="facts">{items}</dl>'
        "<p>C = alpha op(A) op(B) + beta C through cuBLASLt, inputs random, timed with CUDA "
        "events, a sample of outputs checked against a double-precision reference.</p></header>"
    )


def _throughput(result: GemmResult) -> str:
    fig = go.Figure()
    for precision in result.precisions:
        points = sorted(result.measured(precision), key=lambda p: p.shape.flops)
        if not points:
            continue
        hover = []
        for p in points:
            of_peak, _ = result.shares(p)
            share = "" if of_peak is None else f", {of_peak:.0%} of peak"
            hover.append(f"{p.shape.label}: divisible by {p.alignment}{share}")
        fig.add_trace(
            go.Scatter(
                x=[(p.m * p.n * p.k) ** (1 / 3) for p in points],
                y=[(p.flops or 0) / 1e12 for p in points],
                mode="lines+markers",
                name=precision,
                text=hover,
                hovertemplate="%{text}<br>%{y:.1f} TFLOP/s<extra>" + precision + "</extra>",
            )
        )
        top = result.peak(precision)
        if top is not None:
            fig.add_hline(
                y=top.flops / 1e12,
                line_dash="dot",
                line_width=1,
                annotation_text=f"{precision} peak",
                annotation_font_size=10,
            )
    if not fig.data:
        return ""
    fig.update_layout(
        template=TEMPLATE,
        height=460,
        margin={"l": 60, "r": 20, "t": 30, "b": 50},
        xaxis_title="size (cube root of M N K)",
        yaxis={"type": "log", "title": "TFLOP/s"},
    )
    return "<section><h2>Throughput against size</h2>" + plot_div("gemm", fig) + "</section>"


def _points(result: GemmResult) -> str:
    rows: list[list[object]] = []
    for p in result.points:
        if p.status == "skipped":
            continue
        of_peak, of_best = result.shares(p)
        pinned = p.transfer_flops("pinned")
        rows.append(
            [
                p.precision,
                p.shape.label,
                p.alignment,
                format_flops(p.flops) if p.flops else p.status,
                "" if of_peak is None else f"{of_peak:.0%}",
                "" if of_best is None else f"{of_best:.0%}",
                {None: "", True: "yes", False: "NO"}[p.verified],
                "" if pinned is None else format_flops(pinned),
                "" if p.pad_gain is None else f"{p.pad_gain:.2f}x",
                p.error or "",
            ]
        )
    skipped = sorted({f"{p.precision}: {p.error}" for p in result.points if p.status == "skipped"})
    notes = "".join(f"<li>{escape(s)}</li>" for s in skipped)
    return (
        "<section><h2>Every GEMM</h2>"
        + table(
            [
                "precision",
                "shape",
                "divisible by",
                "throughput",
                "of peak",
                "of best",
                "verified",
                "with pinned transfers",
                "padded gain",
                "note",
            ],
            rows,
            ["", "num", "num", "num", "num", "num", "", "num", "num", ""],
        )
        + (f"<p>Skipped, with the reason:</p><ul>{notes}</ul>" if notes else "")
        + "</section>"
    )


def _classes(result: GemmResult) -> str:
    parts = []
    for precision in result.precisions:
        rows = classes(result, precision)
        if len(rows) > 1:
            parts.append(f"<h3>{escape(precision)}</h3>")
            parts.append(
                table(
                    ["divisible by", "mean throughput", "shapes"],
                    [[c, format_flops(f), n] for c, f, n in rows],
                    ["num", "num", "num"],
                )
            )
    if not parts:
        return ""
    return (
        "<section><h2>Alignment classes (largest power of two dividing M, N and K)</h2>"
        + "".join(parts)
        + "</section>"
    )


def _cpu(result: GemmResult) -> str:
    done = [c for c in result.cpu if c.flops]
    if not done:
        return ""
    blas = result.cpu_blas or {}
    rows = [
        [c.precision, c.shape.label, c.threads, c.role, format_flops(c.flops or 0.0)]
        for c in sorted(done, key=lambda c: (c.role, c.precision, c.shape.flops, c.threads))
    ]
    return (
        f"<section><h2>CPU ({escape(blas.get('internal_api'))} {escape(blas.get('version'))})</h2>"
        + table(
            ["precision", "shape", "threads", "part", "throughput"],
            rows,
            ["", "num", "num", "", "num"],
        )
        + '<p class="caption">scaling: CPU scaling over threads; ladder: the offload ladder, '
        "each thread count stopping once the GPU with its transfers beat it.</p></section>"
    )


def _footer(result: GemmResult, files: Sequence[str]) -> str:
    where = files_beside(files, "study")
    return (
        f"<footer>{where}<p>Written by xferscope {escape(result.tool_version)}. TFLOP/s means 10¹² "
        "floating-point operations per second (2 M N K per GEMM).</p></footer>"
    )
