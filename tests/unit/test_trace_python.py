"""`xferscope trace` of a Python program, without a GPU: a trace recorded on an H100 from
benchmarks/torch_train_loop.py (`--steps 30 --warmup 2`, tests/data/trace/torch-loop.jsonl)
read back: every copy placed at the line of the script that made it, though PyTorch released
the GIL; the fixes in PyTorch's words, by line; and two traces compared, before and after a fix.
The lines are the script's as it was when recorded, before later edits to it."""

from __future__ import annotations

import json
import shutil
import signal
from collections import Counter
from pathlib import Path

import pytest

from xferscope import cli
from xferscope.trace import analyze as an
from xferscope.trace.compare import compare_traces
from xferscope.trace.document import from_dict
from xferscope.trace.reading import read_trace
from xferscope.trace.records import PyFrame, user_frame
from xferscope.trace.runner import Ran

RECORDED = Path(__file__).parent.parent / "data" / "trace" / "torch-loop.jsonl"
SCRIPT = "/work/main/benchmarks/torch_train_loop.py"  # where it was when recorded
# what the script made, by line (steps 0-29 and 2 warm-up steps; the model's six tensors)
LINES = {
    (50, "model", "h2d", "pageable"): 6,  # model(...).to(device)
    (86, "train.<locals>.step", "h2d", "pageable"): 32,  # batch.to(device)
    (87, "train.<locals>.step", "h2d", "pinned"): 32,  # target.to(device, non_blocking=True)
    (88, "train.<locals>.step", "h2d", "pageable"): 32,  # torch.tensor([...], device=device)
    (96, "train.<locals>.step", "d2h", "pinned"): 4,  # loss.item(), every 10 steps
}


@pytest.fixture(autouse=True)
def history(tmp_path, monkeypatch) -> Path:
    path = tmp_path / "history.sqlite3"
    monkeypatch.setenv("XFERSCOPE_HISTORY", str(path))
    return path


def test_every_copy_is_placed_at_the_scripts_line():
    trace = read_trace([RECORDED])
    assert all(c.python for c in trace.copies)
    found = Counter(
        (user_frame(c.python).line, user_frame(c.python).function, c.direction, c.host_memory)
        for c in trace.copies
        if user_frame(c.python) and user_frame(c.python).file == SCRIPT
    )
    assert found == LINES
    # the place is `file:line (function)`; the stack keeps PyTorch's own frames beneath it
    assert trace.where(trace.copies[0].frames, trace.copies[0].python) == f"{SCRIPT}:50 (model)"
    model = trace.copies[0].python
    assert model[0].is_library and "/site-packages/torch/nn/modules/module.py" in model[0].file
    assert trace.framework(trace.copies[0].frames, model) == "PyTorch"
    # pinned allocations are placed too: pin_memory() at line 44
    pin = trace.pins[0]
    assert (trace.where(pin.frames, pin.python), pin.bytes) == (
        f"{SCRIPT}:82 (train)",
        1 << 20,
    )


@pytest.mark.parametrize(
    ("file", "library"),
    [
        ("/opt/venv/lib/python3.12/site-packages/torch/nn/modules/module.py", True),
        ("/usr/lib/python3/dist-packages/cupy/_creation/from_data.py", True),
        ("/usr/lib/python3.12/threading.py", True),
        ("<frozen runpy>", True),
        ("/home/me/project/train.py", False),
        ("<stdin>", False),
        ("/home/me/lib/python3/notes.py", False),
    ],
)
def test_the_programs_own_code_is_told_from_libraries(file, library):
    assert PyFrame(file, 1, "f").is_library is library


def test_the_innermost_frame_of_the_programs_own_code_is_the_place():
    torch = PyFrame("/v/lib/python3.12/site-packages/torch/utils/data/loader.py", 9, "next")
    mine = PyFrame("/home/me/train.py", 42, "epoch")
    outer = PyFrame("/home/me/train.py", 90, "<module>")
    assert user_frame((torch, mine, outer)) is mine
    assert user_frame((torch,)) is torch  # no frame of its own: the innermost
    assert user_frame(()) is None
    assert str(mine) == "/home/me/train.py:42 (epoch)"


def test_advice_is_said_in_pytorchs_words_and_lists_the_lines():
    analysis = an.analyze(read_trace([RECORDED]), 1.0, None)
    fixes = {f.code: f for f in analysis.findings}
    pageable = fixes["pageable_copies"]
    assert pageable.framework == "PyTorch" and "pin_memory=True" in pageable.advice
    assert "non_blocking=True" in pageable.advice and pageable.saving_s is None
    assert "not priced" in pageable.unpriced
    lines = {p.where: p.calls for p in pageable.places}
    # the steps' own, the model's upload at line 50 being the start-up's
    assert lines == {
        f"{SCRIPT}:86 (train.<locals>.step)": 30,
        f"{SCRIPT}:88 (train.<locals>.step)": 30,
    }
    costs = [p.cost_s for p in pageable.places]
    assert costs == sorted(costs, reverse=True) and sum(costs) == pytest.approx(pageable.cost_s)
    assert "torch.cuda.Stream()" in fixes["copies_not_overlapped"].advice
    assert "outside the loop" in fixes["repeated_uploads"].advice


def _fake_runs(walls: list[float], drop_line: int | None = None):
    """run_traced's stand-in: the recorded trace, one run after another with these wall times;
    with `drop_line`, the copies made at that line of the script left out (the fix applied)."""
    count = iter(walls)

    def fake(command, directory, limit, kernels="sampled", look_every=0.01, on_stop=None):
        target = directory / "trace-1.jsonl"
        if drop_line is None:
            shutil.copy(RECORDED, target)
        else:
            keep = []
            stacks_at = set()
            for text in RECORDED.read_text().splitlines():
                r = json.loads(text)
                if r.get("t") == "pystack" and r["f"] and r["f"][0][1] == drop_line:
                    stacks_at.add(r["id"])
            dropped = set()
            for text in RECORDED.read_text().splitlines():
                r = json.loads(text)
                if r.get("t") == "api" and r.get("py") in stacks_at:
                    dropped.add(r["c"])
                    continue
                keep.append(text)
            keep = [k for k in keep if json.loads(k).get("c") not in dropped]
            target.write_text("\n".join(keep) + "\n")
        return Ran(("python3", "train.py"), 0, next(count), (target,), 0)

    return fake


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = cli.main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def _trace(capsys, tmp_path, monkeypatch, name, walls, drop_line=None, region=()) -> Path:
    from xferscope.trace import pipeline

    monkeypatch.setattr(pipeline, "run_traced", _fake_runs(walls, drop_line))
    out = tmp_path / name
    code, _, err = run(
        capsys, "trace", "--reference", "none", "--runs", str(len(walls)), "-o", str(out),
        *region, "--", "python3", "train.py",
    )  # fmt: skip
    assert code == 0, err
    (path,) = out.glob("trace-*/trace-summary.json")
    return path


def test_runs_are_kept_and_a_fix_is_compared_line_by_line(capsys, tmp_path, monkeypatch):
    before = _trace(capsys, tmp_path, monkeypatch, "before", [1.00, 1.02, 1.01])
    after = _trace(capsys, tmp_path, monkeypatch, "after", [0.90, 0.91, 0.89], drop_line=86)
    doc = json.loads(before.read_text())
    page = (before.parent / "report.html").read_text()
    assert "Where the findings' calls were made" in page and "torch_train_loop.py:86" in page
    assert len(doc["runs"]) == 3 and [r["wall_s"] for r in doc["runs"]] == [1.00, 1.02, 1.01]
    a, b = from_dict(doc), from_dict(json.loads(after.read_text()))
    comparison = compare_traces(a, b)
    rows = {(c.section, c.subject, c.figure): c for c in comparison.changes}
    wall = rows[("program", "the program", "wall time")]
    assert wall.verdict == "faster" and wall.change == pytest.approx(-0.1089, abs=1e-3)
    line = next(
        c for (section, subject, figure), c in rows.items()
        if section == "line" and ":86 " in subject and figure == "calls"
    )  # fmt: skip
    # of the steady state: one a step, the model's upload (start-up) apart
    assert (line.a, line.b, line.verdict, line.noise) == (30, 0, "fewer", None)
    pageable = rows[("copies", "h2d pageable", "calls")]
    assert (pageable.a, pageable.b, pageable.verdict) == (60, 30, "fewer")
    same = rows[("copies", "h2d pinned", "calls")]
    assert same.verdict == "same"
    paid = {p.code: p for p in comparison.paid}
    # line 88 still copies from pageable memory: the cause is cut, not gone, and no "paid"
    fixed = paid["pageable_copies"]
    assert fixed.status == "cut" and fixed.saved_s is None and fixed.paid is None
    # the command: a table, and the exit status
    # (the fix leaves the GPU's idle as it was, now named at line 88: that finding's cost grows)
    code, out, err = run(capsys, "compare", str(before), str(after))
    assert code in (0, 1) and not err, err
    assert "what the fixes of A paid in B" in out and "FEWER" in out and "FASTER" in out
    assert "cut in B, not gone" in out
    code, out, err = run(capsys, "compare", str(after), str(before), "--json")
    assert code == 1  # more copies and a slower program: a regression
    assert json.loads(out)["schema"] == "xferscope-trace-compare"


def test_one_run_each_gives_no_verdict_on_times(capsys, tmp_path, monkeypatch):
    before = _trace(capsys, tmp_path, monkeypatch, "before", [1.0])
    after = _trace(capsys, tmp_path, monkeypatch, "after", [0.5])
    comparison = compare_traces(
        from_dict(json.loads(before.read_text())), from_dict(json.loads(after.read_text()))
    )
    wall = next(c for c in comparison.changes if c.figure == "wall time")
    assert wall.verdict == "unclear"
    assert any("--runs 3" in w for w in comparison.warnings)


def test_a_trace_is_compared_only_with_a_trace_of_the_same_program(capsys, tmp_path, monkeypatch):
    trace = _trace(capsys, tmp_path, monkeypatch, "t", [1.0])
    doc = json.loads(trace.read_text())
    doc["options"]["command"] = ["python3", "other.py"]
    other = tmp_path / "other.json"
    other.write_text(json.dumps(doc))
    code, _, err = run(capsys, "compare", str(trace), str(other))
    assert code == 2 and "different commands" in err and "--force" in err
    code, out, err = run(capsys, "compare", str(trace), str(other), "--force")
    assert code == 0 and "different commands" in out
    not_trace = tmp_path / "run.json"
    not_trace.write_text(json.dumps({"schema": "xferscope-run", "schema_version": 5}))
    code, _, err = run(capsys, "compare", str(trace), str(not_trace))
    assert code == 2 and "is not a trace" in err


def test_a_place_with_brackets_prints_as_it_is(capsys):
    from rich.console import Console

    from xferscope.report.trace_tables import place_lines

    fix = {"places": [{"where": "libx.so+0x10 (f[abi:cxx11](int))", "calls": 2, "cost_s": 1e-3}]}
    Console(width=200).print(place_lines(fix)[0])
    assert "libx.so+0x10 (f[abi:cxx11](int)): 2 calls" in capsys.readouterr().out


def test_ctrl_c_in_a_later_run_keeps_the_runs_made_and_exits_130(capsys, tmp_path, monkeypatch):
    from xferscope.trace import pipeline

    whole = _fake_runs([1.0, 1.0, 1.0])
    calls = []

    def fake(command, directory, limit, kernels="sampled", look_every=0.01, on_stop=None):
        ran = whole(command, directory, limit)
        calls.append(directory)
        return ran if len(calls) < 2 else Ran(ran.command, -2, 0.5, ran.files, signal.SIGINT)

    monkeypatch.setattr(pipeline, "run_traced", fake)
    out = tmp_path / "t"
    code, _, err = run(
        capsys, "trace", "--reference", "none", "--runs", "3", "-o", str(out), "--", "x"
    )
    assert code == 130, err
    assert len(calls) == 2  # no third run after the Ctrl-C
    (path,) = out.glob("trace-*/trace-summary.json")
    doc = json.loads(path.read_text())
    assert len(doc["runs"]) == 1 and doc["interrupted"] is True


def test_the_recorded_waits_are_at_the_loops_lines():
    """The recording's synchronizations carry their Python stacks: PyTorch's pageable uploads
    wait in cudaStreamSynchronize at the upload lines, `loss.item()` every 10 steps at its own,
    and torch.cuda.synchronize() at the loop's end."""
    from collections import Counter

    trace = read_trace([RECORDED])
    waits = Counter(
        (c.function.split("_v")[0], trace.where(c.frames, c.python))
        for c in trace.calls
        if c.synchronizes
    )
    step = "train.<locals>.step"
    assert waits[("cudaStreamSynchronize", f"{SCRIPT}:86 ({step})")] == 32
    assert waits[("cudaStreamSynchronize", f"{SCRIPT}:96 ({step})")] == 4  # loss.item()
    assert waits[("cudaDeviceSynchronize", f"{SCRIPT}:118 (train)")] == 1


def test_a_region_names_the_line_that_marks_the_steps(capsys, tmp_path, monkeypatch):
    """--region torch_train_loop.py:88 (the loop's third upload, once a step): the steps are its
    calls, their span the steady state, as the loop found without it is; a line that marks
    nothing says so and keeps the GPUs' span (longer: it starts at the model's upload); a region
    that is no FILE:LINE is refused before the program runs."""
    found = json.loads(_trace(capsys, tmp_path, monkeypatch, "found", [1.0]).read_text())
    doc = json.loads(
        _trace(capsys, tmp_path, monkeypatch, "region", [1.0],
               region=("--region", "torch_train_loop.py:88")).read_text()
    )  # fmt: skip
    s = doc["summary"]
    assert s["region"] == "torch_train_loop.py:88" and s["steps"]["where"].startswith(
        f"{SCRIPT}:88 "
    )
    assert s["steps"]["count"] == 30  # the first, a warm-up 249 times the usual, the start-up's
    assert s["span_s"] == pytest.approx((s["steps"]["end_ns"] - s["steps"]["start_ns"]) * 1e-9)
    loop = found["summary"]["steps"]
    assert found["summary"]["span_s"] == pytest.approx((loop["end_ns"] - loop["start_ns"]) * 1e-9)
    assert doc["runs"][0]["span_s"] == pytest.approx(s["span_s"])
    none = json.loads(
        _trace(
            capsys, tmp_path, monkeypatch, "none", [1.0], region=("--region", "other.py:3")
        ).read_text()
    )
    assert none["summary"]["steps"] is None
    assert none["summary"]["span_s"] > found["summary"]["span_s"]
    assert any("--region other.py:3" in n for n in none["summary"]["notes"])
    code, _, err = run(capsys, "trace", "--region", "train.py", "--", "python3", "train.py")
    assert code == 2 and err.strip() == (
        "Error: --region: 'train.py' is not FILE:LINE (such as train.py:41) nor an NVTX range's "
        "name"
    )
