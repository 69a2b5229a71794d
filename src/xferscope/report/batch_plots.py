"""PNG of `xferscope batch`: per direction and host memory, a map of counts (rows) against sizes
(columns), each cell colored by the method that won there and labelled with how many times as
fast as a loop of cudaMemcpyAsync it was."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only; never needs a display
import matplotlib.pyplot as plt
from matplotlib.colors import ListedColormap
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from ..batch.measure import METHODS, BatchResult, crossover_line
from .plots import save_png
from .style import category_colour, plot_title


def plot_batch(result: BatchResult, path: Path) -> None:
    winners = result.winners()
    panels = list(dict.fromkeys((k[0], k[1]) for k in winners))
    if not panels:
        return
    counts = sorted({k[2] for k in winners})
    sizes = sorted({k[3] for k in winners})
    cmap = ListedColormap([category_colour(i) for i in range(len(METHODS))])
    columns = min(2, len(panels))
    rows = -(-len(panels) // columns)
    fig, axes = plt.subplots(
        rows, columns, figsize=(7 * columns, 4.5 * rows), dpi=110, squeeze=False
    )
    for ax, (direction, memory) in zip(axes.flat, panels, strict=False):
        grid = [[float("nan")] * len(sizes) for _ in counts]
        for (d, m, n, s), (best, gain) in winners.items():
            if (d, m) != (direction, memory):
                continue
            i, j = counts.index(n), sizes.index(s)
            grid[i][j] = METHODS.index(best.method)
            label = best.method + ("" if gain is None else f"\n{gain:.1f}x")
            ax.text(j, i, label, ha="center", va="center", fontsize=7)
        ax.imshow(
            grid, cmap=cmap, vmin=-0.5, vmax=len(METHODS) - 0.5, aspect="auto", origin="lower"
        )
        xs, ys = crossover_line(result, direction, memory, counts, sizes)
        if xs:
            nan = float("nan")
            ax.plot([nan if x is None else x for x in xs], [nan if y is None else y for y in ys],
                    color="black", linestyle="--", linewidth=2)  # fmt: skip
        ax.set_xticks(range(len(sizes)), [result.size_label(s) for s in sizes], fontsize=8)
        ax.set_yticks(range(len(counts)), [str(n) for n in counts], fontsize=8)
        ax.set_xlabel("bytes per copy")
        ax.set_ylabel("copies per batch")
        ax.set_title(f"{direction} {memory}: fastest method (x: against the loop)", fontsize=10)
    for ax in list(axes.flat)[len(panels) :]:
        ax.axis("off")
    handles: list[Any] = [Patch(color=cmap(i), label=m) for i, m in enumerate(METHODS)]
    if not any(c.mix for c in result.cells):
        handles.append(
            Line2D([], [], color="black", linestyle="--", label="batch API beats the loop (left)")
        )
    fig.legend(handles=handles, loc="lower center", ncols=min(len(handles), 5), fontsize=8)
    gpu = next((g.get("name") for g in result.machine.get("gpus", [])), "?")
    fig.suptitle(plot_title(f"xferscope batch on {gpu}", result), fontsize=11)
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    save_png(fig, path)
