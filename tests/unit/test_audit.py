"""The second audit's defects about options and messages, each reproduced as the audit wrote it:
every bad input one clear line, before measuring. Each test failed before its fix. Those about
files (nothing destroyed, nothing lost): test_audit_files."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from .test_cli import assert_one_line_error, run

SWEEP = ["sweep", "--simulate", "--quick", "--sizes", "1MiB", "-d", "h2d", "-m", "pinned"]
RUN = ["run", "--simulate", "--quick", "--no-history"]


@pytest.fixture(autouse=True)
def own_history(tmp_path, monkeypatch):
    monkeypatch.setenv("XFERSCOPE_HISTORY", str(tmp_path / "history.sqlite3"))
    monkeypatch.chdir(tmp_path)


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


# ---- 2. fleet: options first, and a missing MPI library is one line ------------------------------


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
     ["checkpoint", "model.safetensors"],
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


# ---- 4. scalars checked up front (documents with NaN: test_audit_files) --------------------------


@pytest.mark.parametrize(("option", "value"), [("--alpha", "nan"), ("--alpha", "inf"),
                                               ("--beta", "nan"), ("--beta", "-inf")])  # fmt: skip
def test_gemm_scalars_are_checked_before_measuring(capsys, tmp_path, option, value):
    code, _, err = run(capsys, "gemm", "--simulate", "--quick", "-o", str(tmp_path), option, value)
    assert_one_line_error(code, err, option, f"'{value}'")
    assert code == 2
    assert not list(tmp_path.iterdir())


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


# ---- 5. a plan is bounded by what can be measured (signals: test_audit_files) --------------------


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["--steps", "200"], "--steps"),
        (["--steps", "256", "-d", "h2d,d2h,d2d", "-m", "pinned,pageable,wc"], "--steps"),
        (["--sizes", ",".join(str(n) for n in range(1, 12_002))], "--sizes"),
    ],
)
def test_a_sweep_too_large_to_measure_is_refused_with_its_size(capsys, tmp_path, args, option):
    code, _, err = run(capsys, "sweep", "--simulate", "--quick", "-o", str(tmp_path), *args)
    assert_one_line_error(code, err, option, "this plan has", "points", "at most 10000")
    assert code == 2 and not list(tmp_path.iterdir())


def test_steps_beyond_the_limit_are_refused(capsys):
    code, _, err = run(capsys, "sweep", "--simulate", "--steps", "100000")
    assert_one_line_error(code, err, "--steps: '100000' is not a count from 1 to 256")


def test_gemm_ranges_are_bounded_before_they_are_expanded(capsys):
    code, _, err = run(capsys, "gemm", "--simulate", "--sizes", "1:2000000000:1")
    assert_one_line_error(code, err, "--sizes", "this plan has 2000000000 points")


# ---- 7, 8, 10. nothing can run: exit 2 before measuring, or 1 with an Error line -----------------


def test_pitch_with_no_runnable_cell_is_refused_up_front(capsys, tmp_path):
    code, _, err = run(capsys, "pitch", "--simulate", "--methods", "span", "--direction", "d2h",
                       "-o", str(tmp_path))  # fmt: skip
    assert_one_line_error(code, err, "--methods", "nothing in this plan can run")
    assert code == 2 and not list(tmp_path.iterdir())


def test_gl_where_every_scenario_fails_exits_1_saying_so(capsys, tmp_path):
    # a texture the simulated GL cannot hold (16 GiB): GL_OUT_OF_MEMORY in every scenario, at
    # run time (what the GL refuses by its rules is refused before measuring: test_gl.py)
    code, out, err = run(capsys, "gl", "--simulate", "--quick", "--size", "32768",
                         "--internal", "rgba32f", "--type", "float", "--bytes", "64MiB",
                         "-o", str(tmp_path), "--no-history")  # fmt: skip
    assert code == 1, err
    assert "Error: every scenario failed" in err
    assert "the other scenarios ran" not in out + err


def test_gemm_shape_larger_than_the_gpu_is_refused_up_front(capsys, tmp_path):
    code, _, err = run(capsys, "gemm", "--simulate", "--sizes", "1000000", "-o", str(tmp_path))
    assert_one_line_error(code, err, "--sizes: '1000000'", "in all")
    assert code == 2 and not list(tmp_path.iterdir())


# ---- 12. messages that mislead (continued) ----------------------------------------------------


def test_compare_of_two_kinds_does_not_offer_force(capsys, tmp_path):
    run_json, gemm_json = tmp_path / "run.json", tmp_path / "gemm.json"
    assert run(capsys, *RUN, "-o", str(tmp_path / "r"))[0] == 0
    gemm = ["gemm", "--simulate", "--quick", "--no-history", "--sizes", "256", "--precision",
            "fp32", "--json", str(gemm_json), "-o", str(tmp_path)]  # fmt: skip
    assert run(capsys, *gemm)[0] == 0
    (found,) = (tmp_path / "r").glob("run-*/run.json")
    run_json.write_text(found.read_text())
    for extra in ([], ["--force"]):
        code, _, err = run(capsys, "compare", str(run_json), str(gemm_json), *extra)
        assert_one_line_error(code, err, "one kind")
        assert "--force" not in err


def test_sizes_too_large_blame_the_option_given(capsys):
    code, _, err = run(capsys, "sweep", "--simulate", "--sizes", "64TiB")
    assert_one_line_error(code, err, "--sizes")
    assert "--max-size" not in err


# ---- 14. what a newcomer trips on --------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "kind"),
    [
        (SWEEP, "sweep"),
        (["overlap", "cpu", "--simulate", "--size", "1MiB", "--trials", "1", "--work", "0,1ms"],
         "overlap-cpu"),
        (["overlap", "buffers", "--simulate", "--buffers", "1,2", "--chunk-sizes", "1MiB",
          "--chunks", "4", "--trials", "1"], "overlap-buffers"),
        (["overlap", "gpu", "--simulate", "--size", "4MiB", "--streams", "1,2"], "overlap-gpu"),
        (["pageable", "--simulate", "--sizes", "1MiB", "--sends", "1,10"], "pageable"),
    ],
)  # fmt: skip
def test_every_measuring_command_adds_to_the_history(capsys, tmp_path, args, kind):
    code, _, err = run(capsys, *args, "-o", str(tmp_path))
    assert code == 0, err
    assert "saved as run 1" in err
    code, out, _ = run(capsys, "history", "--json")
    assert json.loads(out)[0]["kind"] == kind
    code, _, err = run(capsys, "report", "1", "-o", str(tmp_path / "again"))
    assert code == 0, err
    code, _, err = run(capsys, *args, "-o", str(tmp_path), "--no-history")
    assert code == 0 and "saved as" not in err


def _commands() -> list[list[str]]:
    import click

    from xferscope.cli import cli, load_commands

    load_commands()
    found = []
    for name, command in sorted(cli.commands.items()):
        if isinstance(command, click.Group):
            found += [[name, sub] for sub in sorted(command.commands)]
        found.append([name])
    return found


def test_the_command_list_gives_whole_sentences(capsys):
    code, out, _ = run(capsys, "--help")
    assert code == 0
    listed = out.split("Commands:")[1]
    assert "..." not in listed
    assert len([line for line in listed.splitlines() if line.strip()]) == len(
        [c for c in _commands() if len(c) == 1]
    )


@pytest.mark.parametrize("command", _commands())
def test_every_help_ends_with_examples_that_parse(capsys, command):
    import shlex

    from xferscope.cli import cli
    from xferscope.cli.app import subcommand

    code, out, _ = run(capsys, *command, "--help")
    assert code == 0 and "Examples:" in out
    examples = [line.strip() for line in out.split("Examples:")[1].splitlines() if line.strip()]
    assert examples
    for example in examples:
        words = shlex.split(example, comments=True)
        words = words[words.index("xferscope") + 1 :]
        target = cli
        for word in command:
            target = subcommand(target, word)
            assert target is not None, word
        assert words[: len(command)] == command, example
        # parses every option as the command would (types and ranges), without running it
        target.make_context(command[-1], words[len(command) :])


def test_the_pageable_warning_names_how_each_figure_was_timed(capsys, tmp_path):
    code, out, _ = run(capsys, *RUN, "-o", str(tmp_path))
    assert code == 0
    warning = next(line for line in out.splitlines() if "from pageable memory reaches" in line)
    assert "by cudaMemcpy" in warning and "API time" in warning + out


def test_the_readme_lists_the_mechanisms_help_lists(capsys):
    from xferscope.core.cases import MECHANISMS

    readme = (Path(__file__).parents[2] / "docs" / "sweep.md").read_text()  # the README's page
    row = next(line for line in readme.splitlines() if line.startswith("| `--mechanism`"))
    for mechanism in MECHANISMS:
        assert f"`{mechanism}`" in row, mechanism


def test_a_missing_plotting_library_is_one_line_before_measuring(capsys, tmp_path, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "plotly", None)  # import plotly raises ImportError
    monkeypatch.delitem(sys.modules, "xferscope.report.page", raising=False)
    code, _, err = run(capsys, *RUN, "-o", str(tmp_path))
    assert_one_line_error(code, err, "plotly is not installed", "pip install plotly")
    assert not list(tmp_path.iterdir())


# ---- found again, with cases the audit did not list --------------------------------------


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["run", "--simulate", "--resume", "99999999999999999999"], "no run 99999999999999999999"),
        (["report", "99999999999999999999"], "no run 99999999999999999999"),
        (["sweep", "--simulate", "-o", ""], "--out: give a directory, not an empty string"),
        (["sweep", "--simulate", "-o", os.devnull], "is a character device, not a directory"),
        (["gl", "--simulate", "--work", "1e999"], "not a finite time"),
    ],
)
def test_more_bad_input_is_one_line(capsys, tmp_path, args, fragment):
    run(capsys, "sweep", *SWEEP[1:], "-o", str(tmp_path))  # a history with one entry
    code, _, err = run(capsys, *args)
    assert_one_line_error(code, err, fragment)


def test_out_naming_a_file_is_refused_and_the_file_kept(capsys, tmp_path):
    (tmp_path / "afile").write_text("keep")
    code, _, err = run(capsys, *SWEEP, "-o", str(tmp_path / "afile"))
    assert_one_line_error(code, err, "--out", "is a file, not a directory")
    assert (tmp_path / "afile").read_text() == "keep"
