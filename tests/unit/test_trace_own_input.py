"""The GPU waiting while the host made its input itself (no loader seen): priced by the share of
the looks at the main thread that found it making the input, not in the framework's own code."""

from __future__ import annotations

from dataclasses import replace

import pytest

from xferscope.trace.findings import Context, input_starved, repeated
from xferscope.trace.records import Call, Copy, MainSamples, PyFrame, Trace

from .trace_loops import _kernel

MS = 1_000_000
MAKING = (PyFrame("train.py", 30, "make_batch"), PyFrame("train.py", 41, "train"))
OPTIMIZER = (
    PyFrame("/v/site-packages/torch/optim/sgd.py", 9, "_multi_tensor_sgd"),
    PyFrame("train.py", 50, "train"),
)


def _own_input(in_optimizer: int, same: bool = False, lines: tuple[int, ...] = (43,)) -> Trace:
    """20 steps 10 ms apart: a batch copied from train.py:43 (its call 0.1 ms before), 2.9 ms
    of kernels, then the GPU idle until the next copy; seven looks at the main thread in each
    idle, the first `in_optimizer` of them in PyTorch's optimizer, the rest making the batch;
    `same`: every batch the same bytes (a table made again each step); `lines`: the copy's
    line, step by step in turn."""
    copies, kernels, calls, seen, stacks = [], [], [], [], []
    for i in range(20):
        at = (PyFrame("train.py", lines[i % len(lines)], "train"),)
        t = 100 * MS + i * 10 * MS
        call = Call("cudaMemcpyAsync_v3020", t - MS // 10, t - MS // 20, 1, 1)
        calls.append(call)
        copies.append(
            Copy(
                1,
                "h2d",
                "pinned",
                "device",
                1 << 20,
                t,
                t + MS // 10,
                0,
                7,
                True,
                i,
                call,
                python=at,
            )
        )
        kernels.append(_kernel(t + MS // 10, t + 3 * MS))
        if i < 19:
            for k in range(7):
                seen.append(t + 3 * MS + MS // 2 + k * MS)
                stacks.append(OPTIMIZER if k < in_optimizer else MAKING)
    samples = {1: MainSamples(1e-3, tuple(seen), tuple(stacks))}
    copies = [replace(c, content=0xC0FFEE if same else i + 1) for i, c in enumerate(copies)]
    return Trace(tuple(copies), tuple(kernels), (), tuple(calls), {}, {}, (), samples=samples)


@pytest.mark.parametrize("in_optimizer", [2, 3])
def test_the_input_is_the_share_of_looks_outside_the_framework_up_to_the_gpus_idle(in_optimizer):
    """The host away 9.95 ms a step, the GPU idle 7 ms of it (it ran the step's 2.9 ms first):
    made ahead, the step takes the longer of the host's other work (the looks in the optimizer)
    and the GPU's 3 ms. With 2 looks of 7 in the optimizer the host's other work is 2.8 ms, so
    all the idle goes; with 3, 4.3 ms, so the step saves only the making, 4/7 of 9.95 ms."""
    own = input_starved.find(Context(_own_input(0), None))
    mixed = input_starved.find(Context(_own_input(in_optimizer), None))
    assert own is not None and mixed is not None and own.saving_s is not None
    assert own.saving_s == pytest.approx(19 * 7e-3, rel=0.02)
    making = 9.95e-3 * (7 - in_optimizer) / 7
    assert mixed.saving_s == pytest.approx(19 * min(making, 7e-3), rel=0.02)
    assert (
        f"making was {(7 - in_optimizer) / 7:.0%} of the host's time away: {19 * in_optimizer} of"
        in mixed.detail
    )
    assert "making was" not in own.detail
    bound = "all the GPU's idle but" if in_optimizer == 2 else "the host's time making it"
    assert f"the price is {bound}" in mixed.detail


def test_looks_mostly_in_the_framework_are_the_steps_own_launches_not_its_input():
    assert input_starved.find(Context(_own_input(4), None)) is None


def test_the_advice_names_the_line_once_and_counts_its_looks_as_looks():
    own = input_starved.find(Context(_own_input(0), None))
    assert own is not None
    assert "do the host's work at train.py:30 (make_batch) ahead of the step" in own.advice
    assert "make_batch (train.py)" not in own.advice + own.detail
    seen = own.places[0]
    assert seen.where == "train.py:30 (make_batch)" and seen.calls == 0 and seen.looks == 19 * 7


def test_what_the_looks_found_is_said_where_it_is_not_the_lines_own_function():
    from xferscope.trace.findings.input_starved import _doing

    assert _doing("/p/train.py:53 (sample)", "sample (train.py)") == ""
    assert _doing("/p/train.py:53 (sample)", "_clip (numpy)") == "_clip (numpy)"
    assert _doing("/p/train.py:53 (sample)", "sample (other.py)") == "sample (other.py)"


def test_an_input_made_again_each_step_with_the_same_bytes_is_the_repeated_uploads_finding():
    """The same table made and uploaded every step: made once, before the loop, neither the
    host's making nor the upload is spent, so the GPU's wait is priced with the repeats and the
    making's line named, not "do the input's work ahead of the step"."""
    made = _own_input(0)
    same = _own_input(0, same=True)
    ahead = input_starved.find(Context(made, None))
    assert ahead is not None and ahead.saving_s is not None
    assert repeated.find(Context(made, None)) is None  # distinct batches: no repeats
    assert input_starved.find(Context(same, None)) is None
    once = repeated.find(Context(same, None))
    assert once is not None and once.saving_s is not None
    uploads = sum(c.host_cost_s for c in same.copies[1:])
    assert once.saving_s == pytest.approx(ahead.saving_s + uploads)
    assert once.places[0].where == "train.py:30 (make_batch)"
    assert "the host meanwhile making them again at train.py:30 (make_batch)" in once.detail


def test_constant_inputs_uploaded_at_several_lines_are_priced_together():
    """The same bytes uploaded each step, at train.py:43 one step and :44 the next: the GPU's
    waits until either are the repeats' finding, together."""
    ahead = input_starved.find(Context(_own_input(0), None))
    two = _own_input(0, same=True, lines=(43, 44))
    assert ahead is not None and ahead.saving_s is not None
    assert input_starved.find(Context(two, None)) is None
    once = repeated.find(Context(two, None))
    assert once is not None and once.saving_s is not None
    uploads = sum(c.host_cost_s for c in two.copies[1:])
    assert once.saving_s == pytest.approx(ahead.saving_s + uploads)
    assert "(and at 1 more line)" in once.detail


def _handed(trace: Trace) -> Trace:
    """The same steps with each copy made by a framework's own thread (JAX's PJRT threads: a
    jitted call's NumPy arguments copied with no Python stack), so no call of the main thread
    ends the GPU's idle."""
    calls = tuple(replace(c, thread=2) for c in trace.calls)
    copies = tuple(
        replace(c, call=replace(c.call, thread=2), python=())
        for c in trace.copies
        if c.call is not None
    )
    return replace(trace, copies=copies, calls=calls)


def test_an_input_the_frameworks_threads_copied_is_named_by_the_looks_at_its_making():
    """With no call of the main thread to end the idle, the looks at it name the input's
    making: the same price as where the main thread copied it, the advice at its line."""
    own = input_starved.find(Context(_own_input(0), None))
    handed = input_starved.find(Context(_handed(_own_input(0)), None))
    assert own is not None and handed is not None and handed.saving_s is not None
    assert handed.saving_s == pytest.approx(own.saving_s, rel=0.01)  # to the copy, not its call
    assert "until the framework's threads copied it" in handed.detail
    assert "do the host's work at train.py:30 (make_batch) ahead of the step" in handed.advice
    assert input_starved.find(Context(_handed(_own_input(4)), None)) is None  # the framework's


def test_a_constant_the_frameworks_threads_uploaded_each_step_is_the_repeats_finding():
    same = _handed(_own_input(0, same=True))
    assert input_starved.find(Context(same, None)) is None
    once = repeated.find(Context(same, None))
    ahead = input_starved.find(Context(_handed(_own_input(0)), None))
    assert once is not None and once.saving_s is not None
    assert ahead is not None and ahead.saving_s is not None
    assert once.saving_s == pytest.approx(
        ahead.saving_s + sum(c.host_cost_s for c in same.copies[1:])
    )
    assert "uploaded again by the framework's threads" in once.detail
    made = once.places[0]  # the making's looks and the copies placed where it was seen: one
    assert made.where == "train.py:30 (make_batch)" and made.looks > 0 and made.calls == 19
    assert len({p.where for p in once.places}) == len(once.places)


def test_host_work_with_no_upload_after_it_is_no_input():
    """The GPU idle while the host works at its line, but nothing uploaded: no input's wait."""
    bare = _handed(_own_input(0))
    assert input_starved.find(Context(replace(bare, copies=bare.copies[:1]), None)) is None


def test_the_making_is_one_wait_whatever_call_the_host_came_back_with():
    """Every other step the host comes back to CUDA with a call of the framework's own (JAX's
    cudaMemsetAsync, no line) before the GPU resumes, the others with none: two causes of
    idle, the same making seen in both, priced together."""
    handed = _handed(_own_input(0))
    sets = tuple(
        Call("cudaMemsetAsync_v3020", c.start_ns - MS // 5, c.start_ns - MS // 6, 1, 1)
        for c in handed.copies[::2]
    )
    mixed = replace(handed, calls=(*handed.calls, *sets))
    alone = input_starved.find(Context(handed, None))
    both = input_starved.find(Context(mixed, None))
    assert alone is not None and both is not None and both.saving_s is not None
    assert both.saving_s == pytest.approx(alone.saving_s, rel=0.03)
