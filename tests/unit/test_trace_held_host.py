"""Copies whose calls hold the host: what freeing it saves. A synchronous small copy counts at
most this machine's untraced call (tracing lengthens it); an upload from pageable memory issued
with cudaMemcpyAsync, pinned and `non_blocking=True`, lets the host queue the step's work."""

from __future__ import annotations

import pytest

from xferscope.trace.findings import Context, pageable, small
from xferscope.trace.records import Call, Copy, PyFrame, Trace
from xferscope.trace.reference import Reference
from xferscope.trace.steps import loops

from .trace_loops import _kernel

US, MS = 1_000, 1_000_000
AT = (PyFrame("train.py", 43, "train"),)


@pytest.mark.parametrize("function", ["cudaMemcpy_v3020", "cudaMemcpyAsync_v3020"])
def test_a_synchronous_small_copy_counts_at_most_this_machines_untraced_call(function):
    """20 uploads of 256 B from pinned memory 11 us apart, each call 10 us traced (its copy the
    last 0.2 us), the GPU idle: one copy saves the host the run less one call. A
    synchronous call counts at most this machine's untraced cudaMemcpy of 256 B (6 us), so
    its 4 us of tracing, in every call but the one copy's, are not saved: 208 - 76 us. An
    asynchronous call returns before its copy ends: the curve of cudaMemcpy is not its."""
    reference = Reference("test", {("h2d", "pinned"): ((256, 6e-6), (1 << 20, 3e-5))})
    copies = []
    for i in range(20):
        t = 1_000 * US + i * 11 * US
        call = Call(function, t, t + 10 * US, 1, 1)
        copies.append(Copy(1, "h2d", "pinned", "device", 256, t + 9_800, t + 10 * US, 0, 7,
                           "Async" in function, i, call))  # fmt: skip
    trace = Trace(tuple(copies), (), (), tuple(c.call for c in copies), {}, {}, ())
    found = small.find(Context(trace, reference))
    assert found is not None and found.saving_s is not None
    issued = 19 * 11 - 11 + 10
    expected = issued - 19 * 4 if "Async" not in function else issued
    assert found.saving_s == pytest.approx(expected * 1e-6, abs=0.5e-6)


def _pageable_loop(function: str, content: int | None = None) -> Trace:
    """Twelve steps 4 ms apart: a 4 MiB upload from pageable memory at train.py:43 whose call
    waits 0.4 ms for the step before's kernel and 0.6 ms for its copy, then the host launches
    the step, whose 2 ms kernel reaches the GPU 1 ms after the copy; `content`: each step's
    bytes' sampled hash (None: not sampled; an int, the same bytes every step)."""
    copies, kernels, calls = [], [], []
    for i in range(12):
        t = 10 * MS + i * 4 * MS
        call = Call(function, t, t + MS, 1, 1)
        calls.append(call)
        copies.append(Copy(1, "h2d", "pageable", "device", 4 << 20, t + 400 * US, t + MS, 0, 7,
                           "Async" in function, i, call, python=AT, content=content))  # fmt: skip
        kernels.append(_kernel(t + 2 * MS, t + 4 * MS + 400 * US))
    return Trace(tuple(copies), tuple(kernels), (), tuple(calls), {}, {}, ())


def test_a_pageable_upload_that_holds_the_host_is_priced_by_the_host_freed():
    """Pinned, each copy would take 0.1 ms, 0.5 ms less than its 0.6; with
    `non_blocking=True` the host also goes on at once and queues the step, so each step saves
    the smaller of its GPU's idle (1 ms) plus that 0.5 ms and the host's 1 ms blocked (less an
    asynchronous call's issue): 0.995 ms a step, twice what the copies alone save. A
    synchronous cudaMemcpy pinned still holds the host: the copies alone."""
    reference = Reference("test", {("h2d", "pinned"): ((1 << 20, 25e-6), (4 << 20, 1e-4))})
    held = _pageable_loop("cudaMemcpyAsync_v3020")
    (loop,) = loops(held)
    assert loop.where == "train.py:43 (train)"
    context = Context(held, reference, loops=(loop,))
    found = pageable.find(context)
    assert found is not None and found.saving_s is not None
    # the last upload, past the loop's last mark, alone: the idle after it, at most its time
    assert found.saving_s == pytest.approx(12 * (MS - 5 * US) * 1e-9, rel=0.01)
    synchronous = _pageable_loop("cudaMemcpy_v3020")
    alone = pageable.find(Context(synchronous, reference, loops=(loop,)))
    assert alone is not None and alone.saving_s is not None
    # the first call waited for no kernel: its 1 ms is all the copy's
    assert alone.saving_s == pytest.approx(0.9e-3 + 11 * 0.5e-3, rel=0.01)


@pytest.mark.parametrize("content", [None, 0xBEEF])
def test_new_data_pinned_each_step_keeps_its_staging_copy_on_the_host(content):
    """As above, this machine's pageable copy of 4 MiB 0.3 ms slower than its pinned one: data
    new each step is copied into a pinned buffer first, on the host, so each step saves 0.3 ms
    less (0.695 ms); the same bytes every step are pinned once, with the first."""
    curves = {
        ("h2d", "pinned"): ((1 << 20, 25e-6), (4 << 20, 1e-4)),
        ("h2d", "pageable"): ((1 << 20, 1e-4), (4 << 20, 4e-4)),
    }
    reference = Reference("test", curves)
    held = _pageable_loop("cudaMemcpyAsync_v3020", content)
    (loop,) = loops(held)
    found = pageable.find(Context(held, reference, loops=(loop,)))
    assert found is not None and found.saving_s is not None
    kept = (12 if content is None else 1) * 0.3e-3
    assert found.saving_s == pytest.approx(12 * (MS - 5 * US) * 1e-9 - kept, rel=0.005)
