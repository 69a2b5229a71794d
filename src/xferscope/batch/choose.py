"""Which method copy_many uses for a batch: the one this machine measured fastest for the nearest
count and size in its stored calibration (`xferscope batch --calibrate`), or, without one, a
built-in rule drawn from an H200's measurements that never picks a method far slower than a loop
of cudaMemcpyAsync."""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core import stats
from ..core.units import format_bytes
from ..documents.files import atomic_write, read_text
from .measure import (
    CALIBRATION_COUNTS,
    CALIBRATION_DIRECTIONS,
    CALIBRATION_SIZES,
    SIMPLEST_FIRST,
    BatchResult,
    direct_below,
    from_dict,
)

CALIBRATION_ENV = "XFERSCOPE_CALIBRATION"


@dataclass(frozen=True, slots=True)
class Choice:
    """What copy_many did with a batch, and why (explain())."""

    method: str
    direction: str  # h2d, d2h
    memory: str  # pinned, pageable (the host side; pageable if any piece is)
    count: int
    bytes: int
    device: int
    source: str  # calibration, rule, asked
    reason: str
    # the nearest calibrated batch (count, size) and each method's seconds there
    cell: tuple[int, int] | None = None
    measured: dict[str, float] = field(default_factory=dict)

    def explain(self) -> str:
        size = format_bytes(self.bytes // max(self.count, 1))
        head = (
            f"{self.count} copies of {size} on average ({format_bytes(self.bytes)} in all), "
            f"{self.direction} with {self.memory} host memory on GPU {self.device}: "
            f"{self.method}, because {self.reason}."
        )
        if not self.measured:
            return head
        best = min(self.measured.values())
        ranked = sorted(self.measured.items(), key=lambda kv: kv[1])
        times = ", ".join(
            f"{m} {s * 1e6:.1f} us" + ("" if s == best else f" ({s / best:.2f}x)")
            for m, s in ranked
        )
        return f"{head} Measured here for that batch: {times}."


# ---- the built-in rule ------------------------------------------------------------------------

# From `xferscope batch` on an H200 (PCIe Gen5): for pinned memory one SM copy kernel over the
# list beat the loop 30x at 1024 x 4 KiB and stayed ahead up to 64 KiB a copy;
# cudaMemcpyBatchAsync beat the loop about 3x at 64 KiB; from pageable memory packing into one
# pinned buffer won while the pieces were small. Past these sizes the copy engines' bandwidth
# decides and every method is about the loop.
RULE_KERNEL_MAX = 64 << 10
# On an H100 (copyapi_bench, PyTorch tensors) the kernel lost to PyTorch's loop at 4 x 64 KiB up
# (44.8 us against 28.7) and won from 16 pieces (16 x 64 KiB: 61.9 against 92.3) and at 4 x 4 KiB
# (23.5 against 29.1): few pieces larger than this go by the loop.
RULE_KERNEL_FEW, RULE_KERNEL_FEW_MAX = 16, 16 << 10
# On an H100 packing lost to a loop of cudaMemcpyAsync from 96 KiB a piece in most batches of
# 2-15 pieces (4 x 256 KiB up: 122 us against 89; 15 x 128 KiB down: 334 against 326)
RULE_PACK_MAX = 64 << 10
# From pageable memory the staged copy's threads reached 46-51 GB/s for 1 GiB on an H200 and beat
# one cudaMemcpy from 1 MiB, while packing on one thread ran at about 10 GB/s (5.8 GB/s for 1024 x
# 1 MiB, slower than the loop's 8.4): batches of pageable pieces this large in all are staged.
# Below it the staged copy is not chosen even where a calibration timed it fastest: calibration
# times calls back to back, and with 2 ms between calls (as a program makes them) its threads'
# wake-up cost it on an H200 at 1 MiB in all: 346-433 us against the loop's 235-276 (h2d 16 x
# 64 KiB, h2d and d2h 4 x 256 KiB), while at 4 MiB it still won (d2h 16 x 256 KiB: 457 us against
# 663).
RULE_STAGED_FROM = 4 << 20
# Up, on an H100 (PyTorch tensors, forced methods interleaved with PyTorch's loop): at 4 MiB in
# pieces over 256 KiB the staged copy only tied the loop and lost to PyTorch's (1 x 4 MiB: 376 us
# against 347; 4 x 1 MiB with 2 ms between calls: 403 against 366), while from 8 MiB it won (8 x
# 1 MiB: 540 against 776; 2 x 4 MiB: 500 against 607) and in small pieces it won from 4 MiB (64 x
# 64 KiB: 341 against 658). Down it won from 4 MiB in every shape (1 x 4 MiB: 286 against 383).
RULE_STAGED_UP_LARGE_FROM, RULE_STAGED_UP_PIECE_MAX = 8 << 20, 256 << 10


def staged_from(direction: str, size: int) -> int:
    """The bytes in all from which a pageable batch of pieces of `size` is staged by the rule."""
    large_up = direction == "h2d" and size > RULE_STAGED_UP_PIECE_MAX
    return RULE_STAGED_UP_LARGE_FROM if large_up else RULE_STAGED_FROM


def rule(direction: str, memory: str, count: int, size: int, batch_api: bool) -> tuple[str, str]:
    """(method, reason) without a calibration."""
    if memory == "pageable" and count * size >= staged_from(direction, size):
        return "staged", (
            f"pageable batches of {format_bytes(staged_from(direction, size))} or more (in "
            "pieces like these) move fastest through the staged copy's threads, which pack the "
            "pieces into pinned chunks while the copy engine moves the chunks before (built-in "
            "rule: no calibration here)"
        )
    if count < 2:
        return "loop", "a single copy is one cudaMemcpyAsync (no calibration here)"
    if memory == "pinned" and size > RULE_KERNEL_FEW_MAX and count < RULE_KERNEL_FEW:
        return "loop", (
            f"fewer than {RULE_KERNEL_FEW} pinned pieces of over "
            f"{format_bytes(RULE_KERNEL_FEW_MAX)} move as fast by a loop of cudaMemcpyAsync as "
            "by any batch method (built-in rule: no calibration here)"
        )
    if memory == "pinned" and size <= RULE_KERNEL_MAX:
        return "kernel", (
            f"pieces of at most {format_bytes(RULE_KERNEL_MAX)} in pinned memory move fastest "
            "by one SM copy kernel over the list (built-in rule: no calibration here; run "
            "`xferscope batch --calibrate` to measure this machine)"
        )
    if memory == "pinned" and batch_api:
        # on an H100 (PyTorch tensors, interleaved with PyTorch's loop) cudaMemcpyBatchAsync also
        # beat the loop for pinned pieces of 1 MiB: 16 up 344 us against 375, 1024 up 20.8 ms
        # against 22.7, 1024 down 20.8 against 21.9
        return "batch-stream", (
            f"{RULE_KERNEL_FEW} or more pinned pieces over {format_bytes(RULE_KERNEL_MAX)} go "
            "fastest as cudaMemcpyBatchAsync, handed to the driver in growing groups "
            "(built-in rule: no calibration here)"
        )
    if memory == "pageable" and size <= RULE_PACK_MAX:
        return "pack", (
            f"small pageable pieces (at most {format_bytes(RULE_PACK_MAX)}) are packed into one "
            "pinned buffer and moved by one copy (built-in rule: no calibration here)"
        )
    return "loop", (
        "pieces this large keep the copy engines busy whatever the method, and the loop costs "
        "no extra work (built-in rule: no calibration here)"
    )


# ---- the stored calibration -------------------------------------------------------------------


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


CALIBRATION_MEMORIES = ("pinned", "pageable")


def unusable(result: BatchResult) -> str | None:
    """Why a batch result must not be copy_many's calibration (None: it may be): an
    interrupted one, or one that leaves cells of the calibration grid unmeasured. (A simulated
    one is the simulated GPU's: a calibration only ever decides for the GPU it was measured on,
    `measured_on`.)"""
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
    # answers already given, by (direction, memory, count, size): copy_many asks per call
    _answers: dict[tuple[str, str, int, int], Any] = field(default_factory=dict, compare=False)

    @classmethod
    def of(cls, result: BatchResult, path: Path) -> Calibration:
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
        """(method, reason, cell, seconds by method), or None when no cell is near."""
        key = (direction, memory, count, size)
        if key not in self._answers:
            self._answers[key] = self._choose(direction, memory, count, size)
        return self._answers[key]  # type: ignore[no-any-return]

    def _choose(
        self, direction: str, memory: str, count: int, size: int
    ) -> tuple[str, str, tuple[int, int], dict[str, float]] | None:
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


# copy_many's decisions, by (engine, GPU, direction, memory, count, bytes, method asked): when
# each was made and what; forgotten when a calibration is stored.
DECISIONS: dict[tuple[Any, ...], tuple[float, Choice]] = {}
_loaded: dict[Path, tuple[float, Calibration | None]] = {}
_looked: dict[str, tuple[float, Path, Calibration | None]] = {}  # by GPU: when, where, what
LOOK_AGAIN_S = 1.0  # a stored calibration is looked for again at most this often


def load(gpu: str) -> Calibration | None:
    """This GPU's stored calibration, or None; read again when the file changes (looked at
    once a second at most: copy_many asks on every call)."""
    now = time.monotonic()
    path = calibration_path(gpu)
    seen = _looked.get(gpu)
    if seen and now - seen[0] < LOOK_AGAIN_S and seen[1] == path:
        return seen[2]
    calibration = _read(path, gpu)
    _looked[gpu] = (now, path, calibration)
    return calibration


def _read(path: Path, gpu: str) -> Calibration | None:
    try:
        mtime = path.stat().st_mtime
    except OSError:
        return None
    cached = _loaded.get(path)
    if cached and cached[0] == mtime:
        return cached[1]
    try:
        result = from_dict(json.loads(read_text(path)))
        calibration: Calibration | None = None
        # A file copied from elsewhere, stored by hand or by an older version: only a whole
        # calibration measured on this very GPU decides.
        if unusable(result) is None and measured_on(result, gpu):
            calibration = Calibration.of(result, path)
    except (OSError, ValueError, KeyError, TypeError, RecursionError):
        calibration = None  # unreadable: the rule applies, and `batch --calibrate` rewrites it
    _loaded[path] = (mtime, calibration)
    return calibration


def save(result: BatchResult, gpu: str) -> Path:
    """Stores a calibration result for this GPU; returns where."""
    from .measure import dumps_json

    reason = unusable(result)
    if reason is not None:
        raise ValueError(f"a calibration that copy_many cannot use: {reason}")
    path = calibration_path(gpu)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, dumps_json(result))
    _looked.pop(gpu, None)  # this process uses it from its next copy
    DECISIONS.clear()
    from ..core.compiled import engine_module

    engine_module().forget_decisions()  # and the native path's
    return path
