"""PNG plots of the overlap experiments: total time against CPU work (seed 000's Figure 2 axes),
rotation efficiency against the number of buffers, and pipelined speedup against streams."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; never needs a display
import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from ..core.units import format_bytes
from ..overlap import AnyResult, GpuOverlapResult, OverlapCpuResult, RotationResult
from .plots import machine_title, save_png


def _finish(fig: Figure, result: AnyResult, what: str, path: Path) -> None:
    fig.suptitle(machine_title(result, what), color="red" if result.simulated else "black")
    save_png(fig, path)


def plot_suffix(result: AnyResult) -> str | None:
    """The name the experiment's plot ends with (PREFIX-time.png ...), None when it has none."""
    if isinstance(result, OverlapCpuResult):
        return "-time.png" if any(s.points for s in result.series) else None
    if not result.points:
        return None
    return "-efficiency.png" if isinstance(result, RotationResult) else "-speedup.png"


def write_plot(result: AnyResult, path: Path) -> None:
    """Draws the experiment's plot (see plot_suffix) and saves it at `path`."""
    if isinstance(result, OverlapCpuResult):
        _cpu_plot(result, path)
    elif isinstance(result, RotationResult):
        _buffers_plot(result, path)
    else:
        _gpu_plot(result, path)


def _colors(n: int) -> list[tuple[float, ...]]:
    return [plt.get_cmap("tab10")(i % 10) for i in range(n)]


def _cpu_plot(result: OverlapCpuResult, path: Path) -> None:
    """Left, total time against CPU work W per memory kind, with the ideal
    max(T0, W) dashed and no overlap at all, T0 + W, dotted; right, the share of the work hidden
    with its ideal min(1, T0 / W)."""
    series = [s for s in result.series if s.points]
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 5.5), dpi=110)
    for s, color in zip(series, _colors(len(series)), strict=True):
        t0 = s.t0_s or 0.0
        works = [p.work_s * 1e3 for p in s.points]
        marker = "o" if s.valid else "x"
        left.plot(
            works,
            [p.total_s * 1e3 for p in s.points],
            marker=marker,
            color=color,
            label=f"{s.memory}" + ("" if s.valid else " (verification FAILED)"),
        )
        reach = max(works)
        grid = sorted({0.0, t0 * 1e3, reach})
        left.plot(
            grid,
            [max(t0 * 1e3, w) for w in grid],
            linestyle="--",
            color=color,
            linewidth=1,
            label=f"{s.memory} ideal max(T0, W)",
        )
        left.plot(
            [0, reach],
            [t0 * 1e3, t0 * 1e3 + reach],
            linestyle=":",
            color=color,
            linewidth=1,
            label=f"{s.memory} no overlap T0 + W",
        )
        hidden = [
            (p.work_s * 1e3, efficiency, ideal)
            for p in s.points[1:]
            if (efficiency := s.efficiency(p)) is not None and (ideal := s.ideal(p)) is not None
        ]
        right.plot(
            [h[0] for h in hidden],
            [h[1] for h in hidden],
            marker=marker,
            color=color,
            label=s.memory,
        )
        right.plot(
            [h[0] for h in hidden],
            [h[2] for h in hidden],
            linestyle="--",
            color=color,
            linewidth=1,
            label=f"{s.memory} ideal min(1, T0 / W)",
        )
    left.set_xlabel("CPU work W (ms)")
    left.set_ylabel(f"total time per copy of {format_bytes(result.bytes)} (ms)")
    left.set_ylim(bottom=0)
    right.set_xlabel("CPU work W (ms)")
    right.set_ylabel("share of the work hidden (efficiency)")
    right.set_ylim(-0.05, 1.1)
    for ax in (left, right):
        ax.set_xlim(left=0)
        ax.grid(True, linestyle=":", linewidth=0.6)
        ax.legend(fontsize=7)
    what = f"{result.direction} {result.mechanism} copy under CPU work"
    _finish(fig, result, what, path)


def _buffers_plot(result: RotationResult, path: Path) -> None:
    """Efficiency against the number of buffers, one line per chunk size,
    one panel per direction."""
    directions = list(dict.fromkeys(p.direction for p in result.points))
    fig, axes = plt.subplots(
        1, len(directions), figsize=(6.5 * len(directions), 5.5), dpi=110, squeeze=False
    )
    chunk_sizes = sorted({p.chunk_bytes for p in result.points})
    colors = dict(zip(chunk_sizes, _colors(len(chunk_sizes)), strict=True))
    for ax, direction in zip(axes[0], directions, strict=True):
        for chunk in chunk_sizes:
            points = sorted(
                (p for p in result.points if p.direction == direction and p.chunk_bytes == chunk),
                key=lambda p: p.buffers,
            )
            if not points:
                continue
            ax.plot(
                [p.buffers for p in points],
                [p.efficiency for p in points],
                marker="o",
                color=colors[chunk],
                label=f"{format_bytes(chunk)} chunks",
            )
            for p in points:
                if not p.valid:
                    ax.plot([p.buffers], [p.efficiency], marker="x", color="red", markersize=10)
        ax.axhline(1.0, color="grey", linestyle="--", linewidth=1)
        ax.set_title(
            "readback (D2H), CPU checksums" if direction == "d2h" else "upload (H2D), CPU writes",
            fontsize=10,
        )
        ax.set_xlabel("pinned buffers in rotation (N)")
        ax.set_ylabel("efficiency (ideal time / total)")
        ax.set_xticks(sorted({p.buffers for p in result.points}))
        ax.set_ylim(0, 1.1)
        ax.grid(True, linestyle=":", linewidth=0.6)
        ax.legend(fontsize=8, loc="lower right")
    what = f"{result.chunks} chunks through N rotating buffers"
    _finish(fig, result, what, path)


def _gpu_plot(result: GpuOverlapResult, path: Path) -> None:
    """Speedup over sequential against streams K, the bound dashed, one
    panel per kernel work value."""
    works = list(dict.fromkeys(p.work for p in result.points))
    fig, axes = plt.subplots(1, len(works), figsize=(6 * len(works), 5.5), dpi=110, squeeze=False)
    for ax, work in zip(axes[0], works, strict=True):
        points = sorted((p for p in result.points if p.work == work), key=lambda p: p.streams)
        streams = [p.streams for p in points]
        ax.plot(streams, [p.speedup for p in points], marker="o", label="achieved speedup")
        ax.plot(
            streams,
            [p.bound for p in points],
            linestyle="--",
            color="grey",
            label="bound: stage sum / largest stage",
        )
        for p in points:
            if not p.valid:
                ax.plot([p.streams], [p.speedup], marker="x", color="red", markersize=10)
        ax.axhline(1.0, color="black", linewidth=0.6)
        last = points[-1]
        ax.set_title(
            f"work {work} FMA/element: H2D {last.h2d_s * 1e3:.3g} ms, kernel "
            f"{last.kernel_s * 1e3:.3g} ms, D2H {last.d2h_s * 1e3:.3g} ms",
            fontsize=9,
        )
        ax.set_xlabel(f"streams K ({result.chunks_per_stream} chunks per stream)")
        ax.set_ylabel("speedup over sequential")
        ax.set_xticks(streams)
        ax.set_ylim(0, max(max(p.bound for p in points), max(p.speedup for p in points)) * 1.1)
        ax.grid(True, linestyle=":", linewidth=0.6)
        ax.legend(fontsize=8, loc="lower right")
    what = f"H2D, kernel, D2H of {format_bytes(result.bytes)} over K streams"
    _finish(fig, result, what, path)
