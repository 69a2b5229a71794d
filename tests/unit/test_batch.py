"""`xferscope batch` without a GPU: the simulated engine's batches (the engine's own refusals),
the winner map, its files and bad input. tests/gpu/test_batch_gpu.py runs every method."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from xferscope import cli
from xferscope.batch.measure import (
    BatchOptions,
    crossover_line,
    crossovers,
    from_dict,
    measure,
    to_dict,
)
from xferscope.core.engine.simulated import SimulatedEngine


@pytest.fixture(autouse=True)
def history(tmp_path, monkeypatch) -> Path:
    path = tmp_path / "history.sqlite3"
    monkeypatch.setenv("XFERSCOPE_HISTORY", str(path))
    return path


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = cli.main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_each_cell_is_measured_or_refused_with_the_engines_reason():
    result = measure(SimulatedEngine(), BatchOptions(counts=(1, 256), sizes=(4096,)))
    refused = {(c.memory, c.method): c.error for c in result.cells if c.status == "skipped"}
    assert "no HMM or ATS" in refused[("pageable", "kernel")]
    assert "need pinned host memory" in refused[("pageable", "graph")]
    assert "for pageable host memory" in refused[("pinned", "staged")]
    assert "to or from host memory" in refused[("device", "pack")]
    assert "to or from host memory" in refused[("device", "staged")]
    d2d = {c.method for c in result.cells if c.direction == "d2d" and c.status == "complete"}
    assert d2d == {"loop", "batch-stream", "batch-call", "batch-any", "kernel", "graph"}
    assert {c.memory for c in result.cells if c.direction == "d2d"} == {"device"}
    assert all(
        c.status == "complete"
        for c in result.cells
        if c.memory == "pinned" and c.method != "staged"
    )
    assert all(
        c.status == "complete"
        for c in result.cells
        if c.method == "staged" and c.memory == "pageable"
    )
    winners = result.winners()
    best, gain = winners[("h2d", "pinned", 256, 4096)]
    assert best.method != "loop" and gain > 3
    assert winners[("h2d", "pinned", 1, 4096)][0].method == "loop"  # no clear win: the loop
    assert from_dict(json.loads(json.dumps(to_dict(result)))).cells == result.cells


def test_the_command_writes_its_map(capsys, tmp_path):
    code, out, err = run(
        capsys, "batch", "--simulate", "--counts", "1,64", "--sizes", "64,1MiB", "-o", str(tmp_path)
    )
    assert code == 0, err
    flat = " ".join(out.split())
    assert "fastest method" in flat and "cudaMemcpyBatchAsync" in flat
    (directory,) = tmp_path.glob("batch-*")
    assert {p.name for p in directory.iterdir()} == {
        "batch.json", "batch.csv", "batch.png", "report.html",
    }  # fmt: skip
    doc = json.loads((directory / "batch.json").read_text())
    assert doc["schema"] == "xferscope-batch" and doc["winners"]
    page = (directory / "report.html").read_text()
    assert page.count('class="plotly-graph-div"') == 5  # a map per direction and memory
    assert "Every batch" in page and "batch.json" in page  # the table, the files beside


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--methods", "teleport"], "--methods: unknown value 'teleport'"),
        (["--counts", "0"], "--counts"),
        (["--counts", "100000"], "--counts: 100000 copies: at most 65536"),
        (["--sizes", "big"], "--sizes"),
        (["--direction", "sideways"], "--direction"),
        (["--calibrate", "--direction", "d2d"], "--direction: d2d: with --calibrate only"),
        (
            ["-m", "pinned,hugetlb"],
            "--memory: 'hugetlb': batch copies from pinned and pageable memory only, the kinds "
            "xferscope.copy_many takes; `xferscope sweep -m hugetlb` measures hugetlb memory",
        ),
    ],
)
def test_bad_input_is_one_line(capsys, tmp_path, args, fragment):
    code, _, err = run(capsys, "batch", "--simulate", *args, "-o", str(tmp_path))
    assert code == 2 and fragment in err and "Traceback" not in err


def test_the_crossover_line_steps_down_each_row_at_its_edge():
    result = measure(
        SimulatedEngine(noise=0.0),  # the model's own seconds: 1024 x 64 KiB wins by 4.5%
        BatchOptions(counts=(1, 64, 1024), sizes=(64, 4096, 65536), directions=("h2d",),
                     memories=("pinned",), methods=("loop", "batch-any")),
    )  # fmt: skip
    # the model: one copy never gains; 64 copies gain up to 4 KiB; 1024 copies at every size
    assert crossovers(result) == {
        ("h2d", "pinned", 1): None, ("h2d", "pinned", 64): 4096, ("h2d", "pinned", 1024): 65536,
    }  # fmt: skip
    xs, ys = crossover_line(result, "h2d", "pinned", [1, 64, 1024], [64, 4096, 65536])
    assert xs == [-0.5, -0.5, 1.5, 1.5, 2.5, 2.5]  # left of the first, after 4 KiB, after all
    assert ys == [-0.5, 0.5, 0.5, 1.5, 1.5, 2.5]
    # a row without a crossover breaks the line rather than slanting across it
    xs, ys = crossover_line(result, "h2d", "pinned", [1, 2, 64], [64, 4096, 65536])
    assert xs == [-0.5, -0.5, None, 1.5, 1.5] and ys == [-0.5, 0.5, None, 1.5, 2.5]
    assert crossover_line(result, "d2h", "pinned", [1], [64]) == ([], [])


def test_the_batch_api_crossover_is_where_it_stops_beating_the_loop():
    from dataclasses import replace

    from xferscope.batch.measure import Cell, crossovers

    def cell(size: int, method: str, seconds: float) -> Cell:
        return Cell(
            "h2d", "pinned", 64, size, method, "complete", None, (seconds,) * 3, (seconds,) * 3
        )

    times = {64: (10.0, 5.0), 4096: (10.0, 6.0), 65536: (10.0, 11.0), 1 << 20: (10.0, 9.0)}
    cells = tuple(
        c
        for s, (loop, api) in times.items()
        for c in (cell(s, "loop", loop), cell(s, "batch-any", api))
    )
    result = measure(
        SimulatedEngine(),
        BatchOptions(counts=(1,), sizes=(64,), memories=("pinned",), directions=("h2d",)),
    )
    assert crossovers(replace(result, cells=cells)) == {("h2d", "pinned", 64): 4096}


class _Recorder:
    """A batch whose methods take fixed seconds and record the order they ran in."""

    def __init__(self, stop_after: int | None = None) -> None:
        self.timed: list[str] = []
        self.stop_after = stop_after

    def verify(self, method: str, many: bool) -> int:
        return 0

    def time(self, method: str, n: int, many: bool) -> tuple[float, float]:
        self.timed.append(method)
        if self.stop_after is not None and len(self.timed) > self.stop_after:
            raise KeyboardInterrupt
        return {"loop": 2e-3, "pack": 1e-3}[method], 1e-3


def test_a_cells_methods_take_turns_trial_by_trial():
    from xferscope.batch.measure import measure_methods

    batch = _Recorder()
    options = BatchOptions(target_s=1e-3, trials=4)
    out, stopped = measure_methods(batch, options, ["loop", "pack"])
    assert not stopped
    trials = batch.timed[-8:]  # after each method's calibration runs
    assert all(sorted(trials[i : i + 2]) == ["loop", "pack"] for i in range(0, 8, 2))
    assert out["loop"][0] == "complete" and len(out["loop"][2]) == 4
    assert out["pack"][2] == (1e-3,) * 4


def test_ctrl_c_during_a_cells_trials_keeps_the_trials_done():
    from xferscope.batch.measure import measure_methods

    probe = _Recorder()
    measure_methods(probe, BatchOptions(target_s=1e-3, trials=1), ["loop", "pack"])
    calibration_runs = len(probe.timed) - 2
    batch = _Recorder(stop_after=calibration_runs + 3)  # the 4th trial run is interrupted
    out, stopped = measure_methods(batch, BatchOptions(target_s=1e-3, trials=4), ["loop", "pack"])
    assert stopped
    done = batch.timed[calibration_runs : calibration_runs + 3]  # the three before the Ctrl-C
    assert len(out["loop"][2]) == done.count("loop") and len(out["pack"][2]) == done.count("pack")
    assert len(out["loop"][2]) + len(out["pack"][2]) == 3


def test_methods_a_ctrl_c_cut_short_are_marked_interrupted_not_complete():
    from xferscope.batch.measure import measure_methods

    probe = _Recorder()
    measure_methods(probe, BatchOptions(target_s=1e-3, trials=1), ["loop", "pack"])
    batch = _Recorder(stop_after=len(probe.timed) - 2 + 3)
    out, stopped = measure_methods(batch, BatchOptions(target_s=1e-3, trials=4), ["loop", "pack"])
    assert stopped and {o[0] for o in out.values()} == {"interrupted"}
    out, stopped = measure_methods(_Recorder(), BatchOptions(target_s=1e-3, trials=4), ["loop"])
    assert not stopped and out["loop"][0] == "complete"


def test_each_trial_has_an_order_of_its_own_and_the_same_one_again():
    from xferscope.core.plan import trial_order

    names = ["a", "b", "c", "d"]
    orders = [trial_order(names, t) for t in range(20)]
    assert all(sorted(o) == names for o in orders)  # each thing once a trial
    # what runs just before "a" changes from trial to trial (a rotation keeps it "d")
    assert len({o[o.index("a") - 1] for o in orders if o.index("a") > 0}) > 1
    assert orders == [trial_order(names, t) for t in range(20)]  # seeded: repeatable
    assert trial_order([], 3) == []
