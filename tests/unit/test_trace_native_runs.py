"""Steps of a CUDA C++ loop whose copies' callers were unwound one call in 64: its line marks a
step where its run of copies starts, not at each unwound sample."""

from __future__ import annotations

import pytest

from xferscope.trace.records import Call, Copy, Trace
from xferscope.trace.steps import loops

from .trace_loops import _kernel

US = 1_000
LINE = 0x4011
NAMES = {LINE: "rows+0xbbed (main::step rows.cu:172)"}


def _rows_loop(per_step: int, steps: int = 12) -> Trace:
    """`steps` steps of `per_step` synchronous 256-byte uploads 8 us apart, one call in 64
    unwound (counted over the whole run, as the engine counts), then a 300 us kernel."""
    copies, kernels = [], []
    n = 0
    t = 1_000 * US
    for _ in range(steps):
        for _ in range(per_step):
            frames = (LINE,) if n % 64 == 0 else ()
            call = Call("cudaMemcpy_v3020", t, t + 7 * US, 1, 1, frames=frames)
            copies.append(Copy(1, "h2d", "pageable", "device", 256, t + 6 * US, t + 7 * US, 0, 7,
                               False, n, call, frames=frames))  # fmt: skip
            n += 1
            t += 8 * US
        kernels.append(_kernel(t + 5 * US, t + 305 * US))
        t += 310 * US
    return Trace(tuple(copies), tuple(kernels), (), tuple(c.call for c in copies), {}, NAMES, ())


@pytest.mark.parametrize("per_step", [64, 128, 192])
def test_a_native_line_unwound_one_call_in_64_marks_each_run_once(per_step):
    (loop,) = loops(_rows_loop(per_step))
    assert loop.where == NAMES[LINE]
    # every step has an unwound call: a mark each, the first step's start to the last's
    assert loop.count == 11


def test_copies_with_a_kernel_between_them_are_two_runs():
    """Steps of 32 uploads, a sample every other step: the runs with a sample mark, one a
    step at most, never two steps as one."""
    (loop,) = loops(_rows_loop(32, steps=24))
    assert loop.count == 11


OTHER = 0x5022
TWO = NAMES | {OTHER: "rows+0xcc10 (main::refresh rows.cu:210)"}


def test_copies_left_without_callers_are_placed_at_their_runs_unwound_line():
    """The engine unwinds one native call in 64: the rest of each run are its unwound calls'
    line's, in the findings' places and copies.csv, not "(no caller recorded)"."""
    from xferscope.trace.findings.base import places

    trace = _rows_loop(128)
    (place,) = places(trace, trace.copies)
    assert place.where == NAMES[LINE] and place.calls == len(trace.copies)


def test_a_run_or_size_with_two_lines_unwound_stays_unplaced():
    """Where a run's unwound calls, or those of its size on its thread, name two lines, which
    made a call left without callers is not known: it stays "(no caller recorded)"."""
    from dataclasses import replace

    from xferscope.trace.records import NO_CALLER, unwound_lines

    trace = _rows_loop(128, steps=2)
    copies = list(trace.copies)
    copies[64] = replace(copies[64], frames=(OTHER,))  # the first run's second sample
    two = replace(trace, copies=tuple(copies), frames=TWO)
    lines = unwound_lines(two)
    first, second = copies[:128], copies[128:]
    assert not any(id(c) in lines for c in first)
    assert all(lines[id(c)] == TWO[LINE] for c in second if not c.frames)
    assert two.line_of(first[1]) is None
    # alone in its run: the lines of its size's unwound calls, two
    lone = replace(two, copies=(copies[0], copies[64], copies[130]))
    assert lone.line_of(copies[130]) is None and NO_CALLER not in lines.values()
    one = replace(trace, copies=(copies[0], copies[130]))  # one line: its
    assert one.line_of(copies[130]) == NAMES[LINE]


def test_a_wait_left_without_callers_takes_its_threads_one_unwound_line():
    from dataclasses import replace

    from xferscope.trace.records import unwound_lines

    waits = [Call("cudaStreamSynchronize_v3020", 10 * US * i, 10 * US * i + 5, 1, 1,
                  frames=(LINE,) if i % 64 == 0 else ()) for i in range(130)]  # fmt: skip
    trace = replace(_rows_loop(64, steps=1), calls=tuple(waits))
    lines = unwound_lines(trace)
    assert all(lines[id(w)] == NAMES[LINE] for w in waits if not w.frames)
    other = replace(waits[64], frames=(OTHER,))
    mixed = replace(trace, calls=(*waits[:64], other, *waits[65:]), frames=TWO)
    assert not any(id(w) in unwound_lines(mixed) for w in mixed.calls)


def _two_lines(steps: int = 12) -> Trace:
    """`steps` steps of a run of 128 uploads of 128 bytes from LINE, then 64 of 64 bytes from
    OTHER, 8 us apart (one run), one call in 64 unwound, then a 300 us kernel."""
    copies, kernels = [], []
    n, t = 0, 1_000 * US
    for _ in range(steps):
        for line, size, count in ((LINE, 128, 128), (OTHER, 64, 64)):
            for _ in range(count):
                frames = (line,) if n % 64 == 0 else ()
                call = Call("cudaMemcpyAsync_v3020", t, t + 2 * US, 1, 1, frames=frames)
                copies.append(Copy(1, "h2d", "pinned", "device", size, t + 2 * US, t + 3 * US,
                                   0, 7, True, n, call, frames=frames))  # fmt: skip
                n += 1
                t += 8 * US
        kernels.append(_kernel(t + 5 * US, t + 305 * US))
        t += 310 * US
    return Trace(tuple(copies), tuple(kernels), (), tuple(c.call for c in copies), {}, TWO, ())


def test_a_run_from_two_lines_places_each_size_at_its_line_and_marks_each_step_once():
    """A renderer's run a step: 128 instances' structs from one line, then 64 lights' from
    another. Each copy left without callers is its size's line's, and each step is one mark
    of the line chosen, not one at each sample."""
    from xferscope.trace.findings.base import places

    trace = _two_lines()
    found = {p.where: p.calls for p in places(trace, trace.copies)}
    assert found == {TWO[LINE]: 12 * 128, TWO[OTHER]: 12 * 64}
    (loop,) = loops(trace)
    assert loop.where in (TWO[LINE], TWO[OTHER]) and loop.count == 11
