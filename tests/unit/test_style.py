"""Plots a person can read: one panel per direction, and within a panel no two curves drawn
alike (colour: memory kind; line: mechanism and timing; marker: GPU), the same in the PNG and
the HTML."""

from __future__ import annotations

import json
import re

from xferscope.core import cases
from xferscope.core.engine.simulated import SimulatedEngine
from xferscope.report.run_html import render_html
from xferscope.report.style import LINE_STYLES, MEMORY_COLOURS, curve_style, panels
from xferscope.run.investigate import RunOptions, run_investigation
from xferscope.sweep.measure import run_sweep
from xferscope.sweep.options import DIRECTIONS, SweepOptions


def _look(curve):
    style = curve_style(curve.config)
    return style.colour, style.plotly_dash, style.mpl_marker


def test_every_memory_kind_and_every_mechanism_timing_has_its_own_look():
    assert set(MEMORY_COLOURS) == set(cases.MEMORY_KINDS)
    assert len(set(MEMORY_COLOURS.values())) == len(MEMORY_COLOURS)
    accepted = {(c.mechanism, c.timing) for c in cases.table()}
    assert accepted <= set(LINE_STYLES)
    assert len({dash for _, dash in LINE_STYLES.values()}) == len(LINE_STYLES)


def test_no_two_curves_of_a_panel_look_alike_in_the_widest_sweep():
    options = SweepOptions(
        directions=DIRECTIONS,
        memories=cases.HOST_MEMORY,
        mechanisms=cases.MECHANISMS,
        timings=cases.TIMINGS,
        devices=(0, 1),
        sizes=(1, 4096),
        target_s=1e-3,
        budget_s=None,
    )
    result = run_sweep(SimulatedEngine(devices=2), options)
    groups = panels(result.curves)
    assert [title.split(" ")[0] for title, _ in groups] == ["host", "device", "device", "round"]
    assert sum(len(curves) for _, curves in groups) == len(result.curves)
    for title, curves in groups:
        looks = [_look(c) for c in curves]
        assert len(set(looks)) == len(looks), title


def test_curves_of_each_numa_node_look_apart(monkeypatch):
    """The fixed host's two nodes: the same case on node 0 and node 1 differ in colour (the far
    node lighter), and nothing else in a panel looks alike."""
    from xferscope.report.style import curve_style, lighten

    options = SweepOptions(
        directions=("h2d", "d2h"),
        memories=("pageable", "pinned", "wc"),
        mechanisms=("memcpy", "async"),
        timings=("api", "device"),
        sizes=(4096,),
        target_s=1e-3,
        budget_s=None,
        numa_nodes=(0, 1),
    )
    result = run_sweep(SimulatedEngine(), options)
    for _, curves in panels(result.curves):
        looks = [_look(c) for c in curves]
        assert len(set(looks)) == len(looks)
    near, far = (c for c in result.curves if c.config.label.startswith("h2d pinned memcpy api"))
    assert curve_style(far.config).colour == lighten(curve_style(near.config).colour, 0.4)
    assert lighten("#000000", 0.5) == "#808080" and lighten("#1f77b4", 0.0) == "#1f77b4"


def test_the_html_draws_each_curve_as_the_png_does():
    result = run_investigation(SimulatedEngine(), RunOptions(devices=(0,), quick=True))
    page = render_html(result)
    page = page[page.index("<body>") :]  # plotly.js, inlined in <head>, has calls of its own
    decoder = json.JSONDecoder()
    figures = [
        decoder.raw_decode(page, page.index("[", m.end()))[0]
        for m in re.finditer(r"Plotly\.newPlot\(\s*\"[^\"]+\",", page)
    ]
    drawn = {
        t["name"]: (t["line"]["color"], t["line"]["dash"])
        for traces in figures
        for t in traces
        if "marker" in t
    }
    for curve in result.gpus[0].curves:
        style = curve_style(curve.config)
        name = f"{curve.config.memory} {curve.config.mechanism} {curve.config.timing}"
        assert drawn[name] == (style.colour, style.plotly_dash), name
