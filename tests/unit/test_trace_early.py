"""A stopped program's records are read and analyzed while it makes its own way out
(trace/early.py): from the forwarded Ctrl-C, once every process's records have their "end"
line; what that found is the trace's when the program has ended and its records are still
those read, and the trace is read again otherwise. The recorded trace of tests/data/trace/
(copies.cu) stands for the program; the runner's stop (run_traced's on_stop) is made by hand."""

from __future__ import annotations

import json
import os
import shutil
import signal
import threading
import time

from xferscope.trace import early, pipeline
from xferscope.trace.runner import Ran

from .test_trace import RECORDED, run
from .test_trace import history as history  # the autouse fixture

STARTED_NS = 1_700_000_000_000_000_000


def _early_done(timeout_s: float = 20.0) -> None:
    """Waits until the early thread has ended (the program "takes its time" to end)."""
    until = time.monotonic() + timeout_s
    while any(t.name == "xferscope-early" for t in threading.enumerate()):
        assert time.monotonic() < until, "the early analysis never ended"
        time.sleep(0.01)


def _stopped_run(
    ended: bool = True, told: bool = True, after_read=None, program_exit_s: float | None = None
):
    """run_traced's stand-in for a program given its Ctrl-C: its records written (without their
    "end" line unless `ended`), the stop told as the runner tells it (`told`), then, once the
    early thread has ended (or after `program_exit_s`), `after_read(path)`, and the program's
    exit (status 1, as PyTorch's pin-memory thread leaves it)."""

    def fake(command, directory, limit, kernels="sampled", look_every=0.01, on_stop=None):
        path = directory / "trace-840.jsonl"
        text = RECORDED.read_text()
        path.write_text(text if ended else text.rsplit('{"t":"end"', 1)[0])
        if told and on_stop is not None:
            on_stop(directory, STARTED_NS)
        if program_exit_s is None:
            _early_done()
        else:
            time.sleep(program_exit_s)
        if after_read is not None:
            after_read(path)
        return Ran(("/tmp/copies",), 1, 0.7, (path,), signal.SIGINT, (), STARTED_NS,
                   time.monotonic())  # fmt: skip

    return fake


def _counted(monkeypatch) -> dict[str, int]:
    """How often each path analyzed the trace: early's thread, or the pipeline after the end."""
    counts = {"early": 0, "pipeline": 0}
    for module, name in ((early, "early"), (pipeline, "pipeline")):
        real = module.analyze

        def counting(*args, _real=real, _name=name, **kw):
            counts[_name] += 1
            return _real(*args, **kw)

        monkeypatch.setattr(module, "analyze", counting)
    return counts


def _traced(capsys, tmp_path, name: str) -> dict:
    code, _, err = run(capsys, "trace", "--reference", "none", "-o", str(tmp_path / name),
                       "--", "x")  # fmt: skip
    assert code == 130, err
    (directory,) = (tmp_path / name).glob("trace-*")
    return json.loads((directory / "trace-summary.json").read_text())


def _same(a: dict, b: dict) -> None:
    for key in ("summary", "findings", "copies", "wall_s", "returncode", "interrupted"):
        assert a[key] == b[key], key


def test_a_stopped_programs_trace_is_analyzed_while_it_ends_and_is_the_same(
    capsys, tmp_path, monkeypatch
):
    counts = _counted(monkeypatch)
    monkeypatch.setattr(pipeline, "run_traced", _stopped_run(told=False))
    after = _traced(capsys, tmp_path, "after")
    assert counts == {"early": 0, "pipeline": 1}
    monkeypatch.setattr(pipeline, "run_traced", _stopped_run())
    during = _traced(capsys, tmp_path, "during")
    assert counts == {"early": 1, "pipeline": 1}  # analyzed once more, by the early thread
    _same(during, after)
    assert during["wall_s"] == 0.7  # the program's, set when it had ended


def test_records_changed_after_the_early_read_are_read_again(capsys, tmp_path, monkeypatch):
    counts = _counted(monkeypatch)

    def touched(path):
        st = path.stat()
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))

    monkeypatch.setattr(pipeline, "run_traced", _stopped_run(after_read=touched))
    _traced(capsys, tmp_path, "t")
    assert counts == {"early": 1, "pipeline": 1}


def test_records_that_never_end_are_read_when_the_program_has(capsys, tmp_path, monkeypatch):
    """No "end" line (a process killed before it wrote one): the thread waits for the
    program's end, then gives way at once; the trace is read and analyzed as before."""
    counts = _counted(monkeypatch)
    monkeypatch.setattr(pipeline, "run_traced", _stopped_run(ended=False, program_exit_s=0.1))
    started = time.monotonic()
    doc = _traced(capsys, tmp_path, "t")
    assert counts == {"early": 0, "pipeline": 1} and doc["interrupted"] is True
    assert time.monotonic() - started < 15.0
    _early_done(2.0)


def test_the_rates_a_stopped_trace_looks_for_are_looked_for_once(capsys, tmp_path, monkeypatch):
    """With --reference auto, the rates of a stopped program come from the history alone: the
    early thread looks for them, and the pipeline takes what it found without a second look
    (nor a second "not measured" line), whether or not it then reads the records again."""
    looked = []

    def rates(options, open_engine, say, measure=True):
        looked.append(measure)
        say("stopped: rates not measured")
        return None, None

    monkeypatch.setattr(pipeline, "_reference", rates)

    def changed(path):
        shutil.copy(RECORDED, path)  # written again: a new time of change

    monkeypatch.setattr(pipeline, "run_traced", _stopped_run(after_read=changed))
    code, _, err = run(capsys, "trace", "-o", str(tmp_path / "t"), "--", "x")
    assert code == 130, err
    assert looked == [False] and err.count("rates not measured") == 1, err


STOPPED_PROGRAM = """
import os, shutil, signal, sys, time
def stop(*_):  # as the injection library does at the signal: the records written to their end
    shutil.copy(sys.argv[1], os.path.join(os.environ["XFERSCOPE_TRACE_DIR"], "trace-1.jsonl"))
    time.sleep(0.5)  # then the program's own way out
    sys.exit(1)
signal.signal(signal.SIGINT, stop)
open(sys.argv[2], "w").close()
while True:
    time.sleep(0.01)
"""


def test_the_runners_forwarded_ctrl_c_starts_the_reading_before_the_program_ends(
    tmp_path, monkeypatch
):
    """Through the real runner and signal: a program that writes its records at the Ctrl-C and
    takes its time to end is analyzed by the early thread alone, its document as usual."""
    import os
    import sys

    from xferscope.trace import runner
    from xferscope.trace.pipeline import TraceOptions, trace_program

    from .test_libraries import _file, _pathfinder

    _pathfinder(monkeypatch, {"cupti": _file(tmp_path, "libcupti.so.13")})
    monkeypatch.setattr(runner, "injection_library", lambda: tmp_path / "libinject.so")
    counts = _counted(monkeypatch)
    script, ready = tmp_path / "program.py", tmp_path / "ready"
    script.write_text(STOPPED_PROGRAM)

    def ctrl_c() -> None:  # once the program runs (the runner's handlers are set by then)
        until = time.monotonic() + 30
        while not ready.exists() and time.monotonic() < until:
            time.sleep(0.01)
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=ctrl_c, daemon=True).start()
    command = (sys.executable, str(script), str(RECORDED), str(ready))
    traced = trace_program(TraceOptions(command, reference="none"), tmp_path, lambda: None)
    assert traced.stopped is not None and traced.ran.returncode == 1
    assert traced.result is not None and len(traced.result.copies) == 42
    assert counts == {"early": 1, "pipeline": 0}
