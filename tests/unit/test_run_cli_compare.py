"""`xferscope report` and `compare` on two stored simulated runs: a stored run or a run.json
drawn again, reports that never overwrite each other, regressions and the exit codes they give,
and every bad input one line on stderr."""

from __future__ import annotations

import json
import types
from pathlib import Path

import pytest

from xferscope import cli

from .test_cli import assert_one_line_error, run

# history and quick_plots: test_run_cli's autouse fixtures (plots drawn by a stand-in, each test
# a history of its own), which hold here too; imported, pytest finds them.
from .test_run_cli import (  # noqa: F401
    HEADLINE,
    QUICK,
    RUN_FILES,
    _quick_plots,
    flat,
    history,
    quick_plots,
    run_dir,
)

# ---- report and compare ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def stored(tmp_path_factory):
    """Two identical simulated runs, 1 and 2, in one history."""
    base = tmp_path_factory.mktemp("stored")
    path = base / "history.sqlite3"  # not `history`: that is the autouse fixture's name here
    dirs = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("xferscope.report.plots.write_plots", _quick_plots)
        for i in (1, 2):
            out = base / f"out{i}"
            assert cli.main([*QUICK, "-o", str(out), "--history", str(path)]) == 0
            dirs.append(run_dir(out))
    return types.SimpleNamespace(history=path, dirs=dirs, base=base)


def test_report_renders_a_stored_run_again(capsys, tmp_path, stored):
    code, out, err = run(
        capsys, "report", "1", "--history", str(stored.history), "-o", str(tmp_path)
    )
    assert code == 0, err
    directory = tmp_path / "run-1"
    assert {p.name for p in directory.iterdir()} == RUN_FILES
    assert "SIMULATED" in out and "report.html" in flat(err)
    again = json.loads((directory / "run.json").read_text())
    original = json.loads((stored.dirs[0] / "run.json").read_text())
    assert again == original


def test_report_of_a_run_json_file(capsys, tmp_path, stored):
    code, _, err = run(capsys, "report", str(stored.dirs[1] / "run.json"), "-o", str(tmp_path))
    assert code == 0, err
    # Named after the run's own directory, run-<time>.
    assert (tmp_path / stored.dirs[1].name / "report.html").exists()


def test_reports_never_overwrite_each_other(capsys, tmp_path, stored):
    """Two runs' JSON files with the same name, and one run drawn twice: four directories."""
    for n, source in enumerate(stored.dirs):
        copy = tmp_path / f"copy{n}" / "run.json"
        copy.parent.mkdir()
        copy.write_text((source / "run.json").read_text())
    refs = [str(tmp_path / "copy0" / "run.json"), str(tmp_path / "copy1" / "run.json")]
    refs += ["1", "1"]
    out = tmp_path / "out"
    for ref in refs:
        code, _, err = run(capsys, "report", ref, "--history", str(stored.history), "-o", str(out))
        assert code == 0, err
    assert sorted(p.name for p in out.iterdir()) == ["copy0", "copy1", "run-1", "run-1-2"]
    created = [json.loads((d / "run.json").read_text())["created"] for d in sorted(out.iterdir())]
    assert len(created) == 4


def test_report_of_a_missing_run_is_one_line(capsys, tmp_path, stored):
    code, _, err = run(capsys, "report", "7", "--history", str(stored.history), "-o", str(tmp_path))
    assert_one_line_error(code, err, "no run 7")
    assert not list(tmp_path.iterdir())


def test_compare_identical_runs_exits_0(capsys, stored):
    code, out, err = run(capsys, "compare", "1", "2", "--history", str(stored.history))
    assert code == 0, err
    assert "no metric changed beyond its noise" in out
    assert "0 slower" in out and "SLOWER" not in out
    code, out, _ = run(capsys, "compare", "1", "2", "--history", str(stored.history), "--json")
    doc = json.loads(out)
    assert code == 0 and doc["regressions"] == [] and doc["counts"]["slower"] == 0
    assert doc["counts"]["same"] == len(doc["metrics"]) > 0


def _slower_copy(stored, tmp_path: Path) -> Path:
    """Run 1 with the headline H2D curve's largest point 20% slower."""
    doc = json.loads((stored.dirs[0] / "run.json").read_text())
    (curve,) = [
        c
        for c in doc["gpus"][0]["curves"]
        if c["config"]
        == {
            "device": 0,
            "direction": "h2d",
            "memory": "pinned",
            "mechanism": "async",
            "timing": "device",
        }
    ]
    largest = curve["points"][-1]
    largest["samples_s"] = [s / 0.8 for s in largest["samples_s"]]
    path = tmp_path / "slower.json"
    path.write_text(json.dumps(doc))
    return path


def test_compare_against_a_slower_run_exits_1(capsys, tmp_path, stored):
    slower = _slower_copy(stored, tmp_path)
    code, out, err = run(capsys, "compare", "1", str(slower), "--history", str(stored.history))
    assert code == 1, err
    assert "SLOWER" in out and HEADLINE in out
    assert "-20.0%" in out
    assert "1 regression beyond 5%" in out
    code, out, _ = run(
        capsys, "compare", "1", str(slower), "--history", str(stored.history), "--json"
    )
    assert code == 1
    assert json.loads(out)["regressions"] == [HEADLINE]


def test_compare_the_other_way_is_faster_and_exits_0(capsys, tmp_path, stored):
    slower = _slower_copy(stored, tmp_path)
    code, out, err = run(capsys, "compare", str(slower), "2", "--history", str(stored.history))
    assert code == 0, err
    assert "FASTER" in out and "SLOWER" not in out


def test_compare_a_regression_below_the_threshold_exits_0(capsys, tmp_path, stored):
    slower = _slower_copy(stored, tmp_path)
    code, out, _ = run(
        capsys, "compare", "1", str(slower), "--history", str(stored.history), "--threshold", "0.25"
    )
    assert code == 0
    assert "SLOWER" in out, "still shown, but not failing"


@pytest.mark.parametrize(
    ("a", "b", "fragments"),
    [
        ("1", "/missing.json", ["/missing.json", "no such file"]),
        ("1", "99", ["no run 99"]),
        ("/missing.json", "1", ["/missing.json"]),
    ],
)
def test_compare_with_a_missing_run_is_one_line(capsys, stored, a, b, fragments):
    code, out, err = run(capsys, "compare", a, b, "--history", str(stored.history))
    assert_one_line_error(code, err, *fragments)
    assert out == ""


def test_compare_a_file_that_is_not_a_run_is_one_line(capsys, tmp_path, stored):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    code, _, err = run(capsys, "compare", "1", str(bad), "--history", str(stored.history))
    assert_one_line_error(code, err, str(bad), "not valid JSON")


# ---- one rule each -----------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "-0.1", "11"])
def test_compare_refuses_a_threshold_that_is_not_a_fraction(capsys, stored, value):
    code, out, err = run(
        capsys, "compare", "1", "2", "--history", str(stored.history), f"--threshold={value}"
    )
    assert_one_line_error(code, err, "--threshold", "0 to 10")
    assert code == 2 and out == ""


def test_a_report_of_a_document_of_the_wrong_shape_names_the_field(capsys, tmp_path, stored):
    doc = json.loads((stored.dirs[0] / "run.json").read_text())
    doc["gpus"][0]["curves"] = "none"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    code, _, err = run(capsys, "report", str(bad), "-o", str(tmp_path / "out"))
    assert_one_line_error(code, err, str(bad), "gpus[0].curves: expected a list, found a string")
    assert not (tmp_path / "out").exists()


def test_compare_refuses_a_simulated_run_against_a_measured_one(capsys, tmp_path, stored):
    doc = json.loads((stored.dirs[0] / "run.json").read_text())
    doc["simulated"] = False
    measured = tmp_path / "measured.json"
    measured.write_text(json.dumps(doc))
    code, out, err = run(capsys, "compare", "1", str(measured), "--history", str(stored.history))
    assert_one_line_error(
        code, err, "run A is simulated and run B was measured on a GPU", "--force"
    )
    assert code == 2 and out == ""
    code, out, err = run(
        capsys, "compare", "1", str(measured), "--history", str(stored.history), "--force"
    )
    assert code == 0, err
    assert "FORCED: run A is simulated" in out and "(forced: " in out
