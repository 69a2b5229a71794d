"""The sweep driver (xferscope.sweep.measure) on the simulated engine, whose clock is virtual."""

from __future__ import annotations

import pytest

from xferscope.core import interrupt
from xferscope.core.engine.simulated import SimulatedEngine
from xferscope.core.errors import OptionError
from xferscope.core.units import format_bytes
from xferscope.sweep.measure import run_sweep
from xferscope.sweep.options import SweepOptions
from xferscope.sweep.records import (
    CUT_SHORT,
    ESTIMATED,
    MEASURED,
    STOP_BUDGET,
    STOP_MAX_TRIALS,
    CurveConfig,
    SweepResult,
)

SIZES = (1, 4096, 1 << 20)
GIB = 1 << 30


def small_options(**changes: object) -> SweepOptions:
    settings: dict[str, object] = {
        "sizes": SIZES,
        "directions": ("h2d", "d2h"),
        "memories": ("pinned",),
        "target_s": 0.01,
        "budget_s": None,
    }
    settings.update(changes)
    return SweepOptions(**settings)  # type: ignore[arg-type]


class Recorder:
    """A core.progress.Progress that remembers what it was told."""

    def __init__(self) -> None:
        self.begun: list[str] = []
        self.steps: list[str] = []

    def begin(self, label: str) -> None:
        self.begun.append(label)

    def step(self, label: str) -> None:
        self.steps.append(label)

    def points_of(self, config: CurveConfig) -> list[str]:
        """The sizes reported done for a curve ('1 MiB', ...)."""
        prefix = f"{config.label}  "
        return [s[len(prefix) :].split(":")[0] for s in self.steps if s.startswith(prefix)]


def messages(result) -> list[str]:
    """The messages of a result's findings."""
    return [f.message for f in result.findings]


# ---- a plain sweep -----------------------------------------------------------------------------


def test_sweep_gives_one_sorted_verified_curve_per_config() -> None:
    recorder = Recorder()
    result = run_sweep(SimulatedEngine(seed=3), small_options(), recorder)
    assert [c.config for c in result.curves] == [
        CurveConfig(0, "h2d", "pinned", "memcpy", "api"),
        CurveConfig(0, "d2h", "pinned", "memcpy", "api"),
    ]
    for curve in result.curves:
        assert curve.status == "complete"
        assert curve.error is None
        assert [p.bytes for p in curve.points] == list(SIZES)
        for p in curve.points:
            assert p.verification is not None
            assert p.verification.ok
            assert p.verification.bytes_checked == p.bytes
            assert p.valid
            assert p.status == MEASURED
            assert len(p.samples_s) >= 7
            assert all(s > 0 for s in p.samples_s)
    assert not result.interrupted
    assert result.findings == ()
    assert recorder.begun == [c.config.label for c in result.curves]
    assert len(recorder.steps) == 6


def test_sweep_is_marked_simulated() -> None:
    result = run_sweep(SimulatedEngine(seed=3), small_options())
    assert result.simulated is True
    assert result.machine["simulated"] is True
    assert result.machine["host"]["hostname"] == "simulated"
    assert result.machine["gpus"][0]["name"].startswith("Simulated")
    assert result.options["sizes"] == list(SIZES)


def test_sweep_is_deterministic_for_a_seed() -> None:
    first = run_sweep(SimulatedEngine(seed=11), small_options())
    second = run_sweep(SimulatedEngine(seed=11), small_options())
    other = run_sweep(SimulatedEngine(seed=12), small_options())
    assert first.curves == second.curves
    assert first.curves != other.curves


def test_sweep_without_verification() -> None:
    result = run_sweep(SimulatedEngine(seed=3), small_options(verify=False))
    assert all(p.verification is None for c in result.curves for p in c.points)


def test_pinned_is_faster_than_pageable_in_the_model() -> None:
    options = small_options(sizes=(64 << 20,), directions=("h2d",), memories=("pageable", "pinned"))
    pageable, pinned = run_sweep(SimulatedEngine(seed=3), options).curves
    assert pinned.points[0].bandwidth > 2 * pageable.points[0].bandwidth


# ---- trial length ------------------------------------------------------------------------------


def test_without_budget_every_trial_lasts_about_the_target() -> None:
    target = 0.25
    result = run_sweep(SimulatedEngine(seed=5), small_options(target_s=target))
    for curve in result.curves:
        assert curve.requested_target_s == target
        assert curve.budget_s is None
        for p in curve.points:
            assert p.target_s == target
            assert p.status == MEASURED
        # One copy of 4 KiB takes microseconds, far shorter than the target, so a trial
        # repeats it many times and lasts about the target.
        p = curve.point(4096)
        assert p is not None
        assert p.median_s < target / 1000
        assert p.iterations > 1000
        for sample in p.samples_s:
            trial_s = p.iterations * p.copies_per_iteration * sample
            assert target / 2 <= trial_s <= 2 * target


def test_a_tiny_budget_cuts_points_short_or_estimates_them() -> None:
    options = small_options(
        sizes=(1, 4096, 1 << 20, GIB), directions=("h2d",), target_s=0.25, budget_s=0.05
    )
    result = run_sweep(SimulatedEngine(seed=5), options)
    (curve,) = result.curves
    assert curve.budget_s == 0.05
    limited = [p for p in curve.points if p.status in (CUT_SHORT, ESTIMATED)]
    assert limited
    for p in limited:
        assert p.stopped_by == STOP_BUDGET
        assert p.target_s < 0.25
    for p in curve.points:
        assert p.target_s <= 0.25
        if p.status == ESTIMATED:
            assert len(p.samples_s) == 1
            assert p.samples_s[0] == p.warmup_s
        if p.status == CUT_SHORT:
            assert 1 <= len(p.samples_s) < options.trials
    assert any("budget" in w for w in messages(result))
    assert any(f"{len(limited)} sizes did not fit" in w for w in messages(result))


def test_a_moderate_budget_shortens_trials_and_cuts_the_largest_short() -> None:
    options = small_options(
        sizes=(1, 4096, 1 << 20, GIB), directions=("h2d",), target_s=0.25, budget_s=0.1
    )
    (curve,) = run_sweep(SimulatedEngine(seed=5), options).curves
    largest = curve.point(GIB)
    assert largest is not None
    # One 1 GiB copy (~19 ms in the model) outlasts the shortened target, so the 7 trials of
    # one copy each (~0.14 s) do not fit in the 0.1 s budget.
    assert largest.status == CUT_SHORT
    assert largest.stopped_by == STOP_BUDGET
    assert largest.target_s < 0.25
    assert largest.iterations == 1


def test_an_ample_budget_changes_nothing() -> None:
    result = run_sweep(SimulatedEngine(seed=5), small_options(budget_s=1000.0))
    for curve in result.curves:
        for p in curve.points:
            assert p.status == MEASURED
            assert p.target_s == 0.01
    assert result.findings == ()


# ---- failures and interruptions ----------------------------------------------------------------


def test_corrupted_copies_fail_verification_and_warn() -> None:
    result = run_sweep(SimulatedEngine(seed=3, corrupt=True), small_options())
    for curve in result.curves:
        for p in curve.points:
            assert p.verification is not None
            assert not p.verification.ok
            assert p.verification.mismatched_bytes > 0
            assert p.verification.first_mismatch == p.bytes // 2
            assert not p.valid
    failed = [w for w in messages(result) if "verification FAILED" in w]
    assert len(failed) == len(result.curves)
    assert "at 3 of 3 sizes" in failed[0]
    assert failed[0].startswith("h2d pinned memcpy api:")


def _interrupted_at(after: int) -> tuple[SweepResult, Recorder]:
    interrupt.reset()  # the stop asked for by the previous call is the process's until reset
    recorder = Recorder()
    result = run_sweep(SimulatedEngine(seed=3, interrupt_after=after), small_options(), recorder)
    return result, recorder


def test_interruption_keeps_the_points_completed_before() -> None:
    kept_some = False
    interrupted_second_curve = False
    after = 0
    for after in range(1, 200):
        result, recorder = _interrupted_at(after)
        if not result.interrupted:
            break
        *earlier, last = result.curves
        assert last.status == "interrupted"
        assert all(c.status == "complete" for c in earlier)
        # The sweep stops at the interrupted curve.
        assert len(result.curves) == len(recorder.begun)
        done = recorder.points_of(last.config)
        assert sorted(format_bytes(p.bytes) for p in last.points) == sorted(done)
        kept_some = kept_some or bool(last.points)
        interrupted_second_curve = interrupted_second_curve or bool(earlier)
    else:
        pytest.fail("the sweep never finished")
    assert after > 1
    assert kept_some
    assert interrupted_second_curve
    full = run_sweep(SimulatedEngine(seed=3), small_options())
    assert all(c.status == "complete" for c in full.curves)


def test_interruption_in_the_first_curve() -> None:
    result, _ = _interrupted_at(1)
    assert result.interrupted
    assert len(result.curves) == 1
    assert result.curves[0].status == "interrupted"
    assert result.curves[0].points == ()


def test_a_size_beyond_memory_is_refused_before_measuring() -> None:
    engine = SimulatedEngine(seed=3)
    recorder = Recorder()
    with pytest.raises(OptionError, match="--sizes") as caught:
        run_sweep(engine, small_options(sizes=(1, 200 * 10**9)), recorder)
    assert caught.value.option == "--sizes"
    assert "device memory" in str(caught.value)
    assert engine.clock() == 0.0
    assert recorder.begun == []


def test_a_device_that_does_not_exist_is_refused() -> None:
    with pytest.raises(OptionError, match="--device"):
        run_sweep(SimulatedEngine(seed=3), small_options(devices=(1,)))


# ---- options -----------------------------------------------------------------------------------


def test_configs_skip_kernel_with_pageable_and_collapse_d2d() -> None:
    options = SweepOptions(
        directions=("h2d", "d2d"),
        memories=("pageable", "pinned"),
        mechanisms=("memcpy", "kernel"),
        timings=("api",),
    )
    configs, skipped = options.configs()
    assert configs == [
        CurveConfig(0, "h2d", "pageable", "memcpy", "api"),
        CurveConfig(0, "h2d", "pinned", "memcpy", "api"),
        CurveConfig(0, "h2d", "pinned", "kernel", "api"),
        CurveConfig(0, "d2d", "device", "memcpy", "api"),
        CurveConfig(0, "d2d", "device", "kernel", "api"),
    ]
    assert len(skipped) == 1
    assert skipped[0].startswith("h2d pageable kernel")


def test_sweep_warns_about_skipped_combinations() -> None:
    options = small_options(
        directions=("h2d", "d2d"), memories=("pageable",), mechanisms=("kernel",)
    )
    result = run_sweep(SimulatedEngine(seed=3), options)
    assert [c.config for c in result.curves] == [CurveConfig(0, "d2d", "device", "kernel", "api")]
    assert any(w.startswith("skipped h2d pageable kernel") for w in messages(result))


def test_sweep_with_nothing_to_run_is_refused() -> None:
    options = small_options(directions=("h2d",), memories=("pageable",), mechanisms=("kernel",))
    with pytest.raises(OptionError, match="--mechanism"):
        run_sweep(SimulatedEngine(seed=3), options)


@pytest.mark.parametrize(
    ("changes", "option"),
    [
        ({"trials": 0}, "--trials"),
        ({"trials": 5, "max_trials": 4}, "--max-trials"),
        ({"target_s": 0.0}, "--target-time"),
        ({"target_s": float("nan")}, "--target-time"),
        ({"budget_s": -1.0}, "--budget"),
        ({"noise_bound": 0.0}, "--noise-bound"),
        ({"noise_bound": 1.0}, "--noise-bound"),
    ],
)
def test_options_are_validated(changes: dict[str, object], option: str) -> None:
    with pytest.raises(OptionError) as caught:
        SweepOptions(**changes)  # type: ignore[arg-type]
    assert caught.value.option == option


# ---- noise -------------------------------------------------------------------------------------


def test_noisy_points_take_up_to_max_trials() -> None:
    options = small_options(directions=("h2d",), noise_bound=0.01)
    result = run_sweep(SimulatedEngine(seed=3, noise=0.2), options)
    (curve,) = result.curves
    for p in curve.points:
        assert len(p.samples_s) == options.max_trials
        assert p.stopped_by == STOP_MAX_TRIALS
        assert p.status == MEASURED
        assert p.rel_noise > options.noise_bound
    assert any("noisier than 1%" in w for w in messages(result))


def test_quiet_points_stop_at_the_minimum_trials() -> None:
    options = small_options(directions=("h2d",), noise_bound=0.5)
    (curve,) = run_sweep(SimulatedEngine(seed=3, noise=0.01), options).curves
    for p in curve.points:
        assert len(p.samples_s) == options.trials
        assert p.stopped_by == "noise_bound"
