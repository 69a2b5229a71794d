"""benchmarks/trace_corpus_judge.py's price check: the headline's price a step against the fix's
measured saving, the runs' own spread beside it, and the saving the fix made traced."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from trace_corpus_judge import counted_right, foreign, input_share, prediction, step_s


def _runs(*seconds: float, steps: int = 100) -> list[dict[str, float]]:
    return [{"seconds": s, "steps": steps} for s in seconds]


def test_a_price_is_judged_against_the_rounds_own_savings_with_their_spread_beside_it():
    """Each round runs before and fixed back to back; the host ran slower in the second round
    and a little in the third: the rounds saved 1.0, 1.0 and 1.2 s (0.010 a step, the median),
    which the medians of each kind apart (3.3 - 2.1) do not tell."""
    entry = {
        "untraced": {"before": _runs(3.0, 3.6, 3.3), "fixed": _runs(2.0, 2.6, 2.1)},
        "traced": {"seconds": 3.5, "steps": 100},
        "traced_fixed": {"seconds": 2.0, "steps": 100},
    }
    out = prediction(entry, [0.011, 0.010, 0.0105])
    assert out["measured_saving_per_step_s"] == pytest.approx(0.010)
    assert out["measured_saving_unpaired_per_step_s"] == pytest.approx(0.012)
    assert out["prediction_error"] == pytest.approx(0.0005 / 0.010)
    assert out["prediction_error_unpaired"] == pytest.approx(0.0015 / 0.012)
    assert out["measured_saving_range_per_step_s"] == pytest.approx([0.010, 0.012])
    assert out["traced_saving_per_step_s"] == pytest.approx(0.015)
    assert out["prediction_error_traced"] == pytest.approx(0.0045 / 0.015)
    # the rounds' savings resampled: their median is 0.010 or 0.012 a step
    lo, hi = out["measured_saving_interval_per_step_s"]
    assert lo == pytest.approx(0.010) and hi == pytest.approx(0.012)
    assert out["prediction_within_spread"] is True


def test_a_price_outside_the_runs_spread_is_said_so_and_one_inside_it_too():
    steady = {"untraced": {"before": _runs(3.00, 3.01, 2.99, 3.00),
                           "fixed": _runs(2.00, 2.01, 1.99, 2.00)}}  # fmt: skip
    assert prediction(steady, [0.0100])["prediction_within_spread"] is True
    assert prediction(steady, [0.0100])["cause_measured"] is True
    assert prediction(steady, [0.0125])["prediction_within_spread"] is False
    noisy = {"untraced": {"before": _runs(3.0, 3.8, 2.7, 3.4, 3.1),
                          "fixed": _runs(2.0, 2.6, 1.8, 2.2, 2.1)}}  # fmt: skip
    out = prediction(noisy, [0.0115])  # 15% off the rounds' 0.010, yet inside their spread
    assert out["prediction_error"] == pytest.approx(0.15) and out["prediction_within_spread"]


def test_a_fix_that_saved_nothing_is_not_judged_and_a_missing_trace_is_left_out():
    entry = {"untraced": {"before": _runs(1.4, 1.7, steps=300),
                          "fixed": _runs(1.7, 1.4, steps=300)},
             "traced": {"seconds": 1.5, "steps": 300}}  # fmt: skip
    out = prediction(entry, [0.0004])
    assert out["measured_saving_per_step_s"] == pytest.approx(0.0)
    assert "prediction_error" not in out and "prediction_error_traced" not in out
    assert out["measured_saving_range_per_step_s"] == pytest.approx([-0.001, 0.001])
    assert out["cause_measured"] is False  # its headline judged by no cause


def test_the_input_share_is_judged_against_the_resident_form_untraced_and_traced():
    entry = {"untraced": {"before": _runs(3.4, 3.6, 3.8), "resident": _runs(1.9, 2.0, 2.1)},
             "traced": {"seconds": 3.2, "steps": 100}}  # fmt: skip
    out = input_share(entry, [0.33, 0.35, 0.37])
    assert out["expected_input_share"] == pytest.approx(1 - 2.0 / 3.6)
    assert out["idle_share_error"] == pytest.approx(abs(0.35 - (1 - 2.0 / 3.6)))
    assert out["idle_share_error_traced"] == pytest.approx(abs(0.35 - (1 - 2.0 / 3.2)))
    assert input_share({"untraced": {"before": _runs(3.0)}}, [0.3]) == {}
    assert "idle_share_error" not in input_share(entry, [])


def test_runs_that_report_their_steady_steps_are_judged_by_them():
    # an epoch's workers started before the first step: 0.4 s of the fed runs' loop, which a
    # trace leaves to its start-up; the steps after the first say 2.9 s over 99 steps
    fed = [{"seconds": 3.4, "steps": 100, "steady_s": 2.97, "steady_steps": 99}]
    resident = [{"seconds": 2.0, "steps": 100, "steady_s": 1.98, "steady_steps": 99}]
    out = input_share({"untraced": {"before": fed * 3, "resident": resident * 3}}, [0.33])
    assert out["expected_input_share"] == pytest.approx(1 - 0.02 / 0.03)
    assert step_s(fed[0]) == pytest.approx(0.03) and step_s({"seconds": 3.4, "steps": 100}) == 0.034
    fixed = [{"seconds": 2.6, "steps": 100, "steady_s": 2.277, "steady_steps": 99}]
    saved = prediction({"untraced": {"before": fed, "fixed": fixed}}, [0.007])
    assert saved["measured_saving_per_step_s"] == pytest.approx(0.03 - 0.023)


def test_the_input_share_is_also_judged_against_the_resident_form_traced():
    entry = {"untraced": {"before": _runs(3.6), "resident": _runs(2.0)},
             "traced": {"seconds": 4.0, "steps": 100},
             "traced_resident": {"seconds": 2.4, "steps": 100}}  # fmt: skip
    out = input_share(entry, [0.38])
    assert out["expected_input_share_both_traced"] == pytest.approx(1 - 2.4 / 4.0)
    assert out["idle_share_error_both_traced"] == pytest.approx(0.02)
    assert "idle_share_error_both_traced" not in input_share(
        {"untraced": entry["untraced"], "traced": entry["traced"]}, [0.38]
    )


def test_a_trace_stopped_before_its_program_ended_is_not_judged(tmp_path):
    """A kept trace whose run a signal stopped (the call's time limit reached in it: 11 s of
    a start-up, no step) or that failed is no trace to judge; one that ended whole is; a
    damaged ran.json is not."""
    from trace_corpus_judge import whole

    def kept(name: str, ran: str) -> Path:
        run = tmp_path / name / "run1"
        run.mkdir(parents=True)
        # as kept.keep writes it: the command and its time, then how it ended
        (run / "ran.json").write_text('{"command": ["python3"], "wall_s": 1.0, ' + ran[1:])
        return tmp_path / name

    assert whole(kept("ended", '{"returncode": 0, "interrupted": false}'))
    assert not whole(kept("stopped", '{"returncode": 1, "interrupted": true, "stop_signal": 2}'))
    assert not whole(kept("failed", '{"returncode": 3}'))
    assert not whole(kept("damaged", '{"returncode": 0'))
    assert not whole(tmp_path / "none")
    fifo = tmp_path / "fifo" / "run1"  # a FIFO under ran.json's name: passed over, never read
    fifo.mkdir(parents=True)
    os.mkfifo(fifo / "ran.json")
    assert not whole(fifo.parent)


def test_a_damaged_record_leaves_its_program_out_and_says_why(tmp_path):
    """A program's record with a field missing, of the wrong kind or null (edited by hand, cut
    short) is left out of the figures with the damage said; the other programs are judged."""
    from trace_corpus_judge import judge_all

    corpus_dir = Path(__file__).resolve().parents[2] / "benchmarks" / "trace_corpus"
    runs = [{"seconds": 1.0, "steps": 10}]  # no startup_s
    damaged = {
        "cupy_filter": {"untraced": {"before": runs, "fixed": runs}},
        "recsys_small_copies": {"untraced": [1, 2]},
        "memcpy_loop": {"untraced": {"before": None}},
    }
    figures = judge_all(damaged, tmp_path, corpus_dir)
    assert figures["trace_corpus_programs"] == 0
    for name in damaged:
        assert figures["judged"][name]["why"].startswith("its record is damaged (")


def test_a_programs_step_lines_are_read_as_they_stood_at_its_traces_commit(tmp_path):
    """Kept traces name the lines of the program they ran: an edit since that moves its STEP
    lines is judged by the lines at the traces' commit; with no such commit, as it is now."""
    import shutil
    import subprocess

    from trace_corpus_judge import read_program

    if shutil.which("git") is None:
        pytest.skip("needs git")
    program = tmp_path / "loop.py"
    header = "# cause: synchronizations\n# fix: read once\n# step: STEP\n"
    program.write_text(header + "x = 1\ny = x.item()  # STEP\n")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run([*git, "add", "loop.py"], cwd=tmp_path, check=True)
    subprocess.run([*git, "commit", "-qm", "first"], cwd=tmp_path, check=True)
    program.write_text(header + "import os\n\nx = 1\ny = x.item()  # STEP\n")
    assert read_program(program).steps == (7,)
    assert read_program(program, "0123456789abcdef").steps == (7,)
    rev = subprocess.run(["git", "rev-parse", "HEAD"], cwd=tmp_path, capture_output=True, text=True)
    head = rev.stdout.strip()
    assert read_program(program, head).steps == (5,)
    out = tmp_path / "written"
    assert read_program(program, f"--output={out}").steps == (7,) and not out.exists()


def test_steps_are_right_only_where_the_trace_counted_about_as_many_as_the_program_made():
    """A CUDA C++ loop of 4,000 steps whose line was marked twice a step (7,993 steps) is at
    its STEP line but its steps are wrong; warm-up steps marked too are a few."""
    assert counted_right(4_003, {"steps": 4_000}) and counted_right(3_700, {"steps": 4_000})
    assert not counted_right(7_993, {"steps": 4_000}) and not counted_right(None, {"steps": 9})
    assert counted_right(123, {}) and counted_right(None, None)  # the run did not say


def test_a_program_changed_since_the_named_commit_is_told_where_git_knows_it(tmp_path):
    """The commit a round names must be the tree's that ran: a program edited or written since
    a commit git knows differs from it; an unknown commit (a GPU machine's copy of the tree,
    whose git knows only older ones) or one that is no hash tells nothing."""
    import shutil
    import subprocess

    from trace_corpus_judge import changed_since

    if shutil.which("git") is None:
        pytest.skip("needs git")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    subprocess.run([*git, "init", "-q", str(tmp_path)], check=True)
    program = tmp_path / "loop.py"
    program.write_text("x = 1  # STEP\n")
    subprocess.run([*git, "add", "loop.py"], cwd=tmp_path, check=True)
    subprocess.run([*git, "commit", "-qm", "a"], cwd=tmp_path, check=True)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=tmp_path, check=True,
                          capture_output=True, text=True).stdout.strip()  # fmt: skip
    assert not changed_since(program, head)
    program.write_text("x = 2  # STEP\n")
    assert changed_since(program, head) and changed_since(program, head[:7])
    later = tmp_path / "later.py"
    later.write_text("y = 1  # STEP\n")
    assert changed_since(later, head)  # not in it
    assert not changed_since(program, "0123456789abcdef0123456789abcdef01234567")
    assert not changed_since(program, "--output=x")


def test_advice_for_a_component_not_used_or_in_cudas_own_words_to_a_framework_is_foreign():
    """A CuPy program told to raise a DataLoader's workers, or to pin with cudaMallocHost, is
    told about what it does not have; a CUDA C++ program may be told CUDA's calls."""
    cuda = {"code": "pageable_copies", "fix": "copy into buffers pinned once (cudaMallocHost)"}
    loader = {"code": "input_starved", "fix": "raise the DataLoader's `num_workers`"}
    framed = "import cupy as cp\nx = cp.zeros(3)\n"
    assert foreign({"fixes": [cuda, loader]}, framed) == [
        "pageable_copies: cudaMallocHost (CUDA's own words)",
        "input_starved: DataLoader",
    ]
    assert foreign({"fixes": [cuda]}, "#include <cuda_runtime.h>\nint main() {}\n") == []
    said = {"code": "pageable_copies", "fix": "allocate them with `cupyx.empty_pinned`"}
    assert foreign({"fixes": [said]}, framed) == []
