"""A traced program that feeds its step with xferscope.torch.DeviceLoader: the loader's thread
(transfer/prefetch.py) copies batches ahead on a side stream and waits for its own copies. Its
calls are named after the loader, not after xferscope's frames, and the findings about the
step's own waits and copies leave them out; the program's own waits and copies still count."""

from __future__ import annotations

import json
from pathlib import Path

from xferscope.trace.findings import Context, not_overlapped, synchronizing
from xferscope.trace.reading import read_trace
from xferscope.trace.records import LOADER_WHERE, PyFrame, on_loader_thread
from xferscope.trace.steps import Steps, loops


def steps(trace) -> Steps | None:
    """The loop of the process with the most GPU work, or None."""
    found = loops(trace)
    return found[0] if found else None


MS = 1_000_000  # ns
SCRIPT = "/home/user/train.py"
SITE = "/usr/lib/python3/site-packages"
LOADER_STACK = [
    [f"{SITE}/xferscope/transfer/copy.py", 139, "copy_many"],
    [f"{SITE}/xferscope/transfer/frameworks/torch_loader.py", 96, "move"],
    [f"{SITE}/xferscope/transfer/prefetch.py", 203, "_run"],
    ["/usr/lib/python3.12/threading.py", 1012, "run"],
]
ITEM_STACK = [[f"{SITE}/torch/_tensor.py", 990, "item"], [SCRIPT, 12, "train"]]
UPLOAD_STACK = [[f"{SITE}/torch/_tensor.py", 700, "to"], [SCRIPT, 9, "train"]]


def _upload(c: int, at_ms: int, ms: int, nbytes: int, tid: int, stream: int, py: int) -> list:
    """A cudaMemcpyAsync host to GPU made at `at_ms` by thread `tid` (Python stack `py`), and
    the copy it issued, `ms` long on `stream`."""
    return [
        {"t": "api", "rt": 1, "f": "cudaMemcpyAsync_v3020", "st": at_ms * MS,
         "en": at_ms * MS + 5000, "tid": tid, "c": c, "src": c, "dst": c + 1, "at": [],
         "py": py},
        {"t": "memcpy", "k": 1, "s": 2, "d": 3, "async": 1, "b": nbytes, "st": at_ms * MS,
         "en": (at_ms + ms) * MS, "dev": 0, "str": stream, "c": c, "rc": c},
    ]  # fmt: skip


def _trace(tmp_path: Path, steps: int = 4) -> Path:
    """Step i, 20 ms apart: a 10 ms kernel at 20i; the loader's thread copies the next batch
    (12 to 14 ms, beside no kernel) and waits for it; the step uploads a tensor itself (15 to
    16 ms) and reads a value with `.item()` at train.py:12 (1 to 10 ms)."""
    records: list[dict] = [
        {"t": "start", "pid": 9, "ppid": 1, "ts": 0, "limit": 1000, "kernels": "all",
         "on_ms": 0, "period_ms": 0},
        {"t": "pystack", "id": 1, "f": ITEM_STACK},
        {"t": "pystack", "id": 2, "f": LOADER_STACK},
        {"t": "pystack", "id": 3, "f": UPLOAD_STACK},
    ]  # fmt: skip
    for i in range(steps):
        at, c = 20 * i, 100 * (i + 1)
        records += [
            {"t": "kernel", "n": "step", "st": at * MS, "en": (at + 10) * MS, "dev": 0,
             "str": 7, "c": 0},
            {"t": "api", "rt": 1, "f": "cudaStreamSynchronize_v3020", "st": (at + 1) * MS,
             "en": (at + 10) * MS, "tid": 5, "c": c, "at": [], "py": 1},
            # the loader's copy (thread 6, stream 8) and its wait; the step's own upload
            *_upload(c + 1, at + 12, 2, 8 << 20, 6, 8, 2),
            {"t": "api", "rt": 1, "f": "cudaStreamSynchronize_v3020", "st": (at + 12) * MS,
             "en": (at + 14) * MS, "tid": 6, "c": c + 2, "at": [], "py": 2},
            *_upload(c + 3, at + 15, 1, 1 << 20, 5, 7, 3),
        ]  # fmt: skip
    records.append({"t": "end", "ts": 20 * steps * MS})
    path = tmp_path / "trace-9.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_the_loaders_thread_is_told_by_its_stack():
    assert on_loader_thread([PyFrame(*f) for f in LOADER_STACK])
    assert not on_loader_thread([PyFrame(*f) for f in ITEM_STACK])
    # a file of that name outside xferscope is the program's own
    assert not on_loader_thread([PyFrame("/home/user/prefetch.py", 3, "_run")])


def test_its_calls_are_named_after_the_loader(tmp_path):
    trace = read_trace([_trace(tmp_path)])
    loader = [c for c in trace.copies if c.bytes == 8 << 20]
    assert len(loader) == 4 and trace.where(loader[0].frames, loader[0].python) == LOADER_WHERE
    step = next(c for c in trace.copies if c.bytes == 1 << 20)
    assert trace.where(step.frames, step.python) == f"{SCRIPT}:9 (train)"


def test_its_waits_are_not_the_steps(tmp_path):
    trace = read_trace([_trace(tmp_path)])
    assert sum(1 for c in trace.calls if c.synchronizes) == 8  # 4 of the step, 4 of the loader
    f = synchronizing.find(Context(trace, None))
    assert f is not None and f.calls == 4
    (place,) = f.places
    assert place.where == f"{SCRIPT}:12 (train)"


def test_its_copies_beside_no_kernel_are_not_the_steps(tmp_path):
    trace = read_trace([_trace(tmp_path)])
    f = not_overlapped.find(Context(trace, None))
    assert f is not None and f.calls == 4  # the step's own uploads only
    assert [p.where for p in f.places] == [f"{SCRIPT}:9 (train)"]
    assert f.cost_s > 0


def test_the_engines_own_threads_waits_are_not_the_steps(tmp_path):
    """The staged copy's threads call CUDA from xferscope's engine with no Python stack: their
    waits are for the engine's own chunks, and the engine's address is not named after the
    unrelated symbol the loader found nearest."""
    path = _trace(tmp_path)
    records = [json.loads(line) for line in path.read_text().splitlines()]
    engine = "/usr/lib/python3/site-packages/xferscope/_engine.cpython-312-x86_64-linux-gnu.so"
    unrelated = "std::vector<xferscope::gl::FrameLog>::_M_realloc_insert"
    records.insert(1, {"t": "frame", "a": 77, "obj": engine, "off": 0x128CC5, "sym": unrelated})
    for i in range(4):
        records.insert(-1, {"t": "api", "rt": 1, "f": "cudaStreamSynchronize_v3020",
                            "st": (20 * i + 16) * MS, "en": (20 * i + 17) * MS, "tid": 8,
                            "c": 900 + i, "at": [77]})  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    trace = read_trace([path])
    waits = [c for c in trace.calls if c.synchronizes and c.thread == 8]
    assert len(waits) == 4 and trace.engine_thread(waits[0].frames, waits[0].python)
    assert "FrameLog" not in (trace.where(waits[0].frames) or "")
    f = synchronizing.find(Context(trace, None))
    assert (
        f is not None and f.calls == 4 and [p.where for p in f.places] == [f"{SCRIPT}:12 (train)"]
    )


def test_the_loaders_thread_is_told_by_its_qualified_name_too():
    """Python 3.11 on: the frame reader names a method `Prefetcher._run` (seen on an H100)."""
    stack = [PyFrame(*f) for f in LOADER_STACK]
    stack[2] = PyFrame(stack[2].file, stack[2].line, "Prefetcher._run")
    assert on_loader_thread(stack)
    assert not on_loader_thread([PyFrame(stack[2].file, 1, "Prefetcher._runner")])


def test_where_the_step_makes_no_call_the_loaders_batches_mark_its_steps(tmp_path):
    """The step's only recorded calls are its model's upload, 6 calls at start-up: the loader's
    thread, one batch a step, marks the 5 steps 20 ms apart; where the step's thread syncs and
    uploads every step too, its own line marks them (a tie goes to the main thread)."""
    path = _trace(tmp_path, steps=6)
    records = [json.loads(line) for line in path.read_text().splitlines()]
    kept = [r for r in records if not (r.get("tid") == 5 or r.get("c", 0) % 100 == 3)]
    for k in range(6):  # the model's upload: 6 calls in 60 us, before the loop
        kept[4:4] = _upload(5000 + k, 0, 0, 4096, 5, 7, 3)
    path.write_text("".join(json.dumps(r) + "\n" for r in kept))
    found = steps(read_trace([path]))
    assert found is not None and found.where == LOADER_WHERE
    assert found.count == 5 and abs(found.step_s - 0.020) < 1e-9
    path = _trace(tmp_path, steps=6)  # its step on the process's main thread (tid == pid)
    text = path.read_text().replace('"tid": 5,', '"tid": 9,')
    path.write_text(text)
    own = steps(read_trace([path]))
    assert own is not None and own.where.startswith(SCRIPT) and own.count == 5
