"""Statistics over per-copy times (xferscope.core.stats)."""

from __future__ import annotations

import pytest

from xferscope.core.stats import median, relative_noise, relative_range, settle


def test_median() -> None:
    assert median([3.0]) == 3.0
    assert median([3.0, 1.0, 2.0]) == 2.0
    assert median([4.0, 1.0, 2.0, 3.0]) == 2.5
    assert type(median([1, 2, 3])) is float


def test_median_of_nothing_raises() -> None:
    with pytest.raises(ValueError):
        median([])


@pytest.mark.parametrize("values", [[], [1.0]])
def test_relative_noise_is_zero_below_two_samples(values: list[float]) -> None:
    assert relative_noise(values) == 0.0


def test_relative_noise_of_identical_samples_is_zero() -> None:
    assert relative_noise([2e-6] * 7) == 0.0


def test_relative_noise_hand_computed() -> None:
    # median 10; absolute deviations 8, 1, 0, 1, 90 -> MAD 1; 1.4826 * 1 / 10.
    values = [2.0, 9.0, 10.0, 11.0, 100.0]
    assert relative_noise(values) == pytest.approx(0.14826, rel=1e-12)


def test_relative_noise_hand_computed_even_count() -> None:
    # median 5; deviations 4, 1, 1, 4 -> MAD 2.5; 1.4826 * 2.5 / 5.
    values = [1.0, 4.0, 6.0, 9.0]
    assert relative_noise(values) == pytest.approx(1.4826 * 2.5 / 5, rel=1e-12)


def test_relative_noise_ignores_an_outlier_unlike_the_range() -> None:
    values = [1.0, 1.0, 1.0, 1.0, 1000.0]
    assert relative_noise(values) == 0.0
    assert relative_range(values) == pytest.approx(999.0)


def test_relative_noise_is_scale_free() -> None:
    values = [2.0, 9.0, 10.0, 11.0, 100.0]
    assert relative_noise([v * 1e-6 for v in values]) == pytest.approx(relative_noise(values))


def test_relative_noise_with_a_non_positive_median_is_zero() -> None:
    assert relative_noise([0.0, 0.0, 1.0]) == 0.0


@pytest.mark.parametrize("values", [[], [5.0]])
def test_relative_range_is_zero_below_two_samples(values: list[float]) -> None:
    assert relative_range(values) == 0.0


def test_relative_range_hand_computed() -> None:
    # (12 - 8) / 10
    assert relative_range([8.0, 10.0, 12.0]) == pytest.approx(0.4)
    # (4 - 1) / 2.5
    assert relative_range([1.0, 2.0, 3.0, 4.0]) == pytest.approx(1.2)


def test_relative_range_with_a_zero_median_is_zero() -> None:
    assert relative_range([0.0, 0.0, 1.0]) == 0.0


def test_settle_takes_the_simplest_method_within_the_margin() -> None:
    order = ("loop", "batch", "kernel")
    assert settle({"loop": 1.02, "batch": 1.01, "kernel": 1.0}, order) == "loop"
    assert settle({"loop": 1.2, "batch": 1.02, "kernel": 1.0}, order) == "batch"
    assert settle({"loop": 1.2, "batch": 1.05, "kernel": 1.0}, order) == "kernel"
    # a name the order does not know wins only as the fastest
    assert settle({"loop": 1.0, "other": 0.99}, order) == "loop"
    assert settle({"loop": 1.0, "other": 0.5}, order) == "other"
