"""Which of a JAX step's jitted programs marks its steps: XLA pushes a range around each run of
each program (loops._leads), and one around each compilation, whose autotuning's GPU work is
start-up (loops._compiled_aside)."""

from __future__ import annotations

import pytest

from xferscope.trace.loops import NVTX
from xferscope.trace.records import Interval, Range, Trace
from xferscope.trace.steps import loops

MS, US = 1_000_000, 1_000
COLUMNS = "XlaModule:#hlo_module=jit_columns,program_id=2#"
STEP = "XlaModule:#hlo_module=jit_train_step,program_id=7#"


def _gemm(a: int, b: int) -> Interval:
    return Interval(1, "kernel", "gemm", a, b, 0, 7)


def _two_programs(prepare_first: bool, own: bool = False, autotune_ms: int = 0) -> Trace:
    """30 steps of 4 ms: `jit_columns` (0.2 ms of kernels cutting the batch's columns), then
    `jit_train_step` (3 ms of kernels), each run in XLA's range of 50 us; in `prepare_first`'s
    order or the other; `own`: the program's own range "step" around both. `autotune_ms`:
    `jit_columns` run once, then `jit_train_step` compiled for that long, its autotuning
    running kernels all the while, before the loop."""
    kernels, ranges = [], []
    first, second = (COLUMNS, STEP) if prepare_first else (STEP, COLUMNS)
    begin = (22 + autotune_ms) * MS if autotune_ms else 100 * MS
    if autotune_ms:
        ranges.append(Range(1, COLUMNS, "", 10 * MS, 10 * MS + 50 * US))
        kernels.append(
            Interval(1, "kernel", "gather", 10 * MS + 100 * US, 10 * MS + 300 * US, 0, 7)
        )
        ranges.append(Range(1, "XlaCompile:#module=jit_train_step#", "TSL", 20 * MS, begin - MS))
        kernels += [_gemm(a, a + 900 * US) for a in range(20 * MS, begin - MS, MS)]
    for i in range(30):
        t = begin + i * 4 * MS
        for name, at in ((first, t), (second, t + (300 if prepare_first else 3_200) * US)):
            ranges.append(Range(1, name, "", at, at + 50 * US))
        prep, train = (t + 100 * US, t + 400 * US) if prepare_first else (t + 3_300 * US, t)
        kernels.append(Interval(1, "kernel", "gather", prep, prep + 200 * US, 0, 7))
        kernels.append(_gemm(train + 100 * US, train + 3_100 * US))
        if own:
            ranges.append(Range(1, "step", "", t - 10 * US, t + 3_900 * US))
    processes = ({"pid": 1, "start_ns": 1 * MS, "kernels": "all"},)
    return Trace((), tuple(kernels), (), (), {}, {}, processes, ranges=tuple(ranges))


@pytest.mark.parametrize("prepare_first", [True, False])
def test_the_jitted_program_the_most_gpu_work_follows_marks_the_steps(prepare_first):
    (loop,) = loops(_two_programs(prepare_first))
    assert loop.where == NVTX + STEP and loop.count == 29
    assert loop.step_s == pytest.approx(4e-3)
    assert [r.where for r in loop.runners_up] == [NVTX + COLUMNS]


def test_the_programs_own_range_marks_the_steps_before_xlas():
    (loop,) = loops(_two_programs(True, own=True))
    assert loop.where == NVTX + "step"


def test_the_autotunings_gpu_work_is_no_work_a_step_line_must_span():
    """A compilation of 400 ms whose autotuning runs 3.75 times the loop's GPU work: the
    training step's range spans a fifth of the process's work, under what a step line must
    span, unless the compilation's work is set aside; `jit_columns`' early run is a warm-up."""
    (loop,) = loops(_two_programs(True, autotune_ms=400))
    assert loop.where == NVTX + STEP and loop.count == 29


@pytest.mark.parametrize(
    ("cut", "left"),
    [
        (([], []), ([0, 20, 40], [10, 30, 50])),
        (([5], [25]), ([0, 25, 40], [5, 30, 50])),  # across a gap, into the next part
        (([42], [44]), ([0, 20, 40, 44], [10, 30, 42, 50])),  # inside one part
        (([0, 28], [10, 60]), ([20], [28])),  # a whole part, then to the end
    ],
)
def test_parts_less_spans(cut, left):
    from xferscope.trace.costs import less

    assert less(([0, 20, 40], [10, 30, 50]), cut) == left
