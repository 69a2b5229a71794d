"""PNG plot of `xferscope gemm`: throughput against size, one line per precision (log scale, so
FP64 and FP8 read on one axis), each point's marker its alignment class: the pattern of seed
003's Table III at a glance."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; never needs a display
import matplotlib.pyplot as plt

from ..gemm.measure import GemmResult
from .plots import save_png
from .style import SIMULATED

MARKERS = {256: "*", 128: "P", 64: "o", 32: "s", 16: "D", 8: "^", 4: "v", 2: "<", 1: "x"}


def plot_gemm(result: GemmResult, path: Path) -> None:
    fig, ax = plt.subplots(figsize=(10, 6), dpi=110)
    cmap = plt.get_cmap("tab10")
    seen: set[int] = set()
    for i, precision in enumerate(dict.fromkeys(p.precision for p in result.points)):
        points = sorted(result.measured(precision), key=lambda p: p.shape.flops)
        if not points:
            continue
        color = cmap(i % 10)
        x = [p.shape.flops ** (1 / 3) / 2 ** (1 / 3) for p in points]  # the cube root of M N K
        y = [(p.flops or 0.0) / 1e12 for p in points]
        ax.plot(x, y, color=color, linewidth=1, label=precision)
        for xi, yi, p in zip(x, y, points, strict=True):
            klass = min(p.alignment, 256)
            ax.plot(xi, yi, marker=MARKERS.get(klass, "o"), color=color, linestyle="none")
            seen.add(klass)
    for klass in sorted(seen, reverse=True):
        ax.plot(
            [],
            [],
            marker=MARKERS.get(klass, "o"),
            color="gray",
            linestyle="none",
            label=f"divisible by {klass}",
        )
    ax.set_yscale("log")
    ax.set_xlabel("size (cube root of M N K)")
    ax.set_ylabel("TFLOP/s (10^12 floating-point operations per second)")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8, ncols=2)
    gpu = next((g.get("name") for g in result.machine.get("gpus", [])), "?")
    title = f"xferscope gemm on GPU {result.device} ({gpu}): throughput against size"
    if result.simulated:
        title = SIMULATED + "\n" + title
    if result.interrupted:
        title += " (interrupted)"
    ax.set_title(title, fontsize=10)
    save_png(fig, path)
