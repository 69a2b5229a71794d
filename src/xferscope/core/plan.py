"""Experiment design: which sizes, how many repeats per trial, how long each trial runs.

The method is NetPIPE's (seed 003): sizes on a log scale with +-p byte perturbations, a repeat
count chosen so one trial lasts a target time, several trials per size. Seed 000's time limiter
bounds each curve: when a curve would take longer than its budget, trials are shortened, and a
point that still does not fit is cut short and labelled.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

DEFAULT_MIN_SIZE = 1
DEFAULT_MAX_SIZE = 1 << 30
DEFAULT_TARGET_S = 0.25  # NetPIPE's TARGET: one trial lasts this long
QUICK_TARGET_S = 0.01
DEFAULT_TRIALS = 7  # NetPIPE's NTRIALS
DEFAULT_NOISE_BOUND = 0.05
# A size's first trials that agree this closely (robust relative spread) already give its median
# within it: `run` stops there (SweepOptions.early_trials)
EARLY_NOISE = 0.01
DEFAULT_BUDGET_S = 12.0  # per curve; four curves of 1 B..1 GiB then take about a minute
QUICK_BUDGET_S = 3.0
# Buffers are at least this large so that copies rotating through them leave the GPU L2
# (50-60 MB on Hopper) and the CPU's last-level cache.
ROTATION_BYTES = 256 << 20
# Share of a point's time spent on warm-up and calibration, and the least time a calibration
# run must last for its per-copy time to be trusted against timer resolution.
WARMUP_SHARE = 0.1
MIN_CALIBRATION_S = 2e-4


def log_sizes(
    min_size: int, max_size: int, steps_per_doubling: int = 1, perturbation: int = 0
) -> list[int]:
    """Sizes from min_size to max_size, `steps_per_doubling` points per power of two, each with
    NetPIPE's c-p and c+p neighbours when `perturbation` p > 0. Sorted, without duplicates."""
    if min_size < 1 or max_size < min_size:
        raise ValueError("need 1 <= min_size <= max_size")
    if steps_per_doubling < 1:
        raise ValueError("need at least one step per doubling")
    if perturbation < 0:
        raise ValueError("the perturbation cannot be negative")
    bases: set[int] = set()
    doublings = math.log2(max_size / min_size)
    count = math.floor(doublings * steps_per_doubling + 1e-9)
    for i in range(count + 1):
        bases.add(round(min_size * 2 ** (i / steps_per_doubling)))
    bases.add(max_size)
    sizes: set[int] = set()
    for c in bases:
        sizes.add(c)
        if perturbation:
            if c - perturbation >= 1:
                sizes.add(c - perturbation)
            sizes.add(c + perturbation)
    return sorted(sizes)


def netpipe_repeats(target_s: float, size: int, last_size: int, last_seconds: float) -> int:
    """NetPIPE's eq. (1): nrepeat = TARGET / ((bsz2 / bsz1) * tlast), from the last size's
    per-copy time scaled to this size. At least 1."""
    if last_seconds <= 0 or last_size <= 0:
        return 1
    return max(1, int(target_s / ((size / last_size) * last_seconds)))


def repeats_for(target_s: float, per_iteration_s: float) -> int:
    """Repeats so that a trial of copies taking per_iteration_s each lasts target_s."""
    if per_iteration_s <= 0:
        return 1
    return max(1, math.ceil(target_s / per_iteration_s))


def trial_target(
    requested_s: float, remaining_s: float | None, points_left: int, trials: int
) -> float:
    """The trial length for the next point: the requested target, shortened when the curve's
    remaining budget would not cover every remaining point's trials at that length."""
    if remaining_s is None:
        return requested_s
    share = max(remaining_s, 0.0) / max(points_left, 1) / (trials * (1 + WARMUP_SHARE))
    return min(requested_s, share)


@dataclass(frozen=True, slots=True)
class PointBudget:
    """What a point may still do given the curve's remaining time."""

    trials: int  # trials that fit, at least 1 unless `estimate_only`
    estimate_only: bool  # not even one copy fits: report the calibration copy, labelled


def fit_trials(trials: int, trial_s: float, remaining_s: float | None) -> PointBudget:
    """Seed 000's limiter for one point: as many of `trials` trials as fit the remaining time."""
    if remaining_s is None or trial_s * trials <= remaining_s:
        return PointBudget(trials, False)
    fitting = int(remaining_s // trial_s) if trial_s > 0 else trials
    if fitting < 1:
        return PointBudget(0, True)
    return PointBudget(min(trials, fitting), False)


# ---- the one calibrate-and-trial loop ----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Calibration:
    iterations: int  # the repeats of the run that was long enough to trust
    per_iteration_s: float


def calibrate(
    run: Callable[[int], float],
    least_s: float = MIN_CALIBRATION_S,
    first: int = 1,
    most: int = 1 << 20,
) -> Calibration:
    """Every measurement's warm-up and calibration: `run(n)` runs n iterations and returns the
    seconds they took; n grows from `first` until one run lasts `least_s` (long enough to trust
    against the timer's resolution) or reaches `most`. The last run gives the time per
    iteration. NetPIPE's method; its first guess (netpipe_repeats) is the caller's `first`."""
    n = max(1, min(first, most))
    while True:
        seconds = run(n)
        if seconds >= least_s or n >= most:
            return Calibration(n, max(seconds / n, 1e-9))
        n = min(most, max(2 * n, math.ceil(n * least_s / max(seconds, 1e-9))))


T = TypeVar("T")


def run_trials(
    trial: Callable[[], T],
    count: int,
    more: Callable[[list[T]], bool] | None = None,
    most: int | None = None,
    first: int | None = None,
    enough: Callable[[list[T]], bool] | None = None,
) -> list[T]:
    """Every measurement's trials: `count` of them, then more while `more(results)` says so
    (the spread is still above the bound, and the budget allows another), up to `most`. With
    `first` (fewer than `count`), after that many `enough(results)` may end them there."""
    results = [trial() for _ in range(count if first is None else min(first, count))]
    if first is not None and first < count:
        if enough is not None and enough(results):
            return results
        results += [trial() for _ in range(count - first)]
    while more is not None and (most is None or len(results) < most) and more(results):
        results.append(trial())
    return results


def trials_until_stopped(trial: Callable[[], T], count: int) -> tuple[list[T], bool]:
    """`count` trials, or those done when a Ctrl-C (KeyboardInterrupt) stopped them: (the
    results, whether it did). A measurement that must keep what a stop leaves uses it."""
    results: list[T] = []
    try:
        for _ in range(count):
            results.append(trial())
    except KeyboardInterrupt:
        return results, True
    return results, False


def trial_order(names: Sequence[T], trial: int, seed: int = 0) -> list[T]:
    """The order of `names` in trial `trial` when several things are timed trial by trial: a
    permutation drawn afresh for each trial (seeded, so a run can be repeated). Neither a
    thing's place in a trial nor what ran just before it may favour it: in a fixed order, or one
    only rotated, each thing always follows the same other (the staged copy's forced runs always
    followed packing's and took a median 1.25x the time of the same copy run after itself), and
    drift between trials must fall on all alike."""
    order = list(names)
    random.Random(seed * 1_000_003 + trial).shuffle(order)
    return order


def interleave(
    run: Callable[[str], T],
    trials: Mapping[str, int],
    seed: int = 0,
    errors: tuple[type[BaseException], ...] = (),
) -> tuple[dict[str, list[T]], dict[str, str], bool]:
    """Several things timed trial by trial: in trial t, `run(name)` for each name with more than
    t `trials`, in trial_order. A name whose run raises one of `errors` runs no more (its message
    kept, its trials dropped by the caller or not); a Ctrl-C stops them all. Returns each name's
    results, the failures' messages, and whether a Ctrl-C stopped it (the results kept)."""
    results: dict[str, list[T]] = {name: [] for name in trials}
    failed: dict[str, str] = {}
    try:
        for t in range(max(trials.values(), default=0)):
            for name in trial_order(list(trials), t, seed):
                if name in failed or t >= trials[name]:
                    continue
                try:
                    results[name].append(run(name))
                except errors as exc:
                    failed[name] = str(exc)
    except KeyboardInterrupt:
        return results, failed, True
    return results, failed, False


def trials_status(done: Sequence[object], wanted: int) -> str:
    """ "complete" for a thing that ran all its `wanted` trials, else "interrupted" (a Ctrl-C
    came first): its trials are kept, but too few for a median to compare."""
    return "complete" if len(done) == wanted else "interrupted"


# a timed thing's outcome: status, error, host seconds, device seconds (one of each per trial)
Outcome = tuple[str, str | None, tuple[float, ...], tuple[float, ...]]


def timed_outcomes(
    run: Callable[[str], tuple[float, float]],
    trials: Mapping[str, int],
    seed: int = 0,
    errors: tuple[type[BaseException], ...] = (),
) -> tuple[dict[str, Outcome], bool]:
    """Things timed by `run` (host and device seconds of a trial) interleaved as `interleave`
    runs them, each one's outcome: "failed" with the message of the error that stopped it, else
    trials_status with its trials' host and device seconds. And whether a Ctrl-C stopped them."""
    results, failed, stopped = interleave(run, trials, seed, errors)
    out: dict[str, Outcome] = {}
    for name, done in results.items():
        if name in failed:
            out[name] = ("failed", failed[name], (), ())
        else:
            host, device = tuple(h for h, _ in done), tuple(d for _, d in done)
            out[name] = (trials_status(done, trials[name]), None, host, device)
    return out, stopped


# A warm-up has settled once the mean rate of its last SETTLED_CHUNKS chunks is within SETTLED
# of the mean of the SETTLED_CHUNKS before: no trend left, whatever the chunks' own noise.
SETTLED = 0.01
SETTLED_CHUNKS = 3


@dataclass(frozen=True, slots=True)
class Settling:
    """A warm-up: the seconds it ran, and whether the rate held at its end (False: the time
    limit stopped it, or it was skipped: 0 seconds)."""

    seconds: float
    settled: bool


def settle(run: Callable[[int], float], n: int, least_s: float, most_s: float) -> Settling:
    """Every warm-up: `run(n)` chunks for at least `least_s`, then on until the rate has no
    trend left (_steady), or `most_s` has passed. Work that heats a GPU to its power limit
    slows well after it starts: on an H100 a bf16 GEMM of 8192^3 ran at 735 TFLOP/s for its
    first 0.6 s, then at 603-632 as the clocks fell from 1980 to 1200-1440 MHz; trials that
    straddled that spread 13-21%. Three chunks within 2% of each other were not enough: the
    rate then drifted down by about 1% a chunk for seconds (fp16 694, 664, 638, 621, 619)."""
    rates: list[float] = []
    spent = 0.0
    while spent < least_s or (spent < most_s and not _steady(rates)):
        seconds = run(n)
        spent += seconds
        rates.append(n / max(seconds, 1e-12))
    return Settling(spent, _steady(rates))


def _steady(rates: Sequence[float]) -> bool:
    if len(rates) < 2 * SETTLED_CHUNKS:
        return False
    last = sum(rates[-SETTLED_CHUNKS:])
    before = sum(rates[-2 * SETTLED_CHUNKS : -SETTLED_CHUNKS])
    return abs(last / before - 1) <= SETTLED


def timed_trials(
    run: Callable[[int], float],
    target_s: float,
    trials: int,
    warmup_s: float = 0.0,
    settle_most_s: float = 0.0,
) -> tuple[list[float], int, Settling]:
    """The calibrate-then-trials method for a `run(n)` that returns the seconds of n iterations:
    a calibration run of at least a quarter of `target_s`; a warm-up of at least `warmup_s` in
    chunks of `target_s`, on until their rate holds or `settle_most_s` has passed (settle);
    then `trials` trials of about `target_s` each. Returns the seconds per iteration of each
    trial, the iterations per trial and the warm-up."""
    calibration = calibrate(run, least_s=target_s / 4)
    n = repeats_for(target_s, calibration.per_iteration_s)
    warmed = Settling(0.0, False)
    if warmup_s > 0:
        warmed = settle(run, n, warmup_s, max(warmup_s, settle_most_s))
    return run_trials(lambda: run(n) / n, trials), n, warmed
