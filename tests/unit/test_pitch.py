"""`xferscope pitch` on the simulated engine: the grid, the refusals (the engine's own), the
cliffs and winners, every output, and bad input."""

from __future__ import annotations

import csv
import io
import json

import pytest

from xferscope import cli
from xferscope.core.compiled import engine_module
from xferscope.core.engine.simulated import SimulatedEngine
from xferscope.core.engine.simulated_pitch import slices_of
from xferscope.core.errors import EngineError
from xferscope.pitch.measure import (
    CLIFF,
    Cell,
    PitchOptions,
    PitchResult,
    dumps_csv,
    from_dict,
    measure,
    measure_cells,
    to_dict,
)

_e = engine_module()
SMALL = PitchOptions(
    directions=("h2d", "d2h"), memories=("pinned",), layouts=("pitched",), total=1 << 16,
    widths=(1, 16, 256, 4096, 1 << 16), target_s=0.002, trials=2,
)  # fmt: skip


def test_refusals_come_from_the_engine():
    refuse = _e.pitch_refusal
    assert refuse("h2d", "pinned", 4, 10, 8, True, "2d") == ""
    assert "readback" in refuse("d2h", "pinned", 4, 10, 8, True, "span")
    assert "65536" in refuse("h2d", "pinned", 1, 70000, 2, True, "loop")
    assert "pitch" in refuse("h2d", "pinned", 8, 10, 4, True, "2d")
    assert "unknown" in refuse("h2d", "pinned", 8, 10, 8, True, "teleport")
    assert slices_of(1) == 1 and slices_of(16) == 4 and slices_of(12) == 3 and slices_of(7) == 1


def test_every_width_and_method_is_measured_or_refused_with_a_reason():
    result = measure(SimulatedEngine(noise=0.0), SMALL)
    assert not result.interrupted
    for c in result.cells:
        assert c.status in ("complete", "skipped"), c
        assert c.rows * c.width == 1 << 16
        if c.status == "skipped":
            assert c.error
    contiguous = [c for c in result.cells if c.method == "contiguous"]
    assert len(contiguous) == 2  # once per group
    spans = {c.direction: c.status for c in result.cells if c.method == "span"}
    assert spans == {"h2d": "complete", "d2h": "skipped"}
    # the simulated copy engine moves a row in at least 2.5 ns: narrow rows fall off a cliff
    cliffs = {(c.group[0], c.method): c for c in result.cliffs()}
    cliff = cliffs[("h2d", "2d-async")]
    assert cliff.half_below is not None and cliff.half_below <= 256
    assert all(ratio < CLIFF for _, ratio in cliff.drops)
    assert 1 in [w for w, _ in cliff.drops]
    winners = result.winners()
    assert winners[("h2d", "pinned", "pitched", 2, 1)].method == "span"
    assert winners[("h2d", "pinned", "pitched", 2, 4096)].method == "2d-async"
    codes = {(f.code, f.figure.split(",")[0]) for f in result.findings}
    assert ("pitch_cliff", "h2d pinned") in codes and ("pitch_beaten", "h2d pinned") in codes


def test_documents_round_trip():
    result = measure(SimulatedEngine(noise=0.0), SMALL)
    doc = json.loads(json.dumps(to_dict(result)))
    assert doc["schema"] == "xferscope-pitch" and doc["simulated"] is True
    assert doc["cliffs"] and doc["winners"]
    back = from_dict(doc)
    assert back.cells == result.cells
    rows = list(csv.DictReader(io.StringIO(dumps_csv(result))))
    assert len(rows) == len(result.cells)
    assert {r["method"] for r in rows} >= {"2d", "2d-async", "3d", "pack", "span", "contiguous"}


def test_a_wrong_row_marks_the_cell_unverified():
    engine = SimulatedEngine(noise=0.0)
    engine.corrupt = True
    result = measure(engine, SMALL)
    assert all(c.status in ("unverified", "skipped") for c in result.cells)
    assert any(f.code == "verification_failed" for f in result.findings)


def test_rate_is_payload_over_host_time():
    c = Cell("h2d", "pinned", "pitched", 2, 4, 1000, "2d", "complete", host_s=(1e-3, 2e-3, 3e-3))
    assert c.rate == pytest.approx(4000 / 2e-3)
    result = PitchResult(
        (c,), tool_version="0", created="", simulated=True, machine={}, options={},
        interrupted=False, wall_s=0.0,
    )  # fmt: skip
    assert result.reference(c.group) is None


def test_cli_end_to_end(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("XFERSCOPE_HISTORY", str(tmp_path / "h.sqlite3"))
    code = cli.main(["pitch", "--simulate", "--total", "64KiB", "--widths", "1,64,64KiB",
                     "--memory", "pageable", "--target-time", "0.002", "-o", str(tmp_path / "o"),
                     "--json", str(tmp_path / "p.json")])  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "GB/s by row width" in out and "SIMULATED" in out
    doc = json.loads((tmp_path / "p.json").read_text())
    assert {c["width"] for c in doc["cells"]} == {1, 64, 65536}
    assert list((tmp_path / "o").rglob("pitch.png"))


@pytest.mark.parametrize(
    "args,option",
    [
        (["--widths", "8MiB"], "--widths"),
        (["--total", "2GiB"], "--total"),
        (["--host-pitch", "0"], "--host-pitch"),
        (["--methods", "2d,warp"], "--methods"),
        (["--layout", "tiled"], "--layout"),
        (["--trials", "0"], "--trials"),
        (["-m", "managed"], "--memory: 'managed': pitch copies rows from pinned and pageable"),
    ],
)
def test_bad_input_is_one_line(capsys, args, option):
    code = cli.main(["pitch", "--simulate", *args])
    _, err = capsys.readouterr()
    assert code != 0 and len(err.strip().splitlines()) == 1 and option in err, err


class _Recorder:
    """A pitched layout that records its timed trials (100 copies each at 100 us a copy, after
    calibrating with 1 and 25); `slow` takes 1 s a copy, `bad` fails in its second trial."""

    def __init__(self) -> None:
        self.timed: list[str] = []

    def verify(self, method: str) -> tuple[int, int]:
        return (0, 0)

    def time(self, method: str, n: int) -> tuple[float, float]:
        per = 1.0 if method == "slow" else 1e-4
        if n >= 100:
            self.timed.append(method)
        if method == "bad" and self.timed.count("bad") == 2:
            raise EngineError("lost")
        return per, per


def test_methods_trials_are_interleaved_each_in_an_order_of_its_own():
    layout = _Recorder()
    options = PitchOptions(target_s=0.01, trials=6)
    fields, stopped = measure_cells(layout, options, ["2d", "loop", "pack", "slow", "bad"])
    assert not stopped
    assert list(fields) == ["2d", "loop", "pack", "slow", "bad"]
    assert [len(fields[m]["host_s"]) for m in ("2d", "loop", "pack")] == [6, 6, 6]
    assert fields["slow"]["host_s"] == (1.0,)  # seconds a copy: one trial
    assert fields["bad"] == {"status": "failed", "error": "lost"}
    timed = [m for m in layout.timed if m != "bad"]
    trials = [timed[i : i + 3] for i in range(0, len(timed), 3)]
    assert len(trials) == 6 and all(sorted(t) == ["2d", "loop", "pack"] for t in trials)
    assert len({tuple(t) for t in trials}) > 1  # not one fixed order


def test_a_ctrl_c_mid_width_keeps_its_trials_marked_interrupted():
    result = measure(SimulatedEngine(noise=0.0, interrupt_after=60), SMALL)
    assert result.interrupted
    cut = [c for c in result.cells if c.status == "interrupted"]
    assert cut and all(c.host_s and c.seconds is None for c in cut)  # kept, not a median
    assert all(len(c.host_s) == SMALL.trials for c in result.cells if c.status == "complete")
