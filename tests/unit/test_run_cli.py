"""`xferscope run` and `history` on the simulated engine: every file is written, the history
records the run, a broken history or a Ctrl-C costs no results, and every bad input is one line
on stderr. `report` and `compare` of stored runs: test_run_cli_compare.py."""

from __future__ import annotations

import datetime as real_dt
import json
import re
import sqlite3
import threading
import time
import types
from pathlib import Path

import pytest

from xferscope import cli
from xferscope.cli import run as run_command
from xferscope.core.engine.simulated import SimulatedEngine
from xferscope.run.history import History

from .test_cli import ENGINE, assert_one_line_error, run

QUICK = ["run", "--simulate", "--quick"]
RUN_FILES = {
    "report.html",
    "run.json",
    "points.csv",
    "metrics.csv",
    "gpu0-bandwidth.png",
    "gpu0-latency.png",
}
HEADLINE = "gpu0/h2d/pinned/async/device/bandwidth"

from xferscope.run.investigate import gpu_curves  # noqa: E402

CURVES = len(gpu_curves(0))  # per GPU


def _quick_plots(result, prefix):
    """Stands in for report.plots.write_plots (matplotlib takes most of a run's second): the
    same files, as the real one names them, for the tests that are not about the plots."""
    if not any(c.points for c in result.curves):
        return []
    paths = [Path(f"{prefix}-{what}.png") for what in ("bandwidth", "latency")]
    for path in paths:
        path.write_bytes(b"\x89PNG stand-in")
    return paths


@pytest.fixture
def real_plots():
    """Requested by the tests that draw the plots for real."""


@pytest.fixture(autouse=True)
def quick_plots(request, monkeypatch):
    if "real_plots" not in request.fixturenames:
        monkeypatch.setattr("xferscope.report.plots.write_plots", _quick_plots)


@pytest.fixture(autouse=True)
def history(tmp_path, monkeypatch) -> Path:
    """Every test gets its own history: none touches the user's."""
    path = tmp_path / "state" / "history.sqlite3"
    monkeypatch.setenv("XFERSCOPE_HISTORY", str(path))
    return path


def run_dir(out: Path) -> Path:
    (directory,) = out.glob("run-*")
    return directory


def flat(text: str) -> str:
    """stderr as one string: rich wraps long lines at the console's width."""
    return "".join(text.splitlines())


def engine(**kwargs):
    return lambda simulate=False: SimulatedEngine(**kwargs)


def history_json(capsys) -> list[dict]:
    code, out, err = run(capsys, "history", "--json")
    assert code == 0, err
    return json.loads(out)


# ---- a run -------------------------------------------------------------------------------------


def test_run_writes_every_file_and_adds_the_run_to_the_history(
    capsys, tmp_path, history, real_plots
):
    code, out, err = run(capsys, *QUICK, "-o", str(tmp_path / "out"))
    assert code == 0, err
    directory = run_dir(tmp_path / "out")
    assert re.fullmatch(r"run-\d{8}-\d{6}", directory.name)
    assert {p.name for p in directory.iterdir()} == RUN_FILES
    assert all((directory / name).stat().st_size > 0 for name in RUN_FILES)
    assert "SIMULATED" in out
    assert "H2D from pageable memory" in out and "why:" in out and "fix:" in out
    assert "Headline figures" in out
    assert "INCOMPLETE" not in out
    assert "report.html" in flat(err) and "saved as run 1" in flat(err)

    doc = json.loads((directory / "run.json").read_text())
    assert doc["schema"] == "xferscope-run"
    assert doc["simulated"] is True and doc["complete"] is True and doc["interrupted"] is False
    assert doc["mode"] == "quick"
    assert [g["status"] for g in doc["gpus"]] == ["complete"]
    assert len(doc["gpus"][0]["curves"]) == CURVES
    # where the time went, by the host's clock, for every kind of check
    phases = doc["gpus"][0]["phases_s"]
    # numa: the fixed host has two nodes; no chase in a quick run
    assert set(phases) == {"curves", "concurrent", "pinning", "overlap", "numa", "gl", "gemm"}
    assert all(isinstance(v, float) and v >= 0 for v in phases.values())
    assert any(f["code"] == "pageable_slow" for f in doc["findings"])
    # One row per point (every curve has 8 sizes) and a header.
    assert len((directory / "points.csv").read_text().splitlines()) == 1 + CURVES * 8
    assert HEADLINE in (directory / "metrics.csv").read_text()
    html = (directory / "report.html").read_text()
    assert "SIMULATED" in html and 'class="banner incomplete"' not in html
    for name in ("gpu0-bandwidth.png", "gpu0-latency.png"):
        assert (directory / name).read_bytes().startswith(b"\x89PNG")
        assert (directory / name).stat().st_size > 10_000, "a real plot"

    assert history.exists()
    (listed,) = history_json(capsys)
    assert listed["id"] == 1 and listed["created"] == doc["created"]
    assert listed["simulated"] is True and listed["complete"] is True
    assert listed["mode"] == "quick" and listed["hostname"] == "simulated"
    assert listed["findings_error"] == 0
    assert listed["findings_warning"] == sum(f["severity"] == "warning" for f in doc["findings"])

    code, out, err = run(capsys, "history")
    assert code == 0, err
    assert "quick (simulated)" in out and str(history) in out
    assert re.search(r"│\s+1 │", out), out


def test_history_path_option_beats_the_environment(capsys, tmp_path, history):
    other = tmp_path / "other.sqlite3"
    code, _, err = run(capsys, *QUICK, "-o", str(tmp_path), "--history", str(other))
    assert code == 0, err
    assert other.exists() and not history.exists()
    code, out, _ = run(capsys, "history", "--json", "--history", str(other))
    assert code == 0 and len(json.loads(out)) == 1


def test_no_history_adds_nothing(capsys, tmp_path, history):
    code, _, err = run(capsys, *QUICK, "-o", str(tmp_path / "out"), "--no-history")
    assert code == 0, err
    assert {p.name for p in run_dir(tmp_path / "out").iterdir()} == RUN_FILES
    assert not history.exists()
    assert "saved as" not in err
    code, _, err = run(capsys, "history")
    assert_one_line_error(code, err, "no history at", str(history))


def test_prometheus_textfile(capsys, tmp_path):
    prom = tmp_path / "textfiles" / "xferscope.prom"
    code, _, err = run(capsys, *QUICK, "-o", str(tmp_path / "out"), "--prometheus", str(prom))
    assert code == 0, err
    text = prom.read_text()
    assert "# TYPE xferscope_bandwidth_bytes_per_second gauge" in text
    sample = re.search(
        r'^xferscope_bandwidth_bytes_per_second\{gpu="0",[^}]*direction="h2d",memory="pinned",'
        r'mechanism="async",timing="device"\} (\S+)$',
        text,
        re.MULTILINE,
    )
    assert sample is not None, text
    assert 50e9 < float(sample.group(1)) < 60e9
    assert re.search(r"^xferscope_run_simulated 1$", text, re.MULTILINE)
    assert re.search(r"^xferscope_run_complete 1$", text, re.MULTILINE)
    assert "xferscope.prom" in flat(err)
    assert not list(prom.parent.glob("*.tmp")), "no temporary file is left"


def test_verification_failure_exits_3(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(ENGINE, engine(corrupt=True))
    code, out, _ = run(capsys, *QUICK, "-o", str(tmp_path))
    assert code == cli.EXIT_VERIFICATION_FAILED
    assert "ERROR" in out and "data arrived wrong" in out
    assert (run_dir(tmp_path) / "report.html").exists()


# ---- a history that cannot be written ----------------------------------------------------------


def _assert_files_written_but_not_history(code, out, err, out_dir, history, *fragments):
    assert code == 1
    assert "Traceback" not in err
    assert {p.name for p in run_dir(out_dir).iterdir()} == RUN_FILES
    assert "SIMULATED" in out
    text = flat(err)
    assert "the run's files are written, but the history is not" in text
    assert str(history) in text
    for fragment in fragments:
        assert fragment in text


def test_garbage_history_is_refused_before_measuring(capsys, tmp_path, history):
    garbage = bytes(range(256)) * 16
    history.parent.mkdir()
    history.write_bytes(garbage)
    code, out, err = run(capsys, *QUICK, "-o", str(tmp_path / "out"))
    assert_one_line_error(code, err, "--history", str(history), "not a database", "--no-history")
    assert code == 2 and "SIMULATED" not in out, "nothing was measured"
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").iterdir())
    assert history.read_bytes() == garbage, "the file is left as it was"


def test_history_spoiled_during_the_run_costs_no_results(capsys, tmp_path, history, monkeypatch):
    """The history was fine before measuring and is garbage after: the files are written."""
    garbage = bytes(range(256)) * 16
    history.parent.mkdir()
    from xferscope.run import investigate

    measure = investigate.run_investigation

    def spoil(*args, **kwargs):
        result = measure(*args, **kwargs)
        history.write_bytes(garbage)
        return result

    monkeypatch.setattr(investigate, "run_investigation", spoil)
    code, out, err = run(capsys, *QUICK, "-o", str(tmp_path / "out"))
    _assert_files_written_but_not_history(
        code, out, err, tmp_path / "out", history, "not a database"
    )
    assert history.read_bytes() == garbage, "the file is left as it was"


@pytest.mark.parametrize("lock", ["EXCLUSIVE", "IMMEDIATE"])
def test_locked_history_is_waited_for_then_costs_no_results(
    capsys, tmp_path, history, lock, monkeypatch
):
    """EXCLUSIVE: another process holds the file (the run cannot even open it); IMMEDIATE:
    another process is writing (the run opens it but cannot add to it). The run says it waits,
    waits HISTORY_WAIT_S (60 s; 1 s here), then keeps its files and says the history is not
    written."""
    monkeypatch.setattr("xferscope.cli.common.HISTORY_WAIT_S", 1.0)
    History(history).close()
    holder = sqlite3.connect(history, isolation_level=None)
    try:
        holder.execute(f"BEGIN {lock}")
        start = time.monotonic()
        code, out, err = run(capsys, *QUICK, "-o", str(tmp_path / "out"))
        waited = time.monotonic() - start
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert "is locked by another process; waiting up to 1 s" in flat(err)
    assert waited >= 1.0
    lines = [line for line in err.splitlines() if "waiting up to" not in line]
    _assert_files_written_but_not_history(
        code, out, "\n".join(lines), tmp_path / "out", history, "locked"
    )
    with History(history, readonly=True) as h:
        assert h.list() == []


def test_a_lock_released_while_waiting_is_taken(capsys, tmp_path, history, monkeypatch):
    """Another writer that finishes within the wait: the run is added to the history."""
    History(history).close()
    holder = sqlite3.connect(history, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")
    release = threading.Timer(0.3, lambda: (holder.execute("ROLLBACK"), holder.close()))
    # the lock goes 0.3 s after the run says it waits, however long measuring took
    from xferscope.cli import common

    original = common.stderr.print

    def notice(*args, **kwargs):
        original(*args, **kwargs)
        if "waiting up to" in " ".join(map(str, args)) and not release.is_alive():
            release.start()

    monkeypatch.setattr(common.stderr, "print", notice)
    try:
        code, _, err = run(capsys, *QUICK, "-o", str(tmp_path / "out"))
    finally:
        if release.is_alive() or release.finished.is_set():
            release.join()
        else:
            holder.execute("ROLLBACK")
            holder.close()
    assert code == 0, err
    assert "waiting up to 60 s" in flat(err) and "saved as run 1" in flat(err)


# ---- bad options -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (["--device", "5"], ["--device", "no GPU with index 5"]),
        (["--device", "0,x"], ["--device", "'x'"]),
        (["--prometheus", "{tmp}/a-file/x.prom"], ["--prometheus", "is a file, not a directory"]),
        (["--prometheus", "{tmp}"], ["--prometheus", "is a directory"]),
        (["--seed", "abc"], ["--seed"]),
        (["--bogus"], ["No such option", "--bogus"]),
    ],
)
def test_bad_run_input_is_one_line_before_measuring(capsys, tmp_path, history, args, fragments):
    (tmp_path / "a-file").write_text("x")
    args = [a.format(tmp=tmp_path) for a in args]
    code, out, err = run(capsys, *QUICK, "-o", str(tmp_path / "out"), *args)
    assert_one_line_error(code, err, *fragments)
    assert code == 2
    assert "SIMULATED" not in out, "nothing was measured"
    assert not list(tmp_path.rglob("run.json"))
    assert not history.exists()


def test_unwritable_out_directory_is_refused(capsys, history):
    code, _, err = run(capsys, *QUICK, "-o", "/proc/xferscope-cannot-be-here")
    assert_one_line_error(code, err, "--out", "cannot")
    assert not history.exists()


def test_bad_device_leaves_no_directory(capsys, tmp_path):
    code, _, _ = run(capsys, *QUICK, "-o", str(tmp_path / "out"), "--device", "5")
    assert code == 2
    assert not list((tmp_path / "out").glob("run-*"))


def test_two_runs_in_one_second_keep_both(capsys, tmp_path, monkeypatch):
    fixed = real_dt.datetime(2026, 1, 2, 3, 4, 5)
    fake = types.SimpleNamespace(
        datetime=types.SimpleNamespace(now=lambda *a: fixed), timezone=real_dt.timezone
    )
    monkeypatch.setattr("xferscope.cli.outputs.dt", fake)
    for _ in range(2):
        assert run(capsys, *QUICK, "-o", str(tmp_path), "--no-history")[0] == 0
    assert len(list(tmp_path.glob("run-*/run.json"))) == 2


# ---- Ctrl-C and a failing GPU ------------------------------------------------------------------


def test_ctrl_c_writes_an_incomplete_report_and_exits_130(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(ENGINE, engine(interrupt_after=200))
    code, out, err = run(capsys, *QUICK, "-o", str(tmp_path / "out"))
    assert code == cli.EXIT_INTERRUPTED == 130
    assert "Traceback" not in err
    assert "interrupted" in err and "INCOMPLETE" in out
    directory = run_dir(tmp_path / "out")
    assert {"report.html", "run.json", "points.csv", "metrics.csv"} <= {
        p.name for p in directory.iterdir()
    }
    html = (directory / "report.html").read_text()
    assert 'class="banner incomplete"' in html
    assert "INCOMPLETE: interrupted before every measurement ran" in html
    doc = json.loads((directory / "run.json").read_text())
    assert doc["interrupted"] is True and doc["complete"] is False
    (gpu,) = doc["gpus"]
    assert gpu["status"] == "interrupted" and gpu["curves"]
    assert any(f["code"] == "incomplete" for f in doc["findings"])
    (listed,) = history_json(capsys)
    assert listed["complete"] is False


def test_failing_gpu_writes_the_report_and_exits_1(capsys, tmp_path, monkeypatch, real_plots):
    monkeypatch.setattr(ENGINE, engine(devices=2, failing_devices=(1,)))
    code, out, err = run(capsys, *QUICK, "-o", str(tmp_path / "out"))
    assert code == 1
    assert "Traceback" not in err
    assert "GPU 1 failed" in out and "INCOMPLETE" in out
    directory = run_dir(tmp_path / "out")
    assert {p.name for p in directory.iterdir()} >= RUN_FILES
    html = (directory / "report.html").read_text()
    assert "GPU 1 failed" in html
    doc = json.loads((directory / "run.json").read_text())
    gpu0, gpu1 = doc["gpus"]
    assert gpu0["status"] == "complete" and len(gpu0["curves"]) == CURVES
    assert gpu0["pinning"] is not None
    assert gpu1["status"] == "failed" and gpu1["error"].startswith("CUDA error")
    assert doc["findings"][0]["code"] == "gpu_failed"
    assert {m["label"] for m in doc["multi"]} == {"all_gpus/h2d", "all_gpus/d2h", "all_gpus/both"}
    (listed,) = history_json(capsys)
    assert listed["complete"] is False and listed["findings_error"] == 1


def test_device_option_picks_the_gpus(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(ENGINE, engine(devices=2))
    code, _, err = run(capsys, *QUICK, "-o", str(tmp_path), "--device", "1", "--no-history")
    assert code == 0, err
    directory = run_dir(tmp_path)
    doc = json.loads((directory / "run.json").read_text())
    assert [g["index"] for g in doc["gpus"]] == [1] and doc["multi"] == []
    assert (directory / "gpu1-bandwidth.png").exists()
    assert not (directory / "gpu0-bandwidth.png").exists()


# ---- one rule each -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "command",
    [
        ["run", "--simulate", "--quick"],
        ["sweep", "--simulate", "--quick"],
        ["info", "--simulate"],
        ["overlap", "cpu", "--simulate"],
        ["pageable", "--simulate"],
    ],
)
def test_an_empty_device_list_is_refused_by_every_command(capsys, tmp_path, command):
    code, _, err = run(
        capsys, *command, "-g", "", *(["-o", str(tmp_path)] if len(command) > 2 else [])
    )
    assert_one_line_error(code, err, "--device", "one or more GPU indices")
    assert code == 2 and not list(tmp_path.iterdir())


@pytest.mark.parametrize("seed", ["-1", "1e23", str(1 << 64), "abc", ""])
@pytest.mark.parametrize("command", ["run", "sweep"])
def test_a_seed_outside_the_engines_range_is_refused(capsys, tmp_path, command, seed):
    code, _, err = run(
        capsys, command, "--simulate", "--quick", f"--seed={seed}", "-o", str(tmp_path)
    )
    assert_one_line_error(code, err, "--seed", "0 to 18446744073709551615")
    assert code == 2 and not list(tmp_path.iterdir())


@pytest.mark.parametrize(("seed", "value"), [(str((1 << 64) - 1), (1 << 64) - 1), ("0x10", 16)])
def test_seeds_across_the_whole_range_are_taken(capsys, tmp_path, seed, value):
    code, _, err = run(
        capsys,
        "sweep",
        "--simulate",
        "--quick",
        "--sizes",
        "1",
        "-d",
        "h2d",
        "-m",
        "pinned",
        "--seed",
        seed,
        "-o",
        str(tmp_path),
    )
    assert code == 0, err
    (path,) = tmp_path.glob("sweep-*/sweep.json")
    assert json.loads(path.read_text())["options"]["seed"] == value


def test_a_simulated_run_says_its_time_is_modelled(capsys, tmp_path):
    code, _, err = run(capsys, *QUICK, "-o", str(tmp_path))
    assert code == 0, err
    directory = run_dir(tmp_path)
    doc = json.loads((directory / "run.json").read_text())
    assert doc["wall_s"] > 2 and doc["elapsed_s"] < doc["wall_s"]
    html = (directory / "report.html").read_text()
    assert "<dt>modelled time</dt>" in html and "the simulation took" in html
    assert "<dt>wall time</dt>" not in html
    code, out, _ = run(capsys, "history")
    assert code == 0 and "modelled" in out


def test_quick_takes_the_time_the_readme_says():
    """`run --help` and the README quote the same measured times for --quick and the default."""
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    assert (
        f"about {run_command.DEFAULT_S} s per {run_command.TIMES_ON}; `--quick` about "
        f"{run_command.QUICK_S} s" in readme
    )
    from click.testing import CliRunner

    help_text = " ".join(CliRunner().invoke(cli.cli, ["run", "--help"]).output.split())
    assert f"A first look in about {run_command.QUICK_S} s per GPU" in help_text
    assert f"about {run_command.DEFAULT_S} s per GPU" in help_text
