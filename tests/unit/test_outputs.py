"""Where results go: every command's files in a directory of their own, nothing replaced without
being asked, every location checked before measuring, and a write that fails after measuring
costs no other file and no result."""

from __future__ import annotations

import datetime as real_dt
import errno
import json
import os
import threading
import types
from pathlib import Path

import pytest

from xferscope.cli import outputs
from xferscope.cli.outputs import Delivery, Destination, Named, text
from xferscope.documents import files
from xferscope.run.history import History

from .test_cli import assert_one_line_error, run

SWEEP = ["sweep", "--simulate", "--quick", "--sizes", "1,1MiB", "-d", "h2d", "-m", "pinned"]
COMMANDS = {
    "sweep": (SWEEP, "sweep"),
    "overlap-cpu": (
        ["overlap", "cpu", "--simulate", "--size", "1MiB", "--trials", "1", "--work", "0,1ms"],
        "overlap-cpu",
    ),
    "pageable": (["pageable", "--simulate", "--sizes", "1MiB", "--sends", "1,10"], "pageable"),
}


@pytest.fixture(autouse=True)
def own_history(tmp_path_factory, monkeypatch):
    path = tmp_path_factory.mktemp("history") / "history.sqlite3"  # not in the results' place
    monkeypatch.setenv("XFERSCOPE_HISTORY", str(path))
    return path


@pytest.fixture
def one_second(monkeypatch):
    """Every command starts in the same second."""
    fixed = real_dt.datetime(2026, 1, 2, 3, 4, 5)
    fake = types.SimpleNamespace(datetime=types.SimpleNamespace(now=lambda *a: fixed))
    monkeypatch.setattr(outputs, "dt", fake)


# ---- unique names ------------------------------------------------------------------------------


@pytest.mark.parametrize("command", COMMANDS)
def test_results_in_the_same_second_keep_their_own_directories(
    capsys, tmp_path, one_second, command
):
    args, name = COMMANDS[command]
    for _ in range(3):
        code, _, err = run(capsys, *args, "-o", str(tmp_path))
        assert code == 0, err
    directories = sorted(p.name for p in tmp_path.iterdir() if p.is_dir())
    stamp = f"{name}-20260102-030405"
    assert directories == [stamp, f"{stamp}-2", f"{stamp}-3"]
    for directory in directories:
        assert (tmp_path / directory / f"{name}.json").exists()


def test_new_directory_is_unique_under_concurrency(tmp_path):
    made: list[Path] = []
    threads = [
        threading.Thread(target=lambda: made.append(files.new_directory("--out", tmp_path, "x")))
        for _ in range(16)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(made)) == 16 and all(p.is_dir() for p in made)


@pytest.mark.parametrize("option", ["--json", "--csv", "--plot"])
def test_a_named_file_that_exists_is_never_replaced_unasked(capsys, tmp_path, option):
    target = tmp_path / ("r" if option == "--plot" else "r.json" if option == "--json" else "r.csv")
    existing = Path(f"{target}-bandwidth.png") if option == "--plot" else target
    existing.write_text("precious")
    code, out, err = run(capsys, *SWEEP, option, str(target), "-o", str(tmp_path / "out"))
    assert_one_line_error(code, err, option, str(existing), "exists", "--force")
    assert code == 2 and "SIMULATED" not in out, "refused before measuring"
    assert existing.read_text() == "precious"
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").iterdir())
    code, _, err = run(capsys, *SWEEP, option, str(target), "--force", "-o", str(tmp_path / "o"))
    assert code == 0, err
    assert existing.read_bytes() != b"precious"


def test_a_file_made_while_measuring_is_not_replaced(capsys, tmp_path, monkeypatch):
    target = tmp_path / "r.json"
    from xferscope.cli import sweep as measure  # where the command finds run_sweep

    real = measure.run_sweep

    def meanwhile(*args, **kwargs):
        result = real(*args, **kwargs)
        target.write_text("someone else's")
        return result

    monkeypatch.setattr(measure, "run_sweep", meanwhile)
    code, _, err = run(capsys, *SWEEP, "--json", str(target), "-o", str(tmp_path / "out"))
    assert code == 0, err
    assert target.read_text() == "someone else's"
    moved = tmp_path / "r-2.json"
    assert json.loads(moved.read_text())["schema"] == "xferscope-sweep"
    assert f"{target} appeared meanwhile; wrote {moved} instead" in " ".join(err.split())


def test_atomic_write_without_overwrite_refuses_an_existing_file(tmp_path):
    path = tmp_path / "a.txt"
    files.atomic_write(path, "one", overwrite=False)
    with pytest.raises(FileExistsError):
        files.atomic_write(path, "two", overwrite=False)
    assert path.read_text() == "one"
    files.atomic_write(path, "three")
    assert path.read_text() == "three"
    assert [p.name for p in tmp_path.iterdir()] == ["a.txt"], "no temporary file is left"


def test_files_get_the_mode_the_umask_allows(tmp_path):
    path = tmp_path / "a.txt"
    files.atomic_write(path, "x")
    assert path.stat().st_mode & 0o777 == files.DEFAULT_MODE
    files.atomic_write(path, "x", mode=0o640)
    assert path.stat().st_mode & 0o777 == 0o640


# ---- checked before measuring ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["--json", "/proc/xferscope.json"], "--json"),
        (["--csv", "/proc/xferscope.csv"], "--csv"),
        (["--plot", "/proc/xferscope"], "--plot"),
        (["-o", "/proc"], "--out"),
    ],
)
def test_an_unwritable_location_fails_before_measuring(capsys, args, option):
    code, out, err = run(capsys, *SWEEP, *args)
    assert_one_line_error(code, err, option, "/proc")
    assert code == 2 and "SIMULATED" not in out
    assert ".tmp" not in err and "probe" not in err, "the message names the user's path"


@pytest.mark.parametrize(
    "args",
    [["--prometheus", "/proc/xferscope.prom"], ["-o", "/proc"], ["--history", "/proc/h.sqlite3"]],
)
def test_run_checks_every_location_before_measuring(capsys, tmp_path, own_history, args):
    code, out, err = run(capsys, "run", "--simulate", "--quick", *args)
    assert_one_line_error(code, err, args[0], args[1])
    assert code == 2 and "SIMULATED" not in out, "nothing was measured"
    assert not own_history.exists()


def test_probe_leaves_nothing_behind(tmp_path):
    files.probe("--out", tmp_path / "a" / "b")
    assert (tmp_path / "a" / "b").is_dir() and not list((tmp_path / "a" / "b").iterdir())


# ---- writes that fail after measuring ----------------------------------------------------------


def _fail_for(monkeypatch, name: str) -> None:
    """Makes publishing any file called `name` fail as a full disk does."""
    real = files._publish

    def publish(temp: Path, path: Path, overwrite: bool) -> None:
        if path.name == name and "xferscope-" not in path.parent.name:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(temp))
        real(temp, path, overwrite)

    monkeypatch.setattr(files, "_publish", publish)


def test_a_json_that_cannot_be_written_is_saved_elsewhere_and_costs_nothing_else(
    capsys, tmp_path, monkeypatch
):
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr("tempfile.tempdir", None)
    _fail_for(monkeypatch, "r.json")
    target = tmp_path / "r.json"
    code, _, err = run(capsys, *SWEEP, "--json", str(target), "-o", str(tmp_path / "out"))
    assert code == 1
    (line,) = [line for line in err.splitlines() if line.startswith("Error:")]
    assert f"cannot write {target}: No space left on device; saved it as" in line
    assert ".tmp" not in line, "the message names the user's path, not a temporary file"
    (rescued,) = (tmp_path / "tmp").glob("xferscope-*-r.json")
    assert str(rescued) in line
    assert json.loads(rescued.read_text())["schema"] == "xferscope-sweep"
    (directory,) = (tmp_path / "out").iterdir()
    assert {p.name for p in directory.iterdir()} == {
        "sweep.csv",
        "sweep-bandwidth.png",
        "sweep-latency.png",
    }


def test_a_run_whose_files_cannot_be_written_is_still_in_the_history(
    capsys, tmp_path, monkeypatch, own_history
):
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr("tempfile.tempdir", None)
    _fail_for(monkeypatch, "run.json")
    code, _, err = run(capsys, "run", "--simulate", "--quick", "-o", str(tmp_path / "out"))
    assert code == 1
    text = " ".join(err.split())
    (directory,) = (tmp_path / "out").iterdir()
    assert f"cannot write {directory / 'run.json'}: No space left on device" in text
    assert "saved as run 1" in text
    with History(own_history, readonly=True) as history:
        assert history.get(1).complete
    assert {"points.csv", "metrics.csv", "report.html"} <= {p.name for p in directory.iterdir()}
    assert len(list((tmp_path / "tmp").glob("xferscope-*-run.json"))) == 1


def test_a_plot_that_cannot_be_drawn_is_named_and_the_rest_is_written(
    capsys, tmp_path, monkeypatch
):
    _fail_for(monkeypatch, "sweep-latency.png")
    code, _, err = run(capsys, *SWEEP, "-o", str(tmp_path))
    assert code == 1
    (directory,) = tmp_path.iterdir()
    assert f"Error: cannot write {directory / 'sweep-latency.png'}" in err
    assert {p.name for p in directory.iterdir()} == {
        "sweep.json",
        "sweep.csv",
        "sweep-bandwidth.png",
    }


# ---- the mechanism -----------------------------------------------------------------------------


def test_delivery_writes_data_before_renderings(tmp_path):
    order: list[str] = []

    def make(name: str):
        def write(path: Path, written) -> None:
            order.append(name)
            path.write_text(name)

        return write

    with Destination.prepare(
        str(tmp_path), "t", {"a": Named("--a", None, "a.png"), "b": Named("--b", None, "b.json")}
    ) as dest:
        delivery = Delivery(
            [
                dest.output("a", make("render"), render=True),
                dest.output("b", make("data")),
            ]
        )
        delivery.write_data()
        delivery.render()
    assert order == ["data", "render"]
    assert [p.name for p in delivery.written] == ["b.json", "a.png"]


@pytest.mark.parametrize("draw", [True, False])
def test_after_a_signal_drawing_is_begun_only_where_allowed(tmp_path, draw):
    from xferscope.core import interrupt

    def write(path: Path, _written) -> None:
        path.write_text("x")

    named = {"a": Named("--a", None, "a.png"), "b": Named("--b", None, "b.json")}
    with interrupt.handling(), Destination.prepare(str(tmp_path), "t", named) as dest:
        delivery = Delivery(
            [dest.output("a", write, render=True), dest.output("b", write)],
            draw_after_signal=draw,
        )
        interrupt.request()
        delivery.write_data()
        delivery.render()
    assert [p.name for p in delivery.written] == (["b.json", "a.png"] if draw else ["b.json"])
    assert [p.name for p in delivery.skipped] == ([] if draw else ["a.png"])


def test_an_empty_name_is_refused(tmp_path):
    with pytest.raises(Exception, match="--json: give a file name"):
        Destination.prepare(str(tmp_path), "t", {"json": Named("--json", " ")})


def test_text_maker_writes_utf8(tmp_path):
    path = tmp_path / "x"
    text(lambda: "µs")(path, ())
    assert path.read_bytes() == "µs".encode()


# ---- drawing any result again ------------------------------------------------------------------


@pytest.mark.parametrize("command", COMMANDS)
def test_report_draws_any_result_again(capsys, tmp_path, command):
    args, name = COMMANDS[command]
    code, first, err = run(capsys, *args, "-o", str(tmp_path / "a"))
    assert code == 0, err
    (directory,) = (tmp_path / "a").iterdir()
    code, again, err = run(
        capsys, "report", str(directory / f"{name}.json"), "-o", str(tmp_path / "b")
    )
    assert code == 0, err
    (redrawn,) = (tmp_path / "b").iterdir()
    assert redrawn.name == directory.name
    assert {p.name for p in redrawn.iterdir()} == {p.name for p in directory.iterdir()}
    original = json.loads((directory / f"{name}.json").read_text())
    assert json.loads((redrawn / f"{name}.json").read_text()) == original
    assert again == first, "the same tables"


def test_report_of_a_file_that_is_no_result_is_one_line(capsys, tmp_path):
    path = tmp_path / "x.json"
    path.write_text(json.dumps({"schema": "something"}))
    code, _, err = run(capsys, "report", str(path), "-o", str(tmp_path / "out"))
    assert_one_line_error(code, err, str(path), "not an xferscope result", "xferscope-sweep")


def test_a_drawing_that_fails_costs_no_other_file(capsys, tmp_path, monkeypatch):
    """A plotting library's own error is one line; the data and the other plots are written."""

    def broken(result, what, path):
        if what == "latency":
            raise ValueError("Invalid bounding box")
        Path(path).write_bytes(b"\x89PNG")

    monkeypatch.setattr("xferscope.report.plots.write_plot", broken)
    code, _, err = run(capsys, *SWEEP, "-o", str(tmp_path))
    assert code == 1 and "Traceback" not in err
    (directory,) = tmp_path.iterdir()
    assert f"Error: cannot draw {directory / 'sweep-latency.png'}: ValueError" in err
    assert {p.name for p in directory.iterdir()} == {
        "sweep.json",
        "sweep.csv",
        "sweep-bandwidth.png",
    }


def test_a_drawing_cut_by_ctrl_c_into_another_error_is_skipped(capsys, tmp_path, monkeypatch):
    from xferscope.core import interrupt

    monkeypatch.setattr(interrupt, "GRACE_S", 60.0)

    def cut(result, what, path):
        interrupt.request()
        raise ValueError("Invalid bounding box")  # what matplotlib made of the interrupt

    monkeypatch.setattr("xferscope.report.plots.write_plot", cut)
    code, _, err = run(capsys, *SWEEP, "-o", str(tmp_path))
    assert code == 130 and "Traceback" not in err and "Error:" not in err
    assert "not drawn (interrupted): sweep-bandwidth.png, sweep-latency.png" in " ".join(
        err.split()
    )
