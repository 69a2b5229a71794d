"""Experiment design (xferscope.core.plan): sizes, repeats, trial lengths and the budget limiter."""

from __future__ import annotations

import itertools
import math
import types

import pytest

from xferscope.core import plan
from xferscope.core.plan import (
    PointBudget,
    fit_trials,
    log_sizes,
    netpipe_repeats,
    repeats_for,
    trial_target,
)

GIB = 1 << 30

# ---- log_sizes ---------------------------------------------------------------------------------


def test_log_sizes_default_is_31_powers_of_two() -> None:
    sizes = log_sizes(plan.DEFAULT_MIN_SIZE, plan.DEFAULT_MAX_SIZE)
    assert sizes == [1 << i for i in range(31)]
    assert len(sizes) == 31
    assert sizes[0] == 1
    assert sizes[-1] == GIB


def _assert_sorted_unique(sizes: list[int]) -> None:
    assert sizes == sorted(sizes)
    assert len(sizes) == len(set(sizes))
    assert all(b > a for a, b in itertools.pairwise(sizes))


def test_log_sizes_two_steps_per_doubling_adds_sqrt2_points() -> None:
    sizes = log_sizes(1024, 1 << 20, steps_per_doubling=2)
    # 10 doublings, two points each, plus the first size.
    assert len(sizes) == 21
    _assert_sorted_unique(sizes)
    assert sizes[0] == 1024
    assert sizes[-1] == 1 << 20
    powers = sizes[0::2]
    between = sizes[1::2]
    assert powers == [1024 << i for i in range(11)]
    for low, mid in zip(powers[:-1], between, strict=True):
        assert mid == round(low * math.sqrt(2))
        assert low < mid < 2 * low


def test_log_sizes_two_steps_over_the_default_range() -> None:
    sizes = log_sizes(1, GIB, steps_per_doubling=2)
    # 61 grid points, but round(sqrt(2)) == 1 coincides with the first size.
    assert len(sizes) == 60
    _assert_sorted_unique(sizes)
    assert sizes[0] == 1
    assert sizes[-1] == GIB
    assert set(log_sizes(1, GIB)) <= set(sizes)
    assert round(GIB / math.sqrt(2)) in sizes


def test_log_sizes_includes_a_max_size_off_the_grid() -> None:
    assert log_sizes(3, 100) == [3, 6, 12, 24, 48, 96, 100]


def test_log_sizes_single_size() -> None:
    assert log_sizes(4096, 4096) == [4096]
    assert log_sizes(4096, 4096, steps_per_doubling=3) == [4096]


def test_log_sizes_perturbation_adds_neighbours() -> None:
    assert log_sizes(4, 16, perturbation=1) == [3, 4, 5, 7, 8, 9, 15, 16, 17]


def test_log_sizes_perturbation_keeps_sizes_of_at_least_one_byte() -> None:
    sizes = log_sizes(1, 16, perturbation=1)
    assert 0 not in sizes
    assert sizes == [1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17]
    # 2 - 2 = 0 is dropped, 1 - 2 too, but their c + p neighbours stay.
    sizes = log_sizes(1, 4, perturbation=2)
    assert sizes == [1, 2, 3, 4, 6]
    assert min(sizes) >= 1
    _assert_sorted_unique(sizes)


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ((0, 16), "min_size"),
        ((-1, 16), "min_size"),
        ((16, 8), "max_size"),
        ((1, 16, 0), "step"),
        ((1, 16, -1), "step"),
        ((1, 16, 1, -1), "perturbation"),
    ],
)
def test_log_sizes_rejects_bad_arguments(args: tuple[int, ...], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        log_sizes(*args)


# ---- repeat counts -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("target_s", "size", "last_size", "last_seconds", "expected"),
    [
        # nrepeat = TARGET / ((bsz2 / bsz1) * tlast), binary fractions so the division is exact.
        (0.25, 4096, 1024, 2**-10, 64),  # 0.25 / (4 * 2^-10)
        (0.25, 1024, 1024, 2**-10, 256),  # same size: 0.25 / 2^-10
        (0.25, 512, 1024, 2**-10, 512),  # half the size: twice the repeats
        (1.0, 3, 2, 0.5, 1),  # 1 / 0.75 = 1.33 -> truncated to 1
        (1.0, 2, 2, 0.3, 3),  # 3.33 -> 3
    ],
)
def test_netpipe_repeats_is_netpipe_equation_one(
    target_s: float, size: int, last_size: int, last_seconds: float, expected: int
) -> None:
    assert netpipe_repeats(target_s, size, last_size, last_seconds) == expected


def test_netpipe_repeats_is_at_least_one() -> None:
    assert netpipe_repeats(1e-6, 1 << 30, 1, 1.0) == 1
    assert netpipe_repeats(0.0, 1024, 1024, 1e-3) == 1
    assert netpipe_repeats(0.25, 1024, 1024, 0.0) == 1
    assert netpipe_repeats(0.25, 1024, 0, 1e-3) == 1


def test_repeats_for() -> None:
    assert repeats_for(0.25, 2**-10) == 256
    assert repeats_for(1.0, 0.3) == 4  # ceil: a trial lasts at least the target
    assert repeats_for(1.0, 2.0) == 1
    assert repeats_for(1.0, 0.0) == 1
    assert repeats_for(0.0, 1e-3) == 1


# ---- trial length and the budget limiter -------------------------------------------------------


def test_trial_target_without_budget_is_the_requested_target() -> None:
    assert trial_target(0.25, None, 31, 7) == 0.25
    assert trial_target(0.01, None, 1, 1) == 0.01


def test_trial_target_with_ample_budget_is_the_requested_target() -> None:
    assert trial_target(0.25, 1000.0, 4, 7) == 0.25


def test_trial_target_shortens_under_a_tight_budget() -> None:
    target = trial_target(0.25, 1.0, 4, 7)
    # Each of the 4 points gets 1/4 s for 7 trials plus the warm-up share.
    assert target == pytest.approx(1.0 / 4 / (7 * (1 + plan.WARMUP_SHARE)))
    assert target < 0.25


@pytest.mark.parametrize("remaining_s", [-1.0, 0.0, 1e-6, 0.5, 3.0, 12.0, 1e9])
@pytest.mark.parametrize("points_left", [0, 1, 31])
def test_trial_target_is_never_above_the_request(remaining_s: float, points_left: int) -> None:
    target = trial_target(0.25, remaining_s, points_left, 7)
    assert 0.0 <= target <= 0.25


def test_trial_target_with_no_time_left_is_zero() -> None:
    assert trial_target(0.25, -0.5, 3, 7) == 0.0
    assert trial_target(0.25, 0.0, 3, 7) == 0.0


def test_fit_trials_without_budget_fits_all() -> None:
    assert fit_trials(7, 10.0, None) == PointBudget(7, False)


def test_fit_trials_fits_all_when_they_fit() -> None:
    assert fit_trials(7, 0.25, 7 * 0.25) == PointBudget(7, False)
    assert fit_trials(7, 0.25, 100.0) == PointBudget(7, False)


def test_fit_trials_partial() -> None:
    assert fit_trials(7, 0.25, 1.0) == PointBudget(4, False)
    assert fit_trials(7, 0.1, 0.35) == PointBudget(3, False)
    assert fit_trials(7, 0.25, 0.25) == PointBudget(1, False)


@pytest.mark.parametrize("remaining_s", [0.2, 0.0, -1.0])
def test_fit_trials_estimate_only_when_nothing_fits(remaining_s: float) -> None:
    budget = fit_trials(7, 0.25, remaining_s)
    assert budget.estimate_only
    assert budget.trials == 0


def test_interleave_runs_each_name_its_trials_stops_a_failure_and_keeps_a_ctrl_c():
    ran: list[str] = []

    def run(name: str) -> str:
        ran.append(name)
        if name == "bad" and ran.count("bad") == 2:
            raise ValueError("lost")
        if len(ran) == 11 and stop:
            raise KeyboardInterrupt
        return name

    stop = False
    results, failed, interrupted = plan.interleave(
        run, {"a": 3, "b": 3, "one": 1, "bad": 3}, 5, (ValueError,)
    )
    assert [len(results[n]) for n in ("a", "b", "one", "bad")] == [3, 3, 1, 1]
    assert failed == {"bad": "lost"} and not interrupted
    assert sorted(ran[:4]) == ["a", "b", "bad", "one"]  # each trial holds every name still running
    ran.clear()
    stop = True
    results, failed, interrupted = plan.interleave(run, {"a": 9, "b": 9}, 5)
    assert interrupted and sum(len(v) for v in results.values()) == 10  # the trials done, kept


# ---- trials that stop once their spread is known -----------------------------------------------


def test_first_trials_that_agree_end_the_trials_there() -> None:
    values = iter([1.0, 1.001, 0.999, 5.0, 5.0, 5.0, 5.0, 5.0])
    done = plan.run_trials(lambda: next(values), 7, first=3, enough=lambda r: True)
    assert done == [1.0, 1.001, 0.999]
    values = iter(range(20))
    taken = plan.run_trials(lambda: next(values), 7, first=3, enough=lambda r: False)
    assert taken == list(range(7))  # they disagreed: all seven
    values = iter(range(20))
    more = plan.run_trials(lambda: next(values), 7, lambda r: len(r) < 9, 12, 3, lambda r: False)
    assert more == list(range(9))  # and then more while the spread stays above the bound
    values = iter(range(20))
    assert plan.run_trials(lambda: next(values), 2, first=3, enough=lambda r: True) == [0, 1]


def test_a_sweep_with_early_trials_stops_sizes_whose_trials_agree_and_says_so() -> None:
    from xferscope.core.engine.simulated import SimulatedEngine
    from xferscope.sweep.measure import run_sweep
    from xferscope.sweep.options import SweepOptions
    from xferscope.sweep.records import STOP_SPREAD_KNOWN

    sizes = (1, 4096, 1 << 20, 64 << 20)

    def sweep(early_noise: float) -> list:
        options = SweepOptions(
            memories=("pinned",), sizes=sizes, target_s=0.01,
            budget_s=None, early_trials=3, early_noise=early_noise,
        )  # fmt: skip
        return [p for c in run_sweep(SimulatedEngine(seed=3), options).curves for p in c.points]

    agreed = sweep(1.0)  # any spread agrees
    assert agreed and all(len(p.samples_s) == 3 for p in agreed)
    assert all(p.stopped_by == STOP_SPREAD_KNOWN for p in agreed)
    assert all(p.status == "measured" and p.verification.ok for p in agreed)
    strict = sweep(0.0)  # only identical trials agree: the simulated ones never are
    assert all(len(p.samples_s) >= 7 and p.stopped_by != STOP_SPREAD_KNOWN for p in strict)


def test_with_early_trials_a_short_budget_never_cuts_the_curves_figures() -> None:
    """The largest and smallest sizes are measured first; the budget shortens the sizes between
    (on an H100 a 1.2 s budget, spent largest first, had left the smallest sizes one trial: d2h
    latency 7.58 us against 1.59)."""
    from xferscope.core.engine.simulated import SimulatedEngine
    from xferscope.sweep.measure import run_sweep
    from xferscope.sweep.options import SweepOptions

    sizes = tuple(4**i for i in range(16))  # 1 B to 1 GiB, as `run` measures
    options = SweepOptions(
        directions=("d2h",), memories=("pinned",), mechanisms=("async",), timings=("device",),
        sizes=sizes, budget_s=0.25, early_trials=3, early_noise=1.0,
    )  # fmt: skip
    (curve,) = run_sweep(SimulatedEngine(seed=5), options).curves
    points = {p.bytes: p for p in curve.points}
    for end in (min(sizes), max(sizes)):
        assert points[end].status == "measured" and len(points[end].samples_s) >= 3
    assert len(points) == len(sizes)


def test_a_slow_first_copy_is_taken_for_a_warm_up_before_the_budget_cuts_anything():
    """On an H100 a run's first pageable copy was slow once; calibrated on it alone, the curve's
    first size looked unaffordable and its trials were cut: it is calibrated again first."""
    from xferscope.core.engine.simulated import SimulatedEngine
    from xferscope.core.progress import QUIET
    from xferscope.sweep.measure import measure_curve
    from xferscope.sweep.options import SweepOptions
    from xferscope.sweep.records import CurveConfig

    engine = SimulatedEngine(seed=5)
    real_open = engine.open_transfer

    def open_slow_first(*args, **kw):
        transfer = real_open(*args, **kw)
        real_time, first = transfer.time, [True]

        def time(timing, size, iterations):
            result = real_time(timing, size, iterations)
            if first[0]:
                first[0] = False
                engine.advance(0.3)  # the driver's set-up, once
                return types.SimpleNamespace(
                    seconds=result.seconds + 0.3,
                    blocking_kernel=result.blocking_kernel,
                    blocking_timed_out=result.blocking_timed_out,
                    footprint_bytes=result.footprint_bytes,
                )
            return result

        transfer.time = time
        return transfer

    engine.open_transfer = open_slow_first
    # the slow copy takes most of the budget, which bounds measuring, not a warm-up
    options = SweepOptions(
        sizes=(1, 1 << 20, 64 << 20), target_s=0.002, budget_s=0.33, early_trials=3
    )
    run = measure_curve(engine, CurveConfig(0, "h2d", "pageable", "memcpy", "api"), options, QUIET)
    assert [p.status for p in run.curve.points] == ["measured"] * 3


def _chunks(rates: list[float]) -> tuple[list[float], object]:
    """A run(n) whose rate (iterations per second) follows `rates`, then holds the last."""
    seen: list[float] = []

    def run(n: int) -> float:
        rate = rates[min(len(seen), len(rates) - 1)]
        seen.append(rate)
        return n / rate

    return seen, run


def test_settle_waits_past_a_fall_until_the_rate_holds():
    # a GEMM at the power limit, as on an H100: fast while cold, falling, then steady
    rates = [735, 734, 733, 632, 640, 603, 604, 603]
    seen, run = _chunks(rates)
    warmed = plan.settle(run, 10, least_s=0.01, most_s=10.0)
    # on until three chunks' mean is within 1% of the three before: the fall is seen
    assert warmed.settled and seen[: len(rates)] == rates and seen[len(rates) :] == [603] * 3
    assert abs(warmed.seconds - sum(10 / r for r in seen)) < 1e-12


def test_a_slow_drift_is_no_steady_state():
    # about 1% a chunk down, as an H100's fp16 GEMM drifted for seconds: each three within 2%
    drift = [700 * 0.99**i for i in range(30)] + [700 * 0.99**30]
    seen, run = _chunks(drift)
    assert plan.settle(run, 10, least_s=0.01, most_s=10.0).settled
    assert len(seen) > 30  # held only once the drift ended


def test_settle_runs_at_least_its_least_and_at_most_its_most():
    seen, run = _chunks([100.0])  # steady from the start: its least, and two sets of chunks
    warmed = plan.settle(run, 10, least_s=0.5, most_s=10.0)
    assert warmed.settled and warmed.seconds >= 0.5 and len(seen) == 6
    seen, run = _chunks([100.0, 120.0] * 100)  # never holds: stopped by the most
    warmed = plan.settle(run, 10, least_s=0.1, most_s=1.0)
    assert not warmed.settled and 1.0 <= warmed.seconds < 1.1


def test_timed_trials_reports_its_warm_up():
    _, run = _chunks([735, 734, 733, 632, 603, 603, 603])
    seconds, _, warmed = plan.timed_trials(run, 0.1, 3, warmup_s=0.05, settle_most_s=5.0)
    assert warmed.settled and len(seconds) == 3 and all(abs(s - 1 / 603) < 1e-9 for s in seconds)
    _, run = _chunks([100.0])
    assert plan.timed_trials(run, 0.1, 3)[2] == plan.Settling(0.0, False)  # no warm-up asked
