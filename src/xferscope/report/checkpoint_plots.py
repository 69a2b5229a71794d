"""The PNG of `xferscope checkpoint`: for each state (cold, warm), the rate of every stage of
the checkpoint's path and of the load beside them, one bar each on a log scale, the bound in
red and the load in blue."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; never needs a display
import matplotlib.pyplot as plt

from ..checkpoint.records import STAGES, CheckpointResult
from ..core.units import format_bytes, format_rate
from .plots import save_png
from .style import plot_title


def plot_checkpoint(result: CheckpointResult, path: Path) -> None:
    """One panel a state measured: its stages' rates and the load's, GB/s, saved at `path`."""
    bounds = result.bounds()
    fig, axes = plt.subplots(1, max(len(bounds), 1), figsize=(11, 4.5), dpi=110, squeeze=False)
    for ax, bound in zip(axes[0], bounds, strict=False):
        names = [s for s in STAGES[bound.state] if result.rate(s) is not None]
        rates = [float(result.rate(s) or 0.0) for s in names]
        labels = [*names, f"xferscope.load\nfrom {bound.state}"]
        values = [r / 1e9 for r in [*rates, bound.load_bps]]
        colors = ["tab:red" if s == bound.stage else "tab:gray" for s in names] + ["tab:blue"]
        bars = ax.barh(labels, values, color=colors)
        for bar, value in zip(bars, [*rates, bound.load_bps], strict=True):
            ax.annotate(format_rate(value), xy=(bar.get_width(), bar.get_y() + 0.4),
                        xytext=(4, 0), textcoords="offset points", fontsize=8)  # fmt: skip
        ax.invert_yaxis()
        ax.set_xscale("log")  # a disk's 1 GB/s beside a header's hundreds
        ax.set_xlabel("GB/s (log scale)")
        positive = [v for v in values if v > 0] or [1.0]
        ax.set_xlim(min(positive) / 2, max(positive) * 4)
        ax.set_title(f"{bound.state}: bound by the {bound.stage}, the load at {bound.share:.0%}",
                     fontsize=9)  # fmt: skip
        ax.grid(True, axis="x", linestyle=":", linewidth=0.6)
    gpu = next((g.get("name") for g in result.machine.get("gpus", [])), None)
    fig.suptitle(
        plot_title(
            f"xferscope: a {format_bytes(result.data_bytes)} checkpoint to GPU {result.device}"
            f"{f' ({gpu})' if gpu else ''}, stage by stage",
            result,
        ),
        color="red" if result.simulated else "black",
        fontsize=10,
    )
    save_png(fig, path)
