"""`xferscope trace` without a GPU: a trace recorded on a GPU from tests/trace_programs/copies.cu
(`copies --small 20`, every kernel recorded: tests/data/trace/, which
benchmarks/record_trace_fixtures.sh records) read back, summarized and priced; the command's
handling of programs that are missing, not CUDA programs, failing or interrupted; its files.
tests/gpu/test_trace_gpu.py traces real programs."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from xferscope import cli
from xferscope.trace import analyze as an
from xferscope.trace.reading import read_trace
from xferscope.trace.reference import Reference
from xferscope.trace.runner import Ran

RECORDED = Path(__file__).parent.parent / "data" / "trace" / "copies-small20.jsonl"
# what the program itself reported (its own JSON line) for this run
OWN = {"h2d": {"calls": 34, "bytes": 939606016}, "d2h": {"calls": 8, "bytes": 536870912}}
REFERENCE = Reference(
    "test curves",
    {
        ("h2d", "pinned"): ((4096, 8e-6), (1 << 20, 3e-5), (64 << 20, 1.25e-3)),
        ("d2h", "pinned"): ((4096, 8e-6), (1 << 20, 3e-5), (64 << 20, 1.3e-3)),
        ("h2d", "pageable"): ((4096, 1e-5), (64 << 20, 6e-3)),
        ("d2h", "pageable"): ((4096, 1e-5), (64 << 20, 4.5e-3)),
    },
)


@pytest.fixture(autouse=True)
def history(tmp_path, monkeypatch) -> Path:
    path = tmp_path / "history.sqlite3"
    monkeypatch.setenv("XFERSCOPE_HISTORY", str(path))
    return path


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = cli.main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_the_recorded_trace_has_every_copy_joined_to_its_call():
    trace = read_trace([RECORDED])
    for direction, own in OWN.items():
        mine = [c for c in trace.copies if c.direction == direction]
        assert len(mine) == own["calls"] and sum(c.bytes for c in mine) == own["bytes"]
    assert all(
        c.call is not None and c.call.function.startswith("cudaMemcpy") for c in trace.copies
    )
    h2d = [c for c in trace.copies if c.direction == "h2d"]
    assert all(c.content is not None and c.src_ptr for c in h2d)
    assert len(trace.kernels()) == 20 and len(trace.pins) == 2
    assert trace.totals["memcpy"]["records"] == 42 and not trace.sampled
    # a caller is named: the program's own frame, not CUDA's or CUPTI's
    where = trace.where(h2d[0].frames)
    assert where and where.startswith("copies+0x")


def test_seed001s_table_and_the_groups():
    trace = read_trace([RECORDED])
    table = {r.name: r for r in an.kind_table(trace)}
    assert table["[CUDA memcpy HtoD]"].calls == 34 and table["[CUDA memcpy DtoH]"].calls == 8
    assert table["[CUDA memset]"].calls == 1
    row = table["[CUDA memcpy DtoH]"]
    assert row.min_s <= row.avg_s <= row.max_s and 0 < row.share < 1
    groups = {(g.direction, g.memory): g for g in an.groups(trace, REFERENCE)}
    assert set(groups) == {("h2d", "pageable"), ("d2h", "pageable"), ("h2d", "pinned")}
    pageable = groups[("h2d", "pageable")]
    assert pageable.blocked_s >= pageable.gpu_s * 0.9  # the host waited for pageable copies
    assert 5e9 < pageable.rate < 20e9 and pageable.of_reach is not None


def test_its_repeated_wait_is_its_loop_and_what_came_before_is_its_start_up():
    """copies.cu waits at one line 22 times, over 91% of its GPU work: its steps; the buffers
    it pinned and its first upload came before them, in its start-up."""
    analysis = an.analyze(read_trace([RECORDED]), 0.7, REFERENCE)
    assert analysis.loop is not None and analysis.loop.count == 21 and analysis.loop.kind == "wait"
    (startup,) = analysis.startup
    assert startup.uploads == 1 and startup.pinned_bytes == 96 << 20
    assert "pinned_unused" not in {f.code for f in analysis.findings}


def test_each_fix_is_priced_and_they_come_largest_first(monkeypatch):
    monkeypatch.setattr(an, "loops", lambda *_: ())  # the whole program judged: every kind
    trace = read_trace([RECORDED])
    analysis = an.analyze(trace, 0.7, REFERENCE)
    fixes = {f.code: f for f in analysis.findings}
    assert {
        "pageable_copies",
        "repeated_uploads",
        "pinned_unused",
        "synchronous_copies",
        "small_copies",
    } <= set(fixes)
    savings = [f.saving_s for f in analysis.findings]
    assert None not in savings and savings == sorted(savings, reverse=True)
    pageable = fixes["pageable_copies"]
    assert pageable.calls == 16 and pageable.bytes == 16 * (64 << 20)
    # priced against this machine's pinned curve: 64 MiB at 1.25 ms up and 1.3 ms down
    assert pageable.saving_s == pytest.approx(pageable.cost_s - 8 * 1.25e-3 - 8 * 1.3e-3)
    unused = fixes["pinned_unused"]
    assert unused.calls == 1 and unused.bytes == 32 << 20  # the 64 MiB buffer was used
    assert fixes["small_copies"].calls == 20
    assert all(f.advice and f.saving_s is not None and f.saving_s >= 0 for f in analysis.findings)
    # without this machine's curves the fixes that need them say they are not priced, why, and
    # how to price them, and come after the priced ones, the costliest first
    fixes = an.analyze(trace, 0.7, None).findings
    unpriced = {f.code: f for f in fixes if f.saving_s is None}
    assert set(unpriced) == {"pageable_copies", "small_copies"}
    for f in unpriced.values():
        assert f.unpriced.startswith("not priced: ") and "--reference measure" in f.unpriced
    order = [f.saving_s is None for f in fixes]
    assert order == sorted(order)
    costs = [f.cost_s for f in fixes if f.saving_s is None]
    assert costs == sorted(costs, reverse=True)


def test_reference_interpolates_on_log_axes():
    assert REFERENCE.seconds("h2d", "pinned", 4096) == pytest.approx(8e-6)
    assert REFERENCE.seconds("h2d", "pinned", 1024) == pytest.approx(8e-6)  # below: the smallest
    assert REFERENCE.seconds("h2d", "pinned", 128 << 20) == pytest.approx(2.5e-3)  # above: its rate
    middle = REFERENCE.seconds("h2d", "pinned", 2 << 20)
    assert 3e-5 < middle < 1.25e-3
    assert REFERENCE.seconds("d2d", "device", 4096) is None


def _fake_run(tmp_path, returncode=0, stop_signal=0, stopped_s_ago=None):
    def fake(command, directory, limit, kernels="sampled", look_every=0.01, on_stop=None):
        shutil.copy(RECORDED, directory / "trace-840.jsonl")
        return Ran(
            ("/tmp/copies", "--small", "20"),
            returncode,
            0.7,
            (directory / "trace-840.jsonl",),
            stop_signal,
            stopped_at=None if stopped_s_ago is None else time.monotonic() - stopped_s_ago,
        )

    return fake


def test_the_command_writes_its_files_and_passes_the_status_through(capsys, tmp_path, monkeypatch):
    from xferscope.trace import pipeline

    monkeypatch.setattr(pipeline, "run_traced", _fake_run(tmp_path, returncode=3))
    code, out, err = run(
        capsys,
        "trace",
        "--reference",
        "none",
        "--export",
        "chrome-trace",
        "-o",
        str(tmp_path),
        "--",
        "x",
    )
    assert code == 3, err
    assert "[CUDA memcpy HtoD]" in out and "what to change" in out
    (directory,) = tmp_path.glob("trace-*")
    doc = json.loads((directory / "trace-summary.json").read_text())
    assert doc["schema"] == "xferscope-trace" and doc["returncode"] == 3
    assert len(doc["copies"]) == 42 and doc["summary"]["table"]
    assert {f["code"] for f in doc["findings"]} >= {
        "trace_pageable_copies",
        "trace_repeated_uploads",
    }
    rows = (directory / "copies.csv").read_text().splitlines()
    assert len(rows) == 43 and rows[0].startswith("pid,direction")
    chrome = json.loads((directory / "trace.json").read_text())
    spans = [e for e in chrome["traceEvents"] if e["ph"] == "X"]
    assert len(spans) == 42 + 20 + 1 and all(e["dur"] >= 0 for e in spans)
    page = (directory / "report.html").read_text()
    assert "Timeline" in page and "GPU activities" in page and "scale" in page  # a kernel's name
    code, out, _ = run(capsys, "history", "--json")
    assert json.loads(out)[0]["kind"] == "trace"
    code, out, err = run(
        capsys, "report", str(directory / "trace-summary.json"), "-o", str(tmp_path / "again")
    )
    assert code == 0, err
    assert "[CUDA memcpy DtoH]" in out, out


@pytest.mark.parametrize(("stop", "status"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_stop_given_to_the_program_ends_the_command_as_a_stop_does(
    capsys, tmp_path, monkeypatch, stop, status
):
    """A Ctrl-C forwarded to the program, which then exits 1 on its way out (PyTorch's
    pin-memory thread does): its trace is analyzed and written, and the command exits as every
    command does after a stop, not with the program's 1."""
    from xferscope.trace import pipeline

    monkeypatch.setattr(pipeline, "run_traced", _fake_run(tmp_path, 1, stop))
    code, _, err = run(capsys, "trace", "--reference", "none", "-o", str(tmp_path), "--", "x")
    assert code == status, err
    (directory,) = tmp_path.glob("trace-*")
    doc = json.loads((directory / "trace-summary.json").read_text())
    assert doc["interrupted"] is True and doc["returncode"] == 1 and len(doc["copies"]) == 42


def test_a_stop_long_before_the_trace_was_written_leaves_the_report_to_draw(
    capsys, tmp_path, monkeypatch
):
    """A Ctrl-C the program took longer than the renderings' grace to stop on: the data files
    are written, the report is left undrawn, as every command leaves it after a stop, and the
    command that draws it is named."""
    from xferscope.core import interrupt
    from xferscope.trace import pipeline

    run_after = interrupt.GRACE_S + 1.0
    monkeypatch.setattr(pipeline, "run_traced", _fake_run(tmp_path, 1, signal.SIGINT, run_after))
    code, _, err = run(capsys, "trace", "--reference", "none", "-o", str(tmp_path), "--", "x")
    assert code == 130, err
    (directory,) = tmp_path.glob("trace-*")
    assert {p.name for p in directory.iterdir()} == {"trace-summary.json", "copies.csv"}
    text = " ".join(err.split())
    assert "not drawn (interrupted): report.html" in text, text
    assert f"`xferscope report {directory / 'trace-summary.json'}` draws them" in text, text


def test_a_crash_keeps_the_trace_and_reports_the_signal(capsys, tmp_path, monkeypatch):
    from xferscope.trace import pipeline

    monkeypatch.setattr(pipeline, "run_traced", _fake_run(tmp_path, returncode=-6))
    code, _, err = run(capsys, "trace", "--reference", "none", "-o", str(tmp_path), "--", "x")
    assert code == 134 and "ended on SIGABRT; its trace up to then is kept" in err
    (directory,) = tmp_path.glob("trace-*")
    assert json.loads((directory / "trace-summary.json").read_text())["signal"] == "SIGABRT"


def test_a_program_without_cuda_says_so_and_keeps_its_status(capsys, tmp_path):
    code, _, err = run(capsys, "trace", "--reference", "none", "-o", str(tmp_path), "--", "true")
    assert code == 0 and "no CUDA activity was seen" in err
    assert not list(tmp_path.glob("trace-*"))
    code, _, err = run(capsys, "trace", "--reference", "none", "-o", str(tmp_path), "--", "false")
    assert code == 1 and "no CUDA activity was seen" in err


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--", "/nonexistent/program"], "COMMAND: '/nonexistent/program' was not found"),
        ([], "COMMAND: give the program to trace after --"),
        (["--export", "pdf", "--", "true"], "--export: 'pdf' is not chrome-trace"),
        (["--reference", "guess", "--", "true"], "--reference: 'guess' is not one of"),
        (["--limit", "0", "--", "true"], "--limit: '0' is not a count"),
        (["--kernels", "some", "--", "true"], "--kernels: 'some' is not all, none, sampled"),
        (["--kernels", "100/100", "--", "true"], "(0 < ON < PERIOD"),
        (["--kernels", "0/1000", "--", "true"], "--kernels: '0/1000'"),
        (["--kernels", "-5/10", "--", "true"], "--kernels: '-5/10'"),
        (["-o", "/proc/none", "--", "true"], "--out"),
    ],
)
def test_bad_input_is_one_line(capsys, args, fragment):
    code, _, err = run(capsys, "trace", *args)
    assert code == 2 and fragment in err and "Traceback" not in err


def test_ctrl_c_goes_to_the_program_and_its_status_comes_back(tmp_path):
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "xferscope",
            "trace",
            "--reference",
            "none",
            "--no-history",
            "-o",
            str(tmp_path),
            "--",
            "sleep",
            "20",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    _wait_for_a_child(proc.pid)  # the program runs: a loaded machine may take seconds
    start = time.monotonic()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=10)
    assert time.monotonic() - start < 3
    assert proc.returncode == 130, err


def _wait_for_a_child(pid: int, limit_s: float = 30) -> None:
    """Until the process has started a child (Linux's /proc/PID/task/PID/children), or else
    1.5 s where that file is missing."""
    children = Path(f"/proc/{pid}/task/{pid}/children")
    if not children.exists():
        time.sleep(1.5)
        return
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if children.read_text().split():
            time.sleep(0.2)  # its signal forwarding is set before it starts the child
            return
        time.sleep(0.05)
    raise AssertionError(f"xferscope started no program within {limit_s} s")


def test_a_program_stopped_by_ctrl_c_is_not_followed_by_a_calibration(
    capsys, tmp_path, monkeypatch
):
    """The Ctrl-C went to the program: the trace is written at once, unpriced where the history
    holds no rates for this GPU, and no copy rates are measured for seconds after the stop."""
    from xferscope.cli import common
    from xferscope.core.engine.simulated import SimulatedEngine
    from xferscope.trace import pipeline

    def measured(*_args, **_kw):
        raise AssertionError("calibrated after a stop")

    monkeypatch.setattr(pipeline, "run_traced", _fake_run(tmp_path, 1, signal.SIGINT))
    monkeypatch.setattr(common, "open_engine", lambda simulate: SimulatedEngine())
    monkeypatch.setattr(pipeline, "calibrate", measured)
    code, _, err = run(capsys, "trace", "--history", str(tmp_path / "h.db"), "-o",
                       str(tmp_path / "out"), "--", "x")  # fmt: skip
    assert code == 130, err
    assert "stopped: this machine's copy rates are not measured" in " ".join(err.split())
    (directory,) = (tmp_path / "out").glob("trace-*")
    doc = json.loads((directory / "trace-summary.json").read_text())
    assert doc["summary"]["reference"] is None and len(doc["copies"]) == 42


def test_a_stop_during_the_calibration_keeps_the_trace_unpriced(capsys, tmp_path, monkeypatch):
    from xferscope.cli import common
    from xferscope.core import interrupt
    from xferscope.core.engine.simulated import SimulatedEngine
    from xferscope.trace import pipeline

    def stopped(engine, device, progress=None):
        interrupt.request()
        raise KeyboardInterrupt

    monkeypatch.setattr(pipeline, "run_traced", _fake_run(tmp_path))
    monkeypatch.setattr(common, "open_engine", lambda simulate: SimulatedEngine())
    monkeypatch.setattr(pipeline, "calibrate", stopped)
    code, _, err = run(capsys, "trace", "--reference", "measure", "-o", str(tmp_path), "--", "x")
    assert code == 130 and "its findings not priced" in err
    (directory,) = tmp_path.glob("trace-*")
    doc = json.loads((directory / "trace-summary.json").read_text())
    assert doc["summary"]["reference"] is None and len(doc["copies"]) == 42
