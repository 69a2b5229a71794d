"""PNG plot of `xferscope gemm`: throughput against size, one line per precision (log scale, so
FP64 and FP8 read on one axis), each point's marker its alignment class: the pattern of seed
003's Table III at a glance; beside it, when measured, the CPU's scaling over threads (seed 003's
Figure 9) and the offload ladder (where the GPU with its transfers overtakes the CPU)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; never needs a display
import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.ticker import ScalarFormatter

from ..gemm.records import GemmResult
from .plots import save_png
from .style import plot_title

MARKERS = {256: "*", 128: "P", 64: "o", 32: "s", 16: "D", 8: "^", 4: "v", 2: "<", 1: "x"}


def plot_gemm(result: GemmResult, path: Path) -> None:
    scaling = [c for c in result.cpu if c.flops and c.role == "scaling"]
    ladder = bool(result.ladder) and any(c.role == "ladder" and c.flops for c in result.cpu)
    panels = 1 + bool(scaling) + ladder
    fig, axes = plt.subplots(1, panels, figsize=(10 + 5 * (panels - 1), 6), dpi=110, squeeze=False)
    _throughput(result, axes[0][0])
    if scaling:
        _scaling(result, axes[0][1])
    if ladder:
        _ladder(result, axes[0][-1])
    gpu = result.gpu.get("name", "?")
    fig.suptitle(plot_title(f"xferscope gemm on GPU {result.device} ({gpu})", result), fontsize=11)
    save_png(fig, path)


def _throughput(result: GemmResult, ax: Axes) -> None:
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
        top = result.peak(precision)
        if top is not None:
            ax.axhline(top.flops / 1e12, color=color, linestyle=":", linewidth=0.8)
    for klass in sorted(seen, reverse=True):
        ax.plot(
            [],
            [],
            marker=MARKERS.get(klass, "o"),
            color="gray",
            linestyle="none",
            label=f"divisible by {klass}",
        )
    ax.plot([], [], color="gray", linestyle=":", label="peak")
    ax.set_yscale("log")
    ax.set_xlabel("size (cube root of M N K)")
    ax.set_ylabel("TFLOP/s (10^12 floating-point operations per second)")
    ax.set_title("throughput against size", fontsize=10)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8, ncols=2)


def _scaling(result: GemmResult, ax: Axes) -> None:
    """GFLOP/s against threads at the largest shape of each precision (seed 003's Figure 9)."""
    done = [c for c in result.cpu if c.flops and c.role == "scaling"]
    for precision in dict.fromkeys(c.precision for c in done):
        mine = [c for c in done if c.precision == precision]
        shape = max(mine, key=lambda c: c.shape.flops).shape
        at = sorted((c for c in mine if c.shape == shape), key=lambda c: c.threads)
        x = [c.threads for c in at]
        y = [(c.flops or 0.0) / 1e9 for c in at]
        line = ax.plot(x, y, marker="o", label=f"{precision} {shape.label}")[0]
        ax.plot(x, [y[0] * t / x[0] for t in x], color=line.get_color(), linestyle=":", lw=0.8)
    ax.plot([], [], color="gray", linestyle=":", label="linear scaling")
    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted({c.threads for c in done}))
    ax.xaxis.set_major_formatter(ScalarFormatter())
    ax.set_xlabel("CPU threads (pinned)")
    ax.set_ylabel("GFLOP/s")
    blas = result.cpu_blas or {}
    ax.set_title(f"CPU scaling ({blas.get('internal_api')} {blas.get('version')})", fontsize=10)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)


def _ladder(result: GemmResult, ax: Axes) -> None:
    """GFLOP/s against size: the GPU with its transfers, and the CPU on one and on all threads."""
    cmap = plt.get_cmap("tab10")
    for i, precision in enumerate(dict.fromkeys(p.precision for p in result.ladder)):
        color = cmap(i % 10)
        gpu = sorted(
            (p for p in result.ladder if p.precision == precision and p.verified),
            key=lambda p: p.m,
        )
        rates = [(p.m, p.transfer_flops("pinned")) for p in gpu]
        ax.plot(
            [m for m, r in rates if r],
            [r / 1e9 for _, r in rates if r],
            color=color,
            marker="o",
            label=f"{precision} GPU with transfers",
        )
        cpu = [c for c in result.cpu if c.role == "ladder" and c.precision == precision and c.flops]
        for threads, style in zip(sorted({c.threads for c in cpu}), ("--", ":"), strict=False):
            mine = sorted((c for c in cpu if c.threads == threads), key=lambda c: c.m)
            ax.plot(
                [c.m for c in mine],
                [(c.flops or 0.0) / 1e9 for c in mine],
                color=color,
                linestyle=style,
                marker=".",
                label=f"{precision} CPU {threads} thr",
            )
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(ScalarFormatter())
    ax.set_yscale("log")
    ax.set_xlabel("square size N (M = N = K)")
    ax.set_ylabel("GFLOP/s")
    ax.set_title("offload break-even", fontsize=10)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
