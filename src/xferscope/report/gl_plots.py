"""PNG plots of `xferscope gl`: every scenario's rate as a bar, uploads and readbacks in their
own panels, with CUDA pinned memcpy of the same bytes as a line (failed verification hatched);
and seed 000's Figure 2: the transfer time against the CPU work added, one line per
asynchronous scenario, with the ideal (every second of work hidden until it outlasts the
transfer)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; never needs a display
import matplotlib.pyplot as plt

from ..gl.records import GlResult
from .plots import save_png
from .style import plot_title

OPS = (("upload", "tab:blue"), ("readback", "tab:orange"))


def _title(result: GlResult, what: str) -> str:
    renderer = result.gl.get("renderer", "?")
    return plot_title(f"xferscope gl: {what} on GPU {result.device} ({renderer})", result)


def plot_rates(result: GlResult, path: Path) -> None:
    """Bars of every measured scenario's rate, per op."""
    ops = [(op, c) for op, c in OPS if any(s.op == op and s.rate for s in result.scenarios)]
    heights = [max(1, sum(1 for s in result.scenarios if s.op == op and s.rate)) for op, _ in ops]
    fig, axes = plt.subplots(
        len(ops) or 1,
        1,
        figsize=(11, 1.2 + 0.28 * sum(heights) + 0.8 * len(ops)),
        dpi=110,
        squeeze=False,
        gridspec_kw={"height_ratios": heights or [1]},
        layout="constrained",
    )
    for ax, (op, color) in zip(axes[:, 0], ops, strict=False):
        done = [s for s in result.scenarios if s.op == op and s.rate]
        rates = [(s.rate or 0.0) / 1e9 for s in done]
        bars = ax.barh(range(len(done)), rates, color=color)
        for bar, s in zip(bars, done, strict=True):
            if not s.verified:
                bar.set_hatch("///")
                bar.set_facecolor("white")
                bar.set_edgecolor("tab:red")
            if s.status == "estimated":
                bar.set_alpha(0.5)
        ax.set_yticks(range(len(done)), [s.label for s in done], fontsize=7)
        ax.invert_yaxis()
        marks = [
            (i, b.rate / 1e9)
            for i, s in enumerate(done)
            if (b := result.baseline(op, s.frame_bytes)) is not None and b.rate
        ]
        if marks:
            ax.plot(
                [x for _, x in marks],
                [i for i, _ in marks],
                linestyle="none",
                marker="|",
                markersize=9,
                color="black",
                label="CUDA pinned cudaMemcpy of the same bytes",
            )
            ax.legend(fontsize=7, loc="lower right")
        ax.set_xlabel("GB/s (10^9 bytes per second)")
        ax.set_title(f"{op}s (hatched: verification failed; faint: estimated)", fontsize=9)
        ax.grid(axis="x", alpha=0.3)
    fig.suptitle(_title(result, "rate of every scenario"), fontsize=10)
    save_png(fig, path)


def has_async(result: GlResult) -> bool:
    return any(s.asynchronous and s.timing for s in result.scenarios)


def plot_async(result: GlResult, path: Path) -> None:
    """Figure 2: total transfer time of the scenario's bytes against the CPU work added."""
    fig, ax = plt.subplots(figsize=(10, 6), dpi=110, layout="constrained")
    cmap = plt.get_cmap("tab10")
    for i, s in enumerate(x for x in result.scenarios if x.asynchronous and x.timing):
        assert s.timing is not None
        per_frame = s.timing.seconds / s.timing.frames
        frames = s.timing.frames
        # every point scaled to the scenario's frames, so lines compare
        work = [p.work_s / p.frames * frames for p in s.asynchronous]
        total = [p.seconds / p.frames * frames for p in s.asynchronous]
        color = cmap(i % 10)
        ax.plot(work, total, marker="o", color=color, label=s.label)
        top = max(work, default=0.0)
        base = per_frame * frames
        ax.plot(
            [0, base, max(top, base)],
            [base, base, max(top, base)],
            color=color,
            linestyle=":",
            linewidth=1,
        )
    ax.set_xlabel("dummy CPU work (s, over the scenario's frames)")
    ax.set_ylabel("transfer time of the scenario's bytes (s)")
    ax.set_title("dotted: the ideal (work hidden until it outlasts the transfer)", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.suptitle(_title(result, "CPU work hidden under readbacks"), fontsize=10)
    save_png(fig, path)
