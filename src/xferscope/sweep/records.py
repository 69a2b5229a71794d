"""Immutable result records and their JSON form.

Schema history (bump SCHEMA_VERSION on any change a reader must know about):
  1  first version: sweep results with curves of points, raw per-copy samples, verification,
     machine metadata and options.
  2  "findings" (typed: code, severity, figure, message, cause, fix) replace the "warnings"
     strings; version 1 documents are still read, their warnings as findings.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from ..core import stats
from ..documents.envelope import Envelope, document_header, header_fields
from ..documents.reader import Field, SchemaError, check_schema

SCHEMA_NAME = "xferscope-sweep"
SCHEMA_VERSION = 2
OLDEST_SCHEMA_VERSION = 1  # still read

# Why a point stopped taking trials.
STOP_NOISE = "noise_bound"  # the spread fell under the bound after the minimum trials
STOP_MAX_TRIALS = "max_trials"  # the spread stayed above the bound up to the most trials
STOP_BUDGET = "budget"  # the curve's time budget ran out
STOP_INTERRUPTED = "interrupted"

# A point's status.
MEASURED = "measured"
CUT_SHORT = "cut_short"  # fewer trials than asked for, to fit the budget
ESTIMATED = "estimated"  # no full trial fitted: the figure comes from the calibration copy


@dataclass(frozen=True, slots=True)
class CurveConfig:
    device: int
    direction: str  # h2d, d2h, d2d, roundtrip
    memory: str  # pageable, pinned, wc, registered, mapped; "device" for d2d
    mechanism: str  # memcpy, async, kernel
    timing: str  # api, device
    # every copy starts this many bytes past a page-aligned place, host and device side
    host_offset: int = 0
    device_offset: int = 0

    @property
    def label(self) -> str:
        return (
            f"{self.direction} {self.memory} {self.mechanism} {self.timing}"
            + self.offset_label
            + (f" gpu{self.device}" if self.device else "")
        )

    @property
    def offset_label(self) -> str:
        """' host+1 device+0' for misaligned copies, '' for aligned ones."""
        if not (self.host_offset or self.device_offset):
            return ""
        return f" host+{self.host_offset} device+{self.device_offset}"

    @property
    def aligned(self) -> CurveConfig:
        """The same curve with both offsets 0: what misalignment is measured against."""
        return replace(self, host_offset=0, device_offset=0)


@dataclass(frozen=True, slots=True)
class Verification:
    ok: bool
    bytes_checked: int
    mismatched_bytes: int
    first_mismatch: int | None  # byte offset of the first wrong byte


def verification_of(v: Any) -> Verification:
    """The record of the engine's Verification (first_mismatch -1 means none)."""
    return Verification(
        ok=bool(v.ok),
        bytes_checked=int(v.bytes_checked),
        mismatched_bytes=int(v.mismatched_bytes),
        first_mismatch=None if v.first_mismatch < 0 else int(v.first_mismatch),
    )


@dataclass(frozen=True, slots=True)
class Point:
    bytes: int
    iterations: int  # per trial
    copies_per_iteration: int  # 2 for a round trip
    samples_s: tuple[float, ...]  # per-copy time of each trial
    warmup_s: float  # per-copy time of the warm-up (calibration) run, kept apart
    target_s: float  # the trial length aimed at
    status: str
    stopped_by: str
    blocking_kernel: bool
    blocking_timed_out: bool
    footprint_bytes: int
    cache_resident: bool  # the copies' working set could sit in the GPU L2
    verification: Verification | None

    @property
    def min_s(self) -> float:
        return min(self.samples_s)

    @property
    def median_s(self) -> float:
        return stats.median(self.samples_s)

    @property
    def max_s(self) -> float:
        return max(self.samples_s)

    @property
    def rel_noise(self) -> float:
        return stats.relative_noise(self.samples_s)

    @property
    def bandwidth(self) -> float:
        """Bytes per second at the median time (one direction, bytes counted once)."""
        return self.bytes / self.median_s

    @property
    def peak_bandwidth(self) -> float:
        """Bytes per second at the best time."""
        return self.bytes / self.min_s

    @property
    def valid(self) -> bool:
        return not self.blocking_timed_out and (self.verification is None or self.verification.ok)


@dataclass(frozen=True, slots=True)
class Curve:
    config: CurveConfig
    points: tuple[Point, ...]
    status: str  # complete, interrupted, failed
    error: str | None = None
    budget_s: float | None = None
    requested_target_s: float = 0.0
    wall_s: float = 0.0

    def point(self, size: int) -> Point | None:
        return next((p for p in self.points if p.bytes == size), None)


@dataclass(frozen=True, slots=True)
class SweepResult(Envelope):
    curves: tuple[Curve, ...]


# ---- JSON form -------------------------------------------------------------------------------


def _point_to_dict(p: Point) -> dict[str, Any]:
    v = p.verification
    return {
        "bytes": p.bytes,
        "iterations": p.iterations,
        "copies_per_iteration": p.copies_per_iteration,
        "samples_s": list(p.samples_s),
        "warmup_s": p.warmup_s,
        "target_s": p.target_s,
        "status": p.status,
        "stopped_by": p.stopped_by,
        "blocking_kernel": p.blocking_kernel,
        "blocking_timed_out": p.blocking_timed_out,
        "footprint_bytes": p.footprint_bytes,
        "cache_resident": p.cache_resident,
        "verification": None
        if v is None
        else {
            "ok": v.ok,
            "bytes_checked": v.bytes_checked,
            "mismatched_bytes": v.mismatched_bytes,
            "first_mismatch": v.first_mismatch,
        },
        # Derived, for readers that do not want to recompute; ignored when loading.
        "summary": {
            "trials": len(p.samples_s),
            "min_s": p.min_s,
            "median_s": p.median_s,
            "max_s": p.max_s,
            "rel_noise": p.rel_noise,
            "latency_us": p.median_s * 1e6,
            "bandwidth_gbps": p.bandwidth / 1e9,
            "peak_bandwidth_gbps": p.peak_bandwidth / 1e9,
        },
    }


def verification_from(v: Field) -> Verification | None:
    if v.null:
        return None
    return Verification(
        ok=v["ok"].boolean(),
        bytes_checked=v["bytes_checked"].integer(),
        mismatched_bytes=v["mismatched_bytes"].integer(),
        first_mismatch=v["first_mismatch"].optional_integer(),
    )


def _point_from(d: Field) -> Point:
    return Point(
        bytes=d["bytes"].integer(),
        iterations=d["iterations"].integer(),
        copies_per_iteration=d["copies_per_iteration"].integer(),
        samples_s=d["samples_s"].numbers(),
        warmup_s=d["warmup_s"].number(),
        target_s=d["target_s"].number(),
        status=d["status"].string(),
        stopped_by=d["stopped_by"].string(),
        blocking_kernel=d["blocking_kernel"].boolean(),
        blocking_timed_out=d["blocking_timed_out"].boolean(),
        footprint_bytes=d["footprint_bytes"].integer(),
        cache_resident=d["cache_resident"].boolean(),
        verification=verification_from(d.get("verification")),
    )


def curve_to_dict(c: Curve) -> dict[str, Any]:
    return {
        "config": {
            "device": c.config.device,
            "direction": c.config.direction,
            "memory": c.config.memory,
            "mechanism": c.config.mechanism,
            "timing": c.config.timing,
            **(
                {"host_offset": c.config.host_offset, "device_offset": c.config.device_offset}
                if c.config.offset_label
                else {}
            ),
        },
        "label": c.config.label,
        "status": c.status,
        "error": c.error,
        "budget_s": c.budget_s,
        "requested_target_s": c.requested_target_s,
        "wall_s": c.wall_s,
        "points": [_point_to_dict(p) for p in c.points],
    }


def curve_from(c: Field) -> Curve:
    config = c["config"]
    points = tuple(_point_from(p) for p in c["points"].items())
    if not all(p.samples_s for p in points):
        raise SchemaError(f"{c.path}.points: a point has no samples")
    return Curve(
        config=CurveConfig(
            device=config["device"].integer(),
            direction=config["direction"].string(),
            memory=config["memory"].string(),
            mechanism=config["mechanism"].string(),
            timing=config["timing"].string(),
            host_offset=config.get("host_offset", 0).integer(),
            device_offset=config.get("device_offset", 0).integer(),
        ),
        points=points,
        status=c["status"].string(),
        error=c.get("error").optional_string(),
        budget_s=c.get("budget_s").optional_number(),
        requested_target_s=c.get("requested_target_s", 0.0).number(),
        wall_s=c.get("wall_s", 0.0).number(),
    )


def to_dict(result: SweepResult) -> dict[str, Any]:
    return document_header(SCHEMA_NAME, SCHEMA_VERSION, result) | {
        "curves": [curve_to_dict(c) for c in result.curves]
    }


def from_dict(d: dict[str, Any]) -> SweepResult:
    """A sweep document read back; SchemaError names the field that is wrong."""
    check_schema(d, SCHEMA_NAME, SCHEMA_VERSION, OLDEST_SCHEMA_VERSION)
    root = Field(d)
    curves = tuple(curve_from(c) for c in root["curves"].items())
    return SweepResult(curves=curves, **header_fields(root))
