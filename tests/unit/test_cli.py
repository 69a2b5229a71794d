"""The command line on the simulated engine: every bad input is one line on stderr and a
non-zero exit; results are written, also after Ctrl-C."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from xferscope import cli
from xferscope.core.engine.simulated import SimulatedEngine

# Where every command gets its engine: tests put a simulated one of their own there.
ENGINE = "xferscope.cli.common.open_engine"
SMALL = ["--simulate", "--quick", "--sizes", "1,4KiB,1MiB"]
RANGE = ["--simulate", "--quick", "--max-size", "1MiB"]


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = cli.main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line_error(code: int, err: str, *fragments: str) -> None:
    assert code != 0
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("Error: "), err
    assert "Traceback" not in err
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (["--sizes", "0"], ["--sizes", "at least 1 byte"]),
        (["--sizes=-5"], ["--sizes", "'-5'"]),
        (["--sizes", "abc"], ["--sizes", "'abc'", "KiB"]),
        (["--sizes", "12QB"], ["--sizes", "unknown unit"]),
        (["--sizes", "0.5"], ["--sizes", "whole number"]),
        (["--max-size", "1MiB"], ["--sizes", "not both"]),
        (["--device", "3"], ["--device", "no GPU with index 3"]),
        (["--device", "one"], ["--device", "'one'"]),
        (["--memory", "pinned,shiny"], ["--memory", "'shiny'", "pageable, pinned, wc"]),
        (["--direction", "sideways"], ["--direction", "h2d, d2h, d2d, roundtrip"]),
        (["--mechanism", "teleport"], ["--mechanism", "memcpy, async, kernel"]),
        (["--timing", "sundial"], ["--timing", "api, device"]),
        (["--memory", "pageable", "--mechanism", "kernel"], ["--mechanism", "no curve can run"]),
        (["--trials", "0"], ["--trials"]),
        (["--trials", "many"], ["--trials", "'many' is not a count from 1 to 1000"]),
        (["--max-trials", "2"], ["--max-trials", "fewer than --trials"]),
        (["--target-time", "0"], ["--target-time"]),
        (["--target-time", "nan"], ["--target-time"]),
        (["--budget", "-1"], ["--budget"]),
        (["--noise-bound", "2"], ["--noise-bound"]),
        (["--bogus"], ["No such option", "--bogus"]),
    ],
)
def test_bad_sweep_input_is_one_line(capsys, tmp_path, args, fragments):
    code, _, err = run(capsys, "sweep", *SMALL, "-o", str(tmp_path), *args)
    assert_one_line_error(code, err, *fragments)
    assert not list(tmp_path.iterdir()), "nothing is measured (or made) after a bad option"


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (["--min-size", "0"], ["--min-size", "at least 1 byte"]),
        (["--max-size", "x"], ["--max-size", "'x'"]),
        (["--min-size", "1MiB", "--max-size", "1KiB"], ["--max-size", "smaller than --min-size"]),
        (["--max-size", "1TiB"], ["--max-size", "device memory", "free"]),
        (["--steps", "0"], ["--steps"]),
        (["--perturbation", "-3"], ["--perturbation"]),
    ],
)
def test_bad_range_input_is_one_line(capsys, tmp_path, args, fragments):
    code, _, err = run(capsys, "sweep", *RANGE[:2], "-o", str(tmp_path), *args)
    assert_one_line_error(code, err, *fragments)


def test_perturbation_adds_neighbours(capsys, tmp_path):
    code, _, err = run(
        capsys,
        "sweep",
        *RANGE,
        "--min-size",
        "256KiB",
        "--perturbation",
        "3",
        "-d",
        "h2d",
        "-m",
        "pinned",
        "--csv",
        str(tmp_path / "r.csv"),
        "-o",
        str(tmp_path),
    )
    assert code == 0, err
    sizes = sorted(
        {int(r.split(",")[6]) for r in (tmp_path / "r.csv").read_text().splitlines()[1:]}
    )
    assert sizes == [262141, 262144, 262147, 524285, 524288, 524291, 1048573, 1048576, 1048579]


def test_sizes_beyond_host_memory_are_refused(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr("xferscope.core.machine.host_memory_total", lambda: 1 << 30)
    code, _, err = run(capsys, "sweep", *SMALL, "--sizes=4GiB", "-d", "h2d", "-o", str(tmp_path))
    assert_one_line_error(code, err, "--sizes", "host memory")


@pytest.mark.parametrize("option", ["--json", "--csv", "--plot"])
def test_unwritable_output_is_refused_before_measuring(capsys, tmp_path, option):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    code, _, err = run(capsys, "sweep", *SMALL, "-o", str(tmp_path), option, str(blocker / "out"))
    assert_one_line_error(code, err, option, "is a file, not a directory")


def test_output_that_is_a_directory_is_refused(capsys, tmp_path):
    code, _, err = run(capsys, "sweep", *SMALL, "--json", str(tmp_path))
    assert_one_line_error(code, err, "--json", "is a directory")


def test_unwritable_out_directory_is_refused(capsys):
    code, _, err = run(capsys, "sweep", *SMALL, "-o", "/proc/xferscope-cannot-be-here")
    assert_one_line_error(code, err, "--out", "cannot")


def test_sweep_writes_every_output_and_says_simulated(capsys, tmp_path):
    code, out, err = run(capsys, "sweep", *SMALL, "-o", str(tmp_path), "-d", "h2d,d2h,d2d")
    assert code == 0, err
    assert "SIMULATED" in out
    (path,) = tmp_path.glob("sweep-*/sweep.json")
    doc = json.loads(path.read_text())
    assert doc["simulated"] is True and doc["machine"]["simulated"] is True
    assert [c["label"] for c in doc["curves"]] == [
        "h2d pageable memcpy api",
        "h2d pinned memcpy api",
        "d2h pageable memcpy api",
        "d2h pinned memcpy api",
        "d2d device memcpy api",
    ]
    (csv_path,) = tmp_path.glob("sweep-*/sweep.csv")
    assert csv_path.read_text().splitlines()[1].startswith("1,")  # simulated column
    assert len(list(tmp_path.glob("sweep-*/sweep-bandwidth.png"))) == 1
    assert len(list(tmp_path.glob("sweep-*/sweep-latency.png"))) == 1
    assert "wrote" in err


def test_explicit_output_paths(capsys, tmp_path):
    code, _, err = run(
        capsys,
        "sweep",
        *SMALL,
        "--json",
        str(tmp_path / "j" / "r.json"),
        "--csv",
        str(tmp_path / "r.csv"),
        "--plot",
        str(tmp_path / "p" / "fig"),
    )
    assert code == 0, err
    assert (tmp_path / "j" / "r.json").exists() and (tmp_path / "r.csv").exists()
    assert (tmp_path / "p" / "fig-bandwidth.png").exists()


def test_ctrl_c_keeps_what_was_measured(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(ENGINE, lambda simulate: SimulatedEngine(interrupt_after=40))
    code, _, err = run(capsys, "sweep", *SMALL, "-d", "h2d,d2h", "-o", str(tmp_path))
    assert code == cli.EXIT_INTERRUPTED
    assert "interrupted" in err and "Traceback" not in err
    (path,) = tmp_path.glob("sweep-*/sweep.json")
    doc = json.loads(path.read_text())
    assert doc["interrupted"] is True
    assert doc["curves"][-1]["status"] == "interrupted"
    assert sum(len(c["points"]) for c in doc["curves"]) > 0


def test_verification_failure_is_shown_and_exits_non_zero(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(ENGINE, lambda simulate: SimulatedEngine(corrupt=True))
    code, out, _err = run(capsys, "sweep", *SMALL, "-o", str(tmp_path))
    assert code == cli.EXIT_VERIFICATION_FAILED
    assert "verification FAILED" in out
    (path,) = tmp_path.glob("sweep-*/sweep.json")
    assert any(
        not p["verification"]["ok"]
        for c in json.loads(path.read_text())["curves"]
        for p in c["points"]
    )


def test_seed_002_experiment(capsys, tmp_path):
    """README's seed 002 command: 1 MB..1 GB by powers of two, H2D/D2H x pageable/pinned."""
    code, _, err = run(
        capsys,
        "sweep",
        "--simulate",
        "--min-size",
        "1MiB",
        "--max-size",
        "1GiB",
        "--csv",
        str(tmp_path / "seed002.csv"),
        "--plot",
        str(tmp_path / "seed002"),
        "-o",
        str(tmp_path),
    )
    assert code == 0, err
    rows = (tmp_path / "seed002.csv").read_text().splitlines()[1:]
    assert len(rows) == 4 * 11
    assert {int(r.split(",")[6]) for r in rows} == {1 << (20 + i) for i in range(11)}


def test_info_simulated(capsys):
    code, out, _ = run(capsys, "info", "--simulate", "--json")
    assert code == 0
    facts = json.loads(out)
    assert facts["simulated"] is True
    gpu = facts["gpus"][0]
    assert gpu["pcie_generation"] == 5 and gpu["pcie_width"] == 16
    assert gpu["pcie_peak_bps"] == pytest.approx(63.015e9, rel=1e-3)


def test_info_table(capsys):
    code, out, _ = run(capsys, "info", "--simulate")
    assert code == 0
    assert "Gen5 x16" in out and "63 GB/s" in out and "SIMULATED" in out


def test_info_bad_device(capsys):
    code, _, err = run(capsys, "info", "--simulate", "--device", "7")
    assert_one_line_error(code, err, "--device", "no GPU with index 7")


def test_help_lists_every_option(capsys):
    code, out, _ = run(capsys, "sweep", "--help")
    assert code == 0
    for option in (
        "--direction",
        "--memory",
        "--mechanism",
        "--timing",
        "--device",
        "--sizes",
        "--target-time",
        "--trials",
        "--budget",
        "--json",
        "--csv",
        "--plot",
    ):
        assert option in out


def _has_gpu() -> bool:
    try:
        from xferscope.core.engine import NativeEngine

        return NativeEngine().device_count() > 0
    except Exception:
        return False


@pytest.mark.skipif(_has_gpu(), reason="this machine has a GPU")
@pytest.mark.parametrize("command", [["sweep", "--quick"], ["info"]])
def test_no_gpu_is_one_line_through_the_entry_point(tmp_path, command):
    proc = subprocess.run(
        [sys.executable, "-m", "xferscope", *command, "-o", str(tmp_path)]
        if command[0] == "sweep"
        else [sys.executable, "-m", "xferscope", *command],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1
    assert proc.stderr.strip().startswith("Error: no CUDA device:")
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not list(Path(tmp_path).glob("*.json"))


def test_version_through_the_entry_point():
    proc = subprocess.run(
        [sys.executable, "-m", "xferscope", "--version"], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0 and "0.1.0" in proc.stdout


def test_warm_cache_is_recorded_and_labels_points(capsys, tmp_path):
    code, _, err = run(
        capsys,
        "sweep",
        *SMALL,
        "--cache",
        "warm",
        "-d",
        "h2d",
        "-m",
        "pinned",
        "--json",
        str(tmp_path / "w.json"),
        "-o",
        str(tmp_path),
    )
    assert code == 0, err
    doc = json.loads((tmp_path / "w.json").read_text())
    assert doc["options"]["cache"] == "warm"
    assert all(p["cache_resident"] for p in doc["curves"][0]["points"])


def test_bad_cache_state(capsys, tmp_path):
    code, _, err = run(capsys, "sweep", *SMALL, "--cache", "lukewarm", "-o", str(tmp_path))
    assert_one_line_error(code, err, "--cache", "cold", "warm")


def test_summary_gives_the_share_of_each_physical_limit(capsys, tmp_path):
    code, out, err = run(
        capsys,
        "sweep",
        "--simulate",
        "--quick",
        "--sizes",
        "1GiB",
        "-d",
        "h2d,d2d",
        "-m",
        "pinned",
        "-o",
        str(tmp_path),
    )
    assert code == 0, err
    # Model: 55.4 GB/s of a 63.0 GB/s link; 2.1 TB/s copied = 4.2 TB/s traffic of 4.9 TB/s.
    assert "88% PCIe" in out or "87% PCIe" in out
    assert "85% HBM" in out or "86% HBM" in out
