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
