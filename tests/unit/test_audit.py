"""The second audit's defects, each reproduced as the audit wrote it: nothing destroyed, nothing
lost, every bad input one clear line. Each test failed before its fix."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from xferscope.documents import files

from .test_cli import assert_one_line_error, run

SWEEP = ["sweep", "--simulate", "--quick", "--sizes", "1MiB", "-d", "h2d", "-m", "pinned"]
RUN = ["run", "--simulate", "--quick", "--no-history"]


@pytest.fixture(autouse=True)
def own_history(tmp_path, monkeypatch):
    monkeypatch.setenv("XFERSCOPE_HISTORY", str(tmp_path / "history.sqlite3"))
    monkeypatch.chdir(tmp_path)


# ---- 1. writing a file never replaces what is not a regular file --------------------------------


def test_a_fifo_is_refused_before_measuring_and_stays_a_fifo(capsys, tmp_path):
    fifo = tmp_path / "metrics.prom"
    os.mkfifo(fifo)
    code, _, err = run(capsys, *RUN, "-o", str(tmp_path / "r"), "--prometheus", str(fifo))
    assert code == 2
    assert_one_line_error(code, err, "--prometheus", "is a FIFO", "not a regular file")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert not (tmp_path / "r").exists() or not any((tmp_path / "r").iterdir())


@pytest.mark.parametrize("option", ["--json", "--csv"])
def test_a_device_node_is_refused_even_with_force(capsys, tmp_path, option):
    code, _, err = run(capsys, *SWEEP, "-o", str(tmp_path), option, os.devnull, "--force")
    assert_one_line_error(code, err, option, "is a character device")
    assert code == 2
    assert stat.S_ISCHR(os.stat(os.devnull).st_mode)


def test_a_symlink_is_written_through_to_its_target_and_stays_a_link(capsys, tmp_path):
    real = tmp_path / "exporter" / "xferscope.prom"
    real.parent.mkdir()
    real.write_text("old\n")
    link = tmp_path / "link.prom"
    link.symlink_to(real)
    code, _, err = run(capsys, *RUN, "-o", str(tmp_path / "r"), "--prometheus", str(link))
    assert code == 0, err
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert "xferscope_" in real.read_text()
    # the temporary file was made beside the target, and none is left
    assert sorted(p.name for p in real.parent.iterdir()) == ["xferscope.prom"]


def test_a_dangling_symlink_gets_its_target_made(tmp_path):
    link = tmp_path / "out.json"
    link.symlink_to(tmp_path / "made.json")
    files.atomic_write(link, "{}")
    assert link.is_symlink() and (tmp_path / "made.json").read_text() == "{}"


def test_a_symlink_loop_is_refused(capsys, tmp_path):
    (tmp_path / "a.json").symlink_to(tmp_path / "b.json")
    (tmp_path / "b.json").symlink_to(tmp_path / "a.json")
    code, _, err = run(capsys, *SWEEP, "--json", str(tmp_path / "a.json"), "--force")
    assert_one_line_error(code, err, "--json", "loop")


def test_a_path_made_special_while_measuring_is_not_replaced(tmp_path):
    fifo = tmp_path / "late.json"
    os.mkfifo(fifo)
    with pytest.raises(files.NotRegularFile, match="FIFO"):
        files.atomic_write(fifo, "{}")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert [p.name for p in tmp_path.iterdir()] == ["late.json"]


def test_a_history_that_is_a_fifo_is_refused_not_waited_on(capsys, tmp_path):
    fifo = tmp_path / "history.fifo"
    os.mkfifo(fifo)
    code, _, err = run(capsys, *RUN[:-1], "-o", str(tmp_path), "--history", str(fifo))
    assert_one_line_error(code, err, "--history", "is a FIFO")
    assert code == 2


# ---- 12. messages that mislead ----------------------------------------------------------------


def test_two_options_naming_one_file_are_refused(capsys, tmp_path):
    same = str(tmp_path / "x")
    code, _, err = run(capsys, *SWEEP, "--json", same, "--csv", same)
    assert_one_line_error(code, err, "--csv", "also where --json writes")
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("value", ["plots/", "{tmp}/"])
def test_a_plot_prefix_naming_a_directory_is_refused(capsys, tmp_path, value):
    code, _, err = run(capsys, *SWEEP, "--plot", value.format(tmp=tmp_path))
    assert_one_line_error(code, err, "--plot", "names a directory", "prefix")
    assert not list(tmp_path.glob("*.png"))


def _json(path: Path) -> dict[str, object]:
    return json.loads(path.read_text())  # type: ignore[no-any-return]


# ---- 2. fleet: options first, and a missing MPI library is one line ------------------------------


@pytest.fixture
def mpi4py_without_library(monkeypatch):
    """mpi4py 4 installed where no libmpi is: importing MPI raises RuntimeError."""
    import sys
    import types

    package = types.ModuleType("mpi4py")

    def missing(name: str) -> object:
        raise RuntimeError("cannot load MPI library")

    package.__getattr__ = missing  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "mpi4py", package)
    monkeypatch.delitem(sys.modules, "mpi4py.MPI", raising=False)


def test_fleet_without_an_mpi_library_is_one_line_naming_what_to_install(
    capsys, mpi4py_without_library
):
    code, _, err = run(capsys, "fleet", "--simulate")
    assert_one_line_error(code, err, "no MPI library", "Open MPI", "MPICH")
    assert code == 1


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--thresholds", "missing.toml"], "--thresholds"),
        (["--timeout", "0"], "--timeout"),
        (["--cases", "nope"], "--cases"),
        (["--seed", "-1"], "--seed"),
    ],
)
def test_fleet_checks_its_options_before_opening_mpi(
    capsys, mpi4py_without_library, args, fragment
):
    code, _, err = run(capsys, "fleet", "--simulate", *args)
    assert_one_line_error(code, err, fragment)
    assert code == 2


def test_fleet_ranks_other_than_zero_stay_silent_on_a_bad_option(capsys, monkeypatch):
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "3")
    code, _, err = run(capsys, "fleet", "--simulate", "--timeout", "0")
    assert code == 2 and err == ""


# ---- 3. no GPU: the error says that --simulate shows what the command does -------------------


@pytest.mark.parametrize(
    "command",
    [["run"], ["info"], ["sweep"], ["gl"], ["gemm"], ["batch"], ["pitch"], ["pageable"],
     ["overlap", "cpu"], ["overlap", "gpu"], ["overlap", "buffers"]],
)  # fmt: skip
def test_no_gpu_points_at_simulate(capsys, monkeypatch, command):
    from xferscope.cli import common
    from xferscope.core.errors import NoDeviceError

    def no_driver(simulate: bool, **_: object) -> object:
        if simulate:
            raise AssertionError("only the real engine is asked for here")
        raise NoDeviceError("no CUDA device: no NVIDIA driver is loaded on this machine")

    monkeypatch.setattr(common, "open_engine", no_driver)
    code, _, err = run(capsys, *command)
    simulated = " ".join(["xferscope", *command, "--simulate"])
    assert_one_line_error(code, err, "no NVIDIA driver", f"`{simulated}` shows what it does")
    assert code == 1


# ---- 4. scalars checked up front; a document with NaN in it is still written ------------------


@pytest.mark.parametrize(("option", "value"), [("--alpha", "nan"), ("--alpha", "inf"),
                                               ("--beta", "nan"), ("--beta", "-inf")])  # fmt: skip
def test_gemm_scalars_are_checked_before_measuring(capsys, tmp_path, option, value):
    code, _, err = run(capsys, "gemm", "--simulate", "--quick", "-o", str(tmp_path), option, value)
    assert_one_line_error(code, err, option, f"'{value}'")
    assert code == 2
    assert not list(tmp_path.iterdir())


def test_a_document_with_non_finite_numbers_is_written_with_nulls():
    from xferscope.documents.envelope import dumps_document

    text = dumps_document({"a": float("nan"), "b": [1.0, float("inf"), {"c": -float("inf")}]})
    assert json.loads(text) == {"a": None, "b": [1.0, None, {"c": None}]}


def test_a_data_file_that_cannot_be_made_costs_no_other_file(tmp_path):
    from xferscope.cli.outputs import Delivery, Output, text

    def broken() -> str:
        raise ValueError("Out of range float values are not JSON compliant")

    outputs = [
        Output(tmp_path / "a.json", text(broken), "--json", False),
        Output(tmp_path / "a.csv", text(lambda: "x\n"), "--csv", False),
    ]
    delivery = Delivery(outputs)
    delivery.write_data()
    assert (tmp_path / "a.csv").read_text() == "x\n"
    assert delivery.failures == [
        f"cannot write {tmp_path / 'a.json'}: ValueError: Out of range float values are not "
        "JSON compliant"
    ]


# ---- 11. one rule per kind of option, in one place ----------------------------------------------

TRIALS_COMMANDS = [["sweep"], ["gemm"], ["batch"], ["pitch"], ["overlap", "cpu"],
                   ["overlap", "buffers"]]  # fmt: skip
TARGET_COMMANDS = [["sweep"], ["gemm"], ["batch"], ["pitch"]]


@pytest.mark.parametrize("command", TRIALS_COMMANDS)
@pytest.mark.parametrize("value", ["0", "99999999999999999999", "1.5", "nan", "-3"])
def test_trials_mean_the_same_everywhere(capsys, command, value):
    code, _, err = run(capsys, *command, "--simulate", "--trials", value)
    assert_one_line_error(code, err, f"--trials: '{value}' is not a count from 1 to 1000")
    assert code == 2


@pytest.mark.parametrize("command", TARGET_COMMANDS)
@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "61"])
def test_target_time_means_the_same_everywhere(capsys, command, value):
    code, _, err = run(capsys, *command, "--simulate", "--target-time", value)
    assert_one_line_error(
        code, err, f"--target-time: '{value}' is not a number of seconds from 0.001 to 60"
    )
    assert code == 2


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["overlap", "cpu", "--simulate", "--work", "1e9"], "--work"),
        (["gemm", "--simulate", "--pad", "0"], "--pad: '0' is not a power of two"),
        (["gemm", "--simulate", "--cpu-sizes", "64"], "--cpu-sizes: measures the CPU"),
        (["gemm", "--simulate", "--ladder", "64"], "--ladder: measures the CPU"),
        (["trace", "-g", "abc", "--", "true"], "--device: 'abc' is not a GPU index"),
        (["history", "-n", "99999999999999999999"], "--limit: '99999999999999999999'"),
        (["compare", "a.json", "b.json", "--threshold", "nan"], "--threshold: 'nan'"),
        (
            ["sweep", "--simulate", "--noise-bound", "0"],
            "'0' is not a fraction above 0 and below 1",
        ),
        (["sweep", "--simulate", "--budget", "-1"], "--budget: '-1'"),
        (["fleet", "--simulate", "--timeout", "inf"], "--timeout: 'inf'"),
    ],
)
def test_limits_the_audit_found_missing(capsys, args, fragment):
    code, _, err = run(capsys, *args)
    assert_one_line_error(code, err, fragment)
    assert code == 2


def test_the_options_dataclass_keeps_the_same_rule():
    from xferscope.core.errors import OptionError
    from xferscope.sweep.options import SweepOptions

    with pytest.raises(OptionError, match="--trials: '5000' is not a count from 1 to 1000"):
        SweepOptions(trials=5000, max_trials=6000)
