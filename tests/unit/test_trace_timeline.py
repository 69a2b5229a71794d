"""Each GPU's timeline: busy time is the union of its activities, idle the rest of the span from
its first activity to its last, the longest gaps kept; a record without usable times is left
out and counted; compare judges the span, so a faster loop shows behind a slow start-up."""

from __future__ import annotations

from pathlib import Path

import pytest

from xferscope.run.compare import FASTER
from xferscope.trace.compare import compare_traces
from xferscope.trace.document import TraceResult
from xferscope.trace.records import Copy, Interval, Trace, read_trace
from xferscope.trace.timeline import timelines

RECORDED = Path(__file__).parent.parent / "data" / "trace" / "torch-loop.jsonl"


def _kernel(start: int, end: int, device: int = 0) -> Interval:
    return Interval(1, "kernel", "k", start, end, device, 7)


def _copy(start: int, end: int, device: int = 0) -> Copy:
    return Copy(1, "h2d", "pinned", "device", 64, start, end, device, 7, True, 1)


def _trace(copies=(), intervals=()) -> Trace:
    return Trace(tuple(copies), tuple(intervals), (), (), {}, {}, ())


def test_busy_is_the_union_and_idle_the_rest_of_the_span():
    ms = 1_000_000
    trace = _trace(
        copies=[_copy(10 * ms, 12 * ms), _copy(0, 5 * ms)],  # the second has no start time
        intervals=[
            _kernel(11 * ms, 14 * ms),  # overlaps the copy: 10-14 busy
            _kernel(20 * ms, 21 * ms),  # after a 6 ms gap
            _kernel(30 * ms, 29 * ms),  # backwards: left out
            _kernel(22 * ms, 25 * ms),  # after a 1 ms gap
            _kernel(50 * ms, 51 * ms, device=1),
        ],
    )
    t = timelines(trace)
    assert t.left_out == 2
    gpu0, gpu1 = t.gpus
    assert (gpu0.start_ns, gpu0.end_ns) == (10 * ms, 25 * ms)
    assert gpu0.busy_s == pytest.approx(8e-3) and gpu0.idle_s == pytest.approx(7e-3)
    assert gpu0.gaps == ((14 * ms, 20 * ms), (21 * ms, 22 * ms))
    assert gpu0.idle_share == pytest.approx(7 / 15)
    assert gpu1.span_s == pytest.approx(1e-3) and gpu1.idle_s == 0.0
    assert t.span_s == pytest.approx(41e-3) and t.start_ns == 10 * ms


def test_a_recorded_training_loop_has_a_span_inside_its_run():
    trace = read_trace([RECORDED])
    t = timelines(trace)
    (gpu,) = t.gpus
    first = min(c.start_ns for c in trace.copies)
    assert gpu.start_ns <= first and 0 < gpu.busy_s < gpu.span_s < 30
    assert t.left_out == 0


def _result(spans: list[float], walls: list[float]) -> TraceResult:
    runs = tuple(
        {"wall_s": w, "span_s": s, "kinds": {}, "findings": {}, "lines": {}}
        for s, w in zip(spans, walls, strict=True)
    )
    return TraceResult(
        returncode=0,
        signal=None,
        processes=(),
        summary={},
        copies=(),
        runs=runs,
        created="2026-11-26T00:00:00Z",
        simulated=False,
        options={"command": ["python3", "train.py"]},
        interrupted=False,
        wall_s=walls[0],
        machine={},
    )


def test_compare_sees_a_faster_loop_behind_a_slow_start_up():
    """About 10 s of importing torch in each run, and a loop 13% faster after the fix: the wall
    time's spread hides it, the span from the first GPU work to the last does not."""
    before = _result([1.15, 1.16, 1.14], [12.55, 14.09, 11.80])
    after = _result([1.00, 1.01, 0.99], [14.09, 11.50, 12.90])
    changes = {c.figure: c for c in compare_traces(before, after).changes if c.section == "program"}
    assert changes["GPU active span"].verdict == FASTER
    assert changes["wall time"].verdict != FASTER
