"""`xferscope pageable` on the simulated engine: the costs and crossovers against figures worked
out by hand from the model, the records and their JSON/CSV, and the command line."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math

import pytest

from tests.unit.test_cli import ENGINE, assert_one_line_error, run
from xferscope import cli
from xferscope.core.engine.simulated import SimulatedEngine
from xferscope.core.errors import AllocationError
from xferscope.documents.reader import SchemaError
from xferscope.pageable import measure as pageable
from xferscope.pageable.measure import (
    Crossover,
    Strategy,
    cheaper_from,
    crossover,
    crossovers,
    fastest,
    measure,
)

GiB = 1 << 30
MiB = 1 << 20


# ---- the arithmetic on made-up costs -----------------------------------------------------------


def test_crossover_of_two_lines():
    cheap_setup = Strategy("a", 0.0, 3.0, ())
    cheap_sends = Strategy("b", 10.0, 1.0, ())
    # 3k = 10 + k at k = 5: a is cheaper below, b above, strictly from 6.
    assert crossover(cheap_setup, cheap_sends) == Crossover("a", "b", 5.0)
    assert crossover(cheap_sends, cheap_setup) == Crossover("a", "b", 5.0)
    assert Crossover("a", "b", 5.0).from_send == 6
    assert Crossover("a", "b", 5.2).from_send == 6
    assert Crossover("a", "b", 0.3).from_send == 1
    assert cheaper_from(cheap_sends, cheap_setup) == 6
    assert cheaper_from(cheap_setup, cheap_sends) is None
    assert fastest([cheap_setup, cheap_sends], 4).name == "a"
    assert fastest([cheap_setup, cheap_sends], 5).name == "a"  # a tie goes to the first listed
    assert fastest([cheap_setup, cheap_sends], 6).name == "b"


def test_lines_that_never_cross_at_a_positive_count():
    base = Strategy("base", 0.0, 2.0, ())
    better = Strategy("better", 0.0, 1.0, ())  # cheaper from the start: crosses at 0
    parallel = Strategy("parallel", 1.0, 2.0, ())
    dominated = Strategy("dominated", 1.0, 3.0, ())
    assert crossover(base, better) is None
    assert crossover(base, parallel) is None
    assert crossover(base, dominated) is None
    assert cheaper_from(better, base) == 1
    assert cheaper_from(parallel, base) is None
    assert cheaper_from(base, parallel) == 1
    assert crossovers([base, better, parallel, dominated]) == ()


def test_crossovers_are_sorted_by_sends():
    a = Strategy("a", 0.0, 10.0, ())
    b = Strategy("b", 5.0, 5.0, ())  # crosses a at 1
    c = Strategy("c", 50.0, 1.0, ())  # crosses a at 50/9, b at 45/4
    assert [(x.before, x.after) for x in crossovers([a, b, c])] == [
        ("a", "b"),
        ("a", "c"),
        ("b", "c"),
    ]
    assert [x.sends for x in crossovers([a, b, c])] == pytest.approx([1.0, 50 / 9, 45 / 4])


# ---- measured on the model, checked by hand ----------------------------------------------------


def model(size: int) -> dict[str, tuple[float, float]]:
    """(setup, per send) of each strategy, from simulate.py's figures for an H200."""
    gb = size / 1e9
    pinned = 6.6e-6 + size / 55.4e9
    plain = 6.6e-6 + 2e-6 + size / 10.5e9
    # the staged copier makes copies under 1 MiB one plain call
    staged = plain if size < 1 << 20 else 40e-6 + size / 52e9
    return {
        "pageable": (0.0, plain),
        "pinned": (0.316 * gb + size / 12.7e9 + 0.0624 * gb, pinned),
        "registered": (0.0385 * gb + 0.012 * gb, pinned * 1.02),
        "staged": (0.0, staged),  # the simulated copier costs nothing to make
    }


@pytest.fixture(scope="module")
def result() -> pageable.PageableResult:
    return measure(SimulatedEngine(noise=0.0), [MiB, GiB], [1, 10, 100], repeats=3)


def test_costs_match_the_model(result):
    assert [r.bytes for r in result.sizes] == [MiB, GiB]
    for r in result.sizes:
        expected = model(r.bytes)
        for s in result.strategies(r):
            assert (s.setup_s, s.per_send_s) == pytest.approx(expected[s.name], rel=1e-9)
        assert len(r.staged_copy_s) == 3 and r.staged_verified is True
        # Trials last about STAGED_TRIAL_S: many copies of 1 MiB, a few of 1 GiB.
        trial = r.staged_iterations * expected["staged"][1]
        assert pageable.STAGED_TRIAL_S <= trial < pageable.STAGED_TRIAL_S + expected["staged"][1]


def test_one_gib_totals_winners_and_crossovers_by_hand(result):
    gib = result.sizes[1]
    costs = model(GiB)
    strategies = {s.name: s for s in result.strategies(gib)}
    (_, pg), (pin_setup, pin), (reg_setup, reg), (_, st) = costs.values()
    # k = 1: staged 20.7 ms beats registering (54.2 + 19.8 ms) and pageable 102 ms.
    assert strategies["staged"].total_s(1) == pytest.approx(st)
    assert fastest(list(strategies.values()), 1).name == "staged"
    # k = 100: registering once (54 ms) pays for its faster sends (19.8 against 20.7 ms).
    assert strategies["registered"].total_s(100) == pytest.approx(reg_setup + 100 * reg)
    assert fastest(list(strategies.values()), 100).name == "registered"

    found = {(c.before, c.after): c for c in crossovers(list(strategies.values()))}
    expected = {
        ("pageable", "registered"): reg_setup / (pg - reg),
        ("pageable", "pinned"): pin_setup / (pg - pin),
        ("staged", "registered"): reg_setup / (st - reg),
        ("staged", "pinned"): pin_setup / (st - pin),
        ("registered", "pinned"): (pin_setup - reg_setup) / (reg - pin),
    }
    assert set(found) == set(expected)
    for pair, k in expected.items():
        assert found[pair].sends == pytest.approx(k, rel=1e-9)
        assert found[pair].from_send == max(1, math.floor(k) + 1)
    # By hand: 54.2 / (102.3 - 19.8) = 0.657, 490.9 / (102.3 - 19.4) = 5.92 and
    # 54.2 / (20.69 - 19.78) = 59.4 sends.
    assert found[("pageable", "registered")].sends == pytest.approx(0.657, abs=1e-3)
    assert found[("pageable", "pinned")].from_send == 6
    assert found[("staged", "registered")].sends == pytest.approx(59.4, abs=0.05)
    assert found[("staged", "registered")].from_send == 60
    pageable_cost = strategies["pageable"]
    assert cheaper_from(strategies["registered"], pageable_cost) == 1
    assert cheaper_from(strategies["pinned"], pageable_cost) == 6
    assert cheaper_from(strategies["staged"], pageable_cost) == 1


def test_every_repeat_is_kept_and_medians_are_used():
    result = measure(SimulatedEngine(seed=3, noise=0.05), [16 * MiB], [1], repeats=5)
    (r,) = result.sizes
    assert all(len(samples) == 5 for _, samples in r.pinning)
    assert len(r.staged_copy_s) == 5 and len(result.staged_setup_s) == 5
    staged = result.strategies(r)[3]
    assert staged.per_send_s == sorted(r.staged_copy_s)[2]


def test_record_is_immutable_and_round_trips_through_json(result):
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.sends = (1,)  # type: ignore[misc]
    doc = json.loads(pageable.dumps_json(result))
    assert doc["schema"] == "xferscope-pageable" and doc["schema_version"] == 2
    assert doc["simulated"] is True and doc["machine"]["simulated"] is True
    assert doc["direction"] == "h2d" and doc["staged_plan"]["threads"] == 8
    assert pageable.from_dict(doc) == result
    gib = doc["sizes"][1]
    assert [t["fastest"] for t in gib["totals"]] == ["staged", "staged", "registered"]
    assert gib["cheaper_than_pageable_from"] == {"pinned": 6, "registered": 1, "staged": 1}
    assert {(c["before"], c["after"]) for c in gib["crossovers"]} >= {("staged", "registered")}
    assert gib["strategies"][1]["setup_parts"].keys() == {
        "cudaMallocHost",
        "memcpy",
        "cudaFreeHost",
    }
    assert len(gib["samples"]["host_alloc_s"]) == 3


@pytest.mark.parametrize(
    ("change", "message"),
    [({"schema": "xferscope-sweep"}, "not an xferscope-pageable"), ({"schema_version": 9}, "9")],
)
def test_other_schemas_are_refused(result, change, message):
    doc = {**pageable.to_dict(result), **change}
    with pytest.raises(SchemaError, match=message):
        pageable.from_dict(doc)


def test_csv_has_a_row_per_size_send_and_strategy(result):
    rows = list(csv.DictReader(io.StringIO(pageable.dumps_csv(result))))
    assert len(rows) == 2 * 3 * 4
    assert tuple(rows[0]) == pageable.CSV_COLUMNS
    assert {r["simulated"] for r in rows} == {"1"}
    winners = [(r["bytes"], r["sends"], r["strategy"]) for r in rows if r["fastest"] == "1"]
    assert (str(GiB), "100", "registered") in winners and len(winners) == 6
    row = next(r for r in rows if r["bytes"] == str(GiB) and r["strategy"] == "pinned")
    assert float(row["setup_s"]) == pytest.approx(model(GiB)["pinned"][0], rel=1e-6)
    assert row["cheaper_than_pageable_from"] == "6"


def test_size_tags_are_exact():
    assert [pageable.size_tag(n) for n in (MiB, 16 * MiB, GiB, 1536, 1000)] == [
        "1MiB",
        "16MiB",
        "1GiB",
        "1536B",
        "1000B",
    ]


# ---- the command line --------------------------------------------------------------------------

SMALL = ["pageable", "--simulate", "--sizes", "1MiB,16MiB", "--sends", "1,10,100"]


def test_cli_writes_every_output_and_says_simulated(capsys, tmp_path):
    code, out, err = run(capsys, *SMALL, "-o", str(tmp_path))
    assert code == 0, err
    assert "SIMULATED" in out
    assert "16 MiB: total time of k sends" in out and "crossovers" in out
    assert "registered is cheaper than pageable from 1 send on" in out
    (json_path,) = tmp_path.glob("pageable-*/pageable.json")
    doc = json.loads(json_path.read_text())
    assert doc["simulated"] is True and [s["bytes"] for s in doc["sizes"]] == [MiB, 16 * MiB]
    (csv_path,) = tmp_path.glob("pageable-*/pageable.csv")
    assert len(csv_path.read_text().splitlines()) == 1 + 2 * 3 * 4
    assert len(list(tmp_path.glob("pageable-*/pageable-1MiB.png"))) == 1
    assert len(list(tmp_path.glob("pageable-*/pageable-16MiB.png"))) == 1
    assert "wrote" in err


def test_cli_explicit_output_paths(capsys, tmp_path):
    code, _, err = run(
        capsys,
        *SMALL,
        "--json",
        str(tmp_path / "j" / "r.json"),
        "--csv",
        str(tmp_path / "c" / "r.csv"),
        "--plot",
        str(tmp_path / "p" / "x"),
        "-o",
        str(tmp_path / "unused"),
    )
    assert code == 0, err
    assert (tmp_path / "j" / "r.json").exists() and (tmp_path / "c" / "r.csv").exists()
    assert (tmp_path / "p" / "x-1MiB.png").exists() and (tmp_path / "p" / "x-16MiB.png").exists()
    assert not list((tmp_path / "unused").glob("*"))


def test_cli_default_sizes_and_sends(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(ENGINE, lambda simulate: SimulatedEngine(noise=0.0))
    code, out, err = run(capsys, "pageable", "-o", str(tmp_path))
    assert code == 0, err
    doc = json.loads(next(tmp_path.glob("*/*.json")).read_text())
    assert doc["options"]["sizes"] == list(pageable.DEFAULT_SIZES)
    assert doc["sends"] == list(pageable.DEFAULT_SENDS)
    assert len(list(tmp_path.glob("*/*.png"))) == 4
    assert "1 GiB: costs" in out


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (["--sizes", "0"], ["--sizes", "at least 1 byte"]),
        (["--sizes", "abc"], ["--sizes", "'abc'"]),
        (["--sizes", ","], ["--sizes", "one or more sizes"]),
        (["--sizes", "1TiB"], ["--sizes", "device memory", "free"]),
        (["--sends", "0"], ["--sends", "'0'", "from 1 to"]),
        (["--sends", "ten"], ["--sends", "'ten'"]),
        (["--sends", "1.5"], ["--sends", "'1.5'"]),
        (["--sends=-2"], ["--sends", "'-2'"]),
        (["--sends", ""], ["--sends", "one or more"]),
        (["--device", "3"], ["--device", "no GPU with index 3"]),
        (["--device", "one"], ["--device", "'one'"]),
        (["--device", "0,1"], ["--device", "one GPU index"]),
        (["--repeats", "0"], ["--repeats", "from 1 to 1000"]),
        (["--repeats", "many"], ["--repeats"]),
        (["--bogus"], ["No such option", "--bogus"]),
    ],
)
def test_bad_input_is_one_line(capsys, tmp_path, args, fragments):
    code, _, err = run(capsys, *SMALL, "-o", str(tmp_path), *args)
    assert_one_line_error(code, err, *fragments)
    assert not list(tmp_path.glob("*")), "nothing is measured or written after a bad option"


def test_sizes_beyond_host_memory_are_refused(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr("xferscope.core.machine.host_memory_total", lambda: 1 << 30)
    code, _, err = run(capsys, *SMALL, "--sizes", "1GiB", "-o", str(tmp_path))
    assert_one_line_error(code, err, "--sizes", "host memory")


def test_unwritable_output_is_refused_before_measuring(capsys, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    code, _, err = run(capsys, *SMALL, "--csv", str(blocker / "r.csv"), "-o", str(tmp_path))
    assert_one_line_error(code, err, "--csv", "is a file, not a directory")


class CannotPin(SimulatedEngine):
    def measure_pinning(self, device: int, bytes: int) -> dict[str, float]:
        raise AllocationError(f"cannot allocate {bytes} bytes of pinned memory: out of memory")


def test_a_size_that_cannot_be_pinned_is_one_line(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(ENGINE, lambda simulate: CannotPin())
    code, _, err = run(capsys, *SMALL, "-o", str(tmp_path))
    assert_one_line_error(
        code, err, "16 MiB cannot be allocated, pinned or registered", "pinned memory", "--sizes"
    )
    assert not list(tmp_path.glob("*"))


def test_ctrl_c_keeps_the_sizes_measured(capsys, tmp_path, monkeypatch):
    # Each size takes 9 engine calls (3 pinning measurements, fill, warm-up, 3 trials, verify),
    # largest first: interrupting at the 12th keeps 16 MiB whole and 1 MiB's pinning costs.
    monkeypatch.setattr(ENGINE, lambda simulate: SimulatedEngine(interrupt_after=12))
    code, _, err = run(capsys, *SMALL, "-o", str(tmp_path))
    assert code == cli.EXIT_INTERRUPTED
    assert "interrupted" in err
    doc = json.loads(next(tmp_path.glob("*/*.json")).read_text())
    assert doc["interrupted"] is True and [s["bytes"] for s in doc["sizes"]] == [MiB, 16 * MiB]
    part, whole = doc["sizes"]
    assert part["samples"]["staged_copy_s"] == [] and part["samples"]["host_alloc_s"]
    assert len(whole["samples"]["staged_copy_s"]) == 3


def test_ctrl_c_before_any_size_writes_nothing(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(ENGINE, lambda simulate: SimulatedEngine(interrupt_after=0))
    code, _, err = run(capsys, *SMALL, "-o", str(tmp_path))
    assert code == cli.EXIT_INTERRUPTED and "nothing written" in err
    assert not list(tmp_path.glob("*"))


def test_failed_verification_is_a_warning_and_an_exit_code(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(ENGINE, lambda simulate: SimulatedEngine(corrupt=True))
    code, out, _ = run(capsys, *SMALL, "-o", str(tmp_path))
    assert code == cli.EXIT_VERIFICATION_FAILED
    assert "did not match its source" in out


def test_help_lists_every_option(capsys):
    code, out, _ = run(capsys, "pageable", "--help")
    assert code == 0
    for option in (
        "--sizes",
        "--sends",
        "--device",
        "--repeats",
        "--simulate",
        "--out",
        "--json",
        "--csv",
        "--plot",
    ):
        assert option in out
