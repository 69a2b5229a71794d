"""benchmarks/host_speed_probe.py without a GPU: the loop's time-bounded Python work, what the
probe reads from the loop's lines, its summary against the untraced runs, and its command
line's bad input (one line naming the option)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from host_speed_loop import work
from host_speed_probe import HERE as BENCHMARKS
from host_speed_probe import command, said, summary


def test_the_work_lasts_about_its_time_and_counts_what_it_read():
    recent = [i / 1000 for i in range(1000)]
    seconds, n = work(recent, 0.004)
    assert 0.004 <= seconds < 10 and n >= 512


def test_the_loops_lines_are_read_by_rank_and_other_output_left():
    out = "\n".join(
        [
            "NCCL INFO x",
            json.dumps({"host_speed": 1, "loop_s": 2.0}),
            json.dumps({"host_speed": 0, "loop_s": 2.1}),
            "{not this}",
        ]
    )
    assert [r["host_speed"] for r in said(out)] == [0, 1]
    with pytest.raises(RuntimeError, match="said nothing"):
        said("no line")


def _run(loop_s: float, rate: float) -> list[dict]:
    python = {
        "python_ms": 8.0,
        "python_ms_max": 9.0,
        "values_per_ms": rate,
        "values_per_ms_min": rate / 2,
    }
    return [{"host_speed": 0, "loop_s": loop_s}, {"host_speed": 1, "loop_s": loop_s} | python]


def test_the_summary_is_each_variants_medians_against_untraced():
    runs = {
        "untraced": [_run(4.0, 100.0), _run(4.4, 120.0), _run(3.8, 90.0)],
        "traced": [_run(5.0, 60.0), _run(5.2, 70.0), _run(4.8, 65.0)],
        "no_looks": [],
    }
    out = summary(runs)
    assert set(out) == {"untraced", "traced"}  # a variant with no run is left out
    assert out["traced"]["loop_s"] == 5.0 and out["traced"]["values_per_ms"] == 65.0
    assert out["traced"]["speed_vs_untraced"] == pytest.approx(4.0 / 5.0)
    assert out["traced"]["python_speed_vs_untraced"] == pytest.approx(0.65)
    assert out["untraced"]["speed_vs_untraced"] == 1.0


def test_two_ranks_run_under_torchrun():
    assert command(1, 300, 8.0)[1].endswith("host_speed_loop.py")
    assert command(2, 300, 8.0)[1:5] == [
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node=2",
    ]


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["--variants", "traced,bogus"], "--variants"),
        (["--variants", " , "], "--variants"),
        (["--ranks", "3"], "--ranks"),
        (["--ranks", "-1"], "--ranks"),
        (["--rounds", "0"], "--rounds"),
        (["--rounds", "99999999999"], "--rounds"),
        (["--steps", "0"], "--steps"),
        (["--steps", "-5"], "--steps"),
        (["--python-ms", "nan"], "--python-ms"),
        (["--python-ms", "inf"], "--python-ms"),
        (["--python-ms", "-1"], "--python-ms"),
        (["--python-ms", "0"], "--python-ms"),
        (["--out", "{fifo}"], "--out"),
        (["--out", "{file}"], "--out"),
        (["--out", "{link}"], "--out"),
    ],
)
def test_bad_input_is_one_line_naming_the_option(tmp_path, args, option):
    fifo, file, link = tmp_path / "fifo", tmp_path / "file", tmp_path / "link"
    os.mkfifo(fifo)
    file.write_text("kept\n")
    link.symlink_to(file)
    args = [a.format(fifo=fifo, file=file, link=link) for a in args]
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / "host_speed_probe.py"), "--commit", "x", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and option in done.stderr.strip().splitlines()[-1]
    assert "Traceback" not in done.stderr
    assert file.read_text() == "kept\n"  # nothing written over
