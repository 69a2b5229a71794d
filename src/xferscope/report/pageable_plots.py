"""PNG plots of `xferscope pageable`: for each size, the total time of k sends by each strategy,
log-log, with the points where two strategies cross marked."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; never needs a display
import matplotlib.pyplot as plt
import numpy as np

from ..core.units import format_bytes
from ..pageable.measure import PageableResult, SizeResult, crossovers, size_tag
from .plots import save_png
from .style import plot_title

_STYLE = {
    "pageable": ("tab:red", "o"),
    "pinned": ("tab:blue", "s"),
    "registered": ("tab:green", "D"),
    "staged": ("tab:purple", "^"),
}


def _title(result: PageableResult, size: SizeResult) -> str:
    gpu = next(
        (g.get("name") for g in result.machine.get("gpus", []) if g.get("index") == result.device),
        None,
    )
    return plot_title(
        f"xferscope: sending a pageable {format_bytes(size.bytes)} buffer to GPU "
        f"{result.device}{f' ({gpu})' if gpu else ''} k times, every setup counted",
        result,
    )


def plot_size(result: PageableResult, size: SizeResult, path: Path) -> None:
    """The total time of k sends by each way for one size, saved at `path`."""
    strategies = result.strategies(size)
    sends = np.array(result.sends, dtype=float)
    low, high = float(sends.min()), float(sends.max())
    grid = np.geomspace(low, high, 200) if high > low else sends
    fig, ax = plt.subplots(figsize=(10, 6), dpi=110)
    ax.set_xscale("log")
    ax.set_yscale("log")
    for s in strategies:
        color, marker = _STYLE.get(s.name, ("black", "o"))
        ax.plot(grid, [s.total_s(k) for k in grid], color=color, linewidth=1.4)
        ax.plot(
            sends,
            [s.total_s(k) for k in sends],
            color=color,
            marker=marker,
            linestyle="none",
            markersize=4,
            label=f"{s.name}: {s.setup_s * 1e3:.3g} ms once + {s.per_send_s * 1e3:.3g} ms a send",
        )
    for c in crossovers(strategies):
        if not low <= c.sends <= high:
            continue
        total = next(s for s in strategies if s.name == c.after).total_s(c.sends)
        ax.plot([c.sends], [total], marker="X", color="black", markersize=9, zorder=5)
        ax.annotate(
            f"{c.after} beats {c.before}\nfrom {c.from_send} sends (k*={c.sends:.3g})",
            xy=(c.sends, total),
            xytext=(6, -18),
            textcoords="offset points",
            fontsize=7,
        )
    ax.set_xlabel("sends of the same buffer (k)")
    ax.set_ylabel("total time (s)")
    ax.grid(True, which="both", linestyle=":", linewidth=0.6)
    ax.set_title(_title(result, size), color="red" if result.simulated else "black", fontsize=10)
    ax.legend(fontsize=8, loc="best")
    save_png(fig, path)


def plot_suffix(size: SizeResult) -> str:
    """PREFIX-<size>.png: -1GiB.png."""
    return f"-{size_tag(size.bytes)}.png"
