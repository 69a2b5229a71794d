"""The GL result record (its scenarios, frame loops and baseline) and its JSON and CSV forms,
schema xferscope-gl."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from ..core import stats
from ..documents.envelope import (
    Envelope,
    document_header,
    dumps_document,
    dumps_table,
    header_fields,
)
from ..documents.reader import Field, check_schema
from ..documents.records import from_plain
from .states import STATE_FIELDS

SCHEMA_NAME = "xferscope-gl"
SCHEMA_VERSION = 1
# Schema history (bump SCHEMA_VERSION on any change a reader must know about):
#   1  first version.


@dataclass(frozen=True, slots=True)
class FrameTimes:
    """One loop of frames: the paper's Table 1 for one amount of CPU work per frame."""

    work_per_frame_s: float  # asked for
    frames: int
    bytes: int
    seconds: float  # the transfer time: the whole loop, from the first call to glFinish
    call_s: float  # blocked in the transfer calls (read blocking for a readback)
    map_s: float  # blocked mapping PBOs or waiting on fences (map blocking)
    work_s: float  # dummy CPU work done
    log: tuple[tuple[float, float, float], ...] = ()  # per frame (call, map, work), on request

    @property
    def rate(self) -> float:
        return self.bytes / self.seconds if self.seconds > 0 else 0.0

    @property
    def blocking_s(self) -> float:
        return self.call_s + self.map_s

    def to_dict(self) -> dict[str, Any]:
        return {
            "work_per_frame_s": self.work_per_frame_s,
            "frames": self.frames,
            "bytes": self.bytes,
            "seconds": self.seconds,
            "call_s": self.call_s,
            "map_s": self.map_s,
            "work_s": self.work_s,
            "rate": self.rate,
            "log": [list(x) for x in self.log],
        }

    @classmethod
    def read(cls, x: Field) -> FrameTimes:
        return from_plain(cls, x)  # its fields by their types; `rate` is derived


def hidden(base: FrameTimes, point: FrameTimes) -> float | None:
    """The share of the point's CPU work the transfer hid: the work plus the time without work
    (scaled to the point's frames) less the time with it, over the work. 1 is the ideal while
    the work is shorter than the transfer."""
    if point.work_s <= 0 or base.frames < 1:
        return None
    alone = base.seconds / base.frames * point.frames
    return min(1.0, max(0.0, (alone + point.work_s - point.seconds) / point.work_s))


@dataclass(frozen=True, slots=True)
class ScenarioResult:
    """One scenario: its states, the test frame's verification, and its frame loops."""

    label: str
    states: dict[str, Any]
    frame_bytes: int
    status: str  # complete, estimated (the limiter cut it), failed, interrupted
    error: str | None = None
    verification: dict[str, Any] | None = None
    timing: FrameTimes | None = None  # all frames together, or the limiter's 10 (estimated)
    estimated_s: float | None = None  # the whole scenario's estimated time when cut
    asynchronous: tuple[FrameTimes, ...] = ()  # CPU work per frame, least first
    trial_rates: tuple[float, ...] = ()  # bytes per second of each trial

    @property
    def rate(self) -> float | None:
        """The median of the trials' rates (the limiter's 10 frames when estimated)."""
        if self.trial_rates:
            return stats.median(self.trial_rates)
        return self.timing.rate if self.timing is not None else None

    @property
    def spread(self) -> float:
        """The trials' range over their median (0 with one trial)."""
        rate = self.rate
        if len(self.trial_rates) < 2 or not rate:
            return 0.0
        return (max(self.trial_rates) - min(self.trial_rates)) / rate

    @property
    def verified(self) -> bool | None:
        return None if self.verification is None else bool(self.verification["ok"])

    @property
    def op(self) -> str:
        return str(self.states["op"])

    def hidden_share(self) -> float | None:
        """The share hidden of the largest CPU work not longer than the transfer itself."""
        if self.timing is None or not self.asynchronous:
            return None
        frame_s = self.timing.seconds / max(1, self.timing.frames)
        fitting = [p for p in self.asynchronous if 0 < p.work_per_frame_s <= frame_s * 1.001]
        return hidden(self.timing, fitting[-1]) if fitting else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "states": self.states,
            "frame_bytes": self.frame_bytes,
            "status": self.status,
            "error": self.error,
            "verification": self.verification,
            "timing": None if self.timing is None else self.timing.to_dict(),
            "estimated_s": self.estimated_s,
            "trial_rates": list(self.trial_rates),
            "rate": self.rate,
            "spread": self.spread,
            "asynchronous": [
                p.to_dict()
                | {"hidden_share": None if self.timing is None else hidden(self.timing, p)}
                for p in self.asynchronous
            ],
            "hidden_share": self.hidden_share(),
        }

    @classmethod
    def read(cls, x: Field) -> ScenarioResult:
        timing = x["timing"]
        return cls(
            label=x["label"].string(),
            states=x["states"].object(),
            frame_bytes=x["frame_bytes"].integer(),
            status=x["status"].string(),
            error=x["error"].optional_string(),
            verification=None if x["verification"].null else x["verification"].object(),
            timing=None if timing.null else FrameTimes.read(timing),
            estimated_s=x["estimated_s"].optional_number(),
            asynchronous=tuple(FrameTimes.read(p) for p in x["asynchronous"].items()),
            trial_rates=x["trial_rates"].numbers(),
        )


@dataclass(frozen=True, slots=True)
class Baseline:
    """CUDA pinned cudaMemcpy of a frame's bytes on the same GPU."""

    op: str  # upload (h2d) or readback (d2h)
    bytes: int
    rate: float | None
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"op": self.op, "bytes": self.bytes, "rate": self.rate, "error": self.error}

    @classmethod
    def read(cls, x: Field) -> Baseline:
        return cls(
            x["op"].string(),
            x["bytes"].integer(),
            x["rate"].optional_number(),
            x["error"].optional_string(),
        )


@dataclass(frozen=True, slots=True)
class GlResult(Envelope):
    device: int
    gl: dict[str, Any]  # vendor, renderer, version, EGL device ...
    scenarios: tuple[ScenarioResult, ...]
    refused: tuple[tuple[str, str], ...]  # (label, reason)
    baselines: tuple[Baseline, ...]

    def baseline(self, op: str, bytes: int) -> Baseline | None:
        return next((b for b in self.baselines if b.op == op and b.bytes == bytes), None)

    def best(self, op: str) -> ScenarioResult | None:
        """The fastest verified scenario of an op (estimates count: they are rates too)."""
        done = [s for s in self.scenarios if s.op == op and s.verified and s.rate]
        return max(done, key=lambda s: s.rate or 0.0, default=None)


def to_dict(result: GlResult) -> dict[str, Any]:
    return document_header(SCHEMA_NAME, SCHEMA_VERSION, result) | {
        "device": result.device,
        "gl": result.gl,
        "scenarios": [s.to_dict() for s in result.scenarios],
        "refused": [{"label": name, "reason": why} for name, why in result.refused],
        "baselines": [b.to_dict() for b in result.baselines],
        "best": {
            op: None
            if (b := result.best(op)) is None
            else {"label": b.label, "states": b.states, "rate": b.rate}
            for op in ("upload", "readback")
        },
    }


def from_dict(d: dict[str, Any]) -> GlResult:
    """A gl document read back; SchemaError names the field that is wrong."""
    check_schema(d, SCHEMA_NAME, SCHEMA_VERSION)
    r = Field(d)
    return GlResult(
        **header_fields(r),
        device=r["device"].integer(),
        gl=r["gl"].object(),
        scenarios=tuple(ScenarioResult.read(s) for s in r["scenarios"].items()),
        refused=tuple((x["label"].string(), x["reason"].string()) for x in r["refused"].items()),
        baselines=tuple(Baseline.read(b) for b in r["baselines"].items()),
    )


def dumps_json(result: GlResult) -> str:
    return dumps_document(to_dict(result), indent=2)


CSV_COLUMNS = (
    "simulated",
    "device",
    *STATE_FIELDS,
    "status",
    "verified",
    "actual_internal_format",
    "work_per_frame_s",
    "frames",
    "bytes",
    "seconds",
    "rate_gbps",
    "spread",
    "call_s",
    "map_s",
    "work_s",
    "hidden_share",
    "estimated_s",
    "error",
)


def dumps_csv(result: GlResult) -> str:
    """One row per scenario (its rate, work 0) and one per amount of CPU work."""

    def rows() -> Iterator[Sequence[object]]:
        for s in result.scenarios:
            v = s.verification or {}
            loops: list[tuple[FrameTimes | None, float | None]] = [(s.timing, None)]
            loops += [
                (p, None if s.timing is None else hidden(s.timing, p)) for p in s.asynchronous
            ]
            for t, share in loops:
                yield (
                    (
                        int(result.simulated),
                        result.device,
                        *(
                            int(x) if isinstance(x, bool) else x
                            for x in (s.states[f] for f in STATE_FIELDS)
                        ),
                        s.status,
                        "" if s.verified is None else int(s.verified),
                        v.get("actual_internal_format", ""),
                        "" if t is None else t.work_per_frame_s,
                        "" if t is None else t.frames,
                        "" if t is None else t.bytes,
                        "" if t is None else f"{t.seconds:.6g}",
                        ""
                        if t is None
                        else f"{((s.rate or 0.0) if t is s.timing else t.rate) / 1e9:.6g}",
                        f"{s.spread:.4f}" if t is s.timing else "",
                        "" if t is None else f"{t.call_s:.6g}",
                        "" if t is None else f"{t.map_s:.6g}",
                        "" if t is None else f"{t.work_s:.6g}",
                        "" if share is None else f"{share:.4f}",
                        "" if s.estimated_s is None else f"{s.estimated_s:.4g}",
                        s.error or "",
                    )
                )

    return dumps_table(CSV_COLUMNS, rows())
