"""Verifies and times every planned GL scenario, as seed 000's tools do: each scenario moves a
fixed amount of data frame by frame (6.25 GiB by default), a test frame is moved first and
compared exactly, the time limiter runs 10 frames and reports an estimate for a scenario that
would take longer than the limit, and the asynchronous mode adds calibrated CPU work per frame
and records the paper's Table 1 (map and read blocking, work, bytes, time, rate) for each
amount. CUDA pinned cudaMemcpy of the same bytes on the same GPU is the baseline. Holds the
result record and its JSON and CSV forms (schema xferscope-gl)."""

from __future__ import annotations

import csv
import datetime as dt
import io
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from .. import __version__
from ..core import machine, plan, stats
from ..core.engine import Engine, GlContext
from ..core.errors import AllocationError, EngineError, GlError, XferscopeError
from ..core.findings import Finding
from ..core.progress import QUIET, Progress
from ..documents.envelope import document_header, dumps_document, header_fields
from ..documents.reader import Field, check_schema
from .states import (
    AUTO_WORK_SHARES,
    LIMITER_FRAMES,
    STATE_FIELDS,
    GlOptions,
    Planned,
    label,
    plan_scenarios,
)

SCHEMA_NAME = "xferscope-gl"
SCHEMA_VERSION = 1
# Schema history (bump SCHEMA_VERSION on any change a reader must know about):
#   1  first version.

BASELINE_TARGET_S = 0.1  # one baseline trial lasts about this long
BASELINE_TRIALS = 3
# A scenario's frames run as at least this many trials: the rate is their median, the spread
# their range over it (a difference between two scenarios is stated only beyond both spreads).
TRIALS = 5
# No engine call runs longer than about this (frames permitting): a stop is looked for between
# calls, so Ctrl-C ends even a slow scenario within about a second.
MOST_CALL_S = 0.5


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
        return cls(
            work_per_frame_s=x["work_per_frame_s"].number(),
            frames=x["frames"].integer(),
            bytes=x["bytes"].integer(),
            seconds=x["seconds"].number(),
            call_s=x["call_s"].number(),
            map_s=x["map_s"].number(),
            work_s=x["work_s"].number(),
            log=tuple(tuple(f.numbers()) for f in x["log"].items()),  # type: ignore[misc]
        )


def _times(t: Any, work: float) -> FrameTimes:
    return FrameTimes(
        work,
        int(t.frames),
        int(t.bytes),
        float(t.seconds),
        float(t.call_s),
        float(t.map_s),
        float(t.work_s),
        tuple((f.call_s, f.map_s, f.work_s) for f in t.log),
    )


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
class GlResult:
    tool_version: str
    created: str
    simulated: bool
    machine: dict[str, Any]
    options: dict[str, Any]
    device: int
    gl: dict[str, Any]  # vendor, renderer, version, EGL device ...
    scenarios: tuple[ScenarioResult, ...]
    refused: tuple[tuple[str, str], ...]  # (label, reason)
    baselines: tuple[Baseline, ...]
    interrupted: bool
    wall_s: float
    findings: tuple[Finding, ...] = field(default=())

    def baseline(self, op: str, bytes: int) -> Baseline | None:
        return next((b for b in self.baselines if b.op == op and b.bytes == bytes), None)

    def best(self, op: str) -> ScenarioResult | None:
        """The fastest verified scenario of an op (estimates count: they are rates too)."""
        done = [s for s in self.scenarios if s.op == op and s.verified and s.rate]
        return max(done, key=lambda s: s.rate or 0.0, default=None)


# ---- measuring ---------------------------------------------------------------------------------


def _verification(v: Any) -> dict[str, Any]:
    return {
        "ok": bool(v.ok),
        "compared_bytes": int(v.compared_bytes),
        "mismatched_bytes": int(v.mismatched_bytes),
        "first_mismatch": int(v.first_mismatch),
        "expected": int(v.expected),
        "actual": int(v.actual),
        "actual_internal_format": str(v.actual_internal_format),
        "bits": [int(v.red_bits), int(v.green_bits), int(v.blue_bits), int(v.alpha_bits)],
        "component_type": str(v.component_type),
    }


def frames_for(total_bytes: float, frame_bytes: int) -> int:
    """Frames that move `total_bytes` (at least one)."""
    return max(1, math.ceil(total_bytes / frame_bytes))


def work_amounts(options: GlOptions, frame_s: float) -> tuple[float, ...]:
    """The CPU work per frame of the asynchronous mode: the listed amounts, or shares of the
    frame's transfer time from 0 to past it (auto, and a preset's asynchronous scenarios)."""
    if isinstance(options.work, str) or not options.work:
        return tuple(share * frame_s for share in AUTO_WORK_SHARES)
    return tuple(sorted(options.work))


def measure_scenario(
    context: GlContext, planned: Planned, options: GlOptions, progress: Progress = QUIET
) -> ScenarioResult:
    """One scenario; a GL error is recorded in the result, and the next scenario still runs."""
    s = planned.scenario
    name = label(s)
    states = {f: getattr(s, f) for f in STATE_FIELDS}
    result = ScenarioResult(name, states, int(s.frame_bytes), "interrupted")
    try:
        session = context.session(s)
    except GlError as exc:
        return replace(result, status="failed", error=str(exc))
    try:
        result = replace(result, verification=_verification(session.verify()))
        total = frames_for(options.bytes, int(s.frame_bytes))
        # the paper's limiter: the first frames (one call each) estimate the whole
        probe = _sum([_times(session.run(1), 0.0) for _ in range(min(LIMITER_FRAMES, total))])
        estimate = probe.seconds / probe.frames * total
        if estimate > options.limit_s:
            result = replace(result, timing=probe, estimated_s=estimate, status="estimated")
        else:
            trials = max(TRIALS, math.ceil(estimate / MOST_CALL_S))
            runs = [_times(session.run(n), 0.0) for n in split(total, trials)]
            result = replace(
                result,
                timing=_sum(runs),
                trial_rates=tuple(t.rate for t in runs),
                status="complete",
            )
        progress.step(name)
        assert result.timing is not None
        frame_s = result.timing.seconds / result.timing.frames
        for work in work_amounts(options, frame_s) if planned.asynchronous else ():
            frames = min(total, max(LIMITER_FRAMES, int(options.limit_s / (frame_s + work))))
            calls = math.ceil(frames * (frame_s + work) / MOST_CALL_S)
            runs = [
                _times(session.run(n, work, options.log_frames), work) for n in split(frames, calls)
            ]
            result = replace(result, asynchronous=(*result.asynchronous, _sum(runs)))
            progress.step(f"{name} work {work * 1e3:.3g} ms/frame")
        return result
    except GlError as exc:
        return replace(result, status="failed", error=str(exc))
    except KeyboardInterrupt:
        raise _Interrupted(replace(result, status="interrupted")) from None
    finally:
        session.close()


def split(frames: int, trials: int) -> list[int]:
    """`frames` as up to `trials` runs of nearly equal length."""
    count = min(frames, trials)
    return [frames // count + (i < frames % count) for i in range(count)]


def _sum(loops: Sequence[FrameTimes]) -> FrameTimes:
    """Several loops as one: their frames, bytes and times added."""
    return FrameTimes(
        loops[0].work_per_frame_s,
        sum(t.frames for t in loops),
        sum(t.bytes for t in loops),
        sum(t.seconds for t in loops),
        sum(t.call_s for t in loops),
        sum(t.map_s for t in loops),
        sum(t.work_s for t in loops),
        tuple(x for t in loops for x in t.log),
    )


class _Interrupted(Exception):
    def __init__(self, result: ScenarioResult) -> None:
        self.result = result


def measure_baseline(engine: Engine, device: int, op: str, bytes: int) -> Baseline:
    """Pinned cudaMemcpy of `bytes`, host clock, median of three trials of about 0.1 s."""
    direction = "h2d" if op == "upload" else "d2h"
    try:
        t = engine.open_transfer(device, direction, "pinned", "memcpy", bytes, 0, rotate=False)
    except (AllocationError, EngineError) as exc:
        return Baseline(op, bytes, None, str(exc))
    try:
        first = t.time("api", bytes, 1).seconds  # warm-up, and the first guess
        iterations = max(1, math.ceil(BASELINE_TARGET_S / max(first, 1e-7)))
        seconds = plan.run_trials(lambda: t.time("api", bytes, iterations).seconds, BASELINE_TRIALS)
        if not t.verify(bytes).ok:
            return Baseline(op, bytes, None, "the baseline copy failed verification")
        return Baseline(op, bytes, bytes * iterations / stats.median(seconds))
    except (AllocationError, EngineError) as exc:
        return Baseline(op, bytes, None, str(exc))
    finally:
        t.close()


def steps(options: GlOptions, scenarios: Sequence[Planned]) -> int:
    """Progress units: one per scenario and one per amount of work."""
    works = len(AUTO_WORK_SHARES) if options.work in ("auto", ()) else len(options.work)
    return sum(1 + works * p.asynchronous for p in scenarios)


def measure(engine: Engine, options: GlOptions, progress: Progress = QUIET) -> GlResult:
    """Every planned scenario on one GPU's GL context, then the baselines. Ctrl-C keeps what
    was measured, the scenario in progress marked interrupted."""
    from .survey import findings

    scenarios, refused = plan_scenarios(options)
    created = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    start = engine.clock()
    context = engine.gl_context(options.device)
    results: list[ScenarioResult] = []
    baselines: list[Baseline] = []
    interrupted = False
    info: dict[str, Any] = {}
    try:
        info = context.info()
        for planned in scenarios:
            progress.begin(label(planned.scenario))
            results.append(measure_scenario(context, planned, options, progress))
        if options.baseline:
            for op, size in dict.fromkeys((r.op, r.frame_bytes) for r in results if r.timing):
                baselines.append(measure_baseline(engine, options.device, op, size))
    except _Interrupted as stop:
        results.append(stop.result)
        interrupted = True
    except KeyboardInterrupt:
        interrupted = True
    finally:
        context.close()
    result = GlResult(
        tool_version=__version__,
        created=created,
        simulated=engine.simulated,
        machine=machine.collect(engine, [options.device]),
        options=options.to_dict(),
        device=options.device,
        gl=info,
        scenarios=tuple(results),
        refused=tuple(refused),
        baselines=tuple(baselines),
        interrupted=interrupted,
        wall_s=engine.clock() - start,
    )
    return replace(result, findings=tuple(findings(result)))


def check_plan(options: GlOptions) -> tuple[list[Planned], list[tuple[str, str]]]:
    """The plan, refused before measuring when nothing in it can run."""
    scenarios, refused = plan_scenarios(options)
    if not scenarios:
        reasons = "; ".join(f"{name}: {why}" for name, why in refused[:3])
        raise XferscopeError(f"no scenario of these states can run ({reasons})")
    return scenarios, refused


# ---- documents ---------------------------------------------------------------------------------


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
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for s in result.scenarios:
        v = s.verification or {}
        loops: list[tuple[FrameTimes | None, float | None]] = [(s.timing, None)]
        loops += [(p, None if s.timing is None else hidden(s.timing, p)) for p in s.asynchronous]
        for t, share in loops:
            writer.writerow(
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
    return out.getvalue()
