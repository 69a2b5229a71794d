"""Copies another thread of the process issued (JAX's `device_put`: PJRT's threads copy each
array): the GPU's idle they end is the input's, and a run of small ones costs the main thread's
work before its first copy as well."""

from __future__ import annotations

from dataclasses import replace

import pytest

from xferscope.trace.findings import Context, small
from xferscope.trace.records import Call, Copy, PyFrame, Trace
from xferscope.trace.reference import Reference

from .test_trace_timeline import steps
from .trace_loops import _kernel

US = 1_000


def _worker_steps(kernels_at_us: int, stack: tuple[PyFrame, ...] = ()) -> Trace:
    """Ten steps 5 ms apart: four 0.1 ms uploads 0.3 ms apart issued by thread 2 of process 1
    (with `stack` as their Python stack), kernels from `kernels_at_us` to 3 ms, then the main
    thread's 0.5 ms wait at train.py:50 (the step's mark)."""
    copies, kernels, calls = [], [], []
    line = (PyFrame("train.py", 50, "train"),)
    for i in range(10):
        t = 1_000_000 * US + i * 5_000 * US
        for j in range(4):
            at = t + j * 300 * US
            up = Call("cuMemcpyHtoDAsync_v2", at - 20 * US, at, 2, 1)
            calls.append(up)
            copies.append(Copy(1, "h2d", "pageable", "device", 64, at, at + 100 * US, 0, 7,
                               True, j, up, python=stack))  # fmt: skip
        kernels.append(_kernel(t + kernels_at_us * US, t + 3_000 * US))
        calls.append(Call("cuStreamSynchronize", t + 3_000 * US, t + 3_500 * US, 1, 1, python=line))
    return Trace(tuple(copies), tuple(kernels), (), tuple(calls), {}, {}, ())


def test_the_idle_a_worker_threads_upload_ends_is_the_inputs():
    """JAX's `device_put` has PJRT's threads copy the arrays: ten steps 5 ms apart, each four
    0.1 ms uploads 0.3 ms apart issued by thread 2 of process 1, 2 ms of kernels, then the main
    thread's 0.5 ms wait (the step's mark). The idle each upload ends (2 ms before the first,
    0.2 ms before each other) is the input's though the main thread made no copy."""
    loop = steps(_worker_steps(1_000))
    assert loop is not None and loop.count == 9 and loop.where == "train.py:50 (train)"
    assert loop.idle_share == pytest.approx(2.6 / 5)
    assert loop.input_share == pytest.approx((2.6 + 0.4) / 5)


@pytest.mark.parametrize(
    ("thread", "python", "saving_us"), [(1, False, 155.0), (2, False, 455.0), (2, True, 155.0)]
)
def test_a_run_of_small_copies_a_worker_issued_costs_the_idle_before_it(thread, python, saving_us):
    """A kernel from 0.1 ms to 0.5 ms, then 20 pinned uploads of 4 KiB 10 us apart from 0.8 ms:
    issued by the main thread, one copy saves the run's calls less one, at most the GPU's idle
    in them (test_trace_timeline's 155 us); issued by thread 2, the main thread's work for each
    array from the kernel's end to the first call as well, at most the idle from 0.5 ms to the
    last copy's end (455 us); issued by a Python thread (a loader's, its stack recorded), its
    own work before the run is no copy's, as the main thread's."""
    reference = Reference("test", {("h2d", "pinned"): ((4096, 2e-6), (1 << 20, 3e-5))})
    stack = (PyFrame("loader.py", 9, "run"),) if python else ()
    copies = []
    for i in range(20):
        t = 800 * US + i * 10 * US
        call = Call("cuMemcpyHtoDAsync_v2", t, t + 2 * US, thread, 1)
        copy = Copy(1, "h2d", "pinned", "device", 4096, t + 3 * US, t + 5 * US, 0, 7, True, i, call)
        copies.append(replace(copy, python=stack))
    trace = Trace(
        tuple(copies), (_kernel(100 * US, 500 * US),), (), tuple(c.call for c in copies), {}, {}, ()
    )
    f = small.find(Context(trace, reference))
    assert f is not None and f.saving_s == pytest.approx(saving_us * 1e-6, abs=1e-6)


@pytest.mark.parametrize(("thread", "saving_us"), [(2, 915.0), (1, 235.0)])
def test_one_puts_runs_are_one_batch_until_a_kernel(thread, saving_us):
    """Three steps, each a kernel to 0.5 ms, then 40 small uploads from 0.8 ms, 10 us apart, in
    a run of 30 and one of 10, 300 us apart (the main thread making a buffer for each array
    between them). Issued by PJRT's threads (2): one `jax.device_put` of a list, one batch
    from the kernel's end to its last copy, at most the GPU's idle there (995 us less its 40
    copies' 80); the run of 10 alone is under BATCH_MIN and would go unpriced. Issued by the
    main thread (1): two runs, the run of 30 priced (its calls less one, at most the idle in
    them: 295 us less 60)."""
    reference = Reference("test", {("h2d", "pinned"): ((4096, 2e-6), (1 << 20, 3e-5))})
    copies, kernels = [], []
    for step in range(3):
        t0 = step * 5_000 * US
        kernels.append(_kernel(t0 + 100 * US, t0 + 500 * US))
        for i in range(40):
            t = t0 + 800 * US + i * 10 * US + (300 * US if i >= 30 else 0)
            call = Call("cuMemcpyHtoDAsync_v2", t, t + 2 * US, thread, 1)
            copies.append(Copy(1, "h2d", "pinned", "device", 4096, t + 3 * US, t + 5 * US, 0, 7,
                               True, step * 40 + i, call))  # fmt: skip
    trace = Trace(tuple(copies), tuple(kernels), (), tuple(c.call for c in copies), {}, {}, ())
    f = small.find(Context(trace, reference))
    assert f is not None and f.saving_s is not None
    assert f.title.startswith("runs of many small copies (3 runs")
    assert f.saving_s == pytest.approx(3 * saving_us * 1e-6, rel=0.01)


@pytest.mark.parametrize(("python", "after"), [(False, 0.5), (True, 0.0)])
def test_the_idle_after_a_framework_threads_upload_until_the_step_is_the_inputs(python, after):
    """Ten steps 5 ms apart: four 0.1 ms uploads 0.3 ms apart by thread 2, the step's kernels
    0.5 ms after the last one ends, the main thread's wait the step's mark. Issued by PJRT's
    threads (no Python stack), the 0.5 ms until the kernels is the input's too: the main
    thread handed the arrays over and dispatched the step only then. By a loader's thread (a
    Python stack), whose copies run ahead of the step, it is not."""
    stack = (PyFrame("loader.py", 9, "run"),) if python else ()
    loop = steps(_worker_steps(1_500, stack))
    assert loop is not None and loop.input_share is not None
    # the idle each upload ends (2 ms, then 0.2 ms thrice) and the copies alone (0.4 ms)
    assert loop.input_share == pytest.approx((2.0 + 0.6 + 0.4 + after) / 5)
