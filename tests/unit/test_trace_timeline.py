"""Each GPU's timeline: busy time is the union of its activities, idle the rest of the span from
its first activity to its last, the longest gaps kept; a record without usable times is left
out and counted; compare judges the span, so a faster loop shows behind a slow start-up."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from xferscope.run.compare import FASTER
from xferscope.trace.compare import compare_traces
from xferscope.trace.document import TraceResult
from xferscope.trace.reading import read_trace
from xferscope.trace.records import Copy, Interval, Trace
from xferscope.trace.steps import Steps, loops
from xferscope.trace.timeline import timelines

from .trace_loops import _fed_loop, _kernel, loader_loop


def steps(trace) -> Steps | None:
    """The loop of the process with the most GPU work, or None."""
    found = loops(trace)
    return found[0] if found else None


RECORDED = Path(__file__).parent.parent / "data" / "trace" / "torch-loop.jsonl"


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
    assert t.span_s == pytest.approx(41e-3)  # from GPU 0's first work to GPU 1's last


def test_a_recorded_training_loop_has_a_span_inside_its_run():
    trace = read_trace([RECORDED])
    t = timelines(trace)
    (gpu,) = t.gpus
    first = min(c.start_ns for c in trace.copies)
    assert gpu.start_ns <= first and 0 < gpu.busy_s < gpu.span_s < 30
    assert t.left_out == 0


def _result(
    spans: list[float], walls: list[float], steps_s: list[float] | None = None, count: int = 0
) -> TraceResult:
    runs = tuple(
        {"wall_s": w, "span_s": s, "kinds": {}, "findings": {}, "lines": {}}
        | ({"step_s": steps_s[i], "steps": count} if steps_s else {})
        for i, (s, w) in enumerate(zip(spans, walls, strict=True))
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
    assert changes["steady state span"].verdict == FASTER
    assert changes["wall time"].verdict != FASTER


@pytest.mark.parametrize(("after_count", "judged"), [(100, "step time"), (90, None)])
def test_compare_judges_the_step_where_both_ran_the_same_steps(after_count, judged):
    """A loop of 100 steps, 11 ms each before the fix and 8.3 ms after, behind a start-up whose
    GPU work (the model's upload) comes 0.4-1.2 s before the loop: the span's spread hides the
    fix, the step time does not. A trace of other steps (90) has no step time to compare."""
    before = _result([1.9, 1.5, 2.3], [12.0, 12.5, 13.0], [11.0e-3, 11.1e-3, 10.9e-3], 100)
    after = _result([1.6, 2.2, 1.3], [12.4, 11.9, 12.6], [8.3e-3, 8.4e-3, 8.2e-3], after_count)
    changes = {c.figure: c for c in compare_traces(before, after).changes if c.section == "program"}
    assert changes["steady state span"].verdict != FASTER
    if judged:
        assert changes[judged].verdict == FASTER
    else:
        assert "step time" not in changes


def test_idle_is_split_into_launches_blocked_calls_and_time_away_named_at_lines():
    """On GPU 0 of process 1 (main thread 1): a 20 us gap between two kernels is launch
    latency; during a 10 ms gap the main thread waits 4 ms in cudaHostAlloc at train.py:20,
    then is away until the call of a copy at train.py:43 that the GPU starts as the gap ends;
    a calling thread other than the main one is not the host's side."""
    from xferscope.trace.records import Call, PyFrame

    ms, us = 1_000_000, 1_000
    alloc = Call(
        "cudaHostAlloc_v3020", 12 * ms, 16 * ms, 1, 1, (), (PyFrame("train.py", 20, "main"),)
    )
    other = Call("cudaStreamSynchronize_v3020", 11 * ms, 21 * ms, 2, 1)  # another thread
    upload = Call("cudaMemcpyAsync_v3020", 21 * ms + 500 * us, 21 * ms + 600 * us, 1, 1)
    copy = Copy(1, "h2d", "pageable", "device", 64, 22 * ms, 23 * ms, 0, 7, True, 1, upload,
                python=(PyFrame("train.py", 43, "main"),))  # fmt: skip
    trace = Trace(
        (copy,),
        (_kernel(1 * ms, 10 * ms), _kernel(10 * ms + 20 * us, 12 * ms)),
        (),
        (alloc, other, upload),
        {},
        {},
        (),
    )
    (gpu,) = timelines(trace).gpus
    why = {(c.kind, c.function, c.where): (c.seconds, c.gaps) for c in gpu.idle}
    assert why[("launch", "", "")] == (pytest.approx(20e-6), 1)
    assert why[("blocked", "cudaHostAlloc", "train.py:20 (main)")] == (pytest.approx(4e-3), 1)
    # from 16 ms (the call's end) to 21.5 (the upload's call) away, back at its line; in the
    # call 0.1 ms; from its end to 22 ms, when the copy started, the GPU had what it issued
    assert why[("away", "cudaMemcpyAsync", "train.py:43 (main)")] == (pytest.approx(5.9e-3), 1)
    assert why[("blocked", "cudaMemcpyAsync", "train.py:43 (main)")] == (pytest.approx(1e-4), 1)
    assert sum(c.seconds for c in gpu.idle) == pytest.approx(gpu.idle_s)


def test_a_gpu_that_waits_for_each_batch_is_a_finding_at_the_batch_copy():
    """Six steps of 10 ms: a 3 ms kernel, then 7 ms away until the next batch's copy call at
    train.py:43: the GPU waits 70% of a step for its input. Where the looks found the main
    thread in a DataLoader's next, the advice is the DataLoader's; where they found it in the
    program's own code, or nothing was seen, it names no DataLoader."""
    from xferscope.trace.findings import Context, input_starved
    from xferscope.trace.records import PyFrame

    ms = 1_000_000
    torch_to = PyFrame("/usr/lib/python3/site-packages/torch/utils/data/_utils.py", 9, "to")
    at = (torch_to, PyFrame("train.py", 43, "train"))
    starts = [(i + 1) * 10 * ms for i in range(6)]
    next_batch = (
        PyFrame(
            "/v/lib/python3.12/site-packages/torch/utils/data/dataloader.py",
            7,
            "_BaseDataLoaderIter.__next__",
        ),
        PyFrame("train.py", 42, "train"),
    )
    trace = _fed_loop(starts, at, next_batch)  # fmt: skip
    f = input_starved.find(Context(trace, None))
    assert f is not None and f.places[0].where == "train.py:43 (train)"
    # 5 gaps of 7 ms between steps (the first copy opens the span), 0.05 ms of each in the
    # call: the host away 9.95 ms a step making the batch, more than the GPU's idle, so made
    # ahead the GPU would not wait at all (starving.Starved.idle_s)
    assert f.saving_s == pytest.approx(5 * 7e-3)
    assert "num_workers" in f.advice and "persistent_workers=True" in f.advice
    own = (PyFrame("train.py", 30, "make_batch"), PyFrame("train.py", 42, "train"))
    for looks in ((), own):
        f = input_starved.find(Context(_fed_loop(starts, at, looks), None))
        assert f is not None and f.saving_s == pytest.approx(5 * 7e-3)
        assert not any(w in f.advice for w in ("DataLoader", "num_workers", "persistent"))
        assert "ahead of the step" in f.advice
    assert "train.py:30 (make_batch) ahead" in f.advice and "make_batch (train.py)" not in f.advice
    trace = _fed_loop(starts, at)
    loop = steps(trace)
    assert loop is not None and loop.count == 5 and loop.step_s == pytest.approx(10e-3)
    assert loop.idle_share == pytest.approx(0.7, abs=0.02)
    assert loop.copy_share == pytest.approx(0.01)  # each batch's 0.1 ms copy, no kernel beside
    assert loop.long_steps == 0


def test_a_warm_up_step_is_left_out_of_the_steps_shares():
    """Ten steps of 10 ms, 3 ms of each computing, after a first step of 200 ms that waits for
    compilation (idle but for its 3 ms): that warm-up is the start-up's, and the steps are the
    ten, 70% idle."""
    from xferscope.trace.records import PyFrame

    ms = 1_000_000
    at = (PyFrame("train.py", 43, "train"),)
    loop = steps(_fed_loop(list(itertools.accumulate((200 if i == 1 else 10) * ms
                                                     for i in range(12))), at))  # fmt: skip
    assert loop is not None and loop.count == 10 and loop.long_steps == 0 and loop.warm_up == 1
    assert loop.idle_share == pytest.approx(0.7, abs=0.001)
    assert loop.step_s == pytest.approx(10e-3)
    assert loop.steady_step_s == pytest.approx(10e-3)  # what the loop takes a step, said beside
    from xferscope.report.trace_tables import steady_text

    assert steady_text({"long_steps": 1, "steady_step_s": loop.steady_step_s}) == (
        " (10.00 ms the steady ones)"
    )


def test_long_steps_that_recur_are_the_loops_own():
    """A DataLoader of four workers: three steps of 10 ms find a batch ready, the fourth waits
    60 ms; 3 ms of each computes. One step in four is long: counted, and kept in the idle share
    (set apart, the share would be the quick steps' 70%)."""
    from xferscope.trace.records import PyFrame

    ms = 1_000_000
    at = (PyFrame("train.py", 43, "train"),)
    lengths = [60 if i % 4 == 3 else 10 for i in range(16)]
    loop = steps(_fed_loop(list(itertools.accumulate(x * ms for x in lengths)), at))
    assert loop is not None and loop.count == 15 and loop.long_steps == 4
    assert loop.steady_step_s == pytest.approx(10e-3)
    judged = sum(lengths[1:])
    assert loop.idle_share == pytest.approx(1 - 15 * 3 / judged, abs=0.001)


def test_a_burst_of_calls_at_start_up_marks_no_steps():
    """A model uploaded in 100 copies within a millisecond at one line, then 6 steps whose two
    batch tensors are copied 20 us apart at another, each step computing 5 ms: the steps are
    the second line's, one mark per batch."""
    from xferscope.trace.records import Call, PyFrame

    ms, us = 1_000_000, 1_000
    copies = []

    def copy(t: int, line: int) -> Copy:
        call = Call("cudaMemcpyAsync_v3020", t, t + us, 1, 1)
        return Copy(1, "h2d", "pinned", "device", 64, t + 2 * us, t + 3 * us, 0, 7, True, 0, call,
                    python=(PyFrame("train.py", line, "train"),))  # fmt: skip

    copies += [copy(1 * ms + i * 5 * us, 20) for i in range(100)]
    kernels = []
    for i in range(6):
        t = (10 + 10 * i) * ms
        copies += [copy(t, 43), copy(t + 20 * us, 43)]
        kernels.append(_kernel(t + 30 * us, t + 5 * ms))
    loop = steps(Trace(tuple(copies), tuple(kernels), (), (), {}, {}, ()))
    assert loop is not None and loop.where == "train.py:43 (train)"
    assert loop.count == 5 and loop.step_s == pytest.approx(10e-3)


@pytest.mark.parametrize(
    ("kernel_ms", "own_us", "saving_us"), [(None, 0, 155.0), (5.0, 0, 0.0), (None, 3, 128.0)]
)
def test_small_copies_save_the_hosts_calls_where_the_gpu_waits_for_them(
    kernel_ms, own_us, saving_us
):
    """20 pinned uploads of 4 KiB issued 10 us apart (the host's own time between calls: a
    framework's overhead per copy): while the GPU waits, one copy would save the host the run
    less one call, 182 us, at most the GPU's idle in it (195 us less its 40 us of copies), more
    than the copies' own GPU time would save; a kernel running all the while hides the calls,
    so the saving is the GPU side's. Where the tracing spent 3 us of each 10 recording the
    calls, the program untraced spends 7: the saving is 19 spacings of 7 us less one, and the
    last call's 2 us, 128 us."""
    from xferscope.trace.findings import Context, small
    from xferscope.trace.records import Call
    from xferscope.trace.reference import Reference

    us = 1_000
    reference = Reference("test", {("h2d", "pinned"): ((4096, 2e-6), (1 << 20, 3e-5))})
    copies = []
    for i in range(20):
        t = 1_000 * us + i * 10 * us
        call = Call("cudaMemcpyAsync_v3020", t, t + 2 * us, 1, 1, own_ns=own_us * us)
        copies.append(Copy(1, "h2d", "pinned", "device", 4096, t + 3 * us, t + 5 * us, 0, 7,
                           True, i, call))  # fmt: skip
    kernels = () if kernel_ms is None else (_kernel(900 * us, 900 * us + int(kernel_ms * 1e6)),)
    trace = Trace(tuple(copies), kernels, (), tuple(c.call for c in copies), {}, {}, ())
    f = small.find(Context(trace, reference))
    assert f is not None
    gpu_side = 20 * 2e-6 - reference.seconds("h2d", "pinned", 20 * 4096)
    assert f.saving_s == pytest.approx(max(saving_us * 1e-6, gpu_side), abs=1e-6)


@pytest.mark.parametrize(("per_step", "step_us", "call_us"), [(64, 600, 5), (1, 2500, 20)])
def test_steps_of_a_fast_loop_are_told_apart(per_step, step_us, call_us):
    """Seven steps 0.6 ms apart, each 64 uploads 5 us apart at one line (the gap between steps,
    0.28 ms, is far longer than the line's usual gap but under a millisecond), and a loop of
    one wait 2.5 ms apart: six steps each."""
    from xferscope.trace.records import Call, PyFrame

    us = 1_000
    at = (PyFrame("train.py", 29, "upload"),)
    copies = []
    for step in range(7):
        for i in range(per_step):
            t = 1_000 * us + step * step_us * us + i * call_us * us
            call = Call("cudaMemcpyAsync_v3020", t, t + 2 * us, 1, 1)
            copies.append(Copy(1, "h2d", "pinned", "device", 4096, t + 3 * us, t + 4 * us, 0, 7,
                               True, 0, call, python=at))  # fmt: skip
    loop = steps(Trace(tuple(copies), (), (), (), {}, {}, ()))
    assert loop is not None and loop.count == 6
    assert loop.step_s == pytest.approx(step_us * 1e-6)


def test_the_rank_the_others_waited_for_in_nccl_is_named():
    """Two ranks, one GPU each, four all-reduces: rank 1 arrives 3 ms late each time, so GPU
    0's NCCL kernels run 3 ms longer; GPU 1 is the straggler. Alone, or within a millisecond of
    each other, no rank is named."""
    from xferscope.trace.ranks import ranks
    from xferscope.trace.records import Interval

    ms = 1_000_000
    kernels = []
    for i in range(4):
        t = (10 + 20 * i) * ms
        kernels.append(
            Interval(100, "kernel", "ncclDevKernel_AllReduce_Sum_f32", t, t + 4 * ms, 0, 9)
        )
        kernels.append(Interval(101, "kernel", "ncclDevKernel_AllReduce_Sum_f32", t + 3 * ms,
                                t + 4 * ms, 1, 9))  # fmt: skip
        kernels.append(_kernel(t - 5 * ms, t))  # the step's own work, not NCCL's
    trace = Trace((), tuple(kernels), (), (), {}, {}, ())
    job, straggler = ranks(trace, timelines(trace))
    assert [(r.device, r.pid) for r in job] == [(0, 100), (1, 101)]
    assert job[0].nccl_s == pytest.approx(16e-3) and job[0].waited_s == pytest.approx(12e-3)
    assert straggler is not None and (straggler.device, straggler.pid) == (1, 101)
    # why it came late: its GPU sat idle 19 ms between its collectives, with no call recorded
    assert straggler.cause is not None and straggler.cause.kind == "away"
    assert straggler.cause.seconds == pytest.approx(3 * 19e-3)
    alone = Trace((), tuple(k for k in kernels if k.device == 0), (), (), {}, {}, ())
    assert ranks(alone, timelines(alone))[1] is None


def test_with_kernels_in_windows_idle_is_judged_inside_them():
    """A process whose kernels were recorded in two 10 ms windows of a 100 ms span: outside
    them its GPU shows copies only, which is not idle time; inside, a 4 ms gap in each is.
    The idle share is of the 20 ms judged, and scales to the span by 100/20."""
    ms = 1_000_000
    work = [_copy(1 * ms, 2 * ms), _copy(100 * ms, 101 * ms)]
    work += [_kernel(10 * ms, 14 * ms), _kernel(18 * ms, 20 * ms)]  # window 10-20: 4 ms idle
    work += [_kernel(50 * ms, 53 * ms), _kernel(57 * ms, 60 * ms)]  # window 50-60: 4 ms idle
    trace = Trace(
        tuple(c for c in work if isinstance(c, Copy)),
        tuple(k for k in work if not isinstance(k, Copy)),
        (), (), {}, {}, ({"pid": 1, "kernels": "sampled"},),
        kernel_windows=((1, 10 * ms, 20 * ms), (1, 50 * ms, 60 * ms)),
    )  # fmt: skip
    (gpu,) = timelines(trace).gpus
    assert gpu.span_s == pytest.approx(0.1) and gpu.judged_s == pytest.approx(0.02)
    assert gpu.idle_s == pytest.approx(8e-3) and gpu.idle_share == pytest.approx(0.4)
    assert gpu.scale == pytest.approx(5.0)
    assert sorted(gpu.gaps) == [(14 * ms, 18 * ms), (53 * ms, 57 * ms)]
    assert sum(c.seconds for c in gpu.idle) == pytest.approx(8e-3)
    none = Trace(trace.copies, (), (), (), {}, {}, ({"pid": 1, "kernels": "none"},))
    (blind,) = timelines(none).gpus
    assert blind.judged_s == 0 and blind.idle_share is None and blind.scale is None


def test_epoch_starts_are_priced_apart_from_the_steady_wait():
    """Twelve steps of 10 ms, 7 ms of each waiting for the batch at train.py:43, and at two
    epoch starts the wait is 57 ms (the workers start again): persistent workers save the 50 ms
    over a usual wait at each, more workers the rest."""
    from xferscope.trace.findings import Context, input_starved

    trace = loader_loop(12, 10, 60, (4, 8))
    f = input_starved.find(Context(trace, None))
    # all the GPU's idle: the host away longer making each batch than the GPU waited
    assert f is not None and f.saving_s == pytest.approx(9 * 7e-3 + 2 * 57e-3)
    (restart, long_s), (steady, steady_s) = f.each_fix
    assert "persistent_workers=True" in restart and long_s == pytest.approx(2 * 50e-3)
    assert "num_workers" in steady and steady_s == pytest.approx(11 * 7e-3)
    from xferscope.trace.analyze import analyze
    from xferscope.trace.document import findings_of

    said = next(x for x in findings_of(analyze(trace, 1.0, None), 0.25) if "input" in x.message)
    assert "persistent_workers=True`: 100 ms" in said.message  # in the report and the JSON


def test_a_pageable_copy_is_priced_by_its_time_beyond_the_kernels_before_it():
    """A blocking pageable copy whose call starts while the step before still computes: its
    call takes 8 ms, the first 5 of them waiting for a kernel; pinning saves what the copy
    itself took beyond a pinned copy of its size (3 - 0.5 ms), not the 5 ms of kernel, and
    a copy as fast as this machine's pageable curve would save 3 - 1 ms."""
    from xferscope.trace.findings import Context, pageable, slow
    from xferscope.trace.records import Call
    from xferscope.trace.reference import Reference

    ms = 1_000_000
    reference = Reference(
        "test",
        {
            ("h2d", "pinned"): ((1 << 20, 0.5e-3), (1 << 21, 1e-3)),
            ("h2d", "pageable"): ((1 << 20, 1e-3), (1 << 21, 2e-3)),
        },
    )
    copies, kernels = [], []
    for i in range(4):
        t = 10 * ms * (i + 1)
        call = Call("cudaMemcpy_v3020", t, t + 8 * ms, 1, 1)
        copies.append(Copy(1, "h2d", "pageable", "device", 1 << 20, t + 5 * ms, t + 8 * ms, 0,
                           7, False, i, call))  # fmt: skip
        kernels.append(_kernel(t - 2 * ms, t + 5 * ms))
    trace = Trace(tuple(copies), tuple(kernels), (), tuple(c.call for c in copies), {}, {}, ())
    f = pageable.find(Context(trace, reference))
    assert f is not None and f.cost_s == pytest.approx(4 * 8e-3)
    assert f.saving_s == pytest.approx(4 * 2.5e-3)
    # far below the pageable curve by its call's 8 ms, but slower by only 3 - 1 ms of its own
    found = slow.find(Context(trace, reference))
    assert found is not None and found.saving_s == pytest.approx(4 * 2e-3)
    alone = Trace(tuple(copies), (), (), tuple(c.call for c in copies), {}, {}, ())
    blind = pageable.find(Context(alone, reference))  # no kernel recorded: the call's time
    assert blind is not None and blind.saving_s == pytest.approx(4 * 7.5e-3)


def test_a_start_up_wait_does_not_pass_for_the_step_after_step_cause():
    """Two ranks (processes 1 and 2, a GPU each), as recorded from a DDP job on two H100s: at
    start-up each GPU waits 5 s until DDP's set-up copies at ddp.py:43; then 30 steps, rank 2's
    input 20 ms slower, so GPU 1 waits each step until the batch copy at ddp.py:60 and GPU 0
    waits in NCCL. The straggler's cause and its finding name ddp.py:60, and the steps are one
    rank's 30, not both ranks' marks together."""
    from xferscope.trace.findings import Context, input_starved
    from xferscope.trace.findings import straggler as straggler_finding
    from xferscope.trace.ranks import ranks
    from xferscope.trace.records import Call, PyFrame

    ms = 1_000_000
    copies, kernels, calls = [], [], []
    set_up = (PyFrame("ddp.py", 43, "<module>"),)
    for pid, device in ((1, 0), (2, 1)):
        for i, t in enumerate((1 * ms, 5001 * ms, 5002 * ms)):  # start-up: set-up copies
            call = Call("cudaMemcpyAsync_v3020", t - 50_000, t, pid, pid)
            calls.append(call)
            copies.append(Copy(pid, "h2d", "pinned", "device", 8, t, t + 10_000, device, 7,
                               True, i, call, python=set_up))  # fmt: skip
        for i in range(30):
            t = 5010 * ms + i * 30 * ms
            arrive = t + (22 * ms if pid == 2 else 2 * ms)  # the batch copy's call
            call = Call("cudaMemcpyAsync_v3020", arrive - 50_000, arrive, pid, pid)
            calls.append(call)
            copies.append(Copy(pid, "h2d", "pinned", "device", 1 << 24, arrive, arrive + ms,
                               device, 7, True, 10 + i, call,
                               python=(PyFrame("ddp.py", 60, "<module>"),)))  # fmt: skip
            kernels.append(Interval(pid, "kernel", "gemm", arrive + ms, arrive + 5 * ms, device, 7))
            nccl = Interval(pid, "kernel", "ncclDevKernel_AllReduce", arrive + 5 * ms,
                            t + 29 * ms, device, 9)  # fmt: skip
            kernels.append(nccl)
    trace = Trace(tuple(copies), tuple(kernels), (), tuple(calls), {}, {}, ())
    gpus = timelines(trace)
    _, straggler = ranks(trace, gpus)
    assert straggler is not None and straggler.device == 1
    assert straggler.cause is not None and straggler.cause.where == "ddp.py:60 (<module>)"
    # the straggler's idle is the straggler's finding, not an input finding of its GPU
    assert input_starved.find(Context(trace, None)) is None
    f = straggler_finding.find(Context(trace, None))
    assert f is not None and f.places[0].where == "ddp.py:60 (<module>)"
    assert f.title.startswith("GPU 1 made the other ranks wait")
    assert f.saving_s == pytest.approx(29 * 20e-3, rel=0.05)  # GPU 0 waits 20 ms a step
    assert "DataLoader" not in f.advice and "late rank's work at ddp.py:60" in f.advice
    loop = steps(trace)
    assert loop is not None and loop.count == 29 and loop.step_s == pytest.approx(30e-3)


def test_the_input_share_is_the_idle_at_the_uploads_and_not_the_steps_own():
    """Ten steps 5 ms apart, each an upload (its call 0.1 ms before the copy, the copy 0.1 ms)
    and 1.4 ms of kernels, then 1 ms blocked in cudaStreamSynchronize with the GPU idle, then
    0.5 ms of kernels: idle 3 ms a step, of which the 2 ms until the next upload is the
    input's and the wait's 1 ms the step's own (it stays with the data on the GPU); the input
    share adds the copy's 0.1 ms, which ran with no kernel. (The first step starts at its
    upload's call, 0.1 ms before the GPU's first work: no gap.)"""
    from xferscope.trace.records import Call, PyFrame

    us = 1_000
    copies, kernels, calls = [], [], []
    for i in range(10):
        t = 1_000_000 * us + i * 5_000 * us
        call = Call("cudaMemcpyAsync_v3020", t - 100 * us, t - 50 * us, 1, 1)
        calls += [call, Call("cudaStreamSynchronize_v3020", t + 1_400 * us, t + 2_450 * us, 1, 1)]
        copies.append(Copy(1, "h2d", "pinned", "device", 1 << 20, t, t + 100 * us, 0, 7, True,
                           i, call, python=(PyFrame("train.py", 41, "train"),)))  # fmt: skip
        kernels += [_kernel(t + 100 * us, t + 1_500 * us), _kernel(t + 2_500 * us, t + 3_000 * us)]
    loop = steps(Trace(tuple(copies), tuple(kernels), (), tuple(calls), {}, {}, ()))
    assert loop is not None and loop.count == 9
    assert loop.idle_share == pytest.approx(0.6)
    assert loop.copy_share == pytest.approx(0.02)
    assert loop.input_share == pytest.approx((9 * 2.0 - 0.1) / 45 + 0.02)


@pytest.mark.parametrize("gap_us", [8, 80])
def test_the_gaps_between_many_small_uploads_are_the_inputs(gap_us):
    """Steps of 64 uploads (each call 2 us, its copy 2 us after it starts, the next call
    `gap_us` after the copy's end), then a 1 ms kernel: the GPU's gaps between the uploads
    are the input's however short (the host was issuing the next upload), but not the 1 us
    before the kernel, in which no upload's call lies."""
    from xferscope.trace.records import Call, PyFrame

    us = 1_000
    copies, kernels, calls = [], [], []
    t = 1_000_000 * us
    for step in range(8):
        for i in range(64):
            call = Call("cudaMemcpyAsync_v3020", t, t + 2 * us, 1, 1)
            calls.append(call)
            copies.append(Copy(1, "h2d", "pinned", "device", 4096, t + 2 * us, t + 4 * us, 0,
                               7, True, step * 64 + i, call,
                               python=(PyFrame("train.py", 41, "train"),)))  # fmt: skip
            t += (4 + gap_us) * us
        kernels.append(_kernel(t - gap_us * us + us, t - gap_us * us + 1_001 * us))
        t += 1_001 * us
    loop = steps(Trace(tuple(copies), tuple(kernels), (), tuple(calls), {}, {}, ()))
    assert loop is not None and loop.count == 7
    assert loop.input_share == pytest.approx(1 - 1_000 / ((4 + gap_us) * 64 + 1_001), abs=0.002)


def _moved(direction: str, nbytes: int, start: int, call, seq: int, line: int) -> Copy:
    """A copy of 0.1 ms from `start` (ns), up from pinned or down to pageable memory."""
    from xferscope.trace.records import PyFrame

    host = "pinned" if direction == "h2d" else "pageable"
    src, dst = (host, "device") if direction == "h2d" else ("device", host)
    frame = (PyFrame("train.py", line, "train"),)
    return Copy(
        1, direction, src, dst, nbytes, start, start + 100_000, 0, 7, True, seq, call, python=frame
    )


@pytest.mark.parametrize(("nbytes", "data"), [(4, False), (4 << 20, True)])
def test_a_download_of_data_is_the_steps_data_waiting_and_a_value_read_is_not(nbytes, data):
    """The input share's steps with the wait a download to pageable memory (its call 1.05 ms,
    its copy 0.1 ms, then 0.9 ms of the GPU idle until the last kernels): a 4 MiB frame read
    back each step is data the step moves, which its resident form does not (its 0.9 ms is
    the data's); a 4-byte `.item()` reads a value, a wait of the step's own."""
    from xferscope.trace.records import Call

    us = 1_000
    copies, kernels, calls = [], [], []
    for i in range(10):
        t = 1_000_000 * us + i * 5_000 * us
        up = Call("cudaMemcpyAsync_v3020", t - 100 * us, t - 50 * us, 1, 1)
        down = Call("cudaMemcpyAsync_v3020", t + 1_400 * us, t + 2_450 * us, 1, 1)
        calls += [up, down]
        copies.append(_moved("h2d", 1 << 20, t, up, 2 * i, 41))
        copies.append(_moved("d2h", nbytes, t + 1_500 * us, down, 2 * i + 1, 45))
        kernels += [_kernel(t + 100 * us, t + 1_500 * us), _kernel(t + 2_500 * us, t + 3_000 * us)]
    loop = steps(Trace(tuple(copies), tuple(kernels), (), tuple(calls), {}, {}, ()))
    assert loop is not None and loop.count == 9 and loop.copy_share == pytest.approx(0.04)
    value = (9 * 2.0 - 0.1) / 45 + 0.04  # the idle until each upload, and the copies alone
    assert loop.input_share == pytest.approx(value + (9 * 0.9 / 45 if data else 0.0))
