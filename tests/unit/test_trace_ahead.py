"""The input's wait priced as the input made ahead: the host's time away making it, up to the
GPU's idle (starving.Starved.idle_s), and long gaps that recur in most steps priced as the
steady wait, not an epoch's start."""

from __future__ import annotations

import itertools

import pytest

from xferscope.trace.findings import Context, input_starved
from xferscope.trace.idle import split
from xferscope.trace.records import Call, PyFrame, Trace
from xferscope.trace.steps import loops

from .trace_loops import _fed_loop

MS = 1_000_000
AT = (PyFrame("train.py", 43, "train"),)
NEXT = (
    PyFrame("/site-packages/torch/utils/data/dataloader.py", 9, "next"),
    PyFrame("train.py", 42, "train"),
)


def _found(trace: Trace):
    """The input's finding, with the trace's loops found as analyze finds them."""
    return input_starved.find(Context(trace, None, loops(trace, "")))


def test_the_hosts_stretch_away_runs_from_its_last_call_before_the_gap():
    """The host's last call ended at 2 ms, the GPU went idle at 5 ms (it ran what was queued),
    and the host came back with a copy at 9 ms: the GPU idle 4 ms, the host away 7 ms."""
    main = [Call("cudaLaunchKernel", 1 * MS, 2 * MS, 1, 1), Call("cudaMemcpyAsync", 9 * MS,
            9 * MS + 10, 1, 1)]  # fmt: skip
    hosts: dict = {}
    parts = split(main, [c.start_ns for c in main], 5 * MS, 9 * MS, lambda c: (c.name, "t.py:3"),
                  hosts=hosts)  # fmt: skip
    key = ("away", "cudaMemcpyAsync", "t.py:3", "")
    assert parts == {key: 4 * MS}
    assert hosts == {key: [(2 * MS, 9 * MS)]}


@pytest.mark.parametrize("step_ms", [10, 30])
def test_a_batch_made_after_the_step_was_queued_saves_all_the_gpus_idle_or_the_making(step_ms):
    """The host makes each batch for step_ms less 0.05 ms after queuing the step, the GPU
    busy 3 ms of it: the GPU idles step_ms - 3 ms (0.05 ms of it while the host is in the
    copy's call), and made ahead all of it goes, the host's other work (its calls) being
    shorter than the GPU's step. The steps start at the copies' calls, 0.1 ms before their
    copies: the first step's 0.1 ms before the first copy is before the GPU's first work."""
    starts = [(i + 1) * step_ms * MS for i in range(12)]
    f = _found(_fed_loop(starts, (PyFrame("train.py", 43, "train"),), NEXT))
    assert f is not None
    assert f.saving_s == pytest.approx(11 * (step_ms - 3) * 1e-3 - 0.1e-3, rel=1e-4)


def test_long_gaps_in_every_step_are_the_steady_wait_not_the_loaders_restart():
    """Each step copies its images, then 0.07 ms later its labels, from one line: the gaps
    before the labels' copies are the usual ones, so the images' 7 ms waits are long beside
    them. They recur in every step: the steady wait (more workers), not an epoch's restart
    (persistent workers)."""
    starts = list(itertools.accumulate([10 * MS] * 12))
    at = (PyFrame("train.py", 43, "train"),)
    f = _found(_fed_loop(starts, at, NEXT, then=70_000))
    assert f is not None and f.saving_s is not None
    ((fix, saving),) = f.each_fix
    assert "num_workers" in fix and saving == pytest.approx(f.saving_s)
    # an epoch's restart in two of twelve steps stays apart
    lengths = [(60 if i in (4, 8) else 10) * MS for i in range(12)]
    f = _found(_fed_loop(list(itertools.accumulate(lengths)), at, NEXT, then=70_000))
    assert f is not None
    (restart, long_s), (steady, _) = f.each_fix
    assert "num_workers" in steady
    assert "persistent_workers=True" in restart and long_s == pytest.approx(0.1, rel=0.01)


def _small_uploads(n: int) -> Trace:
    """12 steps 10 ms apart, each uploading n 4 KiB arrays from train.py:43 (calls 5 us apart),
    then 3 ms of kernels with a 0.1 ms gap in them, the host away until the next step's."""
    from xferscope.trace.records import Copy

    from .trace_loops import _kernel

    copies, kernels, calls = [], [], []
    for i in range(12):
        t = (i + 1) * 10 * MS
        for k in range(n):
            a = t + k * 5_000
            call = Call("cudaMemcpyAsync_v3020", a - 2_000, a, 1, 1)
            calls.append(call)
            copies.append(Copy(1, "h2d", "pinned", "device", 4096, a, a + 1_000, 0, 7, True,
                               len(copies), call, python=AT))  # fmt: skip
        kernels += [_kernel(t + n * 5_000, t + 3 * MS // 2), _kernel(t + 16 * MS // 10, t + 3 * MS)]
    return Trace(tuple(copies), tuple(kernels), (), tuple(calls), {}, {}, ())


def test_uploads_issued_one_by_one_are_priced_by_the_idle_they_waited_in():
    """The host away 9.8 ms a step, the GPU idle 7.1 ms of it: with 4 uploads a step the input
    made ahead saves all the GPU's idle, its 0.1 ms gap in the kernels too; with 16, a run of
    small copies, the host's time away is theirs to issue (the small copies' finding's), and
    the input is priced by the idle before them only."""
    few, run = _found(_small_uploads(4)), _found(_small_uploads(16))
    assert few is not None and run is not None and few.saving_s and run.saving_s
    waited = 11 * (7e-3 - 1e-6)  # to the first upload's end: its copy and the GPU's idle before
    # every idle of the GPU in the 11 steps: the wait for the next step's uploads, the
    # kernels' gap and the 4 us after each upload
    assert few.saving_s == pytest.approx(11 * (7e-3 + 0.1e-3 + 4 * 4e-6), rel=1e-3)
    assert run.saving_s < few.saving_s and run.saving_s == pytest.approx(waited, rel=0.002)


def test_the_idle_after_a_wait_for_the_gpu_stays_with_the_wait():
    """Each step waits for the GPU (a synchronize), logs for 1 ms, launches 2 ms of kernels,
    then makes the next batch for 5.9 ms, the GPU idle 4 ms of it. Made ahead, the batch saves
    those 4 ms, not the 1 ms after the wait: the host cannot run ahead past a wait (the waits'
    finding prices that)."""
    from xferscope.trace.records import Copy, MainSamples

    from .trace_loops import _kernel

    copies, kernels, calls, seen = [], [], [], []
    for i in range(12):
        t = (i + 1) * 10 * MS
        call = Call("cudaMemcpyAsync_v3020", t - MS // 10, t - MS // 20, 1, 1)
        copies.append(Copy(1, "h2d", "pinned", "device", 1 << 20, t, t + MS // 10, 0, 7, True,
                           i, call, python=AT))  # fmt: skip
        calls += [call, Call("cudaStreamSynchronize", t + MS // 5, t + 3 * MS, 1, 1),
                  Call("cudaLaunchKernel", t + 4 * MS, t + 4 * MS + 10_000, 1, 1)]  # fmt: skip
        kernels += [_kernel(t + MS // 10, t + 3 * MS), _kernel(t + 4 * MS + 10_000, t + 6 * MS)]
        seen += [t + 6 * MS + MS // 2 + k * MS for k in range(4)] if i < 11 else []
    looks = {1: MainSamples(1e-3, tuple(seen), tuple(NEXT for _ in seen))}
    trace = Trace(tuple(copies), tuple(kernels), (), tuple(calls), {}, {}, (), samples=looks)
    f = _found(trace)
    assert f is not None and f.saving_s == pytest.approx(11 * 4e-3, rel=0.01)


def test_an_input_made_in_some_steps_takes_none_of_the_others_idle():
    """Every other step the host makes the next batch for 9.95 ms (the GPU idle 7 ms of it);
    in the others the batch is ready but the host logs until 8 ms (a memset at train.py:60,
    then 1.5 ms of kernels) and makes only the last 1.9 ms. Step by step, made ahead saves
    the 7 ms and the 1.9 ms; the 5 ms idle before the log's memset is no step's input."""
    from xferscope.trace.records import Copy, MainSamples

    from .trace_loops import _kernel

    copies, kernels, calls, seen = [], [], [], []
    for i in range(12):
        t = (i + 1) * 10 * MS
        call = Call("cudaMemcpyAsync_v3020", t - MS // 10, t - MS // 20, 1, 1)
        calls.append(call)
        copies.append(Copy(1, "h2d", "pinned", "device", 1 << 20, t, t + MS // 10, 0, 7, True,
                           i, call, python=AT))  # fmt: skip
        kernels.append(_kernel(t + MS // 10, t + 3 * MS))
        if i % 2 == 1:  # the log: a memset at its own line, then its kernels
            log = (PyFrame("train.py", 60, "train"),)
            calls.append(Call("cudaMemsetAsync_v3020", t + 8 * MS, t + 8 * MS + 10_000, 1, 1,
                              python=log))  # fmt: skip
            kernels.append(_kernel(t + 8 * MS + 10_000, t + 9 * MS + MS // 2))
        elif i < 11:
            seen += [t + 3 * MS + MS // 2 + k * MS for k in range(6)]
    looks = {1: MainSamples(1e-3, tuple(seen), tuple(NEXT for _ in seen))}
    trace = Trace(tuple(copies), tuple(kernels), (), tuple(calls), {}, {}, (), samples=looks)
    f = _found(trace)
    making_odd = 10e-3 - (8e-3 + 10e-6) - 0.1e-3  # from the memset's end to the next copy call
    assert f is not None
    assert f.saving_s == pytest.approx(6 * 7e-3 - 0.1e-3 + 5 * making_odd, rel=0.01)


def test_a_wait_in_every_step_seen_only_in_the_kernels_windows_is_still_the_steady_wait():
    """24 steps of 10 ms, each waiting 7 ms for its batch, with kernels recorded in one window
    over the first fifth: 4 gaps judged there against 24 steps. Scaled to the span they are
    a wait in every step (more workers), not one in every fourth (the loader's restart)."""
    from dataclasses import replace

    starts = list(itertools.accumulate([10 * MS] * 24))
    whole = _fed_loop(starts, AT, NEXT)
    end = starts[5] - MS // 2  # the window holds the first 5 steps' kernels and 4 gaps
    trace = replace(whole, intervals=tuple(k for k in whole.intervals if k.end_ns <= end),
                    processes=({"pid": 1, "kernels": "sampled"},),
                    kernel_windows=((1, 0, end),))  # fmt: skip
    f = _found(trace)
    assert f is not None and f.saving_s is not None
    ((fix, saving),) = f.each_fix
    assert "num_workers" in fix and saving == pytest.approx(f.saving_s)
    assert not f.advice.startswith("make the DataLoader once")
