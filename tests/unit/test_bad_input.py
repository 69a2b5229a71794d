"""Bad input to every command, generated from the commands themselves: every option of every
command given bad numbers, unknown values, empty lists and special paths, and every command that
reads a file given corrupt, truncated, foreign and hostile ones. Each is refused with one
`Error:` line and exit 2 (or 1 for a failure at run time), never a traceback, a hang or a
destroyed file; a value that happens to be acceptable may run (exit 0).

The cases come from click's own description of each command, so a new option is covered the
day it is added; the simulated engine keeps each run short."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import click
import pytest

from xferscope import cli
from xferscope.cli import cli as group
from xferscope.cli.app import subcommand

# What each command runs with when the option under test is not at fault: small and quick.
BASE: dict[tuple[str, ...], list[str]] = {
    ("sweep",): ["--simulate", "--quick", "--sizes", "1MiB", "-d", "h2d", "-m", "pinned"],
    ("batch",): ["--simulate", "--counts", "4", "--sizes", "4KiB", "--memory", "pinned",
                 "--direction", "h2d", "--methods", "loop", "--trials", "1",
                 "--target-time", "0.001"],
    ("pitch",): ["--simulate", "--widths", "4KiB", "--total", "64KiB", "--memory", "pinned",
                 "--direction", "h2d", "--layout", "pitched", "--methods", "2d", "--trials", "1",
                 "--target-time", "0.001", "--host-pitch", "1"],
    ("gemm",): ["--simulate", "--quick", "--sizes", "256", "--precision", "fp32",
                "--transfers", "none", "--pad", "off"],
    ("gl",): ["--simulate", "--quick", "--op", "upload", "--size", "64", "--bytes", "1MiB"],
    ("overlap", "cpu"): ["--simulate", "--size", "1MiB", "--trials", "1", "--work", "0"],
    ("overlap", "buffers"): ["--simulate", "--buffers", "1", "--chunk-sizes", "1MiB",
                             "--chunks", "2", "--trials", "1"],
    ("overlap", "gpu"): ["--simulate", "--size", "4MiB", "--streams", "1"],
    ("pageable",): ["--simulate", "--sizes", "1MiB", "--sends", "1", "--repeats", "1"],
    ("run",): ["--simulate", "--quick"],
    ("info",): ["--simulate"],
    ("cases",): ["--simulate"],
    ("history",): [],
    ("trace",): [],
    ("fleet",): ["--simulate"],
    # a port it can bind: with --listen not at fault, every other option's value is reached
    ("exporter",): ["--simulate", "--listen", "127.0.0.1:39877"],
}  # fmt: skip
# Options whose values run long when acceptable, or that take the command's program.
SLOW = {("run",), ("fleet",)}
NUMBERS = ["-1", "0", "nan", "-inf", "1e999", "99999999999999999999", "1.5"]
WORDS = ["", ",", "nonsense,,µ"]


def _command(path: tuple[str, ...]) -> click.Command:
    target: click.Command = group
    for name in path:
        sub = subcommand(target, name)
        assert sub is not None, name
        target = sub
    return target


def _options(path: tuple[str, ...]) -> list[str]:
    """The command's options that take a value, by their longest name."""
    names = []
    for param in _command(path).params:
        if isinstance(param, click.Option) and not param.is_flag and param.name != "help":
            names.append(max(param.opts, key=len))
    return names


def _tail(path: tuple[str, ...]) -> list[str]:
    return ["--", "true"] if path == ("trace",) else []


def _check(code: int, out: str, err: str, case: str) -> None:
    assert "Traceback" not in out + err, case
    assert code in (0, 1, 2, 3), (case, code, err)
    errors = [line for line in err.splitlines() if line.startswith("Error:")]
    if code == 2:
        assert len(errors) == 1, (case, err)
    if code == 1:
        assert errors, (case, err)


@pytest.fixture(autouse=True)
def no_drawing(monkeypatch):
    """Plots and pages are not what these cases test: a value that runs skips drawing them."""
    monkeypatch.setattr("xferscope.cli.outputs.Delivery.render", lambda self: None)


@pytest.fixture(autouse=True)
def no_schedule(monkeypatch):
    """`exporter` with acceptable options binds its port and ends at once here: its schedule,
    which would measure until stopped, returns."""
    monkeypatch.setattr("xferscope.exporter.service.Exporter.run", lambda self: None)


@pytest.fixture(autouse=True)
def no_mpi(mpi4py_without_library):
    """`fleet` with acceptable options stops at opening MPI here, which can be opened once per
    process (tests/unit/test_fleet.py runs it under mpirun)."""


def _run(capsys: pytest.CaptureFixture[str], args: list[str]) -> tuple[int, str, str]:
    code = cli.main(args)
    out, err = capsys.readouterr()
    return code, out, err


CASES = [
    (path, option, value)
    for path in BASE
    for option in _options(path)
    for value in (NUMBERS if path not in SLOW else ["-1", "nan", "1e999", "99999999999999999999"])
    + (WORDS if path not in SLOW else ["", ",", "nonsense"])
]


@pytest.mark.parametrize(("path", "option", "value"), CASES, ids=str)
def test_a_bad_value_of_any_option_is_one_line(capsys, tmp_path, path, option, value):
    if option in ("--json", "--csv", "--plot", "--html", "--prometheus", "--out", "--history"):
        value = str(tmp_path / "sub" / value) if value.strip() else value
    extra = ["-o", str(tmp_path / "o")] if "--out" in _options(path) and option != "--out" else []
    args = [*path, *BASE[path], option, value, *extra, *_tail(path)]
    _check(*_run(capsys, args), " ".join(args))


# ---- special paths: refused, and never destroyed -------------------------------------------------


def _special(tmp_path: Path) -> dict[str, Path]:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    (tmp_path / "dir").mkdir()
    (tmp_path / "file").write_text("keep\n")
    (tmp_path / "loop").symlink_to(tmp_path / "loop2")
    (tmp_path / "loop2").symlink_to(tmp_path / "loop")
    return {
        "fifo": fifo,
        "devnull": Path(os.devnull),
        "dir": tmp_path / "dir",
        "under-a-file": tmp_path / "file" / "x",
        "loop": tmp_path / "loop",
    }


# (--plot is a prefix: --plot fifo writes fifo-bandwidth.png beside it, which is fine)
WRITTEN = ["--json", "--csv", "--html", "--prometheus", "--history"]
PATH_CASES = [
    (path, option, kind)
    for path in BASE
    if path not in SLOW or path == ("run",)
    for option in _options(path)
    if option in WRITTEN
    for kind in ("fifo", "devnull", "dir", "under-a-file", "loop")
]


@pytest.mark.parametrize(("path", "option", "kind"), PATH_CASES, ids=str)
def test_a_special_path_is_refused_and_left_as_it_was(capsys, tmp_path, path, option, kind):
    places = _special(tmp_path)
    target = places[kind]
    args = [*path, *BASE[path], option, str(target), "--force", *_tail(path)]
    if "--force" not in [o for p in _command(path).params for o in getattr(p, "opts", [])]:
        args.remove("--force")
    code, out, err = _run(capsys, args)
    _check(code, out, err, " ".join(args))
    # a history to read that is not there (under a file) is no history yet: a runtime answer
    reading = path == ("history",) and kind == "under-a-file"
    assert code == (1 if reading else 2), (args, err)
    assert stat.S_ISFIFO(os.lstat(places["fifo"]).st_mode)
    assert stat.S_ISCHR(os.stat(os.devnull).st_mode)
    assert places["dir"].is_dir() and (tmp_path / "file").read_text() == "keep\n"
    assert (tmp_path / "loop").is_symlink()


# ---- input files: corrupt, truncated, foreign, hostile ------------------------------------------


def _inputs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Path]:
    code, _, err = _run(capsys, ["sweep", *BASE[("sweep",)], "--json", str(tmp_path / "ok.json"),
                                 "--no-history", "-o", str(tmp_path)])  # fmt: skip
    assert code == 0, err
    good = (tmp_path / "ok.json").read_text()
    doc = json.loads(good)
    wrong = dict(doc, curves="many")
    version = dict(doc, schema_version=999)
    files = {
        "empty": "",
        "binary": "\x00\xff\xfe garbage \x81",
        "truncated": good[: len(good) // 2],
        "foreign": json.dumps({"name": "not ours", "values": [1, 2, 3]}),
        "array": "[1, 2, 3]",
        "wrong-types": json.dumps(wrong),
        "future-version": json.dumps(version),
        "nan": good.replace('"wall_s": ', '"wall_s": NaN, "old_wall_s": ', 1),
        "huge-number": good.replace('"wall_s": ', '"wall_s": 1e999, "old_wall_s": ', 1),
        "deep": "[" * 100_000 + "]" * 100_000,
    }
    out = {}
    for name, text in files.items():
        path = tmp_path / f"{name}.json"
        path.write_bytes(text.encode("utf-8", "surrogateescape"))
        out[name] = path
    return out


READERS = [
    ["report", "{file}"],
    ["compare", "{file}", "{file}"],
    ["run", "--simulate", "--resume", "{file}"],
    ["gemm", "--simulate", "--shapes-file", "{file}"],
    ["fleet", "--simulate", "--thresholds", "{file}"],
    ["batch", "--simulate", "--size-mix", "file:{file}"],
]
KINDS = ["empty", "binary", "truncated", "foreign", "array", "wrong-types", "future-version",
         "nan", "huge-number", "deep"]  # fmt: skip


@pytest.mark.parametrize("reader", READERS, ids=lambda r: r[0] + (r[1] if r[1][0] == "-" else ""))
def test_a_bad_input_file_is_one_line(capsys, tmp_path, reader):
    inputs = _inputs(tmp_path, capsys)
    for kind in KINDS:
        args = [a.format(file=inputs[kind]) for a in reader] + ["-o", str(tmp_path / "o")]
        if reader[0] == "compare":
            args = args[:-2]
        code, out, err = _run(capsys, args)
        _check(code, out, err, " ".join(args))
        assert code in (1, 2), (kind, args, err)
