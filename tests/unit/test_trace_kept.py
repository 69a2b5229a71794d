"""`xferscope trace --records DIR` keeps each run's raw records, and `--replay DIR` analyzes
them again as the run was, priced by the rates kept beside them: the recorded trace of
tests/data/trace/ (copies.cu) stands for a program."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from xferscope.trace.kept import RAN, read_kept
from xferscope.trace.runner import Ran

from .test_trace import history, run  # noqa: F401  (history: the autouse fixture)

RECORDED = Path(__file__).parent.parent / "data" / "trace" / "copies-small20.jsonl"
REFERENCE = {
    "source": "test curves",
    "curves": {
        "h2d pinned": [[4096, 8e-6], [1 << 20, 3e-5], [64 << 20, 1.25e-3]],
        "d2h pinned": [[4096, 8e-6], [1 << 20, 3e-5], [64 << 20, 1.3e-3]],
        "h2d pageable": [[4096, 1e-5], [64 << 20, 6e-3]],
        "d2h pageable": [[4096, 1e-5], [64 << 20, 4.5e-3]],
    },
}


def fake_run(command, directory, limit, kernels="sampled", look_every=0.01, on_stop=None):
    shutil.copy(RECORDED, directory / "trace-840.jsonl")
    return Ran(("/tmp/copies", "--small", "20"), 0, 0.7, (directory / "trace-840.jsonl",), 0,
               (), 1_700_000_000_000_000_000)  # fmt: skip


def summary(directory: Path) -> dict:
    (found,) = directory.glob("trace-*/trace-summary.json")
    return json.loads(found.read_text())


def test_kept_runs_replay_as_they_were_priced(capsys, tmp_path, monkeypatch):
    from xferscope.trace import pipeline, reference

    monkeypatch.setattr(pipeline, "run_traced", fake_run)
    monkeypatch.setattr(pipeline, "_reference", lambda *_: (reference.from_dict(REFERENCE), None))
    kept = tmp_path / "kept"
    code, _, err = run(capsys, "trace", "--runs", "2", "--records", str(kept), "-o",
                       str(tmp_path / "a"), "--", "x")  # fmt: skip
    assert code == 0, err
    runs = read_kept(kept)
    assert len(runs) == 2 and runs[0].command == ("/tmp/copies", "--small", "20")
    assert runs[0].started_ns == 1_700_000_000_000_000_000 and runs[0].wall_s == 0.7
    assert [p.name for p in runs[1].files] == ["trace-840.jsonl"]
    named = json.loads((kept / "run1" / "frames.json").read_text())
    assert named and all(isinstance(v, str) for v in named.values())
    # a C++ program's records name no Python line: none of its source kept
    assert json.loads((kept / "run1" / "sources.json").read_text()) == {}
    # a replay names the native callers as they were named where the program ran
    named = {a: f"{n} [where it ran]" for a, n in named.items()}
    (kept / "run1" / "frames.json").write_text(json.dumps(named))
    monkeypatch.setattr(pipeline, "run_traced", lambda *_: pytest.fail("a replay runs nothing"))
    code, out, err = run(capsys, "trace", "--replay", str(kept), "-o", str(tmp_path / "b"))
    assert code == 0, err
    before, again = summary(tmp_path / "a"), summary(tmp_path / "b")
    assert again["summary"]["reference"]["source"] == "test curves"
    assert "[where it ran]" in json.dumps(again["summary"]["fixes"])
    assert [f["code"] for f in again["summary"]["fixes"]] == [
        f["code"] for f in before["summary"]["fixes"]
    ]
    assert again["options"]["runs"] == 2 and len(again["runs"]) == 2
    assert "what to change" in out


def test_bad_records_and_replays_are_one_line(capsys, tmp_path):
    kept = tmp_path / "kept" / "run1"
    kept.mkdir(parents=True)
    (kept / RAN).write_text("{}")
    cases = [
        (["--replay", str(tmp_path / "none")], "--replay: "),
        (["--replay", str(tmp_path)], "holds no kept run"),
        (["--replay", str(tmp_path / "kept")], "is not a kept run"),
        (["--replay", str(tmp_path / "kept"), "--", "true"], "give no COMMAND with it"),
        (["--records", str(tmp_path / "kept"), "--", "true"], "already holds kept runs"),
        (["--records", str(kept / RAN), "--", "true"], "is not a directory"),
        (["--records", "", "--", "true"], "--records: '' is not a directory: name one"),
        (["--replay", " "], "--replay: '' is not a directory: name one"),
    ]
    for args, fragment in cases:
        code, _, err = run(capsys, "trace", *args)
        assert code == 2 and fragment in err and "Traceback" not in err, (args, err)


def test_an_inlined_callers_own_line_is_named_not_a_headers():
    """addr2line -a -i's chain for one address: a standard header's code inlined into a lambda
    inlined into main; the program's own innermost line names it."""
    from xferscope.trace.symbols import inlined, own_frame

    out = (
        "0x0000000000000ab3\n"
        "std::basic_istream<char>::basic_istream()\n/usr/include/c++/12/istream:606\n"
        "main::{lambda()#1}::operator()() const\n/src/memcpy_loop.cu:137\n"
        "main\n/src/memcpy_loop.cu:147 (discriminator 2)\n"
        "0x0000000000000cd0\n??\n??:0\n"
    )
    first, unknown = inlined(out)
    assert own_frame(first) == ("main::{lambda()#1}::operator()() const", "/src/memcpy_loop.cu:137")
    assert own_frame(unknown) is None


def test_callers_in_several_objects_are_each_named_from_their_own_and_kept(tmp_path, monkeypatch):
    """symbolize reads each object's symbols with one addr2line, side by side: every address
    is named from its own object, whichever finished first; and the next trace names them from
    what was kept, running no addr2line. Two of the interpreter's own extension modules stand
    for a framework's libraries; their exported functions' offsets (nm -D) for the return
    addresses."""
    import importlib
    import subprocess

    from xferscope.core import cache
    from xferscope.trace import symbols
    from xferscope.trace.symbols import symbolize

    monkeypatch.setenv(cache.CACHE_ENV, str(tmp_path / "cache"))

    if not (shutil.which("addr2line") and shutil.which("nm")):
        pytest.skip("binutils' addr2line and nm are not installed")
    objects: dict[str, int] = {}  # an object and one exported function's offset in it
    for name in ("_ctypes", "_decimal", "_json", "select", "_socket", "_ssl", "_sqlite3"):
        path = getattr(importlib.import_module(name), "__file__", None) if _has(name) else None
        listed = subprocess.run(["nm", "-D", "--defined-only", str(path)], capture_output=True,
                                text=True, check=False).stdout if path else ""  # fmt: skip
        functions = [line.split() for line in listed.splitlines() if " T " in line]
        if functions:
            objects[path] = int(functions[0][0], 16)
    if len(objects) < 2:
        pytest.skip("fewer than two extension modules with exported functions here")
    # a return address is one byte past its call: the function's first byte, plus one
    names = symbolize({i: (obj, off + 1, "") for i, (obj, off) in enumerate(objects.items())})
    for i, (obj, off) in enumerate(objects.items()):  # named: "object+offset (function ...)"
        assert names[i].startswith(f"{Path(obj).name}+{off + 1:#x} (") and names[i].endswith(")")

    def no_addr2line(*_args, **_kwargs):
        raise AssertionError("addr2line ran for names already kept")

    monkeypatch.setattr(symbols.subprocess, "run", no_addr2line)
    again = symbolize({i + 10: (obj, off + 1, "") for i, (obj, off) in enumerate(objects.items())})
    assert [again[i + 10] for i in range(len(objects))] == [names[i] for i in range(len(objects))]
    (tmp_path / "cache" / symbols.NAMES_FILE).write_text("{not json")  # a spoilt file: read again
    monkeypatch.undo()
    monkeypatch.setenv(cache.CACHE_ENV, str(tmp_path / "cache"))
    assert (
        symbolize({1: (next(iter(objects)), next(iter(objects.values())) + 1, "")})[1] == names[0]
    )


def _has(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


def test_a_replay_quotes_the_lines_as_they_ran(tmp_path):
    """keep_sources keeps the text of the program's own lines the records name (not a
    library's); a replay after the program changed quotes the kept text, not the file's."""
    import linecache

    from xferscope.trace.kept import SOURCES, keep_sources, use_kept_sources
    from xferscope.trace.records import Call, MainSamples, PyFrame, Trace

    program = tmp_path / "train.py"
    program.write_text("import torch\nloss.item()  # waits\nprint('done')\n")
    library = "/usr/lib/python3/site-packages/torch/_tensor.py"
    call = Call(
        "cudaStreamSynchronize",
        1,
        2,
        5,
        9,
        (),
        (PyFrame(library, 990, "item"), PyFrame(str(program), 2, "train")),
    )
    looks = MainSamples(0.01, (5,), ((PyFrame(str(program), 3, "train"),),))
    trace = Trace((), (), (), (call,), {}, {}, (), 0, (), samples={9: looks})
    (tmp_path / "kept" / "run1").mkdir(parents=True)
    keep_sources(trace, tmp_path / "kept", 1)
    kept = json.loads((tmp_path / "kept" / "run1" / SOURCES).read_text())
    assert kept == {str(program): {"2": "loss.item()  # waits", "3": "print('done')"}}
    program.write_text("# the program, edited since it ran\n\n\n")
    linecache.checkcache(str(program))
    ran = Ran(("x",), 0, 1.0, (tmp_path / "kept" / "run1" / "trace-9.jsonl",), 0, ())
    assert use_kept_sources(ran) == 1
    assert PyFrame(str(program), 2, "train").source() == "loss.item()  # waits"
    linecache.checkcache(str(program))  # what linecache checks keeps the kept text
    assert linecache.getline(str(program), 3) == "print('done')\n"
    linecache.clearcache()
    (tmp_path / "kept" / "run1" / SOURCES).write_text('{"b": {"0": "x", "9999999999": "y"}}')
    assert use_kept_sources(ran) == 1 and linecache.getline("b", 1) == ""  # no line kept
    (tmp_path / "kept" / "run1" / SOURCES).write_text('{"a": 3}')  # damaged: none used
    assert use_kept_sources(ran) == 0
    assert use_kept_sources(Ran(("x",), 0, 1.0, (), 0, ())) == 0


def test_a_kept_run_with_no_cuda_activity_says_so_of_the_records(capsys, tmp_path):
    kept = tmp_path / "kept" / "run1"
    kept.mkdir(parents=True)
    (kept / "trace-5.jsonl").write_text('{"t": "start", "pid": 5, "ts": 1}\n')
    (kept / RAN).write_text(json.dumps({"command": ["x"], "returncode": 0, "wall_s": 1.0}))
    code, _, err = run(
        capsys, "trace", "--replay", str(tmp_path / "kept"), "-o", str(tmp_path / "out")
    )
    assert code == 0 and "no CUDA activity in the kept records of" in err
    assert not list((tmp_path / "out").glob("trace-*"))  # nothing written


def test_fifos_under_the_kept_names_are_passed_over_not_read(tmp_path):
    """A FIFO where a kept file goes (records, frames, sources, rates) would never end a read:
    the replay leaves each out and ends, in one line."""
    import os
    import subprocess
    import sys

    run1 = tmp_path / "kept" / "run1"
    run1.mkdir(parents=True)
    shutil.copy(RECORDED, run1 / "trace-840.jsonl")
    (run1 / RAN).write_text(json.dumps({"command": ["x"], "returncode": 0, "wall_s": 0.7}))
    for name in ("trace-841.jsonl", "pysamples-841.jsonl", "frames.json", "sources.json"):
        os.mkfifo(run1 / name)
    os.mkfifo(tmp_path / "kept" / "reference.json")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "xferscope",
            "trace",
            "--replay",
            str(tmp_path / "kept"),
            "--no-history",
            "-o",
            str(tmp_path / "out"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr and "what to change" in done.stdout
