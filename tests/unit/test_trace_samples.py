"""Where the traced program's main thread was while the GPU sat idle with no CUDA call to name:
a thread of the injection library (engine/src/trace/looks.cpp) looks at it every few ms without
the GIL, on every CPython minor this machine has, with no Python thread in the program and
nothing written by a forked child; samples.py reads the looks back, and idle.causes names the
program's lines they saw in each cause's time."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from xferscope.report.trace_tables import cause_text
from xferscope.trace import runner
from xferscope.trace.idle import NO_LINE, Lines, causes
from xferscope.trace.records import Call, MainSamples, PyFrame, Trace, native_framework
from xferscope.trace.samples import Seen, lines_in, program_line, read_samples, with_samples

from .test_pystack import _interpreters

MS = 1_000_000  # ns
PROGRAM = """
import ctypes, os, sys, threading, time

lib = ctypes.PyDLL(sys.argv[1])
lib.xferscope_looks_start.argtypes = [ctypes.c_char_p, ctypes.c_double]
threads = threading.active_count()
started = lib.xferscope_looks_start(sys.argv[2].encode(), float(sys.argv[3]))

def wait_for_batch():
    time.sleep(0.4)  # WAIT_LINE

def busy(seconds):
    until, x = time.perf_counter() + seconds, 0
    while time.perf_counter() < until:  # BUSY_LINE
        x += 1

if os.environ.get("FORK"):
    child = os.fork()
    if child == 0:
        time.sleep(0.2)
        sys.exit(0)  # a child's exit flushes what stdio holds: none of the parent's
    wait_for_batch()
    os.waitpid(child, 0)
else:
    wait_for_batch()
busy(0.3)  # the GIL held all along: the looks do not need it
lib.xferscope_looks_end()
print(started, threading.active_count() - threads)
"""


def _run(tmp_path: Path, python: str = sys.executable, period: str = "0.002",
         fork: bool = False) -> tuple[str, Path, Path]:  # fmt: skip
    """Runs PROGRAM in `python`: the injection library's looks started from its main thread,
    as CUDA's initialization starts them; its output, records directory, and the program."""
    records = tmp_path / "records"
    records.mkdir(parents=True)
    program = tmp_path / "train.py"
    program.write_text(PROGRAM)
    env = {"FORK": "1"} if fork else {}
    done = subprocess.run(
        [python, str(program), str(runner.injection_library()), str(records), period],
        env={**os.environ, **env}, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout.strip(), records, program


def _line(program: Path, marker: str, function: str) -> str:
    number = next(i for i, t in enumerate(program.read_text().splitlines(), 1) if marker in t)
    return f"{program}:{number} ({function})"


@pytest.mark.parametrize("python", _interpreters())
def test_the_main_thread_is_seen_where_it_waits_and_where_it_holds_the_gil(tmp_path, python):
    said, records, program = _run(tmp_path, python)
    assert said == "0 0"  # started, and no Python thread added
    (path,) = records.glob("pysamples-*.jsonl")
    (pid, samples), *_ = read_samples([path]).items()
    assert path.name == f"pysamples-{pid}.jsonl" and samples.period_s == 0.002
    # 0.7 s at 2 ms: up to 350 looks; a loaded host may give the looks' thread fewer turns
    assert len(samples.ts) >= 50 and list(samples.ts) == sorted(samples.ts)
    lines = [program_line(s) for s in samples.stacks]
    waiting = lines.count(_line(program, "# WAIT_LINE", "wait_for_batch"))
    busy = lines.count(_line(program, "# BUSY_LINE", "busy"))
    assert waiting >= 0.4 * len(lines) and busy >= 0.2 * len(lines), lines


def test_a_forked_child_writes_nothing_and_no_period_looks_at_nothing(tmp_path):
    _, records, _ = _run(tmp_path / "a", fork=True)
    (path,) = records.glob("pysamples-*.jsonl")  # the parent's only
    text = path.read_text()
    assert text.count('"t":"samples"') == 1 and text.endswith("\n")  # nothing written twice
    said, records, _ = _run(tmp_path / "b", period="0")
    assert not list(records.glob("pysamples-*.jsonl")) and said.split()[1] == "0"


def test_the_trace_adds_no_python_thread_and_no_site_directory():
    assert not hasattr(runner, "SITE") and 0 < runner.SAMPLE_S <= 0.05


def test_xferscopes_own_frames_give_way_to_the_programs_line():
    loop = PyFrame("/home/user/train.py", 41, "train")
    waiting = (PyFrame("/usr/lib/python3.12/threading.py", 331, "Condition.wait"),
               PyFrame("/opt/src/xferscope/transfer/prefetch.py", 120, "Prefetcher.__next__"),
               loop)  # fmt: skip
    assert program_line(waiting) == str(loop)
    assert program_line(()) == ""


def _trace(pid: int = 9) -> Trace:
    """GPU idle from 0 to 100 ms and 200 to 300 ms with no call of the main thread in it (the
    GPU resumed with a kernel launch); the main thread seen at train.py:41 (the loader's
    `for`) in the first gap and at train.py:50 (the step's Python) in the second; a look
    outside both gaps, at train.py:60."""
    loader = (PyFrame("/usr/lib/python3.12/queue.py", 171, "Queue.get"),
              PyFrame("/home/user/train.py", 41, "train"))  # fmt: skip
    step = (PyFrame("/home/user/train.py", 50, "train"),)
    other = (PyFrame("/home/user/train.py", 60, "train"),)
    ts = [*range(5 * MS, 100 * MS, 10 * MS), 150 * MS, *range(205 * MS, 300 * MS, 10 * MS)]
    stacks = [loader] * 10 + [other] + [step] * 10
    stacks[3] = step  # one look in the first gap elsewhere
    call = Call("cudaMemcpyAsync_v3020", 120 * MS, 121 * MS, pid, pid)
    return Trace((), (), (), (call,), {}, {}, (), samples={
        pid: MainSamples(0.01, tuple(ts), tuple(stacks))})  # fmt: skip


def test_an_idle_cause_names_the_lines_the_main_thread_was_seen_at():
    trace = _trace()
    (first,) = [c for c in causes(trace, [(0, 100 * MS)], {9}, Lines(trace))]
    assert first.kind == "away" and first.looks == 10
    assert first.seen_at == (("/home/user/train.py:41 (train)", 9),
                             ("/home/user/train.py:50 (train)", 1))  # fmt: skip
    text = cause_text({"kind": "away", "function": first.function, "where": first.where,
                       "gaps": first.gaps, "looks": first.looks,
                       "seen_at": [list(x) for x in first.seen_at]})  # fmt: skip
    assert text.endswith("; the main thread meanwhile at /home/user/train.py:41 (train) (90%), "
                         "/home/user/train.py:50 (train) (10%)")  # fmt: skip
    # another process's looks, and a look outside the gaps, are not counted
    assert lines_in(trace.samples, {8}, [(0, 100 * MS)]) == Seen()
    assert lines_in(trace.samples, {9}, [(140 * MS, 160 * MS)]).looks == 1


def test_without_looks_an_idle_cause_reads_as_before():
    trace = Trace((), (), (), (), {}, {}, ())
    (cause,) = causes(trace, [(0, 100 * MS)], {9}, Lines(trace))
    assert cause.where == NO_LINE and cause.looks == 0 and cause.seen_at == ()
    text = cause_text({"kind": "away", "function": "", "where": NO_LINE, "gaps": 1})
    assert "meanwhile" not in text


def test_a_bad_look_every_is_one_line_naming_the_option():
    done = subprocess.run([sys.executable, "-m", "xferscope", "trace", "--look-every", "5", "--",
                           "true"], capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode != 0
    assert done.stderr.strip() == (
        "Error: --look-every: '5' is not a number of seconds from 0.001 to 1 (0: no looks)"
    )


def _fed_by_device_loader(steps: int = 20) -> Trace:
    """A step every 10 ms whose kernels run 3 ms of it; DeviceLoader's thread (2) copies each
    batch 1 ms before its step; the main thread (1) makes no recorded CUDA call, and the looks
    at it, one a ms, find it in DeviceLoader's next at train.py:41 while the GPU is idle and at
    train.py:50 while it computes."""
    from xferscope.trace.records import Copy, Interval

    site = "/usr/lib/python3/site-packages/xferscope/transfer"
    loader_stack = (PyFrame(f"{site}/copy.py", 139, "copy_many"),
                    PyFrame(f"{site}/prefetch.py", 231, "Prefetcher._run"))  # fmt: skip
    waiting = (PyFrame("/usr/lib/python3.12/threading.py", 331, "Condition.wait"),
               PyFrame(f"{site}/prefetch.py", 150, "Prefetcher.__next__"),
               PyFrame(f"{site}/frameworks/torch_loader.py", 140, "DeviceLoader.__iter__"),
               PyFrame("/home/user/train.py", 41, "train"))  # fmt: skip
    stepping = (PyFrame("/home/user/train.py", 50, "train"),)
    copies, kernels, ts, stacks = [], [], [], []
    for i in range(steps):
        t = (i + 1) * 10 * MS
        call = Call("cudaMemcpyAsync_v3020", t - MS, t - MS + 20_000, 2, 1)
        copies.append(Copy(1, "h2d", "pinned", "device", 1 << 20, t - MS, t - MS // 2, 0, 8,
                           True, i, call, python=loader_stack))  # fmt: skip
        kernels.append(Interval(1, "kernel", "k", t, t + 3 * MS, 0, 7))
        for k in range(10):
            ts.append(t + k * MS + MS // 2)
            stacks.append(stepping if k < 3 else waiting)
    return Trace(tuple(copies), tuple(kernels), (), tuple(c.call for c in copies), {}, {}, (),
                 samples={1: MainSamples(0.001, tuple(ts), tuple(stacks))})  # fmt: skip


def test_a_loop_fed_by_device_loader_that_waits_is_found_at_its_line():
    from xferscope.trace.findings import Context, input_starved

    found = input_starved.find(Context(_fed_by_device_loader(), None))
    assert found is not None and found.framework == "PyTorch"
    assert found.places[0].where == "/home/user/train.py:41 (train)"
    assert "waited for its next batch at /home/user/train.py:41 (train)" in found.detail
    assert "DeviceLoader" in found.detail and "num_workers" in " ".join(
        fix for fix, _ in found.each_fix
    )
    # without the looks, the GPU's idle has no line to name, and nothing is found
    bare = replace(_fed_by_device_loader(), samples={})
    assert input_starved.find(Context(bare, None)) is None


def test_damaged_looks_are_left_out_and_said(tmp_path):
    records = [
        {"t": "samples", "pid": 9, "period_s": 0.01},
        {"t": "pystack", "id": 1, "f": [["train.py", 3, "step"]]},
        {"t": "sample", "ts": 10, "id": 1},
        {"t": "sample", "id": 1},
        {"t": "sample", "ts": "later", "id": 1},
        {"t": "pystack", "id": 2, "f": 5},
        {"t": "sample", "ts": 30, "id": 1},
    ]
    path = tmp_path / "pysamples-9.jsonl"
    path.write_text("junk\n" + "".join(json.dumps(r) + "\n" for r in records))
    trace = with_samples(Trace((), (), (), (), {}, {}, (), 0, ()), [path])
    assert trace.samples[9].ts == (10, 30)
    assert trace.warnings == (
        "4 damaged look(s) left out (not JSON, or a field missing or of the wrong kind)",
    )


def test_a_native_frame_in_a_cython_module_is_its_packages_framework():
    """CuPy's copies go through Cython modules named like `memory.cpython-312-....so`: the
    package is read from the function's mangled name; a library's name tells where it can."""
    memory = ("memory.cpython-312-x86_64-linux-gnu.so+0x1c0c5 (__pyx_f_4cupy_4cuda_6memory_13"
              "MemoryPointer_copy_to_host_async(x) memory.cpp:18373)")  # fmt: skip
    runtime = ("runtime.cpython-312-x86_64-linux-gnu.so+0x1b6f9 (__pyx_f_13cupy_backends_4cuda"
               "_3api_7runtime_memcpyAsync(long))")  # fmt: skip
    assert native_framework(memory) == "CuPy"
    assert native_framework(runtime) == "CuPy"
    assert native_framework("libtorch_cuda.so+0x10 (at::native::copy_)") == "PyTorch"
    assert native_framework("python3+0x148fb5 (_PyObject_MakeTpCall)") is None
    assert native_framework("x.cpython-312.so+0x1 (__pyx_pw_5numpy_3foo(x))") is None
