"""The stored form of `xferscope batch`'s result, which is also copy_many's calibration: per
(direction, memory, count, size, method) the times of each trial, and where the staged copy
starts to beat one plain cudaMemcpy. `xferscope batch` measures and writes it; copy_many's
policy reads it (calibration.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..core import stats
from ..core.units import format_bytes
from ..documents.envelope import Envelope, document_header, dumps_document, header_fields
from ..documents.reader import Field, check_schema
from ..documents.records import KEY, OMIT_DEFAULT, from_plain, to_plain

SCHEMA_NAME = "xferscope-batch"
SCHEMA_VERSION = 1

# Where methods come within stats.CLEAR_WIN of each other, the first of these wins: the copy
# engines alone first, then packing (one host thread and a scatter kernel), the SM copy kernel
# (the GPU's SMs for the whole copy, which a program's own kernels want) and the staged copy
# (host threads and a kernel).
SIMPLEST_FIRST = ("loop", "graph", "batch-stream", "batch-call", "batch-any", "pack", "kernel",
                  "staged")  # fmt: skip


# `xferscope batch --calibrate`: the grid copy_many chooses from
CALIBRATION_DIRECTIONS = ("h2d", "d2h")  # copy_many's: between host memory and a GPU
CALIBRATION_COUNTS = (1, 4, 16, 64, 256, 1024)
CALIBRATION_SIZES = (64, 1024, 4096, 16384, 65536, 262144, 1 << 20)
CALIBRATION_MEMORIES = ("pinned", "pageable")


@dataclass(frozen=True, slots=True)
class Cell:
    """One (direction, memory, count, size, method)."""

    direction: str
    memory: str
    count: int
    size: int
    method: str
    status: str  # complete, skipped, failed, unverified, interrupted
    error: str | None = None
    host_s: tuple[float, ...] = ()  # per batch, each trial
    device_s: tuple[float, ...] = ()
    # mixed sizes (--size-mix): what they were drawn from, and the batch's bytes; `size` is then
    # the mix's mean, the same for every count
    mix: str = field(default="", metadata={OMIT_DEFAULT: True})
    mixed_bytes: int = field(default=0, metadata={OMIT_DEFAULT: True, KEY: "bytes"})

    @property
    def seconds(self) -> float | None:
        return stats.median(self.host_s) if self.host_s and self.status == "complete" else None

    @property
    def bytes(self) -> int:
        """The bytes one batch moves."""
        return self.mixed_bytes if self.mix else self.count * self.size

    @property
    def what(self) -> str:
        """The batch in words: "64 copies of 4 KiB", or "64 copies of lognormal 4 KiB s=1 (avg
        6 KiB)"."""
        if self.mix:
            average = format_bytes(self.mixed_bytes // max(self.count, 1))
            return f"{self.count} copies of {self.mix} (avg {average})"
        return f"{self.count} copies of {format_bytes(self.size)}"


@dataclass(frozen=True, slots=True)
class StagedPoint:
    """One size of pageable memory: a plain cudaMemcpy's and the staged copy's seconds per
    copy, each trial, API time."""

    direction: str
    size: int
    plain_s: tuple[float, ...]
    staged_s: tuple[float, ...]


def direct_below(points: tuple[StagedPoint, ...]) -> int | None:
    """The size under which copy_to_device and copy_to_host make one plain cudaMemcpy: the
    threshold that loses least against the faster of the two at every measured size, both
    directions together (ties: the larger, the simpler call); None without points."""
    if not points:
        return None
    sizes = sorted({p.size for p in points})
    plain = {(p.direction, p.size): stats.median(p.plain_s) for p in points}
    staged = {(p.direction, p.size): stats.median(p.staged_s) for p in points}

    def loss(threshold: int) -> float:
        return sum(
            (plain[k] if k[1] < threshold else staged[k]) / min(plain[k], staged[k]) for k in plain
        )

    return min([0, *sizes, 2 * sizes[-1]], key=lambda t: (round(loss(t), 6), -t))


@dataclass(frozen=True, slots=True)
class BatchResult(Envelope):
    cells: tuple[Cell, ...]
    staged: tuple[StagedPoint, ...] = ()  # a calibration's staged-copy crossover

    def size_label(self, size: int) -> str:
        """A size column's heading: the size, or the mix its batches' sizes were drawn from."""
        mix = next((c.mix for c in self.cells if c.size == size and c.mix), "")
        return f"{mix}, mean {format_bytes(size)}" if mix else format_bytes(size)

    def winners(self) -> dict[tuple[str, str, int, int], tuple[Cell, float | None]]:
        """Per (direction, memory, count, size): the fastest verified method (the simplest of
        those within stats.CLEAR_WIN of it) and how many times as fast as the loop it is (None
        without a loop to compare)."""
        groups: dict[tuple[str, str, int, int], list[Cell]] = {}
        for c in self.cells:
            if c.seconds:
                groups.setdefault((c.direction, c.memory, c.count, c.size), []).append(c)
        out = {}
        for key, cells in groups.items():
            by = {c.method: c for c in cells}
            best = by[stats.settle({m: c.seconds or 0.0 for m, c in by.items()}, SIMPLEST_FIRST)]
            loop = by.get("loop")
            gain = (loop.seconds or 0.0) / (best.seconds or 1.0) if loop else None
            out[key] = (best, gain)
        return out


# ---- documents ---------------------------------------------------------------------------------


def to_dict(result: BatchResult) -> dict[str, Any]:
    return document_header(SCHEMA_NAME, SCHEMA_VERSION, result) | {
        "cells": [to_plain(c) for c in result.cells],
        "winners": [
            {
                "direction": d,
                "memory": m,
                "count": n,
                "size": s,
                "method": best.method,
                "seconds": best.seconds,
                "vs_loop": gain,
                **({"mix": best.mix} if best.mix else {}),
            }
            for (d, m, n, s), (best, gain) in result.winners().items()
        ],
        **(
            {
                "staged": {
                    "points": [to_plain(p) for p in result.staged],
                    "direct_below": direct_below(result.staged),
                }
            }
            if result.staged
            else {}
        ),
    }


def from_dict(d: dict[str, Any]) -> BatchResult:
    check_schema(d, SCHEMA_NAME, SCHEMA_VERSION)
    r = Field(d)
    cells = tuple(from_plain(Cell, c) for c in r["cells"].items())
    staged = tuple(
        from_plain(StagedPoint, p) for p in r.get("staged", {}).get("points", []).items()
    )
    return BatchResult(**header_fields(r), cells=cells, staged=staged)


def dumps_json(result: BatchResult) -> str:
    return dumps_document(to_dict(result))
