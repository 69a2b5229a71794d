"""The GL result record (its scenarios, frame loops, refusals and baselines) and its JSON and CSV
forms, schema xferscope-gl."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

from ..core import stats
from ..documents.envelope import Envelope, dumps_document
from ..documents.records import Column, Derived, dumps_columns, read_result, result_document
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
    # Derived, for readers; ignored when loading.
    DERIVED: ClassVar[tuple[Derived, ...]] = (Derived("rate", lambda t: t.rate, "work_s"),)

    @property
    def rate(self) -> float:
        return self.bytes / self.seconds if self.seconds > 0 else 0.0

    @property
    def blocking_s(self) -> float:
        return self.call_s + self.map_s


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
    trial_rates: tuple[float, ...] = ()  # bytes per second of each trial
    # CPU work per frame, least first (in the document each with its hidden share: to_dict)
    asynchronous: tuple[FrameTimes, ...] = ()
    # Derived, for readers; ignored when loading.
    DERIVED: ClassVar[tuple[Derived, ...]] = (
        Derived("rate", lambda s: s.rate, "trial_rates"),
        Derived("spread", lambda s: s.spread, "trial_rates"),
        Derived("hidden_share", lambda s: s.hidden_share()),
    )

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

    def share_hidden(self, loop: FrameTimes) -> float | None:
        """The share of one of its asynchronous loops' CPU work the transfer hid (hidden(), set
        against the scenario's timing; None without one)."""
        return None if self.timing is None else hidden(self.timing, loop)

    def hidden_share(self) -> float | None:
        """The share hidden of the largest CPU work not longer than the transfer itself."""
        if self.timing is None or not self.asynchronous:
            return None
        frame_s = self.timing.seconds / max(1, self.timing.frames)
        fitting = [p for p in self.asynchronous if 0 < p.work_per_frame_s <= frame_s * 1.001]
        return self.share_hidden(fitting[-1]) if fitting else None


@dataclass(frozen=True, slots=True)
class Baseline:
    """CUDA pinned cudaMemcpy of a frame's bytes on the same GPU."""

    op: str  # upload (h2d) or readback (d2h)
    bytes: int
    rate: float | None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class Refusal:
    """A scenario of the plan that cannot run, and why (the engine's rules)."""

    label: str
    reason: str


@dataclass(frozen=True, slots=True)
class GlResult(Envelope):
    device: int
    gl: dict[str, Any]  # vendor, renderer, version, EGL device ...
    scenarios: tuple[ScenarioResult, ...]
    refused: tuple[Refusal, ...]
    baselines: tuple[Baseline, ...]
    # Derived, for readers; ignored when loading.
    DERIVED: ClassVar[tuple[Derived, ...]] = (Derived("best", lambda r: _best(r)),)

    def baseline(self, op: str, bytes: int) -> Baseline | None:
        return next((b for b in self.baselines if b.op == op and b.bytes == bytes), None)

    def best(self, op: str) -> ScenarioResult | None:
        """The fastest verified scenario of an op (estimates count: they are rates too)."""
        done = [s for s in self.scenarios if s.op == op and s.verified and s.rate]
        return max(done, key=lambda s: s.rate or 0.0, default=None)


# ---- documents ---------------------------------------------------------------------------------


def _best(result: GlResult) -> dict[str, Any]:
    """The fastest scenario of each op: its label, states and rate (null: none)."""
    return {
        op: None
        if (b := result.best(op)) is None
        else {"label": b.label, "states": b.states, "rate": b.rate}
        for op in ("upload", "readback")
    }


def to_dict(result: GlResult) -> dict[str, Any]:
    """The result's document: its fields and derived entries, each asynchronous loop's with the
    share of its CPU work hidden (which its scenario, not the loop, knows)."""
    d = result_document(SCHEMA_NAME, SCHEMA_VERSION, result)
    for s, scenario in zip(result.scenarios, d["scenarios"], strict=True):
        for p, loop in zip(s.asynchronous, scenario["asynchronous"], strict=True):
            loop["hidden_share"] = s.share_hidden(p)
    return d


def from_dict(d: dict[str, Any]) -> GlResult:
    """A gl document read back; SchemaError names the field that is wrong."""
    return read_result(GlResult, d, SCHEMA_NAME, SCHEMA_VERSION)


def dumps_json(result: GlResult) -> str:
    return dumps_document(to_dict(result), indent=2)


class _Row(NamedTuple):
    """A row of the CSV: a scenario's frames together (`loop` its timing, None when it failed
    before), or one of its asynchronous loops."""

    result: GlResult
    scenario: ScenarioResult
    loop: FrameTimes | None
    asynchronous: bool


def _state_column(name: str) -> Column[_Row]:
    def value(r: _Row) -> object:
        x = r.scenario.states[name]
        return int(x) if isinstance(x, bool) else x

    return Column(name, value)


def _loop_column(name: str, value: Callable[[FrameTimes], object]) -> Column[_Row]:
    """A figure of the row's frame loop (empty when there is none)."""
    return Column(name, lambda r: "" if r.loop is None else value(r.loop))


def _rate_gbps(r: _Row) -> str:
    """The loop's rate; on the scenario's row, the scenario's (its trials' median)."""
    if r.loop is None:
        return ""
    rate = r.loop.rate if r.asynchronous else (r.scenario.rate or 0.0)
    return f"{rate / 1e9:.6g}"


def _hidden(r: _Row) -> float | None:
    """The share of an asynchronous loop's CPU work hidden (none on the scenario's row)."""
    return r.scenario.share_hidden(r.loop) if r.asynchronous and r.loop is not None else None


def _text(value: float | None, spec: str) -> str:
    return "" if value is None else format(value, spec)


CSV_COLUMNS: tuple[Column[_Row], ...] = (
    Column("simulated", lambda r: int(r.result.simulated)),
    Column("device", lambda r: r.result.device),
    *(_state_column(name) for name in STATE_FIELDS),
    Column("status", lambda r: r.scenario.status),
    Column("verified", lambda r: "" if r.scenario.verified is None else int(r.scenario.verified)),
    Column(
        "actual_internal_format",
        lambda r: (r.scenario.verification or {}).get("actual_internal_format", ""),
    ),
    _loop_column("work_per_frame_s", lambda t: t.work_per_frame_s),
    _loop_column("frames", lambda t: t.frames),
    _loop_column("bytes", lambda t: t.bytes),
    _loop_column("seconds", lambda t: f"{t.seconds:.6g}"),
    Column("rate_gbps", _rate_gbps),
    Column("spread", lambda r: "" if r.asynchronous else f"{r.scenario.spread:.4f}"),
    _loop_column("call_s", lambda t: f"{t.call_s:.6g}"),
    _loop_column("map_s", lambda t: f"{t.map_s:.6g}"),
    _loop_column("work_s", lambda t: f"{t.work_s:.6g}"),
    Column("hidden_share", lambda r: _text(_hidden(r), ".4f")),
    Column("estimated_s", lambda r: _text(r.scenario.estimated_s, ".4g")),
    Column("error", lambda r: r.scenario.error or ""),
)


def _rows(result: GlResult) -> Iterator[_Row]:
    for s in result.scenarios:
        yield _Row(result, s, s.timing, False)
        yield from (_Row(result, s, p, True) for p in s.asynchronous)


def dumps_csv(result: GlResult) -> str:
    """One row per scenario (its rate, work 0) and one per amount of CPU work."""
    return dumps_columns(CSV_COLUMNS, _rows(result))
