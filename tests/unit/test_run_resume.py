"""`xferscope run --resume`: an interrupted run continued on the same GPUs keeps what it had
completed and measures the rest, on the simulated engine."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from xferscope import cli
from xferscope.core.engine.simulated import SimulatedEngine
from xferscope.core.errors import OptionError
from xferscope.run.investigate import RunOptions, gpu_curves, run_investigation, steps
from xferscope.run.records import run_from_dict, run_to_dict
from xferscope.run.resume import check_same_gpus, load_interrupted, options_of


class StopAt:
    """Ctrl-C at the n-th unit of progress."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.steps = 0

    def begin(self, label: str) -> None:
        pass

    def step(self, label: str) -> None:
        self.steps += 1
        if self.steps == self.n:
            raise KeyboardInterrupt


class Count:
    def __init__(self) -> None:
        self.steps = 0

    def begin(self, label: str) -> None:
        pass

    def step(self, label: str) -> None:
        self.steps += 1


@pytest.fixture
def interrupted(tmp_path) -> tuple[Path, RunOptions]:
    """A quick run of three simulated GPUs stopped during the third GPU, as run.json."""
    options = RunOptions(devices=(0, 1, 2), quick=True)
    first = steps(RunOptions(devices=(0,), quick=True))  # every check on GPU 0
    headline = len(gpu_curves(0, "headline")) * len(options.plan.sizes) + 1  # GPUs 1 and 2
    result = run_investigation(SimulatedEngine(devices=3), options, StopAt(first + headline + 3))
    assert result.interrupted
    assert [g.status for g in result.gpus] == ["complete", "complete", "interrupted"]
    path = tmp_path / "run-1" / "run.json"
    path.parent.mkdir()
    path.write_text(json.dumps(run_to_dict(result)))
    return path, options


def test_a_resumed_run_keeps_what_was_done_and_measures_the_rest(interrupted):
    path, options = interrupted
    earlier = load_interrupted(str(path.parent))  # the directory names its run.json
    assert options_of(earlier) == options
    engine = SimulatedEngine(devices=3)
    count = Count()
    result = run_investigation(engine, options, count, earlier)
    assert not result.interrupted
    assert [g.status for g in result.gpus] == ["complete"] * 3
    assert result.gpus[:2] == earlier.gpus[:2]  # kept as they were, not measured again
    assert result.gpus[2] != earlier.gpus[2]
    assert {c.label for c in result.multi} >= {"0-1/async/peer/one_way", "all_gpus/both"}
    assert all(c.status == "complete" for c in result.multi)
    # progress counts only what is measured now
    assert count.steps == steps(options, earlier) < steps(options)
    assert result.wall_s > earlier.wall_s
    assert any(n.startswith("Resumed: GPUs 0, 1 from the interrupted run of") for n in result.notes)
    assert "GPU 2 measured now" in result.notes[-1]
    assert run_from_dict(json.loads(json.dumps(run_to_dict(result)))).notes == result.notes


def test_the_command_resumes_into_a_new_directory(interrupted, tmp_path, monkeypatch, capsys):
    path, _ = interrupted
    monkeypatch.setenv("XFERSCOPE_SIMULATE_GPUS", "3")
    monkeypatch.setenv("XFERSCOPE_HISTORY", str(tmp_path / "history.sqlite3"))
    out = tmp_path / "out"
    code = cli.main(["run", "--simulate", "--resume", str(path), "-o", str(out)])
    _, err = capsys.readouterr()
    assert code == 0, err
    (doc,) = out.rglob("run.json")
    run = json.loads(doc.read_text())
    assert not run["interrupted"] and len(run["gpus"]) == 3
    assert any("Resumed" in n for n in run["notes"])
    # a complete run has nothing to resume
    code = cli.main(["run", "--simulate", "--resume", str(doc), "-o", str(out)])
    assert code == 2 and "is complete: there is nothing to resume" in capsys.readouterr().err
    # by its id in the history: the resumed run was added there, complete
    from xferscope.run.history import History

    with History(tmp_path / "history.sqlite3", readonly=True) as history:
        last = history.list(1)[0].id
    code = cli.main(["run", "--simulate", "--resume", str(last), "-o", str(out)])
    assert code == 2 and f"run {last} is complete" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["-g", "0"], "leave out -g"),
        (["--quick"], "leave out --quick"),
        (["--seed", "7"], "leave out --seed"),
    ],
)
def test_resume_takes_the_runs_own_options(interrupted, capsys, tmp_path, args, fragment):
    path, _ = interrupted
    code = cli.main(["run", "--simulate", "--resume", str(path), *args, "-o", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and "--resume" in err and fragment in err
    assert len(err.strip().splitlines()) == 1


def test_bad_resumes_are_one_line(interrupted, tmp_path):
    path, _ = interrupted
    with pytest.raises(OptionError, match="no such file"):
        load_interrupted(str(tmp_path / "nowhere.json"))
    other = tmp_path / "sweep.json"
    other.write_text(json.dumps({"schema": "xferscope-sweep"}))
    with pytest.raises(OptionError, match="is not the result of `xferscope run`"):
        load_interrupted(str(other))
    earlier = load_interrupted(str(path))
    with pytest.raises(OptionError, match="not the GPU that run began on"):
        check_same_gpus(SimulatedEngine(devices=2), earlier, (0, 1, 2))


def test_a_run_stopped_among_the_peer_measurements_keeps_those_done():
    options = RunOptions(devices=(0, 1, 2), quick=True)
    total = steps(options)
    earlier = run_investigation(SimulatedEngine(devices=3), options, StopAt(total - 5))
    assert earlier.interrupted and all(g.status == "complete" for g in earlier.gpus)
    done = [c for c in earlier.multi if c.status == "complete"]
    assert done
    count = Count()
    result = run_investigation(SimulatedEngine(devices=3), options, count, earlier)
    assert not result.interrupted and result.gpus == earlier.gpus
    labels = [c.label for c in result.multi]
    assert len(labels) == len(set(labels)) and set(labels) > {c.label for c in done}
    assert [c for c in result.multi if c.label in {d.label for d in done}] == done  # kept
    assert count.steps == steps(options, earlier)  # every step still reported, GPUs aside
