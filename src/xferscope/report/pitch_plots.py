"""PNG of `xferscope pitch`: per direction, host memory, device layout and host pitch, each
method's rate against the row width (log axes), the contiguous copy of the same bytes as a
dashed line, the cliffs marked where a rate falls to half of the next wider row's."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; never needs a display
import matplotlib.pyplot as plt

from ..core.units import format_bytes
from ..pitch.measure import METHODS, PitchResult, group_label
from .plots import save_png
from .style import category_colour, plot_title


def plot_pitch(result: PitchResult, path: Path) -> None:
    groups = [g for g in result.groups() if any(c.rate for c in result.cells if c.group == g)]
    if not groups:
        return
    columns = min(2, len(groups))
    rows = -(-len(groups) // columns)
    fig, axes = plt.subplots(
        rows, columns, figsize=(7.5 * columns, 4.8 * rows), dpi=110, squeeze=False
    )
    colours = {m: category_colour(i) for i, m in enumerate(METHODS)}
    drops = {(c.group, c.method): c.drops for c in result.cliffs()}
    for ax, group in zip(axes.flat, groups, strict=False):
        cells = [c for c in result.cells if c.group == group and c.rate]
        widths = sorted({c.width for c in result.cells if c.group == group})
        for method in METHODS:
            mine = sorted((c for c in cells if c.method == method), key=lambda c: c.width)
            if not mine:
                continue
            if method == "contiguous":
                ax.axhline(
                    (mine[0].rate or 0) / 1e9,
                    color="grey",
                    linestyle="--",
                    linewidth=1,
                    label="one contiguous copy",
                )
                continue
            ax.plot(
                [c.width for c in mine],
                [(c.rate or 0) / 1e9 for c in mine],
                marker="o",
                markersize=3,
                linewidth=1.3,
                color=colours[method],
                label=method,
            )
            rates = {c.width: c.rate or 0 for c in mine}
            for width, _ in drops.get((group, method), ()):
                ax.plot([width], [rates[width] / 1e9], marker="v", color="red", markersize=7)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(widths, [format_bytes(w).replace(" ", "") for w in widths], fontsize=7)
        ax.set_xlabel("row width (same bytes in all: narrower rows, more of them)")
        ax.set_ylabel("GB/s (10^9 B/s), host time")
        ax.set_title(group_label(group), fontsize=10)
        ax.grid(True, which="both", linestyle=":", linewidth=0.6)
        ax.legend(fontsize=7, loc="lower right")
    for ax in list(axes.flat)[len(groups) :]:
        ax.axis("off")
    title = "xferscope pitch: 2D and 3D copies by row width (red v: the rate halves)"
    fig.suptitle(plot_title(title, result), color="red" if result.simulated else "black")
    fig.tight_layout(rect=(0, 0, 1, 0.97 if rows > 1 else 0.92))
    save_png(fig, path)
