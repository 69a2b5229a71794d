"""Verifies and times every planned GL scenario, as seed 000's tools do: each scenario moves a
fixed amount of data frame by frame (6.25 GiB by default), a test frame is moved first and
compared exactly, the time limiter runs 10 frames and reports an estimate for a scenario that
would take longer than the limit, and the asynchronous mode adds calibrated CPU work per frame
and records the paper's Table 1 (map and read blocking, work, bytes, time, rate) for each
amount. CUDA pinned cudaMemcpy of the same bytes on the same GPU is the baseline. The result
record and its JSON and CSV forms are in records.py."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from ..core import machine, plan, stats
from ..core.engine import Engine, GlContext
from ..core.errors import AllocationError, EngineError, GlError, OptionError
from ..core.progress import QUIET, Progress
from ..documents.envelope import now
from .records import Baseline, FrameTimes, GlResult, Refusal, ScenarioResult
from .states import (
    AUTO_WORK_SHARES,
    LIMITER_FRAMES,
    STATE_FIELDS,
    GlOptions,
    Planned,
    label,
    plan_scenarios,
)

BASELINE_TARGET_S = 0.1  # one baseline trial lasts about this long
BASELINE_TRIALS = 3
# A scenario's frames run as at least this many trials: the rate is their median, the spread
# their range over it (a difference between two scenarios is stated only beyond both spreads).
TRIALS = 5
# No engine call runs longer than about this (frames permitting): a stop is looked for between
# calls, so Ctrl-C ends even a slow scenario within about a second.
MOST_CALL_S = 0.5


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
    created = now()
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
        created=created,
        simulated=engine.simulated,
        machine=machine.collect(engine, [options.device]),
        options=options.to_dict(),
        device=options.device,
        gl=info,
        scenarios=tuple(results),
        refused=tuple(Refusal(name, why) for name, why in refused),
        baselines=tuple(baselines),
        interrupted=interrupted,
        wall_s=engine.clock() - start,
    )
    return replace(result, findings=tuple(findings(result)))


def check_plan(options: GlOptions) -> tuple[list[Planned], list[tuple[str, str]]]:
    """The plan, refused before measuring when nothing in it can run."""
    scenarios, refused = plan_scenarios(options)
    if not scenarios:
        name, why = refused[0]
        option, _, why = why.partition(": ") if why.startswith("--") else ("--method", "", why)
        more = f" (and {len(refused) - 1} more)" if len(refused) > 1 else ""
        raise OptionError(option, f"no scenario of these states can run: {name}: {why}{more}")
    return scenarios, refused


# ---- documents ---------------------------------------------------------------------------------
