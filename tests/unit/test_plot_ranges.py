"""The bandwidth plot's axes: 1 GB/s to the link limit fills most of each panel's height, the
sizes left of the floor are named in the panel's title, and no panel is left empty."""

from __future__ import annotations

import math

from xferscope.report import plots

from .run_samples import _curves


def test_bandwidth_panels_show_1_gbps_to_the_limit_and_no_empty_panel(monkeypatch, tmp_path):
    result = _curves(0, 1)  # h2d, d2h and d2d: three panels
    drawn = []
    monkeypatch.setattr(plots, "save_png", lambda fig, path: drawn.append(fig))
    plots.write_plot(result, "bandwidth", tmp_path / "b.png")
    (fig,) = drawn
    axes = fig.get_axes()
    assert len(axes) == 3 and all(ax.get_visible() for ax in axes)
    for ax in axes:
        direction = "d2d" if "device to device" in ax.get_title() else "h2d"
        limit = plots.physical_limit(result.machine, direction)
        assert limit is not None
        bottom, top = ax.get_ylim()
        limit_gbps = limit[0] / 1e9
        assert bottom <= 1.0 <= limit_gbps <= top
        share = math.log(limit_gbps / max(bottom, 1.0)) / math.log(top / bottom)
        assert share >= 0.6, (ax.get_title(), bottom, top)
        assert "the latency plot shows them" in ax.get_title()


def test_curves_that_coincide_nest_inside_each_other():
    """Pinned, write-combined and registered memory often move alike: each is drawn thinner than
    the one before it (the order the run lists them), so all three stay visible on one line,
    in the PNG and in the report's plotly figures alike."""
    from xferscope.report.style import curve_style
    from xferscope.sweep.records import CurveConfig

    widths = [curve_style(CurveConfig(0, "h2d", m, "memcpy", "api")).width
              for m in ("pinned", "wc", "registered")]  # fmt: skip
    assert widths == sorted(widths, reverse=True) and widths[-1] >= 1.0
    assert widths[0] - widths[1] >= 1.5 and widths[1] - widths[2] >= 1.0  # an edge of each shows
    kernel = curve_style(CurveConfig(0, "h2d", "pinned", "kernel", "device")).width
    assert kernel < widths[0]
