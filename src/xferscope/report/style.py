"""The report's shared vocabulary: the one SIMULATED banner, and how every plot (PNG and HTML)
draws a curve: one colour per memory kind, one line style per mechanism and timing, one panel
per direction."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..core.findings import ERROR, INFO, OK, WARNING, Finding
from ..core.units import format_bytes
from ..sweep.alignment import misalignments
from ..sweep.records import Curve, CurveConfig, SweepResult

# Every output of the simulated engine says this, in these words.
SIMULATED = "SIMULATED: these figures come from a link model, not from a GPU"


def print_simulated(console: Console) -> None:
    console.print(f"[bold red]{SIMULATED}[/bold red]")


# How each severity of a finding is labelled and coloured in the terminal.
def titled_table(title: str, columns: Sequence[str], left: Collection[str]) -> Table:
    """A table titled at its left, the columns named in `left` (words) aligned left and the rest
    (figures) right."""
    table = Table(title=title, title_justify="left")
    for name in columns:
        table.add_column(name, justify="left" if name in left else "right")
    return table


SEVERITY_STYLES = {ERROR: "bold red", WARNING: "yellow", INFO: "cyan", OK: "green"}
SEVERITY_LABELS = {ERROR: "ERROR", WARNING: "warning", INFO: "note", OK: "ok"}


def findings_text(findings: Sequence[Finding]) -> list[Text]:
    """Every finding as the terminal shows it: severity, message, then why and the fix."""
    lines = []
    for f in findings:
        label = SEVERITY_LABELS.get(f.severity, f.severity)
        line = Text.assemble((f"{label:>7} ", SEVERITY_STYLES.get(f.severity, "")), f.message)
        if f.cause:
            line.append(f"\n        why: {f.cause}", style="dim")
        if f.fix:
            line.append(f"\n        fix: {f.fix}", style="dim")
        lines.append(line)
    return lines


def print_findings(findings: Sequence[Finding], console: Console) -> None:
    for line in findings_text(findings):
        console.print(line)


# ---- curves ------------------------------------------------------------------------------------

# matplotlib's tab10 hues as hex, which plotly draws the same: a category's colour by its index,
# alike in a PNG and on an HTML page.
CATEGORY_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
                    "#7f7f7f", "#bcbd22", "#17becf")  # fmt: skip


def category_colour(index: int) -> str:
    return CATEGORY_COLOURS[index % len(CATEGORY_COLOURS)]


# One colour per memory kind (matplotlib's tab10 hues, which plotly draws the same).
MEMORY_COLOURS = {
    "pageable": "#d62728",  # red
    "pinned": "#1f77b4",  # blue
    "wc": "#2ca02c",  # green
    "registered": "#9467bd",  # purple
    "mapped": "#ff7f0e",  # orange
    "thp": "#8c564b",  # brown
    "hugetlb": "#e377c2",  # pink
    "readonly": "#7f7f7f",  # grey
    "portable": "#bcbd22",  # olive
    "system": "#17becf",  # cyan
    "managed": "#393b79",  # indigo
    "device": "#333333",  # near black
}
# Line widths per memory kind, in points, widest first in the order curves are drawn (pageable,
# pinned, wc, registered): where pinned, write-combined and registered memory move alike, each
# thinner line lies inside the wider one drawn before it, and all three stay visible. A kernel's
# copies (also of pinned memory) are drawn at KERNEL_WIDTH_SHARE of their memory's width.
MEMORY_WIDTHS = {
    "pageable": 1.6,
    "pinned": 4.5,
    "wc": 2.7,
    "registered": 1.2,
    "mapped": 1.6,
    "thp": 1.6,
    "hugetlb": 1.6,
    "readonly": 1.6,
    "portable": 1.6,
    "system": 1.6,
    "managed": 1.6,
    "device": 1.6,
}
KERNEL_WIDTH_SHARE = 0.45
# One line style per mechanism and timing: (matplotlib dashes, plotly dash).
LINE_STYLES: dict[tuple[str, str], tuple[Any, str]] = {
    ("memcpy", "api"): ("-", "solid"),
    ("async", "device"): ((0, (5, 2)), "dash"),
    ("async", "api"): ((0, (8, 2, 2, 2)), "longdashdot"),
    ("memcpy", "device"): ((0, (1, 1.5)), "dot"),
    ("kernel", "device"): ((0, (10, 3)), "longdash"),
    ("kernel", "api"): ((0, (3, 1, 1, 1, 1, 1)), "dashdot"),
    ("staged", "api"): ((0, (6, 1.5, 1, 1.5)), "5px,2px,1px,2px"),
    ("driver", "api"): ((0, (2, 1)), "3px,1px"),
    ("driver", "device"): ((0, (1, 3)), "1px,4px"),
    ("driver-async", "device"): ((0, (4, 1, 1, 1)), "6px,1px,1px,1px"),
    ("driver-async", "api"): ((0, (12, 2)), "12px,2px"),
}
# One marker per GPU, so the curves of several GPUs in one panel stay apart.
MARKERS = (
    ("o", "circle"),
    ("s", "square"),
    ("D", "diamond"),
    ("^", "triangle-up"),
    ("v", "triangle-down"),
    ("P", "cross"),
    ("X", "x"),
    ("*", "star"),
)
# The panels, one per direction, in this order.
PANELS = {
    "h2d": "host to device",
    "d2h": "device to host",
    "d2d": "device to device (bytes copied)",
    "roundtrip": "round trip (H2D then D2H)",
}


@dataclass(frozen=True, slots=True)
class CurveStyle:
    colour: str
    mpl_dashes: Any
    plotly_dash: str
    mpl_marker: str
    plotly_symbol: str
    width: float = 1.6  # line width in points (plotly: pixels)


# Host memory placed on NUMA node n > 0 is drawn in its kind's colour this much closer to white
# per node (node 0, and memory left where the OS put it, in the colour itself).
NODE_LIGHTEN = 0.4


def lighten(colour: str, share: float) -> str:
    """'#rrggbb' moved `share` (0..1) of the way to white."""
    channels = (int(colour[i : i + 2], 16) for i in (1, 3, 5))
    return "#" + "".join(f"{round(c + (255 - c) * share):02x}" for c in channels)


def curve_style(config: CurveConfig) -> CurveStyle:
    """How a curve is drawn in every plot: its memory kind's colour (lighter on a further NUMA
    node) and line width, its mechanism and timing's line style, its GPU's marker."""
    mpl_dashes, plotly_dash = LINE_STYLES.get((config.mechanism, config.timing), ("-", "solid"))
    mpl_marker, plotly_symbol = MARKERS[config.device % len(MARKERS)]
    width = MEMORY_WIDTHS.get(config.memory, 1.6)
    if config.mechanism == "kernel":
        width *= KERNEL_WIDTH_SHARE
    colour = MEMORY_COLOURS.get(config.memory, "#7f7f7f")
    if config.numa_node:
        colour = lighten(colour, min(0.8, NODE_LIGHTEN * config.numa_node))
    return CurveStyle(
        colour,
        mpl_dashes,
        plotly_dash,
        mpl_marker,
        plotly_symbol,
        width,
    )


def panels(curves: Sequence[Curve]) -> list[tuple[str, list[Curve]]]:
    """The curves with points, grouped into one panel per direction, in PANELS' order. Within a
    panel no two curves look alike: each (memory, mechanism, timing, GPU) is one curve.
    Misaligned copies (the alignment study) have a plot of their own."""
    out = []
    for direction, title in PANELS.items():
        members = [
            c
            for c in curves
            if c.points and c.config.direction == direction and not c.config.offset_label
        ]
        if members:
            out.append((title, members))
    return out


def legend_label(config: CurveConfig) -> str:
    """A curve's name within its direction's panel: 'pinned async device (gpu1)', 'pinned
    memcpy api node1' for host memory placed on NUMA node 1."""
    gpu = f" (gpu{config.device})" if config.device else ""
    node = "" if config.numa_node is None else f" node{config.numa_node}"
    return f"{config.memory} {config.mechanism} {config.timing}{node}{gpu}"


def plot_title(text: str, result: Any) -> str:
    """A plot's title, every command's alike: SIMULATED above it for the simulated engine's
    results, "(interrupted)" after it for a result cut short."""
    if getattr(result, "interrupted", False):
        text += " (interrupted)"
    return f"{SIMULATED}\n{text}" if result.simulated else text


# A bandwidth panel spans from BANDWIDTH_FLOOR_GBPS (or its limit / BANDWIDTH_SPAN_UNDER, if
# lower) to BANDWIDTH_HEADROOM times its limit, so that 1 GB/s to the limit fills most of the
# axis; smaller copies, slower than that, are read on the latency plot.
BANDWIDTH_FLOOR_GBPS = 1.0
BANDWIDTH_SPAN_UNDER = 300.0
BANDWIDTH_HEADROOM = 1.6


@dataclass(frozen=True, slots=True)
class BandwidthView:
    """What a bandwidth panel shows, in every plot (PNG and report): GB/s from `bottom` to
    `top`; sizes from `first` (None: all), the smaller ones slower than `bottom`."""

    bottom: float
    top: float
    first: int | None

    def note(self) -> str:
        """The panel's word on the sizes it leaves out ('' when none)."""
        if self.first is None:
            return ""
        return (
            f"sizes under {format_bytes(self.first)} move slower than {self.bottom:.2g} GB/s: "
            "the latency plot shows them"
        )


def bandwidth_view(limit_gbps: float, curves: Sequence[Curve]) -> BandwidthView:
    bottom = min(BANDWIDTH_FLOOR_GBPS, limit_gbps / BANDWIDTH_SPAN_UNDER)
    sizes = [p.bytes for c in curves for p in c.points]
    shown = [p.bytes for c in curves for p in c.points if p.bandwidth / 1e9 >= bottom]
    first = min(shown) if shown and min(shown) > min(sizes) else None
    return BandwidthView(bottom, limit_gbps * BANDWIDTH_HEADROOM, first)


# ---- the sweep's plots (report/plots.py draws them) ------------------------------------------

PLOTS = ("bandwidth", "latency")
ALIGNMENT_PLOT = "alignment"


def plot_names(result: SweepResult) -> tuple[str, ...]:
    """The plots a result has: both, or none when no curve has a point; and the cost of
    misalignment when misaligned curves were measured."""
    if not any(c.points for c in result.curves):
        return ()
    return PLOTS + ((ALIGNMENT_PLOT,) if misalignments(result.curves) else ())


# What the sweep's plots read of a GPU's facts: its name (titles) and its limits (physical_limit).
PLOT_FACTS = ("index", "name", "pcie_peak_bps", "memory_peak_bps")


def plot_facts(gpu: dict[str, Any]) -> dict[str, Any]:
    """The facts of a GPU's record (core/machine.py) that its plots show."""
    return {key: gpu.get(key) for key in PLOT_FACTS}


def physical_limit(machine: dict[str, Any], direction: str) -> tuple[float, str] | None:
    """The limit a panel's bandwidth is drawn against: the PCIe link per direction for host
    transfers, half the memory's traffic for device-to-device copies (bytes copied)."""
    gpus = machine.get("gpus", [])
    if direction == "d2d":
        peak = max((g.get("memory_peak_bps") or 0 for g in gpus), default=0)
        return (peak / 2, "HBM limit (bytes copied)") if peak else None
    peak = max((g.get("pcie_peak_bps") or 0 for g in gpus), default=0)
    return (peak, "PCIe limit") if peak else None
