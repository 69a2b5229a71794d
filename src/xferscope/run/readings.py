"""What the diagnosis rules read from a run: a GPU's facts as the machine recorded them, a
curve's bandwidth at its largest size, the name of a bandwidth figure, and the GPUs that
measured curves."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ..sweep.records import Curve
from .records import GpuSection, RunResult


def gpu_facts(result: RunResult, index: int) -> dict[str, Any]:
    """The machine's record of GPU `index` (empty where it has none)."""
    return next((g for g in result.machine.get("gpus", []) if g.get("index") == index), {})


def largest(curve: Curve | None) -> float | None:
    """The bandwidth at the curve's largest size; None where it was not measured or is not
    valid."""
    if curve is None or not curve.points:
        return None
    point = curve.points[-1]
    return point.bandwidth if point.valid else None


def figure_of(gpu: int, direction: str, memory: str, mechanism: str, timing: str) -> str:
    """The name of a curve's bandwidth figure, as findings and metrics name it."""
    return f"gpu{gpu}/{direction}/{memory}/{mechanism}/{timing}/bandwidth"


def curve_figure(gpu: int, curve: Curve) -> str:
    """The name of this curve's bandwidth figure (figure_of, from its configuration)."""
    c = curve.config
    return figure_of(gpu, c.direction, c.memory, c.mechanism, c.timing)


def measured_gpus(result: RunResult) -> Iterator[GpuSection]:
    """The GPU sections that measured curves."""
    return (g for g in result.gpus if g.curves)
