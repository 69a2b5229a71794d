"""The fleet's HTML page: outliers and failures first, then a node x GPU x metric heat map
(colour: each GPU's robust z-score, value on hover), the GPU-to-GPU pair matrix, and every GPU's
own section (facts, figures, findings, verdict), linked from the tables. Self-contained."""

from __future__ import annotations

import html
from pathlib import Path

import plotly.graph_objects as go

from ..core.units import format_rate, format_seconds
from ..fleet.records import COMPLETE, FleetResult, RankReport
from .page import Html, banners, page, table


def _e(value: object) -> str:
    return html.escape(str(value))


def _value(metric: str, value: float) -> str:
    return format_seconds(value) if metric.endswith("/latency") else format_rate(value)


def _anchor(r: RankReport) -> str:
    return f"rank-{r.rank}-gpu-{r.device}"


def _link(r: RankReport) -> Html:
    return Html(f'<a href="#{_anchor(r)}">{_e(r.label)}</a>')


def _heatmap(result: FleetResult) -> str:
    done = [r for r in result.ranks if r.status == COMPLETE]
    if not done or not result.stats:
        return ""
    metrics = [s.name for s in result.stats]
    stats = {s.name: s for s in result.stats}
    z, text = [], []
    for r in done:
        row, labels = [], []
        for m in metrics:
            s = stats[m]
            score = s.z.get(r.rank)
            # the bad side drawn red whatever the metric: higher latency is as bad as lower GB/s
            row.append(None if score is None else (score if s.higher_is_better else -score))
            labels.append(_value(m, r.metrics[m]) if m in r.metrics else "")
        z.append(row)
        text.append(labels)
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=metrics,
            y=[r.label for r in done],
            text=text,
            hovertemplate="%{y}<br>%{x}: %{text}<br>robust z (bad side negative): %{z:.1f}"
            "<extra></extra>",
            colorscale="RdBu",
            zmid=0,
            zmin=-6,
            zmax=6,
            colorbar={"title": "z"},
        )
    )
    fig.update_layout(
        title="Every GPU against the fleet (robust z-score; red: worse than typical)",
        height=360 + 32 * len(done),
        margin={"l": 260, "b": 220},
        xaxis={"tickangle": -40},
    )
    return str(fig.to_html(full_html=False, include_plotlyjs=False))


def _pair_map(result: FleetResult) -> str:
    if not result.pairs:
        return f"<p>GPU to GPU through NCCL: {_e(result.pairs_note or 'not measured')}</p>"
    ranks = sorted({p.source for p in result.pairs} | {p.destination for p in result.pairs})
    cell = {(p.source, p.destination): p for p in result.pairs}
    z = [
        [(cell[(a, b)].bandwidth_bps or 0) / 1e9 if (a, b) in cell else None for b in ranks]
        for a in ranks
    ]
    names = [f"rank {r}" for r in ranks]
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=names,
            y=names,
            colorscale="Viridis",
            zmin=0,  # from zero: a pair at half the others' rate looks half as bright
            hovertemplate="%{y} to %{x}: %{z:.0f} GB/s<extra></extra>",
            colorbar={"title": "GB/s"},
        )
    )
    fig.update_layout(
        title="GPU to GPU through NCCL: GB/s from row to column (64 MiB messages)",
        height=200 + 30 * len(ranks),
        yaxis={"autorange": "reversed"},
    )
    rows = [
        [
            f"{p.source} → {p.destination}",
            p.kind,
            "" if p.bandwidth_bps is None else f"{p.bandwidth_bps / 1e9:.1f}",
            "" if p.latency_s is None else f"{p.latency_s * 1e6:.2f}",
            "yes" if p.verified else ("WRONG DATA" if p.verified is False else ""),
        ]
        for p in result.pairs
    ]
    markup = table(
        ["pair", "kind", "GB/s", "latency (µs)", "data verified"], rows, ["", "", "num", "num"]
    )
    return str(fig.to_html(full_html=False, include_plotlyjs=False)) + markup


def _gpu_section(result: FleetResult, r: RankReport) -> str:
    verdict = next((v for v in result.verdicts if v.rank == r.rank), None)
    facts = "".join(
        f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>" for k, v in r.gpu.items() if v not in (None, "")
    )
    figures = table(
        ["metric", "value"], [[m, _value(m, v)] for m, v in sorted(r.metrics.items())], ["", "num"]
    )
    findings = "".join(f"<li>{_e(f.get('message', ''))}</li>" for f in r.findings)
    status = (
        f"{r.status}: {r.error}"
        if r.status != COMPLETE
        else (
            "PASS" if verdict is None or verdict.passed else "FAIL: " + "; ".join(verdict.failures)
        )
    )
    own = ""
    if r.report_path.endswith(".json"):  # interrupted: data only, `xferscope report` draws it
        own = f' <a href="{_e(r.report_path)}">its own run.json</a> (not drawn: interrupted)'
    elif r.report_path:
        own = f' <a href="{_e(r.report_path)}">its own report</a>'
    return (
        f'<section id="{_anchor(r)}"><h3>rank {r.rank}: {_e(r.label)}</h3>'
        f'<p><b>{_e(status)}</b>{own}</p><dl class="facts">{facts}</dl>{figures}'
        + (f"<ul>{findings}</ul>" if findings else "")
        + "</section>"
    )


def render_fleet_html(result: FleetResult) -> str:
    nodes = len({r.host for r in result.ranks})
    passed = sum(v.passed for v in result.verdicts)
    head = (
        f"<h1>xferscope fleet: {len(result.ranks)} GPUs on {nodes} node(s)</h1>"
        f'<p class="summary">{passed} passed, {len(result.ranks) - passed} failed; created '
        f"{_e(result.created)}; reports gathered in {result.gather_s:.2f} s, "
        f"{result.wall_s:.1f} s in all</p>"
    )
    banner = banners(
        result.simulated,
        ["interrupted: the GPUs marked so reported what they had"] if result.interrupted else [],
    )
    by_rank = {r.rank: r for r in result.ranks}
    outliers = table(
        ["GPU", "metric", "value", "fleet median", "z", "likely cause"],
        [
            [
                _link(by_rank[o.rank]),
                o.metric,
                _value(o.metric, o.value),
                _value(o.metric, o.median),
                f"{o.z:.1f}",
                o.cause,
            ]
            for o in result.outliers
        ],
        ["", "", "num", "num", "num"],
    )
    failures = table(
        ["GPU", "status", "why"],
        [
            [_link(r), r.status, r.error or "; ".join(v.failures)]
            for r in result.ranks
            for v in result.verdicts
            if v.rank == r.rank and not v.passed
        ],
    )
    body = [
        banner,
        head,
        "<h2>Outliers</h2>" + (outliers if result.outliers else "<p>None.</p>"),
        "<h2>Failed GPUs</h2>" + (failures if passed < len(result.ranks) else "<p>None.</p>"),
        "<h2>Every GPU against the fleet</h2>" + _heatmap(result),
        "<h2>GPU to GPU</h2>" + _pair_map(result),
        "<h2>Every GPU</h2>" + "".join(_gpu_section(result, r) for r in result.ranks),
    ]
    return page(f"xferscope fleet, {result.created}", body, result.simulated)


def write_fleet_html(result: FleetResult, path: Path) -> None:
    path.write_text(render_fleet_html(result), encoding="utf-8")
