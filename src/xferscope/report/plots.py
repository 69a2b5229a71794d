"""PNG plots of a sweep: bandwidth against size and latency against size, log axes, one line
per curve."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; never needs a display
import matplotlib.pyplot as plt
from matplotlib import ticker
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from ..sweep.records import ESTIMATED, Curve, SweepResult
from .style import SIMULATED


def _title(result: SweepResult, what: str) -> str:
    gpus = ", ".join(sorted({g.get("name", "?") for g in result.machine.get("gpus", [])}))
    title = f"xferscope: {what}" + (f" on {gpus}" if gpus else "")
    if result.simulated:
        title = SIMULATED + "\n" + title
    if result.interrupted:
        title += " (interrupted)"
    return title


_MARKERS = {"h2d": "o", "d2h": "s", "d2d": "D", "roundtrip": "^"}
_LINESTYLES = {"api": "-", "device": "--"}


def _plot(ax: Axes, curve: Curve, values: list[float], color: tuple[float, ...]) -> None:
    sizes = [p.bytes for p in curve.points]
    (line,) = ax.plot(
        sizes,
        values,
        marker=_MARKERS.get(curve.config.direction, "o"),
        linestyle=_LINESTYLES.get(curve.config.timing, "-"),
        markersize=3,
        linewidth=1.2,
        color=color,
        label=curve.config.label,
    )
    for p, value in zip(curve.points, values, strict=False):
        if not p.valid:
            ax.plot([p.bytes], [value], marker="x", color="red", markersize=9, zorder=5)
        elif p.status == ESTIMATED:
            ax.plot(
                [p.bytes],
                [value],
                marker="o",
                markerfacecolor="none",
                color=line.get_color(),
                markersize=8,
            )


def _size_label(value: float, _position: int) -> str:
    for unit, factor in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if value >= factor:
            return f"{value / factor:g} {unit}"
    return f"{value:g} B"


def _figure(result: SweepResult, ylabel: str, what: str, curves: int) -> tuple[Figure, Axes]:
    fig, ax = plt.subplots(figsize=(12, max(5.5, 0.2 * curves + 1)), dpi=110)
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(ticker.LogLocator(base=1024))
    ax.xaxis.set_minor_locator(ticker.LogLocator(base=2, subs=(1.0,), numticks=64))
    ax.xaxis.set_major_formatter(ticker.FuncFormatter(_size_label))
    ax.xaxis.set_minor_formatter(ticker.NullFormatter())
    ax.set_yscale("log")
    ax.set_xlabel("transfer size")
    ax.set_ylabel(ylabel)
    ax.grid(True, which="both", linestyle=":", linewidth=0.6)
    ax.set_title(_title(result, what), color="red" if result.simulated else "black")
    return fig, ax


PLOTS = ("bandwidth", "latency")


def plot_names(result: SweepResult) -> tuple[str, ...]:
    """The plots a result has: both, or none when no curve has a point."""
    return PLOTS if any(c.points for c in result.curves) else ()


def write_plot(result: SweepResult, what: str, path: Path) -> None:
    """Draws one of PLOTS ("bandwidth" or "latency" against size) and saves it at `path`."""
    curves = [c for c in result.curves if c.points]
    colors = [plt.get_cmap("tab20")(i % 20) for i in range(len(curves))]
    if what == "bandwidth":
        fig, ax = _figure(result, "bandwidth (GB/s, 10^9 B/s)", "bandwidth vs size", len(curves))
        for curve, color in zip(curves, colors, strict=True):
            _plot(ax, curve, [p.bandwidth / 1e9 for p in curve.points], color)
        peaks = {
            g.get("pcie_peak_bps") for g in result.machine.get("gpus", []) if g.get("pcie_peak_bps")
        }
        for peak in peaks:
            ax.axhline(peak / 1e9, color="grey", linestyle="--", linewidth=1)
            ax.annotate(
                f"PCIe limit {peak / 1e9:.1f} GB/s",
                xy=(0.01, peak / 1e9),
                xycoords=("axes fraction", "data"),
                color="grey",
                fontsize=8,
                va="top",
            )
    else:
        fig, ax = _figure(result, "latency per copy (µs)", "latency vs size", len(curves))
        for curve, color in zip(curves, colors, strict=True):
            _plot(ax, curve, [p.median_s * 1e6 for p in curve.points], color)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    save_png(fig, path)


def write_plots(result: SweepResult, prefix: Path) -> list[Path]:
    """Writes PREFIX-bandwidth.png and PREFIX-latency.png; returns their paths."""
    paths = [Path(f"{prefix}-{what}.png") for what in plot_names(result)]
    for what, path in zip(plot_names(result), paths, strict=True):
        write_plot(result, what, path)
    return paths


def save_png(fig: Figure, path: Path) -> None:
    """Lays a figure out, saves it as PNG at `path` (whatever its name ends with: a temporary
    name while the file is written atomically) and frees it. Every PNG is saved here."""
    fig.tight_layout()
    fig.savefig(path, format="png")
    plt.close(fig)
