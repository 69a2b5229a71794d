"""benchmarks/trace_corpus.py's bad input: one line naming the option and what it takes, exit 2,
before anything is run or written (no PyTorch needed to be told)."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "trace_corpus.py"


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--commit", "x", "--archive", "{file}"], "--archive: '{file}' is not a directory"),
        (["--commit", "x", "--archive", ""], "--archive: '' is not a directory"),
        (["--commit", "x", "--programs", " , "], "--programs: no program named"),
        (["--commit", "x", "--rounds", "0"], "--rounds must be 1 or more"),
        (["--commit", "x", "--rounds", "99999999999"], "--rounds must be 1 or more and at most 50"),
        (["--commit", "x", "--time-limit", "inf"], "--time-limit must be a finite number"),
        (["--commit", "x", "--time-limit", "nan"], "--time-limit must be a finite number"),
        (
            ["--commit", "x", "--rounds", "4", "--most-rounds", "3"],
            "--most-rounds must be from --rounds (4) to 50",
        ),
        (["--commit", "x", "--most-rounds", "51"], "--most-rounds must be from --rounds (3) to 50"),
        (["--rounds", "2"], "--commit is required to measure"),
        (["--judge", "{file}", "--records", "{dir}"], "is not a trace-corpus record file"),
        (["--judge", "{file}", "--records", "{dir}", "--no-judge"], "--no-judge goes with"),
        (["--commit", "x", "--programs", "no_such_program"], "no_such_program"),
    ],
)
def test_bad_input_is_one_line(tmp_path, args, said):
    file = tmp_path / "a-file"
    file.write_text("not a record\n")
    fill = {"file": str(file), "dir": str(tmp_path)}
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), *(a.format(**fill) for a in args)],
        capture_output=True, text=True, timeout=60, env=dict(os.environ),
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert said.format(**fill) in last and "Traceback" not in proc.stderr
    assert file.read_text() == "not a record\n"  # left as it was


def test_a_programs_traces_are_archived_whole(tmp_path, capsys):
    """--archive: a program's kept traces as one <program>.tar.gz beside nothing half-made; a
    failure is one line and leaves the traces where they are."""
    sys.path.insert(0, str(SCRIPT.parent))
    from trace_corpus import archive

    kept = tmp_path / "rec" / "clean_loop" / "round0" / "run1"
    kept.mkdir(parents=True)
    (kept / "trace-1.jsonl").write_text('{"t": "start"}\n')
    into = tmp_path / "out"
    into.mkdir()
    archive(tmp_path / "rec", "clean_loop", into)
    assert [p.name for p in into.iterdir()] == ["clean_loop.tar.gz"]
    with tarfile.open(into / "clean_loop.tar.gz") as tar:
        assert "clean_loop/round0/run1/trace-1.jsonl" in tar.getnames()
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    archive(tmp_path / "rec", "clean_loop", blocked)  # no directory can be made there
    assert "clean_loop: --archive:" in capsys.readouterr().out
    assert (kept / "trace-1.jsonl").exists()


def _runs(*seconds: float) -> list[dict]:
    return [{"seconds": x} for x in seconds]


def test_more_rounds_run_only_while_the_fixs_saving_is_not_known_within_a_quarter():
    sys.path.insert(0, str(SCRIPT.parent))
    from trace_corpus import programs, settled

    by_name = {p.name: p for p in programs("")}
    recsys, clean = by_name["recsys_small_copies"], by_name["clean_loop"]
    steady = {"before": _runs(2.00, 2.01, 1.99), "fixed": _runs(1.00, 1.01, 0.99)}
    assert settled(recsys, steady)  # a saving of 1.0 s known to within 1%
    noisy = {"before": _runs(0.95, 0.70, 0.98), "fixed": _runs(0.83, 0.80, 0.90)}
    assert not settled(recsys, noisy)  # the rounds saved 0.12, -0.10 and 0.08 s: unknown
    # the host drifted from round to round, each round's fix saving 1.0 s: known
    drifting = {"before": _runs(2.0, 2.6, 2.3), "fixed": _runs(1.0, 1.6, 1.3)}
    assert settled(recsys, drifting)
    assert not settled(recsys, {"before": _runs(1.0, 1.0), "fixed": _runs(1.1, 1.1)})  # none saved
    assert not settled(recsys, {"before": _runs(2.0), "fixed": _runs(1.0)})  # one run: no spread
    assert settled(clean, noisy)  # nothing to price: its first rounds do


def test_past_the_time_limit_a_program_stops_at_the_round_it_is_in():
    """One round at least; before the limit, --rounds, then up to --most-rounds while the fix's
    saving is not settled (asked only then); past it, no further round."""
    sys.path.insert(0, str(SCRIPT.parent))
    from trace_corpus import another_round

    asked: list[int] = []

    def unsettled() -> bool:
        asked.append(1)
        return False

    assert another_round(0, 3, 6, True, unsettled)  # past the limit: still one round
    assert not another_round(1, 3, 6, True, unsettled)
    assert another_round(2, 3, 6, False, unsettled) and not asked
    assert another_round(3, 3, 6, False, unsettled) and asked
    assert not another_round(6, 3, 6, False, unsettled)
    assert not another_round(3, 3, 6, False, lambda: True)
    assert not another_round(4, 3, 6, True, unsettled)
