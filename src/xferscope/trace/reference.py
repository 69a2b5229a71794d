"""What this machine reaches for a copy of a given size, to price a traced program's copies:
the time of one cudaMemcpy from pageable and from pinned memory, each way, at every size
(API time: the host waits for it). From the newest `xferscope run` in the history that measured
this GPU, or from a short sweep made on the spot."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core import plan
from ..core.engine import Engine
from ..core.progress import QUIET, Progress
from ..sweep.records import Curve

CURVES = tuple((d, m) for d in ("h2d", "d2h") for m in ("pageable", "pinned"))
CALIBRATION_SIZES = tuple(plan.log_sizes(1 << 10, 256 << 20))[::2]  # 1 KiB, 4 KiB, ...


@dataclass(frozen=True, slots=True)
class Reference:
    """Seconds per copy by (direction, host memory), as (bytes, seconds) points in size order."""

    source: str  # where the curves come from, in words
    points: dict[tuple[str, str], tuple[tuple[int, float], ...]] = field(default_factory=dict)

    def seconds(self, direction: str, memory: str, size: int) -> float | None:
        """The time one copy of `size` bytes takes here: interpolated on log-log axes between
        measured sizes, at the largest size's bandwidth above them, at the smallest's time
        below them. None when that curve was not measured."""
        pts = self.points.get((direction, memory))
        if not pts:
            return None
        if size <= pts[0][0]:
            return pts[0][1]
        if size >= pts[-1][0]:
            return pts[-1][1] * size / pts[-1][0]
        for (b0, t0), (b1, t1) in itertools.pairwise(pts):
            if b0 <= size <= b1:
                f = (math.log(size) - math.log(b0)) / (math.log(b1) - math.log(b0))
                return math.exp(math.log(t0) + f * (math.log(t1) - math.log(t0)))
        return None

    def to_dict(self) -> dict[str, object]:
        return {
            "source": self.source,
            "curves": {f"{d} {m}": [list(p) for p in pts] for (d, m), pts in self.points.items()},
        }


def from_dict(d: dict[str, Any]) -> Reference:
    """A Reference as to_dict wrote it; ValueError where it is not one."""
    try:
        points = {
            tuple(key.split(" ", 1)): tuple((int(b), float(t)) for b, t in pts)
            for key, pts in d["curves"].items()
        }
        return Reference(str(d["source"]), points)
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        raise ValueError(f"not a trace reference: {exc}") from None


def from_curves(source: str, curves: Iterable[Curve]) -> Reference:
    points: dict[tuple[str, str], tuple[tuple[int, float], ...]] = {}
    for c in curves:
        key = (c.config.direction, c.config.memory)
        if key in CURVES and c.config.mechanism == "memcpy" and c.config.timing == "api":
            valid = sorted((p.bytes, p.median_s) for p in c.points if p.samples_s)
            if valid:
                points[key] = tuple(valid)
    return Reference(source, points)


def from_history(path: Path, uuid: str) -> Reference | None:
    """The newest complete run in the history that measured the GPU `uuid`, if any."""
    from ..run.history import History, HistoryError

    if not path.exists():
        return None
    try:
        with History(path, readonly=True) as history:
            for summary in history.list(200):
                if summary.kind != "run" or summary.simulated or not summary.complete:
                    continue
                run = history.get(summary.id)
                for gpu in run.gpus:
                    facts: dict[str, object] = next(
                        (g for g in run.machine.get("gpus", []) if g.get("index") == gpu.index), {}
                    )
                    if facts.get("uuid") == uuid:
                        ref = from_curves(
                            f"xferscope run {summary.id} ({summary.created})", gpu.curves
                        )
                        if len(ref.points) == len(CURVES):
                            return ref
    except HistoryError:
        return None
    return None


def calibrate(engine: Engine, device: int, progress: Progress = QUIET) -> Reference:
    """A short sweep of cudaMemcpy from pageable and pinned memory, both ways (about 10 s).
    Raises KeyboardInterrupt when a stop cut it short."""
    from ..sweep.measure import run_sweep
    from ..sweep.options import SweepOptions

    options = SweepOptions(
        directions=("h2d", "d2h"),
        memories=("pageable", "pinned"),
        mechanisms=("memcpy",),
        timings=("api",),
        devices=(device,),
        sizes=CALIBRATION_SIZES,
        target_s=0.01,
        trials=3,
        max_trials=5,
        budget_s=4.0,
        verify=False,
    )
    result = run_sweep(engine, options, progress)
    if result.interrupted:
        raise KeyboardInterrupt  # a partial sweep would price the fixes with missing sizes
    return from_curves("a calibration sweep made for this trace", result.curves)
