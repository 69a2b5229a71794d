"""Immutable result records and their JSON form.

Schema history (bump SCHEMA_VERSION on any change a reader must know about):
  1  first version: sweep results with curves of points, raw per-copy samples, verification,
     machine metadata and options.
  2  "findings" (typed: code, severity, figure, message, cause, fix) replace the "warnings"
     strings; version 1 documents are still read, their warnings as findings. Added later,
     optional: a curve config's numa_node and a curve's host_node (host memory placed on a NUMA
     node, and where its pages were found), and "chases" (--chase: latency seen from the GPU).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

from ..core import stats
from ..documents.envelope import Envelope
from ..documents.records import (
    NON_EMPTY,
    OMIT_DEFAULT,
    OMIT_WHEN,
    Derived,
    read_result,
    result_document,
)
from .chase import ChasePoint

SCHEMA_NAME = "xferscope-sweep"
SCHEMA_VERSION = 2
OLDEST_SCHEMA_VERSION = 1  # still read

# Why a point stopped taking trials.
STOP_NOISE = "noise_bound"  # the spread fell under the bound after the minimum trials
# the first few trials already agreed within the early bound (SweepOptions.early_trials): the
# rest were not taken
STOP_SPREAD_KNOWN = "spread_known"
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
    # every copy starts this many bytes past a page-aligned place, host and device side (in
    # the document only for a misaligned curve)
    host_offset: int = field(default=0, metadata={OMIT_WHEN: lambda c: not c.offset_label})
    device_offset: int = field(default=0, metadata={OMIT_WHEN: lambda c: not c.offset_label})
    # the host memory and the measuring thread on this NUMA node (--numa-node); None: where the
    # operating system put them
    numa_node: int | None = field(default=None, metadata={OMIT_DEFAULT: True})

    @property
    def label(self) -> str:
        return (
            f"{self.direction} {self.memory} {self.mechanism} {self.timing}"
            + self.offset_label
            + ("" if self.numa_node is None else f" node{self.numa_node}")
            + (f" gpu{self.device}" if self.device else "")
        )

    @property
    def gpu_alone(self) -> bool:
        """Whether the curve times the GPU alone: copies queued behind the blocking kernel and
        timed by CUDA events, so that what else the host does cannot change them (side work,
        core/background.py, may run beside it)."""
        from ..core.cases import blocks_for_device_timing

        return self.timing == "device" and blocks_for_device_timing(
            self.direction, self.memory, self.mechanism
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
    samples_s: tuple[float, ...] = field(metadata={NON_EMPTY: True})  # per-copy time per trial
    warmup_s: float  # per-copy time of the warm-up (calibration) run, kept apart
    target_s: float  # the trial length aimed at
    status: str
    stopped_by: str
    blocking_kernel: bool
    blocking_timed_out: bool
    footprint_bytes: int
    cache_resident: bool  # the copies' working set could sit in the GPU L2
    verification: Verification | None
    # Derived, for readers that do not want to recompute; ignored when loading.
    DERIVED: ClassVar[tuple[Derived, ...]] = (
        Derived(
            "summary",
            lambda p: {
                "trials": len(p.samples_s),
                "min_s": p.min_s,
                "median_s": p.median_s,
                "max_s": p.max_s,
                "rel_noise": p.rel_noise,
                "latency_us": p.median_s * 1e6,
                "bandwidth_gbps": p.bandwidth / 1e9,
                "peak_bandwidth_gbps": p.peak_bandwidth / 1e9,
            },
        ),
    )

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


@dataclass(frozen=True, slots=True, kw_only=True)
class Curve:
    config: CurveConfig
    status: str  # complete, interrupted, failed
    error: str | None = None
    budget_s: float | None = None
    requested_target_s: float = 0.0
    wall_s: float = 0.0
    points: tuple[Point, ...]
    # the NUMA node the host buffer's pages were found on after filling, for a placed curve
    # (numa_node set): -1 where the kernel did not say
    host_node: int | None = field(default=None, metadata={OMIT_DEFAULT: True})
    DERIVED: ClassVar[tuple[Derived, ...]] = (Derived("label", lambda c: c.config.label, "config"),)

    def point(self, size: int) -> Point | None:
        return next((p for p in self.points if p.bytes == size), None)


@dataclass(frozen=True, slots=True)
class SweepResult(Envelope):
    curves: tuple[Curve, ...]
    # latency seen from the GPU (--chase): a pointer chase through each memory swept that a GPU
    # thread can read, and device memory (chase.py)
    chases: tuple[ChasePoint, ...] = field(default=(), metadata={OMIT_DEFAULT: True})


# ---- JSON form -------------------------------------------------------------------------------


def to_dict(result: SweepResult) -> dict[str, Any]:
    return result_document(SCHEMA_NAME, SCHEMA_VERSION, result)


def from_dict(d: dict[str, Any]) -> SweepResult:
    """A sweep document read back; SchemaError names the field that is wrong."""
    return read_result(SweepResult, d, SCHEMA_NAME, SCHEMA_VERSION, OLDEST_SCHEMA_VERSION)
