"""How the trace's findings price a fix step by step (issue 67): waits by the step's idle and
its time blocked, chained waits as one, a blocking copy down as a wait, a wait only the looks
saw (JAX), copies hidden only where the step is the GPU's, repeated uploads only of constants,
the host's own launches apart from its input, library NVTX ranges apart from the program's."""

from __future__ import annotations

import dataclasses

import pytest

from xferscope.trace.analyze import analyze, one_price
from xferscope.trace.findings import Context, input_starved, not_overlapped, repeated
from xferscope.trace.findings import synchronizing as waits_finding
from xferscope.trace.findings.base import PIN_LOADER, PINNED, Place, TraceFinding
from xferscope.trace.idle import IdleCause
from xferscope.trace.loops import candidates
from xferscope.trace.ranks import _alone
from xferscope.trace.records import Call, Copy, Interval, MainSamples, PyFrame, Range, Trace
from xferscope.trace.reference import Reference

MS, US = 1_000_000, 1_000
STEP = 10 * MS


def _call(name: str, a: int, b: int, line: int) -> Call:
    return Call(name, a, b, 1, 1, (), (PyFrame("train.py", line, "main"),))


def _copy(direction: str, memory: str, call: Call, a: int, b: int, content: int | None = None,
          nbytes: int = 1 << 20) -> Copy:  # fmt: skip
    src, dst = (memory, "device") if direction == "h2d" else ("device", memory)
    return Copy(1, direction, src, dst, nbytes, a, b, 0, 7, True, 0,
                Call(call.function, call.start_ns, call.end_ns, call.thread), content=content,
                python=call.python)  # fmt: skip


def _loop(steps: int, work_ms: float = 5.0, each=None, looks=None, memory="pinned") -> Trace:
    """`steps` steps of 10 ms: an upload at train.py:43 at each step's start, `work_ms` of
    kernels after it; `each(t)` adds a step's other calls, copies and kernels; `looks(t)` its
    looks at the main thread (ns, stack)."""
    copies, calls, kernels, seen = [], [], [], []
    for i in range(steps):
        t = (100 + i * 10) * MS
        up = _call("cudaMemcpyAsync_v3020", t - 60 * US, t - 40 * US, 43)
        calls.append(up)
        copies.append(_copy("h2d", memory, up, t, t + 50 * US, content=1000 + i))
        kernels.append(Interval(1, "kernel", "gemm", t + 60 * US, t + int(work_ms * MS), 0, 7))
        if each:
            more_calls, more_copies, more_kernels = each(t)
            calls += more_calls
            copies += more_copies
            kernels += more_kernels
        if looks:
            seen += looks(t)
    samples = {1: MainSamples(1e-3, tuple(t for t, _ in seen), tuple(s for _, s in seen))}
    return Trace(tuple(sorted(copies, key=lambda c: c.start_ns)), tuple(kernels), (),
                 tuple(sorted(calls, key=lambda c: c.start_ns)), {}, {}, (),
                 samples=samples if looks else {})  # fmt: skip


def _context(trace: Trace) -> Context:
    a = analyze(trace, 1.0, None)
    assert a.view is not None and a.loop is not None
    return Context(a.view, None, a.loops, trace)


def test_two_waits_in_a_row_are_priced_as_the_steps_idle():
    """Each step: kernels until 5 ms, `.item()` blocked from 0.5 ms until they end, a tiny
    kernel, a second `.item()` blocked 20 us, then the host's own 4.9 ms before the next
    upload: the step loses its idle (about 4.9 ms) to the waits, which blocked 4.5 ms. Each
    wait alone would have been priced at the idle after it or its time, whichever is less:
    0.01 ms and 0.02 ms."""

    def each(t):
        first = _call("cudaStreamSynchronize_v3020", t + 500 * US, t + 5010 * US, 61)
        tiny = Interval(1, "kernel", "eq", t + 5015 * US, t + 5020 * US, 0, 7)
        second = _call("cudaStreamSynchronize_v3020", t + 5030 * US, t + 5050 * US, 62)
        return [first, second], [], [tiny]

    found = waits_finding.find(_context(_loop(12, each=each)))
    assert found is not None and found.saving_s == pytest.approx(11 * 4.52e-3, rel=0.02)
    assert {p.where for p in found.places} == {"train.py:61 (main)", "train.py:62 (main)"}


def test_a_blocking_copy_down_is_a_wait_and_the_idle_after_it_is_the_waits():
    """`.cpu()` of a result to pageable memory: the copy's call blocks until the step's kernels
    end, then the host post-processes 4 ms: no synchronize call, a wait all the same, and the
    idle after it is not the input's."""

    def each(t):
        call = _call("cudaMemcpyAsync_v3020", t + 300 * US, t + 5100 * US, 70)
        down = _copy("d2h", "pageable", call, t + 5000 * US, t + 5090 * US)
        return [call], [down], []

    context = _context(_loop(12, each=each))
    found = waits_finding.find(context)
    assert found is not None and found.places[0].where == "train.py:70 (main)"
    assert found.saving_s == pytest.approx(11 * 4.8e-3, rel=0.05)
    assert input_starved.find(context) is None
    kinds = {c.kind for g in context.gpus.gpus for c in g.idle}
    assert "after_wait" in kinds


def test_a_wait_only_the_looks_saw_is_priced_in_jaxs_words():
    """JAX reads a value through its runtime's threads: no CUDA call of the main thread waits,
    but the looks in the GPU's idle find it in jax.Array._value, at the program's line."""
    read = (PyFrame("/v/site-packages/jax/_src/array.py", 640, "ArrayImpl._value"),
            PyFrame("train.py", 101, "run"))  # fmt: skip
    trace = _loop(12, looks=lambda t: [(t + (6 + k) * MS, read) for k in range(3)])
    found = waits_finding.find(_context(trace))
    assert found is not None and found.framework == "JAX" and "jax.device_get" in found.advice
    assert "jnp.stack" in found.advice  # a list read as it is pays a transfer an array
    assert found.places[0].where == "train.py:101 (run)"
    # the steps' idle but the last's, whose end is past the steady state's last mark
    assert found.saving_s == pytest.approx(10 * 4.98e-3, rel=0.02)


def test_the_steps_own_launches_are_not_its_input():
    """The GPU waits 5 ms a step before the upload while the looks find the host in PyTorch's
    optimizer (the step's own launches, a host-bound loop): no input finding; in the program's
    own code making a batch, it is the input's."""
    optimizer = (PyFrame("/v/site-packages/torch/optim/sgd.py", 9, "_multi_tensor_sgd"),
                 PyFrame("train.py", 50, "main"))  # fmt: skip
    own = (PyFrame("train.py", 30, "make_batch"), PyFrame("train.py", 42, "main"))
    for stack, found in ((optimizer, False), (own, True)):
        trace = _loop(12, looks=lambda t, s=stack: [(t + (6 + k) * MS, s) for k in range(3)])
        assert (input_starved.find(_context(trace)) is not None) is found


def test_copies_hidden_only_where_the_step_is_the_gpus():
    """A 1 ms copy with no kernel beside it each step: where the GPU then waits 4 ms for the
    host anyway, hiding it saves nothing; where the step is all GPU work, it saves the 1 ms."""

    def copy_alone(t):
        call = _call("cudaMemcpyAsync_v3020", t + 100 * US, t + 110 * US, 44)
        return [call], [_copy("h2d", "pinned", call, t + 5 * MS, t + 6 * MS)], []

    host_bound = not_overlapped.find(_context(_loop(12, work_ms=5.0, each=copy_alone)))
    assert host_bound is not None and host_bound.saving_s == pytest.approx(0.0, abs=1e-4)

    def busy_step(t):
        calls, copies, _ = copy_alone(t)
        more = Interval(1, "kernel", "gemm2", t + 6 * MS, t + 10 * MS - 20 * US, 0, 7)
        return calls, copies, [more]

    gpu_bound = not_overlapped.find(_context(_loop(12, work_ms=5.0, each=busy_step)))
    assert gpu_bound is not None and 11 * 0.9e-3 < gpu_bound.saving_s <= 11 * 1e-3  # its gaps


def test_only_a_constant_is_a_repeated_upload():
    """Each step uploads a mask that never changes and one of five batches in turn: the mask's
    uploads after the first are repeats, the batches revisited every fifth step are not."""

    def each(t):
        mask = _call("cudaMemcpyAsync_v3020", t + 20 * US, t + 30 * US, 45)
        batch = _call("cudaMemcpyAsync_v3020", t + 40 * US, t + 50 * US, 46)
        i = (t // MS - 100) // 10
        return [mask, batch], [_copy("h2d", "pinned", mask, t + 51 * US, t + 55 * US, 7),
                               _copy("h2d", "pinned", batch, t + 56 * US, t + 59 * US,
                                     100 + i % 5)], []  # fmt: skip

    context = _context(_loop(20, each=each))
    again = repeated.repeats(context)
    assert again and {c.content for c in again} == {7}


def test_nccl_time_beside_other_kernels_is_no_wait():
    """NCCL's kernels from 0 to 50 and 100 to 200, other kernels 10-20, 40-60 and 120-130: NCCL
    alone 0-10, 20-40, 100-120 and 130-200."""
    assert _alone(([0, 100], [50, 200]), ([10, 40, 120], [20, 60, 130])) == (
        [0, 20, 100, 130],
        [10, 40, 120, 200],
    )


def test_library_nvtx_ranges_mark_no_steps_but_xlas_program_runs_do():
    """CUB and NCCL push ranges in their own domains, each run of XLA's compiled program one in
    TSL's; only the last is a step candidate."""
    ranges = tuple(
        Range(1, name, domain, (100 + 10 * i) * MS, (105 + 10 * i) * MS)
        for i in range(8)
        for name, domain in (
            ("cub::DeviceScan::ExclusiveScan", "CCCL"),
            ("ncclAllReduce", "NCCL"),
            ("XlaModule:#hlo_module=jit_train_step,program_id=7#", "TSL"),
        )
    )
    trace = Trace((), (Interval(1, "kernel", "k", 100 * MS, 180 * MS, 0, 7),), (), (), {}, {}, (),
                  ranges=ranges)  # fmt: skip
    (found,) = candidates(trace)[1]
    assert "jit_train_step" in found.where and found.kind == "nvtx"


def _priced(code: str, saving: float, where: str, change: str = "",
            each: tuple[tuple[str, float], ...] = ()) -> TraceFinding:  # fmt: skip
    return TraceFinding(code, code.replace("_", " "), 10, 0, "", (Place(where, 10, 0, saving),),
                        saving, saving, "fix", "found", change=change, each_fix=each)  # fmt: skip


def test_one_change_at_one_line_is_one_price():
    """`pin_memory=True` ends both a DataLoader's pageable copies' staging and the main thread's
    receipt of the workers' batches at the batch's line: one finding, the copies' (whose whole
    fix it is, even where the input's part is larger), priced as both parts (each in each_fix),
    nothing counted twice; the input's restarts (`persistent_workers`) stay its own finding; the
    same change at another line, a finding of no change and one not priced stay as they are."""
    line = "train.py:71 (step)"
    pageable = _priced("pageable_copies", 0.36, line, PIN_LOADER)
    starved = _priced("input_starved", 0.52, line, PIN_LOADER,
                      (("keep the workers", 0.10), (PINNED, 0.42)))  # fmt: skip
    elsewhere = _priced("input_starved", 0.5, "train.py:90 (main)", PIN_LOADER, ((PINNED, 0.5),))
    waits = _priced("synchronizations", 0.01, line)
    unpriced = dataclasses.replace(_priced("slow_copies", 0.2, line, PIN_LOADER), saving_s=None)
    found = [starved, pageable, elsewhere, waits, unpriced]
    out = one_price(found)
    assert [f.code for f in out] == ["input_starved", "pageable_copies", "input_starved",
                                     "synchronizations", "slow_copies"]  # fmt: skip
    assert out[2:] == [elsewhere, waits, unpriced]
    restarts, merged = out[0], out[1]
    assert merged.saving_s == pytest.approx(0.78) and merged.cost_s == pytest.approx(0.78)
    assert merged.each_fix == (("pageable copies", 0.36), ("input starved", 0.42))
    assert merged.advice == pageable.advice and PIN_LOADER in merged.detail
    assert restarts.saving_s == pytest.approx(0.10) and restarts.change == ""
    assert restarts.each_fix == (("keep the workers", 0.10),)
    total = sum(f.saving_s or 0.0 for f in found)
    assert sum(f.saving_s or 0.0 for f in out) == pytest.approx(total)
    apart = dataclasses.replace(starved, change="")
    assert one_price([pageable, apart]) == [pageable, apart]
    assert one_price([starved, elsewhere]) == [starved, elsewhere]  # no copies' finding: none


@pytest.mark.parametrize(
    ("memory", "doing", "pinning"),
    [("pageable", (("_recv (multiprocessing)", 2), ("_poll (multiprocessing)", 1)), True),
     ("pageable", (("rebuild_storage_fd (torch)", 3),), True),
     ("pinned", (("_recv (multiprocessing)", 3),), False),  # pinned already
     ("pageable", (("select (selectors)", 5), ("_recv (multiprocessing)", 1)), False),  # waiting
     ("pageable", (("collate (train.py)", 3),), False)],  # the main thread makes its batches
)  # fmt: skip
def test_pinning_is_the_input_waits_fix_where_the_main_thread_received_pageable_batches(
    memory, doing, pinning
):
    """The input's wait at a DataLoader's batch is `pin_memory=True`'s to end where at least
    half the looks in the loader found the main thread receiving from the workers' queue (not
    waiting for slow workers) and the batches were copied from pageable memory: the pin-memory
    thread then receives them."""
    up = _call("cudaMemcpy", 0, MS, 71)
    copies = [_copy("h2d", memory, up, 0, MS)] * 2
    looks = sum(n for _, n in doing)
    cause = IdleCause("away", "cudaMemcpy", "train.py:71 (step)", 0.3, 80, looks=looks + 1,
                      input_looks=looks, seen_doing=doing)  # fmt: skip
    assert input_starved._receives_pageable(cause, copies) is pinning


@pytest.mark.parametrize(("doing", "merged"), [("_recv", True), ("_poll", False)])
def test_a_dataloaders_pageable_batches_received_by_the_main_thread_are_one_price(doing, merged):
    """12 steps of 10 ms: a DataLoader's batch copied from pageable memory at train.py:43, 5 ms
    of kernels, then 5 ms with the GPU idle while the main thread is in the loader's next. Where
    the looks find it reading the workers' queue, the copies' finding is priced with that idle
    (pin_memory=True ends both) and no input finding is left; where they find it waiting for
    the workers, the two stay apart, the input's in the DataLoader's words."""
    from xferscope.trace.analyze import one_price as merge

    stack = (PyFrame("/usr/lib/python3.12/multiprocessing/connection.py", 395, doing),
             PyFrame("/v/site-packages/torch/utils/data/dataloader.py", 1318, "_get_data"),
             PyFrame("/v/site-packages/torch/utils/data/dataloader.py", 733, "__next__"),
             PyFrame("train.py", 42, "main"))  # fmt: skip
    trace = _loop(12, looks=lambda t: [(t + (6 + k) * MS, stack) for k in range(3)],
                  memory="pageable")  # fmt: skip
    reference = Reference("test", {("h2d", "pinned"): ((4096, 2e-6), (1 << 20, 1e-5))})
    a = analyze(trace, 1.0, reference)
    codes = [f.code for f in a.findings]
    pageable = next(f for f in a.findings if f.code == "pageable_copies")
    assert ("input_starved" not in codes) is merged
    if merged:
        (_, copy_s), (title, idle_s) = pageable.each_fix
        assert title == "the GPU waited for its next input" and idle_s > 0.03
        assert pageable.saving_s == pytest.approx(copy_s + idle_s)
    else:
        starved = next(f for f in a.findings if f.code == "input_starved")
        assert "num_workers" in starved.advice and starved.change == ""
        assert merge(a.findings) == list(a.findings)
