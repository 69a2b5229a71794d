"""PNG plots of a sweep: bandwidth against size and latency against size, log axes, one panel
per direction, each curve drawn as report.style says (colour: memory kind; line: mechanism and
timing; marker: GPU)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only; never needs a display
import matplotlib.pyplot as plt
from matplotlib import ticker
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from ..sweep.alignment import COSTLY, Misalignment, misalignments
from ..sweep.records import ESTIMATED, Curve, SweepResult
from .style import (
    ALIGNMENT_PLOT,
    bandwidth_view,
    curve_style,
    legend_label,
    panels,
    physical_limit,
    plot_names,
    plot_title,
)


def machine_title(result: Any, what: str) -> str:
    """A plot's title naming what it shows and the GPUs of the result's machine."""
    gpus = ", ".join(sorted({g.get("name", "?") for g in result.machine.get("gpus", [])}))
    return plot_title(f"xferscope: {what}" + (f" on {gpus}" if gpus else ""), result)


def _plot(ax: Axes, curve: Curve, values: list[float]) -> None:
    style = curve_style(curve.config)
    ax.plot(
        [p.bytes for p in curve.points],
        values,
        marker=style.mpl_marker,
        linestyle=style.mpl_dashes,
        markersize=3,
        linewidth=style.width,
        color=style.colour,
        label=legend_label(curve.config),
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
                color=style.colour,
                markersize=8,
            )


def _size_label(value: float, _position: int) -> str:
    for unit, factor in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if value >= factor:
            return f"{value / factor:g} {unit}"
    return f"{value:g} B"


def _axes(ax: Axes, title: str, ylabel: str) -> None:
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(ticker.LogLocator(base=1024))
    ax.xaxis.set_minor_locator(ticker.LogLocator(base=2, subs=(1.0,), numticks=64))
    ax.xaxis.set_major_formatter(ticker.FuncFormatter(_size_label))
    ax.xaxis.set_minor_formatter(ticker.NullFormatter())
    ax.set_yscale("log")
    ax.set_xlabel("transfer size")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="both", linestyle=":", linewidth=0.6)


def write_alignment_plot(result: SweepResult, path: Path) -> None:
    """Time against page-aligned buffers per size, one panel per case, one line per pair of
    offsets: how much a misaligned start costs, and at which sizes."""
    by_case: dict[str, list[Misalignment]] = {}
    for m in misalignments(result.curves):
        by_case.setdefault(m.case, []).append(m)
    columns = 1 if len(by_case) == 1 else 2
    rows = -(-len(by_case) // columns)
    fig, axes = plt.subplots(
        rows, columns, figsize=(8.5 * columns, 4.6 * rows), dpi=110, squeeze=False
    )
    # colour: the host offset; line: the device offset
    host_offsets = sorted({m.config.host_offset for ms in by_case.values() for m in ms})
    device_offsets = sorted({m.config.device_offset for ms in by_case.values() for m in ms})
    colours = plt.get_cmap("turbo")
    dashes = ("-", "--", ":", "-.")
    for ax, (case, members) in zip(axes.flat, by_case.items(), strict=False):
        _axes(ax, case, "time against aligned buffers (%)")
        ax.set_yscale("linear")
        sizes = sorted({size for m in members for size, _ in m.costs})
        ax.set_xticks(sizes, [_size_label(s, 0) for s in sizes])
        ax.axhline(0, color="grey", linewidth=1)
        ax.axhspan(-100 * COSTLY, 100 * COSTLY, color="grey", alpha=0.12, linewidth=0)
        for m in members:
            shade = host_offsets.index(m.config.host_offset) / max(1, len(host_offsets) - 1)
            ax.plot(
                [size for size, _ in m.costs],
                [100 * cost for _, cost in m.costs],
                marker="o",
                markersize=3,
                linewidth=1.3,
                color=colours(0.1 + 0.8 * shade),
                linestyle=dashes[device_offsets.index(m.config.device_offset) % len(dashes)],
                label=m.config.offset_label.strip(),
            )
        ax.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    for ax in list(axes.flat)[len(by_case) :]:
        ax.set_visible(False)
    fig.suptitle(
        machine_title(result, "cost of misaligned buffers (grey: within the noise)"),
        color="red" if result.simulated else "black",
    )
    save_png(fig, path)


def _bandwidth_range(ax: Axes, limit_gbps: float, curves: list[Curve], title: str) -> None:
    """The panel's axes as report.style's bandwidth_view says; the sizes left out named under
    the title."""
    view = bandwidth_view(limit_gbps, curves)
    ax.set_ylim(view.bottom, view.top)
    if view.first is not None:
        ax.set_xlim(view.first / 2, max(p.bytes for c in curves for p in c.points) * 2)
        ax.set_title(f"{title}\n({view.note()})", fontsize=10)


def write_plot(result: SweepResult, what: str, path: Path) -> None:
    """Draws one of plot_names' plots ("bandwidth" or "latency" against size, one panel per
    direction (report.style), or "alignment") and saves it at `path`."""
    if what == ALIGNMENT_PLOT:
        write_alignment_plot(result, path)
        return
    groups = panels(result.curves)
    columns = len(groups) if len(groups) <= 3 else 2  # three panels side by side: none empty
    rows = -(-len(groups) // columns)
    fig, axes = plt.subplots(
        rows, columns, figsize=(7.5 * columns, 5.2 * rows), dpi=110, squeeze=False
    )
    for ax, (title, curves) in zip(axes.flat, groups, strict=False):
        if what == "bandwidth":
            _axes(ax, title, "bandwidth (GB/s, 10^9 B/s)")
            for curve in curves:
                _plot(ax, curve, [p.bandwidth / 1e9 for p in curve.points])
            limit = physical_limit(result.machine, curves[0].config.direction)
            if limit is not None:
                _bandwidth_range(ax, limit[0] / 1e9, curves, title)
                ax.axhline(limit[0] / 1e9, color="grey", linestyle="--", linewidth=1)
                ax.annotate(
                    f"{limit[1]} {limit[0] / 1e9:.1f} GB/s",
                    xy=(0.01, limit[0] / 1e9),
                    xycoords=("axes fraction", "data"),
                    color="grey",
                    fontsize=8,
                    va="top",
                )
        else:
            _axes(ax, title, "latency per copy (µs)")
            for curve in curves:
                _plot(ax, curve, [p.median_s * 1e6 for p in curve.points])
        ax.legend(fontsize=7, loc="best", handlelength=4)
    for ax in list(axes.flat)[len(groups) :]:
        ax.set_visible(False)
    fig.suptitle(
        machine_title(result, f"{what} vs size"), color="red" if result.simulated else "black"
    )
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
    if fig.get_layout_engine() is None:  # a constrained layout lays itself out
        fig.tight_layout()
    fig.savefig(path, format="png")
    plt.close(fig)
