"""The trace's phases (issue 67): which line marks a loop's steps on loops it was not built
around, the start-up kept apart from the steady state every finding is judged on, the idle
after a wait kept the wait's, and compare's "paid" only where a finding's cause is gone."""

from __future__ import annotations

import dataclasses
import itertools
import math
import random

import pytest

from xferscope.trace.analyze import analyze
from xferscope.trace.compare import FIX_CUT, FIX_GONE, FIX_SAME, _fixes, fix_text
from xferscope.trace.findings import Context, input_starved, pageable, synchronizing
from xferscope.trace.findings.base import PIN_LOADER
from xferscope.trace.loops import Candidate, bursts, candidates, choose
from xferscope.trace.records import Call, Copy, Interval, MainSamples, PyFrame, Range, Trace
from xferscope.trace.steps import loops
from xferscope.trace.timeline import timelines

MS, US = 1_000_000, 1_000
IMPORT = PyFrame("<frozen importlib._bootstrap>", 1, "_find_and_load")


def _upload(t: int, line: int, pid: int = 1, device: int = 0, nbytes: int = 1 << 20) -> Copy:
    call = Call("cudaMemcpyAsync_v3020", t - 50 * US, t, pid, pid)
    return Copy(pid, "h2d", "pinned", "device", nbytes, t, t + 100 * US, device, 7, True, 0,
                call, python=(PyFrame("train.py", line, "main"),))  # fmt: skip


def _kernel(a: int, b: int, pid: int = 1, device: int = 0) -> Interval:
    return Interval(pid, "kernel", "gemm", a, b, device, 7)


def _sync(a: int, b: int, line: int, pid: int = 1) -> Call:
    return Call(
        "cudaStreamSynchronize_v3020", a, b, pid, pid, (), (PyFrame("train.py", line, "main"),)
    )


def _job(steps: int = 40, startup_ms: int = 2000, item: bool = False, looks: tuple = ()) -> Trace:
    """A program that uploads its model in 50 copies at train.py:20, imports modules for
    `startup_ms` with the GPU idle (the looks inside an import), then runs `steps` steps of
    10 ms: an upload at train.py:43, 6 ms of kernels, then (with `item`) a wait at train.py:47
    for the GPU and 3 ms of the host's own work (the looks at `looks`) before the next upload."""
    copies = [_upload(1 * MS + i * 200 * US, 20) for i in range(50)]
    kernels = []
    calls = [c.call for c in copies if c.call]
    seen: list[tuple[int, tuple]] = [(t, (IMPORT, PyFrame("train.py", 25, "<module>")))
                                     for t in range(12 * MS, startup_ms * MS, 10 * MS)]  # fmt: skip
    start = (startup_ms + 20) * MS
    for i in range(steps):
        t = start + i * 10 * MS
        copies.append(_upload(t, 43))
        calls.append(copies[-1].call)
        kernels.append(_kernel(t + 100 * US, t + 6 * MS))
        if item:
            calls.append(_sync(t + 1 * MS, t + 6 * MS + 10 * US, 47))
        if looks:
            seen += [(t + 7 * MS, looks), (t + 8 * MS, looks)]
    samples = {1: MainSamples(0.01, tuple(t for t, _ in seen), tuple(s for _, s in seen))}
    processes = ({"pid": 1, "start_ns": 1 * MS // 2, "kernels": "all"},)
    return Trace(tuple(copies), tuple(kernels), (), tuple(sorted(calls, key=lambda c: c.start_ns)),
                 {}, {}, processes, samples=samples)  # fmt: skip


def test_the_steps_are_the_loops_and_the_start_up_is_apart():
    """The model's 50 uploads and 2 s of imports come before 40 steps of 10 ms: the steps are
    the batch upload's, the steady state their span, and the start-up says how long it took,
    that the GPU sat idle while the host imported, and its uploads; no finding counts any of
    it: the input finding is the steps' 4 ms waits alone, where the looks found the host."""
    trace = _job(looks=(PyFrame("train.py", 43, "main"),))
    a = analyze(trace, 3.0, None, started_ns=0)
    assert a.loop is not None and a.loop.where == "train.py:43 (main)" and a.loop.count == 39
    assert a.steady_s == pytest.approx(0.39)
    (s,) = a.startup
    assert s.seconds == pytest.approx(2.02, abs=1e-3) and s.uploads == 50
    assert s.idle_s > 1.9 and s.importing == s.looks > 150
    first = a.headline
    assert first is not None and first.code == "input_starved"
    assert first.cost_s == pytest.approx(38 * 3.95e-3, rel=0.02)  # none of the 2 s idle
    assert "DataLoader" not in first.advice and "train.py:43" in first.advice


def test_an_own_input_is_named_only_where_the_looks_found_the_host_there():
    """The same steps' 4 ms waits before each upload, with no loader: looked at every 10 ms
    and none of the looks in them (a launch-bound step's own host work before its first copy
    can look alike), they are no input's; with no looks at all (a CUDA C++ program), they
    are, at the copy's line."""
    unseen = analyze(_job(), 3.0, None, started_ns=0)
    assert "input_starved" not in {f.code for f in unseen.findings}
    blind = analyze(dataclasses.replace(_job(), samples={}), 3.0, None, started_ns=0)
    first = blind.headline
    assert first is not None and first.code == "input_starved"
    assert first.cost_s == pytest.approx(38 * 3.95e-3, rel=0.02)


def test_a_line_run_once_an_epoch_or_at_start_up_does_not_mark_the_steps():
    """Candidates of one process: a start-up line spanning none of the GPU work, an evaluation
    line once an epoch, the batch copy and a `.item()` once a step: the loop's period is the
    count two lines share, and of them the upload marks the steps; the others are runners-up."""
    found = [
        Candidate(1, "train.py:20", "upload", tuple(range(0, 123)), covers=0.01),
        Candidate(1, "train.py:90", "wait", tuple(range(0, 6)), covers=0.95),
        Candidate(1, "train.py:47", "wait", tuple(range(0, 301)), covers=0.97),
        Candidate(1, "train.py:43", "upload", tuple(range(0, 300)), covers=0.97),
    ]
    chosen, runners_up = choose(found)
    assert chosen is not None and chosen.where == "train.py:43"
    assert [r.where for r in runners_up][:2] == ["train.py:47", "train.py:90"]
    assert choose([found[0]]) == (None, [])  # a start-up's line alone: no loop


def test_the_idle_after_a_wait_is_the_waits_and_not_the_inputs():
    """Each step waits for the GPU at train.py:47 (`.item()`), then does 3 ms of its own work
    (logging) before uploading the next batch: the GPU's idle is after that wait, the waits'
    finding prices it, and no input finding claims it; the same idle seen waiting in a
    DataLoader's next is the input's."""
    logging = (PyFrame("/v/lib/python3.12/logging/__init__.py", 1, "Logger.info"),
               PyFrame("train.py", 48, "main"))  # fmt: skip
    trace = _job(item=True, looks=logging)
    (gpu,) = timelines(trace).gpus
    after = [c for c in gpu.idle if c.kind == "after_wait"]
    assert after and after[0].waited_at.startswith("cudaStreamSynchronize at train.py:47")
    assert after[0].where == "train.py:43 (main)"
    steady = analyze(trace, 3.0, None).view
    assert steady is not None
    assert input_starved.find(Context(steady, None)) is None
    waits = synchronizing.find(Context(steady, None))
    assert waits is not None and waits.saving_s == pytest.approx(39 * 4e-3, rel=0.05)
    loader = (PyFrame("/v/site-packages/torch/utils/data/dataloader.py", 1, "__next__"),
              PyFrame("train.py", 42, "main"))  # fmt: skip
    fed_analysis = analyze(_job(item=True, looks=loader), 3.0, None)
    fed = fed_analysis.view
    assert fed is not None
    f = input_starved.find(Context(fed, None))
    assert f is not None and "num_workers" in f.advice
    # the steps' share waiting for input says the same: the loader's, not the logging's
    logged = analyze(trace, 3.0, None).loop
    assert logged is not None and logged.input_share is not None and logged.input_share < 0.05
    assert fed_analysis.loop is not None and fed_analysis.loop.input_share is not None
    assert fed_analysis.loop.input_share > 0.3


def test_a_job_of_two_ranks_finds_each_ranks_steps():
    """Two processes, a GPU each, 20 steps of 10 ms after their own start-ups: a loop each,
    the one with the most GPU work first."""
    copies, kernels = [], []
    for pid, device, work in ((7, 0, 5), (8, 1, 8)):
        for i in range(21):
            t = (500 + 10 * i) * MS
            copies.append(_upload(t, 60, pid, device))
            kernels.append(_kernel(t + 100 * US, t + work * MS, pid, device))
    calls = tuple(c.call for c in copies if c.call)
    trace = Trace(tuple(copies), tuple(kernels), (), calls, {}, {}, ())
    found = loops(trace)
    assert [s.pid for s in found] == [8, 7] and all(s.count == 20 for s in found)


def _run(step_s: float, findings: dict[str, float], saving: float = 0.1) -> dict:
    return {"steps": 100, "step_s": step_s, "span_s": step_s * 100, "wall_s": 5.0,
            "findings": {k: {"title": k, "cost_s": v, "saving_s": saving}
                         for k, v in findings.items()}}  # fmt: skip


@pytest.mark.parametrize(
    ("after", "status", "paid"),
    [
        ({}, FIX_GONE, 0.8),  # gone: the steps saved 0.08 s of the 0.1 predicted
        ({"synchronizations": 0.005}, FIX_GONE, 0.8),  # under a tenth of its cost: gone
        ({"synchronizations": 0.05}, FIX_CUT, None),
        ({"synchronizations": 0.1}, FIX_SAME, None),
    ],
)
def test_compare_says_paid_only_where_the_cause_is_gone(after, status, paid):
    before = [_run(10e-3, {"synchronizations": 0.1}) for _ in range(3)]
    runs_b = [_run(9.2e-3, after) for _ in range(3)]
    (fix,) = _fixes(before, runs_b)
    assert fix.status == status
    if paid is None:
        assert fix.paid is None and fix.saved_s is None
    else:
        assert fix.saved_s == pytest.approx(0.08) and fix.paid == pytest.approx(paid)


def test_the_steps_of_a_warm_up_free_loop_are_all_steady():
    trace = _job(steps=12, startup_ms=100)
    (loop,) = loops(trace)
    gaps = [b - a for a, b in itertools.pairwise(c.call.start_ns for c in trace.copies[50:])]
    assert loop.count == 11 and loop.step_s == pytest.approx(sum(gaps) / len(gaps) * 1e-9)


def test_nvtx_ranges_are_read_and_mark_the_steps(tmp_path):
    """The injection library's NVTX records (a range's start with its name, its end by id; a
    mark with none) read back; a range pushed once a step marks the steps before any line,
    and `--region` may name it."""
    import json

    from xferscope.trace.reading import read_trace

    lines = [{"t": "start", "pid": 5, "ts": 1}]
    for i in range(12):
        a = (100 + 10 * i) * MS
        lines += [{"t": "nvtx", "id": i + 1, "a": a, "n": "train_step", "dom": "", "tid": 5,
                   "i": 0}, {"t": "nvtx", "id": i + 1, "b": a + 9 * MS}]  # fmt: skip
    lines.append({"t": "nvtx", "id": 99, "a": 5 * MS, "n": "loaded", "dom": "app", "tid": 5,
                  "i": 1})  # fmt: skip
    path = tmp_path / "trace-5.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in lines))
    ranges = read_trace([path]).ranges
    assert len(ranges) == 13 and ranges[0].name == "loaded" and ranges[0].end_ns == 5 * MS
    assert ranges[1].name == "train_step" and ranges[1].end_ns - ranges[1].start_ns == 9 * MS
    trace = _job(steps=12, startup_ms=50)
    shifted = tuple(
        dataclasses.replace(r, pid=1, start_ns=r.start_ns - 30 * MS, end_ns=r.end_ns - 30 * MS)
        for r in ranges
    )
    trace = dataclasses.replace(trace, ranges=shifted)
    (loop,) = loops(trace)
    assert loop.where == "NVTX range train_step" and loop.kind == "nvtx" and loop.count == 11
    assert any(r.where == "train.py:43 (main)" for r in loop.runners_up)
    (named,) = loops(trace, "train_step")
    assert named.where == "NVTX range train_step"


def _calls(step_ns: int, inside_ns: tuple[int, ...], steps: int, jitter: int = 0):
    """A line's (start, end) calls: each step its calls `inside_ns` apart, then the next step
    `step_ns` later; each call 5 us long, the gaps jittered by up to `jitter` ns."""
    spans, t = [], 0
    for i in range(steps):
        for j, gap in enumerate((0, *inside_ns)):
            t += gap + (i * 7919 + j * 104729) % (jitter + 1)
            spans.append((t, t + 5_000))
            t += 5_000
        t += step_ns
    return spans


@pytest.mark.parametrize(
    ("step_ns", "inside_ns"),
    [
        (10_000_000, (1_000, 60_000, 5_000)),  # two pageable copies and their waits, 10 ms steps
        (11_000_000, (300_000,)),  # a batch's two tensors 0.3 ms apart
        (500_000, ()),  # one call a step, steps of 0.5 ms
        (2_000_000, (40_000, 40_000, 40_000)),  # four tensors a step
    ],
)
def test_a_steps_calls_of_one_line_make_one_mark(step_ns, inside_ns):

    spans = _calls(step_ns, inside_ns, 50, jitter=20_000)
    assert len(bursts(spans)) == 50


def test_a_burst_whose_inner_gaps_spread_wide_is_still_one_mark():
    """A batch's two pinned copies usually 11 us apart, at times 0.7 ms (a loader's thread held
    the GIL), steps of 6-24 ms and an epoch's end of 0.2 s: 120 marks, not one per copy."""
    rng = random.Random(3)
    spans, t = [], 0
    for step in range(120):
        inner = 11_000 if rng.random() < 0.6 else int(math.exp(rng.uniform(9.3, 13.5)))
        spans += [(t, t + 4_000), (t + 4_000 + inner, t + 8_000 + inner)]
        t += 8_000 + inner + rng.randint(6_000_000, 24_000_000)
        if step % 12 == 11:
            t += 200_000_000
    assert len(bursts(spans)) == 120


def _jax_job(reads: int, others: int) -> Trace:
    """A JAX loop of 40 steps of 10 ms: XLA's range around each run of the jitted step, 6 ms
    of kernels, and no CUDA call of the main thread; in each step's 4 ms idle `reads` looks in
    jax.Array._value and `others` at the program's bookkeeping, and 2 reading looks while
    the kernels run."""
    read = (PyFrame("/v/site-packages/jax/_src/array.py", 1, "ArrayImpl._value"),
            PyFrame("train.py", 47, "run"))  # fmt: skip
    books = (PyFrame("train.py", 60, "keep_books"), PyFrame("train.py", 48, "run"))
    kernels, ranges, seen = [], [], []
    for i in range(40):
        t = 100 * MS + i * 10 * MS
        kernels.append(_kernel(t, t + 6 * MS))
        ranges.append(Range(1, "XlaModule:#hlo_module=jit_step,program_id=3#", "", t - 50 * US,
                            t + 20 * US))  # fmt: skip
        seen += [(t + 1 * MS, read), (t + 4 * MS, read)]
        seen += [(t + 6 * MS + (k + 1) * 3 * MS // (reads + others + 1), read if k < reads
                  else books) for k in range(reads + others)]  # fmt: skip
    samples = {1: MainSamples(0.001, tuple(t for t, _ in seen), tuple(s for _, s in seen))}
    processes = ({"pid": 1, "start_ns": 1 * MS, "kernels": "all"},)
    return Trace((), tuple(kernels), (), (), {}, {}, processes, samples=samples,
                 ranges=tuple(ranges))  # fmt: skip


def test_a_jax_value_read_each_step_is_the_waits_finding_when_a_quarter_of_looks_saw_it():
    """After `float(loss)` returns, the host does its bookkeeping before the next step: the
    GPU's idle holds one look in the read and two in the bookkeeping, and is the read's; with
    one look in five in the read it is nobody's wait."""
    a = analyze(_jax_job(reads=1, others=2), 1.0, None)
    assert a.headline is not None and a.headline.code == "synchronizations"
    assert "jax.device_get" in a.headline.advice
    assert a.headline.saving_s == pytest.approx(38 * 4e-3, rel=0.05)
    b = analyze(_jax_job(reads=1, others=4), 1.0, None)
    assert b.headline is None or b.headline.code != "synchronizations"


@pytest.mark.parametrize(
    ("lines", "step_line"),
    [  # (where, kind, steps, covers) of each line
        ((("train.py:122", "upload", 120, 0.96), ("train.py:100", "copy", 10, 0.90),
          ("train.py:102", "wait", 9, 0.89)), "train.py:122"),
        ((("train.py:20", "upload", 10, 0.9), ("train.py:43", "copy", 300, 0.97),
          ("train.py:47", "wait", 301, 0.97)), "train.py:47"),
    ],
)  # fmt: skip
def test_an_evaluations_lines_once_an_epoch_do_not_outvote_the_steps_upload(lines, step_line):
    """Ten epochs of 12 steps: the batch upload once a step, and an evaluation's copy and wait
    once an epoch, 9 and 10 times (an epoch's start cut): the upload marks the steps; a batch
    copy and an `.item()` as often as one another still outvote a line alone."""
    found = [Candidate(1, w, kind, tuple(range(n)), covers=c) for w, kind, n, c in lines]
    chosen, _ = choose(found)
    assert chosen is not None and chosen.where == step_line


@pytest.mark.parametrize(("inner", "share"), [(None, 0.40), ("torch", 0.11)])
def test_the_hosts_time_at_its_upload_line_after_the_copy_is_the_inputs(inner, share):
    """40 steps of 10 ms: a batch's upload at train.py:43, then 2.9 ms with the GPU idle and
    the looks at that line, inside a call made there (a batch's release, its staging) or inside
    the framework below it (`model(x.to(device))`), then 6 ms of kernels and 1 ms away until
    the next upload (the input's, 0.11 with the copies): the first 2.9 ms are the input's too,
    the second the step's own."""
    line = PyFrame("train.py", 43, "main")
    below = (PyFrame("/v/site-packages/torch/nn/modules/module.py", 1, "Module._call_impl"),)
    stack = (*(below if inner else ()), line)
    copies, kernels, seen = [], [], []
    for i in range(40):
        t = 100 * MS + i * 10 * MS
        copies.append(_upload(t, 43))
        kernels.append(_kernel(t + 3 * MS, t + 9 * MS))
        seen += [(t + k * MS // 2, stack) for k in range(1, 6)]
    samples = {1: MainSamples(0.0005, tuple(t for t, _ in seen), tuple(s for _, s in seen))}
    trace = Trace(tuple(copies), tuple(kernels), (), tuple(c.call for c in copies if c.call), {},
                  {}, ({"pid": 1, "start_ns": MS, "kernels": "all"},), samples=samples)  # fmt: skip
    loop = analyze(trace, 1.0, None).loop
    assert loop is not None and loop.input_share is not None
    assert loop.input_share == pytest.approx(share, abs=0.02)


@pytest.mark.parametrize(
    ("calls", "sizes", "said"),
    [(12, "4 KiB", "12 calls, 4 KiB"), (1, "", "1 call"), (0, "4 KiB", "4 KiB"), (0, "", "")],
)
def test_a_findings_calls_are_said_with_nothing_empty(calls, sizes, said):
    """No "29 calls ()" for waits that move no bytes, no "1 calls, ," for a straggler."""
    from xferscope.trace.findings.base import counted

    assert counted(calls, sizes) == said


def test_the_idle_after_a_cpu_copy_is_the_waits_in_the_steps_share_too():
    """`.cpu()` to pageable memory each step (a blocking copy down, no synchronize call), then
    3 ms of the host's own work before the next upload: the steps' share waiting for input
    leaves that idle to the wait, as the findings do."""
    trace = _job()
    calls, copies = list(trace.calls), list(trace.copies)
    for i in range(40):
        t = 2020 * MS + i * 10 * MS
        call = Call("cudaMemcpyAsync_v3020", t + 1 * MS, t + 6 * MS + 10 * US, 1, 1)
        line = (PyFrame("train.py", 47, "main"),)
        copies.append(Copy(1, "d2h", "device", "pageable", 4096, t + 6 * MS,
                           t + 6 * MS + 5 * US, 0, 7, True, 0, call, python=line))  # fmt: skip
        calls.append(call)
    trace = dataclasses.replace(trace, copies=tuple(copies),
                                calls=tuple(sorted(calls, key=lambda c: c.start_ns)))  # fmt: skip
    loop = analyze(trace, 3.0, None).loop
    assert loop is not None and loop.input_share is not None and loop.input_share < 0.05


def test_a_line_the_looks_found_carries_its_source(tmp_path):
    """A finding's place found by the looks alone (a JAX read, a straggler's host work) shows
    its line's source as a recorded call's place does; none where the file is not here."""
    from xferscope.trace.findings.base import seen_place

    program = tmp_path / "train.py"
    program.write_text("import jax\n\nlog(float(loss))  # the read\n")
    place = seen_place(f"{program}:3 (run)", 300, 0.4)
    assert place.code == "log(float(loss))  # the read" and place.looks == 300
    assert seen_place("/nowhere/train.py:3 (run)", 1, 0.1).code == ""
    assert seen_place("libfoo.so+0x10", 1, 0.1).code == ""


def read_ranges(lines: list[dict]) -> tuple:
    """NVTX records as the injection library writes them, read back."""
    import json
    import tempfile
    from pathlib import Path

    from xferscope.trace.reading import read_trace

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "trace-5.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in lines))
        return read_trace([path]).ranges


def test_ranges_close_together_are_each_a_step():
    """A jitted step dispatched ahead (JAX with nothing read back): XLA's range around each run
    lasts 1.5-2 ms with 0.55-0.7 ms between them, 1.2 ms twice and 7.6 ms once; every range
    is a step: a range spans its step, so the gaps between ranges are no burst's."""
    lines = [{"t": "start", "pid": 5, "ts": 1}]
    t = 100 * MS
    longer = {50: 600 * US, 100: 700 * US, 150: 7 * MS}
    for i in range(300):
        lines += [{"t": "nvtx", "id": i + 1, "a": t, "n": "XlaModule:#hlo_module=jit_step#",
                   "dom": "TSL", "tid": 5, "i": 0},
                  {"t": "nvtx", "id": i + 1, "b": t + 1500 * US + (i % 5) * 100 * US}]  # fmt: skip
        t += 1500 * US + (i % 5) * 100 * US + (550 + (i * 37) % 140) * US + longer.get(i, 0)
    ranges = read_ranges(lines)
    trace = dataclasses.replace(_job(steps=1, startup_ms=50), ranges=ranges)
    kernels = tuple(_kernel(r.start_ns + 100 * US, r.end_ns + 300 * US, pid=5) for r in ranges)
    trace = dataclasses.replace(trace, intervals=kernels)
    (found,) = [c for c in candidates(trace)[5] if c.kind == "nvtx"]
    assert found.steps == 299


def test_a_synchronous_copy_is_priced_by_the_idle_it_leaves_not_the_host_it_blocks():
    """40 steps of 10 ms: an upload, 9.4 ms of kernels, and the result read back with a
    synchronous cudaMemcpy into pinned memory that blocks the host 8.5 ms a step waiting for
    them: made asynchronous, a step saves only the GPU's idle in it (about 0.5 ms), not the
    host time it frees."""
    from xferscope.trace.findings import synchronous

    copies, kernels = [], []
    for i in range(40):
        t = 100 * MS + i * 10 * MS
        copies.append(_upload(t, 43))
        kernels.append(_kernel(t + 100 * US, t + 9500 * US))
        call = Call("cudaMemcpy_v3020", t + 1 * MS, t + 9600 * US, 1, 1)
        copies.append(Copy(1, "d2h", "device", "pinned", 4096, t + 9500 * US,
                           t + 9600 * US, 0, 7, False, 0, call,
                           python=(PyFrame("train.py", 47, "main"),)))  # fmt: skip
    calls = tuple(sorted((c.call for c in copies if c.call), key=lambda c: c.start_ns))
    trace = Trace(tuple(copies), tuple(kernels), (), calls, {}, {},
                  ({"pid": 1, "start_ns": MS, "kernels": "all"},))  # fmt: skip
    steady = analyze(trace, 1.0, None)
    assert steady.view is not None
    found = synchronous.find(Context(steady.view, None, steady.loops))
    assert found is not None and found.cost_s == pytest.approx(39 * 8.6e-3, rel=0.02)
    assert found.saving_s is not None and found.saving_s < 40 * 0.6e-3


def test_a_loop_that_makes_no_call_of_its_own_is_found_by_its_kernels():
    """The model uploaded and 2 s of imports, then 40 steps of 10 ms queued ahead with nothing
    read back and no NVTX: no line recurs, so the kernels that do mark the steps, and the
    start-up is still apart; C++ kernels are named short."""
    trace = _job(steps=0)
    kernels = []
    for i in range(40):
        t = 2100 * MS + i * 10 * MS
        reduce = "_ZN2at6native13reduce_kernelILi512EEEvT_"
        kernels += [Interval(1, "kernel", reduce, t, t + 2 * MS, 0, 7),
                    Interval(1, "kernel", "sgemm", t + 2 * MS, t + 5 * MS, 0, 7),
                    Interval(1, "kernel", "sgemm", t + 5 * MS, t + 8 * MS, 0, 7)]  # fmt: skip
    trace = dataclasses.replace(trace, intervals=tuple(kernels))
    a = analyze(trace, 3.0, None, started_ns=0)
    assert a.loop is not None and a.loop.where == "kernel at::native::reduce_kernel"
    assert a.loop.count == 39 and a.steady_s == pytest.approx(0.39)
    (s,) = a.startup
    assert s.seconds == pytest.approx(2.1, abs=1e-3) and s.uploads == 50


def test_a_process_start_up_is_from_its_own_start_where_the_library_read_it(tmp_path):
    """The injection library's start record says how long the process had run (`age`): its
    start-up is said from then, not from its first look or from the launch of the program
    (a launcher, torchrun, started it later)."""
    import json

    from xferscope.trace.reading import read_trace

    path = tmp_path / "trace-1.jsonl"
    path.write_text(json.dumps({"t": "start", "pid": 1, "ts": 1500 * MS, "age": 1200 * MS}) + "\n")
    (process,) = read_trace([path]).processes
    assert process["began_ns"] == 300 * MS
    trace = dataclasses.replace(_job(), processes=(process | {"kernels": "all"},))
    (s,) = analyze(trace, 3.0, None, started_ns=0).startup
    assert s.seconds == pytest.approx(2.02 - 0.3, abs=1e-3)  # the first step at 2.02 s


def test_pageable_batches_of_a_program_with_a_dataloader_are_advised_in_its_words():
    """A DataLoader's batches come in pageable memory unless it pins them: where a look found
    the main thread in the DataLoader's own module (making it, starting its workers, waiting
    in its next), the pageable copies' fix is the DataLoader's `pin_memory=True`; elsewhere,
    pinning the tensor."""
    torch_to = PyFrame("/v/site-packages/torch/_tensor.py", 1, "to")
    copies = tuple(dataclasses.replace(_upload(i * 10 * MS, 43), src="pageable",
                                       python=(torch_to, PyFrame("train.py", 43, "main")))
                   for i in range(1, 30))  # fmt: skip
    starting = (PyFrame("/usr/lib/python3.12/multiprocessing/popen_fork.py", 65, "_launch"),
                PyFrame("/v/site-packages/torch/utils/data/dataloader.py", 1192, "__init__"),
                PyFrame("train.py", 40, "main"))  # fmt: skip
    processes = ({"pid": 1, "start_ns": 0, "kernels": "all"},)

    def advice(looks: tuple) -> str:
        samples = {1: MainSamples(0.01, (1 * MS,), (looks,))}
        trace = Trace(copies, (), (), tuple(c.call for c in copies if c.call), {}, {},
                      processes, samples=samples)  # fmt: skip
        f = pageable.find(Context(trace, None))
        assert f is not None and f.framework == "PyTorch"
        assert (f.change == PIN_LOADER) == ("DataLoader" in f.advice)  # one change, one price
        return f.advice

    assert "`pin_memory=True` in the DataLoader" in advice(starting)
    importing = (
        PyFrame("/v/site-packages/torch/utils/data/dataloader.py", 9, "<module>"),
        PyFrame("train.py", 1, "<module>"),
    )  # `import torch`, no DataLoader made
    for elsewhere in (advice((PyFrame("train.py", 40, "main"),)), advice(importing)):
        assert "DataLoader" not in elsewhere and "`tensor.pin_memory()`" in elsewhere


@pytest.mark.parametrize(("wait_line", "share"), [(43, 0.40), (47, 0.11)])
def test_the_idle_after_an_uploads_own_wait_is_the_inputs(wait_line, share):
    """40 steps of 10 ms: a batch's upload at train.py:43 from pageable memory, whose `.to()`
    then waits for its copy there (cudaStreamSynchronize at the same line), 2.9 ms with the GPU
    idle (the batch released), 6 ms of kernels and 1 ms away until the next upload: the idle
    after the upload's own wait is the input's (0.40 with the copies); after a wait at another
    line (an `.item()` at train.py:47) it is that wait's (0.11)."""
    copies, kernels, calls = [], [], []
    for i in range(40):
        t = 100 * MS + i * 10 * MS
        copies.append(_upload(t, 43))
        calls += [copies[-1].call, _sync(t + 10 * US, t + 100 * US, wait_line)]
        kernels.append(_kernel(t + 3 * MS, t + 9 * MS))
    trace = Trace(tuple(copies), tuple(kernels), (), tuple(calls), {}, {},
                  ({"pid": 1, "start_ns": MS, "kernels": "all"},))  # fmt: skip
    loop = analyze(trace, 1.0, None).loop
    assert loop is not None and loop.input_share is not None
    assert loop.input_share == pytest.approx(share, abs=0.02)


def test_findings_gone_together_are_paid_together_and_a_longer_loop_pays_nothing():
    """A's input wait (predicted 0.2 s) and a small wait (predicted 1 ms) both gone in B, whose
    steps saved 0.21 s: each says the two paid 105% together, not the small one 21,000%. Where
    B's loop took longer, gone is said without a payment."""
    before = [{**_run(10e-3, {"input_starved": 0.3, "synchronizations": 0.01}),
               "findings": {"input_starved": {"title": "input", "cost_s": 0.3, "saving_s": 0.2},
                            "synchronizations": {"title": "waits", "cost_s": 0.01,
                                                 "saving_s": 0.001}}}
              for _ in range(3)]  # fmt: skip
    faster = [_run(7.9e-3, {}) for _ in range(3)]
    paid = {p.code: p for p in _fixes(before, faster)}
    for code in ("input_starved", "synchronizations"):
        assert paid[code].paid == pytest.approx(0.21 / 0.201)
        assert paid[code].predicted_together_s == pytest.approx(0.201)
    assert "predicted together 201.00 ms, paid 104%" in fix_text(paid["synchronizations"])
    slower = [_run(10.8e-3, {}) for _ in range(3)]
    for p in _fixes(before, slower):
        assert p.status == FIX_GONE and p.paid is None
        assert "took 80.00 ms longer, not shorter" in fix_text(p) and "paid" not in fix_text(p)


def test_the_findings_gone_together_are_named_by_their_titles():
    before = [_run(10e-3, {"input_starved": 0.3, "synchronizations": 0.01}) for _ in range(3)]
    paid = {p.code: p for p in _fixes(before, [_run(8e-3, {}) for _ in range(3)])}
    titles = {"input_starved": "the GPU waited for its next input"}
    said = fix_text(paid["synchronizations"], titles)
    assert "together with the GPU waited for its next input;" in said
    assert "together with input_starved;" in fix_text(paid["synchronizations"])
