"""benchmarks/trace_overhead.py's variants: each traced round's environment, and a variant
$TRACE_CORPUS_VARIANTS names that is not one is a line naming those that are."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from trace_overhead import NO_NVTX_TOOL, VARIANTS, chosen_variants, entry, order, ratio_interval


def test_each_variant_adds_only_what_it_names():
    assert VARIANTS["traced"].env() == {}
    assert VARIANTS["no_nvtx"].env() == NO_NVTX_TOOL
    floor = VARIANTS["cupti_floor"]
    assert floor.env() == {"XFERSCOPE_TRACE_KNOBS": "nosubscribe"} and floor.kernels == "all"
    assert VARIANTS["no_hash"].kernels == VARIANTS["traced"].kernels
    sets = VARIANTS["set_calls"]  # traced by default, a callback on each memset call too
    assert sets.env() == {"XFERSCOPE_TRACE_KNOBS": "keepsetcalls"}
    assert (sets.kernels, sets.look_every) == (
        VARIANTS["traced"].kernels,
        VARIANTS["traced"].look_every,
    )
    assert VARIANTS["lean_calls"].env() == {"XFERSCOPE_TRACE_KNOBS": "nod2dcalls"}


def test_the_variants_named_are_timed_in_their_order(monkeypatch):
    monkeypatch.setenv("TRACE_CORPUS_VARIANTS", "no_hash,traced")
    assert list(chosen_variants()) == ["no_hash", "traced"]
    monkeypatch.delenv("TRACE_CORPUS_VARIANTS")
    assert list(chosen_variants()) == ["traced", "no_looks", "no_kernels"]


def test_a_variant_that_is_not_one_is_named(monkeypatch):
    monkeypatch.setenv("TRACE_CORPUS_VARIANTS", "traced,nohash")
    with pytest.raises(SystemExit, match="nohash not one of traced, no_looks"):
        chosen_variants()


def test_a_kernel_setting_is_a_variant_traced_by_default_but_for_its_kernels(monkeypatch):
    monkeypatch.setenv("TRACE_CORPUS_VARIANTS", "traced,kernels=50/500/30000/2000")
    chosen = chosen_variants()
    assert chosen["kernels=50/500/30000/2000"].kernels == "50/500/30000/2000"
    assert chosen["kernels=50/500/30000/2000"].env() == {}
    for bad in ("kernels=500/50", "kernels=", "kernels=all/x"):
        monkeypatch.setenv("TRACE_CORPUS_VARIANTS", bad)
        with pytest.raises(SystemExit, match=r"or kernels=ON/PERIOD\[/FIRST"):
            chosen_variants()


def test_each_round_starts_one_later_so_every_run_takes_the_first_place_in_turn():
    names = ["untraced", "traced", "no_kernels"]
    rounds = [order(names, i) for i in range(4)]
    assert rounds[0] == names and rounds[3] == names
    assert [r[0] for r in rounds[:3]] == names
    assert all(sorted(r) == sorted(names) for r in rounds)


def test_a_ratios_interval_holds_it_and_is_wide_where_the_rounds_spread():
    steady = [1.00, 1.01, 0.99, 1.00, 1.02]
    lo, hi = ratio_interval(steady, [x * 1.25 for x in steady])  # traced 25% slower, steadily
    assert lo <= 0.8 <= hi and hi - lo < 0.05
    assert ratio_interval(steady, steady[::-1]) == ratio_interval(steady, steady[::-1])  # seeded
    spread = [0.70, 0.98, 0.79, 0.90, 0.80]  # recsys_small_copies's untraced rounds
    lo, hi = ratio_interval(spread, [x * 1.1 for x in spread])
    assert lo < 1 / 1.1 < hi and hi - lo > 0.2
    lo, hi = ratio_interval(steady, [1.3, 1.31, 1.29, 1.30])  # rounds of different counts
    assert hi < 0.8


@pytest.mark.parametrize("times", ["", "0", "-3", "nan", "1e3", "1001", "99999999999999999999"])
def test_a_steps_multiplier_that_is_not_one_is_one_line(monkeypatch, capsys, times):
    import corpus  # benchmarks/trace_corpus/corpus.py, on the path trace_overhead sets

    monkeypatch.setattr(sys, "argv", ["program"])
    monkeypatch.setenv(corpus.STEPS_TIMES, times)
    with pytest.raises(SystemExit) as stop:
        corpus.options(5)
    assert stop.value.code == 2
    said = capsys.readouterr().err.strip().splitlines()[-1]
    assert said.endswith(f"'{times}' is not a whole number from 1 to 1000")
    assert "$TRACE_CORPUS_STEPS_TIMES" in said


def test_the_steps_multiplier_multiplies_the_default_steps_alone(monkeypatch):
    import corpus

    monkeypatch.setenv(corpus.STEPS_TIMES, "10")
    monkeypatch.setattr(sys, "argv", ["program"])
    assert corpus.options(30).steps == 300
    monkeypatch.setattr(sys, "argv", ["program", "--steps", "7"])
    assert corpus.options(30).steps == 7


def test_a_program_cut_short_keeps_the_ratios_of_the_variants_that_ran(monkeypatch):
    monkeypatch.delenv("TRACE_CORPUS_STEPS_TIMES", raising=False)
    got = entry({"untraced": [1.0, 1.2, 1.1], "traced": [1.25, 1.3], "copies_floor": []})
    assert got["ratio_traced"] == pytest.approx(1.1 / 1.275)
    assert "ratio_copies_floor" not in got and "interval_copies_floor" not in got
    low, high = got["interval_traced"]
    assert low <= got["ratio_traced"] <= high
    assert got["steps_times"] == 1 and got["traced"] == [1.25, 1.3]


def test_the_floor_with_callbacks_records_nothing_of_ours():
    floor = VARIANTS["subscribed_floor"]
    assert floor.env() == {"XFERSCOPE_TRACE_KNOBS": "nocall,noapi"}
    assert (floor.kernels, floor.look_every) == ("none", 0.0)


def test_the_form_timed_is_the_program_as_it_is_unless_its_fix_is_named(monkeypatch):
    from trace_overhead import FORMS, chosen_form

    monkeypatch.delenv("TRACE_CORPUS_FORM", raising=False)
    assert chosen_form() == "before" and FORMS["before"] == []
    monkeypatch.setenv("TRACE_CORPUS_FORM", "fixed")
    assert chosen_form() == "fixed" and FORMS["fixed"] == ["--fixed"]
    monkeypatch.setenv("TRACE_CORPUS_FORM", "resident")
    with pytest.raises(SystemExit, match="TRACE_CORPUS_FORM: resident is not one of before, fixed"):
        chosen_form()


def test_the_worst_figures_are_of_the_programs_whose_rounds_all_ran():
    from trace_overhead import worst

    found = {
        "a": entry({"untraced": [1.0, 1.0, 1.0], "traced": [1.1, 1.1, 1.1]}),
        "b": entry({"untraced": [1.0, 1.0, 1.0], "traced": [1.02, 1.02, 1.02]}),
        "cut": entry({"untraced": [1.0], "traced": [2.0]}) | {"interrupted": True},
        "failed": {"error": "exit 1"},
    }
    figures: dict = {}
    worst(found, chosen_variants(), figures)
    assert figures["trace_corpus_overhead_worst"] == pytest.approx(1 / 1.1)
    assert figures["trace_corpus_overhead_programs"] == 2
    assert "trace_corpus_overhead_looks" not in figures  # no program ran that variant
    assert figures["trace_corpus_overhead_surely_below"] == ["a"]  # steadily 10% slower
    noisy = entry({"untraced": [1.0, 0.8, 1.2], "traced": [1.1, 0.9, 1.3]})
    figures = {}
    worst({"noisy": noisy}, chosen_variants(), figures)
    assert figures["trace_corpus_overhead_worst"] < 0.95
    assert figures["trace_corpus_overhead_surely_below"] == []  # its interval reaches 0.95
