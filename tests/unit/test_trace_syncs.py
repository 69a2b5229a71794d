"""Waits for the GPU at the program's lines: a synchronization's record carries its Python stack
(as the injection writes it, inject.cpp), the finding groups the waits by line, and prices each
by the host time it blocked and the GPU idle that followed it until the next work (the saving:
that idle, at most the time the wait blocked); a wait with no work after it costs no idle."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from xferscope.trace.findings import Context, synchronizing
from xferscope.trace.reading import read_trace
from xferscope.trace.steps import Steps

MS = 1_000_000  # ns
SCRIPT = "/home/user/train.py"  # the program's own file: its frames name the line


def _write(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def _step(i: int) -> list[dict]:
    """Step i (20 ms apart): a 10 ms kernel at 20i, then `.item()` at train.py:12 waits for it
    from 20i + 1 to 20i + 10, and the next step's kernel is launched 3 ms after the wait."""
    at = 20 * i
    return [
        {"t": "kernel", "n": "step", "st": (at + 0) * MS, "en": (at + 10) * MS, "dev": 0,
         "str": 7, "c": 0},
        {"t": "api", "rt": 1, "f": "cudaStreamSynchronize_v3020", "st": (at + 1) * MS,
         "en": (at + 10) * MS, "tid": 5, "c": 100 + i, "at": [], "py": 1},
    ]  # fmt: skip


def _trace(tmp_path: Path, steps: int = 5, kernels: str = "all") -> Path:
    records: list[dict] = [
        {"t": "start", "pid": 9, "ppid": 1, "ts": 0, "limit": 1000, "kernels": kernels,
         "on_ms": 0, "period_ms": 0},
        {"t": "pystack", "id": 1, "f": [["/usr/lib/python3/site-packages/torch/_tensor.py",
                                         990, "item"], [SCRIPT, 12, "train"]]},
    ]  # fmt: skip
    for i in range(steps):
        records += _step(i)
    # the last wait is followed by nothing: the program ends
    records.append({"t": "end", "ts": 20 * steps * MS})
    return _write(tmp_path / "trace-9.jsonl", records)


def test_a_wait_is_read_with_its_line(tmp_path):
    trace = read_trace([_trace(tmp_path)])
    syncs = [c for c in trace.calls if c.synchronizes]
    assert len(syncs) == 5 and all(c.pid == 9 for c in syncs)
    assert trace.where(syncs[0].frames, syncs[0].python) == f"{SCRIPT}:12 (train)"


def test_waits_are_priced_by_the_host_time_blocked_and_the_idle_after(tmp_path):
    trace = read_trace([_trace(tmp_path)])
    f = synchronizing.find(Context(trace, None))
    assert f is not None and f.calls == 5
    # idle after each of the first 4 waits: 10 ms, from 20i + 10 to the next kernel at
    # 20(i + 1); the host, not waiting, would have launched it at most the 9 ms it waited sooner
    assert f.saving_s == pytest.approx(4 * 9e-3)
    assert f.cost_s == pytest.approx(4 * 10e-3)  # the GPU's idle; the host's 45 ms in `detail`
    assert "waited 45.00 ms in 5 calls that wait" in f.detail
    (place,) = f.places
    assert place.where == f"{SCRIPT}:12 (train)" and place.calls == 5
    assert f.framework == "PyTorch" and "loss.detach()" in f.advice


def test_one_wait_at_the_end_is_no_finding(tmp_path):
    assert synchronizing.find(Context(read_trace([_trace(tmp_path, steps=1)]), None)) is None


def test_work_on_another_stream_keeps_the_gpu_busy_after_a_wait(tmp_path):
    path = _trace(tmp_path, steps=2)
    records = [json.loads(line) for line in path.read_text().splitlines()]
    # a copy on another stream runs from 9 to 19 ms: after the first wait (ends at 10) the GPU
    # is idle only from 19 to 20
    copy = {"t": "memcpy", "k": 1, "s": 2, "d": 3, "async": 1, "b": 4096, "st": 9 * MS,
            "en": 19 * MS, "dev": 0, "str": 8, "c": 7, "rc": 7}  # fmt: skip
    records.insert(-1, copy)
    f = synchronizing.find(Context(read_trace([_write(path, records)]), None))
    assert f is not None and f.saving_s == pytest.approx(1e-3)


def test_a_steps_idle_for_its_host_leaves_out_the_gap_kept_between_queued_kernels(tmp_path):
    """Each step: 40 kernels of 50 us queued back to back (1 us apart, as a fed GPU keeps
    them), then 200 us idle while the host read a value. Without the read the GPU still
    keeps its 1 us after each kernel: a step's idle for its host is the 200 us, not 240 us."""
    us = 1_000
    records: list[dict] = [
        {"t": "start", "pid": 9, "ppid": 1, "ts": 0, "limit": 1000, "kernels": "all",
         "on_ms": 0, "period_ms": 0},
    ]  # fmt: skip
    step_ns = 40 * 51 * us + 200 * us
    for i in range(6):
        at = i * step_ns
        records += [
            {"t": "kernel", "n": "k", "st": at + k * 51 * us, "en": at + k * 51 * us + 50 * us,
             "dev": 0, "str": 7, "c": 0}
            for k in range(40)
        ]  # fmt: skip
    records.append({"t": "end", "ts": 6 * step_ns})
    trace = read_trace([_write(tmp_path / "trace-9.jsonl", records)])
    marks = tuple(i * step_ns for i in range(6))
    loop = Steps(where="train.py:1", count=5, step_s=step_ns * 1e-9, idle_share=None,
                 start_ns=marks[0], end_ns=marks[-1], pid=9, marks=marks)  # fmt: skip
    context = Context(trace, None, (loop,))
    assert context.back_to_back_s[9] == pytest.approx(1e-6)
    assert context.step_idle_s(9, 2) == pytest.approx(200e-6)
    assert Context(trace, None).step_idle_s(9, 2) == 0.0  # no loop: no step


def test_device_frees_wait_too_and_are_advised_as_frees(tmp_path):
    # `torch.cuda.empty_cache()` at train.py:30 each step: cudaFree waits for the step's kernel
    path = _trace(tmp_path)
    records = [json.loads(line) for line in path.read_text().splitlines()]
    for r in records:
        if r.get("f") == "cudaStreamSynchronize_v3020":
            r["f"] = "cudaFree_v3020"
    records[1]["f"] = [["/usr/lib/python3/site-packages/torch/cuda/memory.py", 222,
                        "empty_cache"], [SCRIPT, 30, "train"]]  # fmt: skip
    trace = read_trace([_write(path, records)])
    assert all(c.synchronizes and c.frees for c in trace.calls)
    f = synchronizing.find(Context(trace, None))
    assert f is not None and f.saving_s == pytest.approx(4 * 9e-3)
    assert f.places[0].where == f"{SCRIPT}:30 (train)"
    assert "5 of them device frees, cudaFree" in f.detail
    assert "torch.cuda.empty_cache()" in f.advice and ".item()" not in f.advice


def test_a_host_free_or_a_queued_free_is_no_wait():
    from xferscope.trace.records import Call

    for name in ("cudaFreeHost_v3020", "cudaFreeAsync_v11020", "cuMemFreeHost", "cuMemFreeAsync"):
        assert not Call(name, 0, 1, 1).synchronizes
    assert Call("cuMemFree_v2", 0, 1, 1).synchronizes


def test_a_loop_that_frees_is_priced_with_the_allocations_that_follow(tmp_path):
    """Each step (20 ms): a 10 ms kernel, cudaFree waiting for it from 1 to 10 ms, then
    cudaMalloc asking for the memory again from 10.5 to 14.5 ms, the GPU idle until the next
    step's kernel at 20 ms. Without the frees neither call is made: each step saves the smaller
    of its 10 ms idle and the 13 ms blocked, not the 9 ms of the frees alone."""
    path = _trace(tmp_path)
    records = [json.loads(line) for line in path.read_text().splitlines()]
    for r in records:
        if r.get("f") == "cudaStreamSynchronize_v3020":
            r["f"] = "cudaFree_v3020"
    records[-1:-1] = [
        {"t": "api", "rt": 1, "f": "cudaMalloc_v3020", "st": int((20 * i + 10.5) * MS),
         "en": int((20 * i + 14.5) * MS), "tid": 5, "c": 200 + i}
        for i in range(5)
    ]  # fmt: skip
    trace = read_trace([_write(path, records)])
    assert sum(c.allocates for c in trace.calls) == 5
    marks = tuple(20 * i * MS for i in range(5))
    loop = Steps(where="train.py:1", count=4, step_s=20e-3, idle_share=None,
                 start_ns=marks[0], end_ns=marks[-1], pid=9, marks=marks)  # fmt: skip
    context = Context(trace, None, (loop,))
    idle = [context.step_idle_s(9, i) for i in range(4)]
    assert idle[1:] == pytest.approx([10e-3] * 3)
    f = synchronizing.find(context)
    assert f is not None and f.saving_s == pytest.approx(sum(min(s, 13e-3) for s in idle))
    assert "20.00 ms in 5 device allocations (cudaMalloc)" in f.detail
    # the same waits as synchronizations: allocations are not theirs
    for r in records:
        if r.get("f") == "cudaFree_v3020":
            r["f"] = "cudaStreamSynchronize_v3020"
    plain = synchronizing.find(Context(read_trace([_write(path, records)]), None, (loop,)))
    assert plain is not None and plain.saving_s == pytest.approx(sum(min(s, 9e-3) for s in idle))
    assert "cudaMalloc" not in plain.detail


def test_waits_made_off_the_main_thread_are_placed_where_the_main_thread_was(tmp_path):
    """Each step's backward pass waits on autograd's thread (tid 77, no Python of its own) at a
    native frame of PyTorch's; the looks saw the main thread at `loss.backward()` (train.py:40)
    near most of them and at the forward (train.py:30) near one: every such wait is placed at
    train.py:40, its source read. A wait of the main thread keeps its own line, and with no
    look near them the waits keep their native place."""
    import dataclasses

    from xferscope.trace.findings.base import places
    from xferscope.trace.records import MainSamples, PyFrame

    script = tmp_path / "train.py"
    script.write_text("\n".join(f"x = {i}" for i in range(1, 40)) + "\nloss.backward()\n")
    trace = read_trace([_trace(tmp_path)])
    waits = [dataclasses.replace(c, thread=77, python=()) for c in trace.calls]
    mine = dataclasses.replace(trace.calls[0], thread=9)
    at = [(w.start_ns + 2 * MS, 40) for w in waits[:4]] + [(waits[4].start_ns - 2 * MS, 30)]
    stacks = tuple((PyFrame(str(script), line, "train"),) for _, line in at)
    seen = dataclasses.replace(
        trace, samples={9: MainSamples(0.01, tuple(t for t, _ in at), stacks)}
    )
    (place,) = places(seen, waits)
    assert place.where == f"{script}:40 (train)" and place.calls == 5
    assert place.code == "loss.backward()"
    assert places(seen, [mine])[0].where == f"{SCRIPT}:12 (train)"
    far = [dataclasses.replace(w, start_ns=w.start_ns + 10_000 * MS) for w in waits]
    assert places(seen, far)[0].where == "(no caller recorded)"


def test_waits_that_count_a_mask_are_advised_to_keep_sizes_fixed(tmp_path):
    """Most of the unwound waits' time is in PyTorch's nonzero (a boolean index counting its
    mask): the advice is to keep sizes fixed (`torch.where`, `gather`), not to read values
    once; with the counts the lesser part, the usual advice."""
    nonzero = "_ZN2at6native21nonzero_cuda_out_implIbEEvRKNS_6TensorERS2_"
    lib = "/venv/lib/python3.12/site-packages/torch/lib/libtorch_cuda.so"
    path = _trace(tmp_path)
    base = [json.loads(line) for line in path.read_text().splitlines()]

    def advice(counting: int) -> str:
        records = [dict(r) for r in base]
        waits = [r for r in records if r.get("f") == "cudaStreamSynchronize_v3020"]
        for i, r in enumerate(waits):
            r["at"] = [1000 + (i < counting)]  # 1001: in nonzero, 1000: elsewhere in torch
        records[1:1] = [
            {"t": "frame", "a": 1001, "obj": lib, "off": 0x2363141, "sym": nonzero},
            {"t": "frame", "a": 1000, "obj": lib, "off": 0x100, "sym": "_ZN2at6native5item"},
        ]
        f = synchronizing.find(Context(read_trace([_write(path, records)]), None))
        assert f is not None
        return f.advice

    assert "keep the tensors' sizes fixed" in advice(4) and "`gather`" in advice(4)
    assert ".item()" in advice(2) and "sizes fixed" not in advice(2)


@pytest.mark.parametrize(("nbytes", "data"), [(4, False), (1 << 20, True)])
def test_waits_in_downloads_of_data_are_advised_to_copy_ahead(nbytes, data):
    """Each step's result read back with `.cpu()` to pageable memory after a 10 ms kernel: a
    1 MiB result (a serving loop's) the host needs, so the advice copies it to pinned memory
    without waiting and reads it a step later; a 4-byte value, the usual advice."""
    from dataclasses import replace

    from xferscope.trace.records import Call, Copy, Interval, PyFrame, Trace

    read = (PyFrame("/v/site-packages/torch/_tensor.py", 1, "cpu"), PyFrame(SCRIPT, 30, "serve"))
    copies, kernels = [], []
    for i in range(5):
        at = 20 * i * MS
        kernels.append(Interval(9, "kernel", "step", at, at + 10 * MS, 0, 7))
        call = Call("cudaMemcpyAsync_v3020", at + MS, at + 10 * MS + MS // 10, 9, 9)
        end = at + 10 * MS + MS // 20
        copy = Copy(9, "d2h", "device", "pageable", nbytes, at + 10 * MS, end, 0, 7, True, i, call)
        copies.append(replace(copy, python=read))
    trace = Trace(tuple(copies), tuple(kernels), (), tuple(c.call for c in copies), {}, {}, ())
    f = synchronizing.find(Context(trace, None))
    assert f is not None
    assert (f.advice == synchronizing.DATA_ADVICE["PyTorch"]) is data
    assert (f.advice == synchronizing.ADVICE["PyTorch"]) is not data
