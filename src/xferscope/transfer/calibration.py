"""copy_many's stored calibration: what `xferscope batch --calibrate` measured on this GPU (a
batch document, batch_document.py), kept per GPU under $XFERSCOPE_CALIBRATION or the XDG data
directory, and read again when its file changes.

Light until a calibration is stored: the batch document's modules (a third of the copy API's
imports, 37 ms of 90 on an H100 host) are imported once a file is there to read or write, so a
program without one does not wait for them (transfer/first.py sets up beside the program)."""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from .rule import staged_from

if TYPE_CHECKING:
    from .batch_document import BatchResult

CALIBRATION_ENV = "XFERSCOPE_CALIBRATION"
LOOK_AGAIN_S = 1.0  # a stored calibration is looked for again at most this often


def calibration_dir() -> Path:
    """$XFERSCOPE_CALIBRATION if set, else $XDG_DATA_HOME/xferscope/calibration (by default
    ~/.local/share/xferscope/calibration)."""
    if os.environ.get(CALIBRATION_ENV):
        return Path(os.environ[CALIBRATION_ENV])
    data = os.environ.get("XDG_DATA_HOME", "")
    base = Path(data) if data and os.path.isabs(data) else Path.home() / ".local" / "share"
    return base / "xferscope" / "calibration"


def calibration_dir_named_by() -> str:
    """What chose the calibration's directory, for a message about it: the variable where it is
    set, else the command's --calibrate."""
    return f"${CALIBRATION_ENV}" if os.environ.get(CALIBRATION_ENV) else "--calibrate"


def unusable(result: BatchResult) -> str | None:
    """Why a batch result must not be copy_many's calibration (None: it may be): an
    interrupted one, or one that leaves cells of the calibration grid unmeasured. (A simulated
    one is the simulated GPU's: a calibration only ever decides for the GPU it was measured on,
    `measured_on`.)"""
    from .batch_document import (
        CALIBRATION_COUNTS,
        CALIBRATION_DIRECTIONS,
        CALIBRATION_MEMORIES,
        CALIBRATION_SIZES,
    )

    if result.interrupted:
        return "it was interrupted"
    measured = {(c.direction, c.memory, c.count, c.size) for c in result.cells if c.seconds}
    grid = [
        (d, m, n, s)
        for d in CALIBRATION_DIRECTIONS
        for m in CALIBRATION_MEMORIES
        for n in CALIBRATION_COUNTS
        for s in CALIBRATION_SIZES
    ]
    missing = [cell for cell in grid if cell not in measured]
    if missing:
        return (
            f"{len(missing)} of the grid's {len(grid)} cells are unmeasured (copy_many's grid "
            "is measured whole: leave --counts, --sizes, --memory, --direction and --methods "
            "at their defaults)"
        )
    return None


def measured_on(result: BatchResult, gpu: str) -> bool:
    """Whether `result` was measured on the GPU `gpu` names (gpu_key)."""
    return any(gpu_key(g) == gpu for g in result.machine.get("gpus", []))


def calibration_path(gpu_key: str) -> Path:
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in gpu_key) or "gpu"
    return calibration_dir() / f"copy-many-{safe}.json"


def gpu_key(info: dict[str, Any]) -> str:
    """What names a GPU for its calibration: its UUID, else its name and bus id."""
    return str(info.get("uuid") or f"{info.get('name', 'gpu')}-{info.get('pci_bus_id', '')}")


@dataclass(frozen=True, slots=True)
class Calibration:
    """The copy_many cells of a batch result: per (direction, memory, count, size), each method's
    median seconds."""

    path: Path
    created: str
    driver: str
    cells: dict[tuple[str, str, int, int], dict[str, float]]
    # copy_to_device/copy_to_host: plain cudaMemcpy under this many bytes (None: not measured)
    direct_below: int | None = None

    @classmethod
    def of(cls, result: BatchResult, path: Path) -> Calibration:
        from .batch_document import direct_below

        cells: dict[tuple[str, str, int, int], dict[str, float]] = {}
        for c in result.cells:
            if c.seconds:
                cells.setdefault((c.direction, c.memory, c.count, c.size), {})[c.method] = c.seconds
        driver = str(result.machine.get("driver", result.machine.get("driver_version", "")))
        return cls(path, result.created, driver, cells, direct_below(result.staged))

    def nearest(self, direction: str, memory: str, count: int, size: int) -> tuple[int, int] | None:
        """The calibrated (count, size) nearest this batch, on log scales."""
        mine = [(n, s) for (d, m, n, s) in self.cells if (d, m) == (direction, memory)]
        if not mine:
            return None
        return min(
            mine,
            key=lambda ns: (
                abs(math.log2(ns[0] / max(count, 1))) + abs(math.log2(ns[1] / max(size, 1)))
            ),
        )

    def choose(
        self, direction: str, memory: str, count: int, size: int
    ) -> tuple[str, str, tuple[int, int], dict[str, float]] | None:
        """(method, reason, cell, seconds by method), or None when no cell is near (asked once
        per shape: copy_many's decisions are remembered)."""
        from ..core import stats
        from ..core.units import format_bytes
        from .batch_document import SIMPLEST_FIRST

        cell = self.nearest(direction, memory, count, size)
        if cell is None:
            return None
        times = self.cells[(direction, memory, cell[0], cell[1])]
        small = count * size < staged_from(direction, size)
        allowed = {m: t for m, t in times.items() if not (small and m == "staged")} or times
        best = stats.settle(allowed, SIMPLEST_FIRST)
        fastest = min(allowed, key=lambda m: allowed[m])
        loop = times.get("loop")
        where = f"{cell[0]} x {format_bytes(cell[1])}"
        gain = "" if best == "loop" or loop is None else f", {loop / times[best]:.1f}x the loop"
        if best == fastest:
            reason = (
                f"it was the fastest for {where} when this machine was calibrated "
                f"({self.created}{gain})"
            )
        else:
            reason = (
                f"it came within {stats.CLEAR_WIN:.0%} of the fastest ({fastest}) for {where} "
                f"when this machine was calibrated ({self.created}{gain}), and takes less of the "
                "machine"
            )
        if len(allowed) < len(times) and min(times, key=lambda m: times[m]) == "staged":
            least = format_bytes(staged_from(direction, size))
            reason += (
                f"; the staged copy timed faster, but below {least} in all its threads' "
                "wake-up costs more than it saves when calls are apart"
            )
        return best, reason, cell, dict(times)


class _Looked(NamedTuple):
    """A GPU's calibration file as last looked at: when, where, its mtime and what it held."""

    at: float
    path: Path
    mtime: float | None  # None: no file
    calibration: Calibration | None


_looked: dict[str, _Looked] = {}  # by GPU


def load(gpu: str) -> Calibration | None:
    """This GPU's stored calibration, or None; read again when the file changes (looked at
    once a second at most: copy_many asks for each new shape)."""
    now = time.monotonic()
    path = calibration_path(gpu)
    seen = _looked.get(gpu)
    if seen and seen.path == path and now - seen.at < LOOK_AGAIN_S:
        return seen.calibration
    try:
        mtime: float | None = path.stat().st_mtime
    except OSError:
        mtime = None
    if seen and seen.path == path and seen.mtime == mtime:
        calibration = seen.calibration
    else:
        calibration = None if mtime is None else _read(path, gpu)
    _looked[gpu] = _Looked(now, path, mtime, calibration)
    return calibration


def _read(path: Path, gpu: str) -> Calibration | None:
    import json

    from ..documents.files import read_text
    from .batch_document import from_dict

    try:
        result = from_dict(json.loads(read_text(path)))
    except (OSError, ValueError, KeyError, TypeError, RecursionError):
        return None  # unreadable: the rule applies, and `batch --calibrate` rewrites it
    # A file copied from elsewhere, stored by hand or by an older version: only a whole
    # calibration measured on this very GPU decides.
    if unusable(result) is None and measured_on(result, gpu):
        return Calibration.of(result, path)
    return None


def save(result: BatchResult, gpu: str) -> Path:
    """Stores a calibration result for this GPU; returns where."""
    from ..core.compiled import engine_module
    from ..documents.files import atomic_write
    from .batch_document import dumps_json

    reason = unusable(result)
    if reason is not None:
        raise ValueError(f"a calibration that copy_many cannot use: {reason}")
    path = calibration_path(gpu)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, dumps_json(result))
    _looked.pop(gpu, None)  # this process uses it from its next copy
    engine_module().forget_decisions()
    return path
