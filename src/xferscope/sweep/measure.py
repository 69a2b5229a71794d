"""Drives an engine through a sweep and builds the result records.

Python orchestrates here; every timed loop runs inside the engine. Per point: a warm-up run
that also calibrates the per-copy time, a repeat count that makes one trial last the target
time, the trials (more while the spread is above the bound), then verification.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..core import background, cases, limits, machine, plan
from ..core.engine import Engine, Transfer, check_device, memory_refusal
from ..core.errors import AllocationError, EngineError, OptionError, XferscopeError
from ..core.findings import INFO, WARNING, Finding, corrupted, failed, finding
from ..core.progress import QUIET, Progress
from ..core.stats import relative_noise, relative_range
from ..core.units import format_bytes, format_rate
from ..documents.envelope import now
from .alignment import alignment_findings
from .chase import CHASE_TRIALS, ChasePoint, chase_points, readable
from .options import SweepOptions
from .records import (
    CUT_SHORT,
    ESTIMATED,
    MEASURED,
    STOP_BUDGET,
    STOP_MAX_TRIALS,
    STOP_NOISE,
    STOP_SPREAD_KNOWN,
    Curve,
    CurveConfig,
    Point,
    SweepResult,
    verification_of,
)


def _calibrate(
    transfer: Transfer,
    timing: str,
    size: int,
    target_s: float,
    last: plan.Calibration | None,
    last_size: int | None,
) -> plan.Calibration:
    """The point's warm-up run, which also measures the per-iteration time (plan.calibrate).
    Its first guess of the repeat count comes from NetPIPE's scaling of the previous size."""
    budget = plan.WARMUP_SHARE * target_s
    first = 1
    if last is not None and last_size:
        # Sizes run largest first. Scaling the last time down in proportion to size (NetPIPE's
        # eq. 1 going the other way) would ignore the fixed latency and ask for far too many
        # repeats, so a smaller size is predicted to take as long as the last one.
        first = plan.netpipe_repeats(budget, max(size, last_size), last_size, last.per_iteration_s)
    return plan.calibrate(
        lambda n: transfer.time(timing, size, n).seconds,
        least_s=min(plan.MIN_CALIBRATION_S, budget),
        first=first,
    )


def measure_point(
    engine: Engine,
    transfer: Transfer,
    config: CurveConfig,
    size: int,
    target_s: float,
    options: SweepOptions,
    deadline: float | None,
    last: plan.Calibration | None,
    last_size: int | None,
    cache_bytes: int,
    early: int | None = None,
) -> tuple[Point, plan.Calibration, float]:
    """One size: calibration, trials (`early`: after that many, stop if they agree within
    options.early_noise), verification; and the seconds of a first calibration taken for a
    warm-up, which the curve's budget does not bound (0: none)."""
    copies = transfer.copies_per_iteration

    def planned() -> tuple[plan.Calibration, int, float, plan.PointBudget]:
        """Calibration, repeats per trial, a trial's seconds, and the trials that fit."""
        calibration = _calibrate(transfer, config.timing, size, target_s, last, last_size)
        iterations = plan.repeats_for(target_s, calibration.per_iteration_s)
        trial_s = iterations * calibration.per_iteration_s
        remaining = None if deadline is None else deadline - engine.clock()
        return calibration, iterations, trial_s, plan.fit_trials(options.trials, trial_s, remaining)

    started = engine.clock()
    calibration, iterations, trial_s, fit = planned()
    warm_up_s = 0.0
    if last is None and fit.trials < options.trials:
        # A curve's first copy can be slow once (on an H100 a run's first pageable copy, the
        # driver's staging set up, made its size's trials look unaffordable and the budget cut
        # them): before the budget cuts anything, that run counts as a warm-up, which the budget
        # does not bound (as it does not bound allocating), and the size is calibrated again.
        warm_up_s = engine.clock() - started
        deadline = None if deadline is None else deadline + warm_up_s
        calibration, iterations, trial_s, fit = planned()
    warmup_per_copy = calibration.per_iteration_s / copies

    blocking = False
    timed_out = False
    footprint = 0

    def trial() -> float:
        nonlocal blocking, timed_out, footprint
        r = transfer.time(config.timing, size, iterations)
        blocking = r.blocking_kernel
        timed_out = timed_out or r.blocking_timed_out
        footprint = r.footprint_bytes
        return r.seconds / (iterations * copies)

    def more(samples: list[float]) -> bool:
        """Another trial while the spread is above the bound, if the budget allows one."""
        in_time = deadline is None or engine.clock() + trial_s <= deadline
        return (
            fit.trials == options.trials
            and relative_noise(samples) > options.noise_bound
            and in_time
        )

    if fit.estimate_only:
        status, stopped_by = ESTIMATED, STOP_BUDGET
        samples = [warmup_per_copy]
        iterations = calibration.iterations
    else:

        def agreed(samples: list[float]) -> bool:
            # every one of the first trials within the bound of their median (the robust spread
            # of three says nothing of one outlier)
            return relative_range(samples) <= options.early_noise

        samples = plan.run_trials(trial, fit.trials, more, options.max_trials, early, agreed)
        if early is not None and len(samples) == early <= fit.trials and agreed(samples):
            status, stopped_by = MEASURED, STOP_SPREAD_KNOWN
        elif fit.trials < options.trials:
            status, stopped_by = CUT_SHORT, STOP_BUDGET
        else:
            status = MEASURED
            if relative_noise(samples) <= options.noise_bound:
                stopped_by = STOP_NOISE
            elif len(samples) >= options.max_trials:
                stopped_by = STOP_MAX_TRIALS
            else:
                stopped_by = STOP_BUDGET

    point = Point(
        bytes=size,
        iterations=iterations,
        copies_per_iteration=copies,
        samples_s=tuple(samples),
        warmup_s=warmup_per_copy,
        target_s=target_s,
        status=status,
        stopped_by=stopped_by,
        blocking_kernel=blocking,
        blocking_timed_out=timed_out,
        footprint_bytes=footprint,
        cache_resident=0 < footprint < 2 * cache_bytes,
        verification=verification_of(transfer.verify(size)) if options.verify else None,
    )
    return point, calibration, warm_up_s


@dataclass(frozen=True, slots=True)
class CurveRun:
    """A curve as measured, whether Ctrl-C cut it short, and the error that stopped it (a
    CudaError means the GPU itself is in trouble; an AllocationError only that memory ran
    short)."""

    curve: Curve
    interrupted: bool
    error: XferscopeError | None


def measure_curve(
    engine: Engine, config: CurveConfig, options: SweepOptions, progress: Progress
) -> CurveRun:
    """One curve, with what stopped it."""
    start = engine.clock()
    deadline: float | None = None
    # Largest first: the big sizes have a fixed least cost, the small ones share what is left
    # of the budget, and the first copies fault in every page of the buffers.
    sizes = sorted(options.sizes, reverse=True)
    if options.early_trials is not None and len(sizes) > 2:
        # the sizes the curve's figures come from first (largest: bandwidth; smallest:
        # latency), so that a budget spent on the sizes between never cuts them short
        sizes = [sizes[0], sizes[-1], *sizes[1:-1]]
    cache_bytes = int(engine.device_info(config.device).get("l2_cache_bytes") or 0)
    points: list[Point] = []
    host_node: int | None = None
    status, error, interrupted = "complete", None, False
    failure: XferscopeError | None = None
    progress.begin(config.label)

    def finish() -> Curve:
        return Curve(
            config=config,
            points=tuple(sorted(points, key=lambda p: p.bytes)),
            status=status,
            error=error,
            budget_s=options.budget_s,
            requested_target_s=options.target_s,
            wall_s=engine.clock() - start,
            host_node=host_node,
        )

    try:
        transfer = engine.open_transfer(
            config.device,
            config.direction,
            config.memory,
            config.mechanism,
            max(sizes),
            options.rotation_bytes if options.cache == "cold" else 0,
            rotate=options.cache == "cold",
            host_offset=config.host_offset,
            device_offset=config.device_offset,
            numa_node=-1 if config.numa_node is None else config.numa_node,
        )
        try:
            transfer.fill(options.seed)
            if config.numa_node is not None:
                host_node = transfer.host_node()  # where the filled pages went
            # side work runs beside a curve that times the GPU alone, and stops for the others
            (background.host_free if config.gpu_alone else background.host_timed)()
            # The budget bounds measuring, not allocating and filling the buffers.
            if options.budget_s is not None:
                deadline = engine.clock() + options.budget_s
            last: plan.Calibration | None = None
            last_size: int | None = None
            for i, size in enumerate(sizes):
                remaining = None if deadline is None else deadline - engine.clock()
                # every size gets an equal share of what is left of the budget, in as many
                # trials as it plans (the largest and smallest are measured first: the sizes
                # between are the ones a budget cuts)
                planned = options.early_trials or options.trials
                target = plan.trial_target(options.target_s, remaining, len(sizes) - i, planned)
                point, last, warm_up_s = measure_point(
                    engine,
                    transfer,
                    config,
                    size,
                    target,
                    options,
                    deadline,
                    last,
                    last_size,
                    cache_bytes,
                    options.early_trials,
                )
                if deadline is not None:
                    deadline += warm_up_s
                last_size = size
                points.append(point)
                progress.step(
                    f"{config.label}  {format_bytes(size)}: {format_rate(point.bandwidth)}"
                )
        finally:
            transfer.close()
    except KeyboardInterrupt:
        status, interrupted = "interrupted", True
    except (AllocationError, EngineError) as exc:
        status, error, failure = "failed", str(exc), exc
    return CurveRun(finish(), interrupted, failure)


def check_memory(
    engine: Engine, options: SweepOptions, configs: list[CurveConfig], option: str = "--sizes"
) -> None:
    """Refuses, before anything runs, sizes that cannot fit in device or host memory, naming
    `option`, the one that gave the sizes."""
    largest = max(options.sizes)
    per_buffer = max(largest, options.rotation_bytes if options.cache == "cold" else 0)
    for device in {c.device for c in configs}:
        free, _ = engine.memory_info(device)
        device_buffers = max(
            (2 if c.direction == "d2d" else 1) for c in configs if c.device == device
        )
        # Verification of a host destination stages it in one more device buffer.
        need = device_buffers * per_buffer + largest
        if need > free:
            raise OptionError(
                option,
                f"{format_bytes(largest)} needs {format_bytes(need)} of device memory on GPU "
                f"{device}, but {format_bytes(free)} is free",
            )
    host_buffers = max(
        (2 if c.direction == "roundtrip" else 1 if c.direction != "d2d" else 0) for c in configs
    )
    available = machine.host_memory_total()
    need = host_buffers * per_buffer
    if available is not None and need > available:
        raise OptionError(
            option,
            f"{format_bytes(largest)} needs {format_bytes(need)} of host memory, but "
            f"this machine has {format_bytes(available)}",
        )


def _findings(curves: list[Curve], skipped: list[str], options: SweepOptions) -> list[Finding]:
    """What a sweep found. Codes: skipped (a combination the engine cannot measure), failed,
    verification_failed, blocking_timed_out, noisy, budget."""
    found = [finding("skipped", INFO, note.split(":")[0], f"skipped {note}") for note in skipped]
    for curve in curves:
        label = curve.config.label
        if curve.status == "failed":
            found.append(failed(label, str(curve.error)))
        bad = [p for p in curve.points if p.verification is not None and not p.verification.ok]
        if bad:
            first = bad[0]
            assert first.verification is not None
            found.append(
                corrupted(
                    label,
                    f"{label}: verification FAILED at {len(bad)} of {len(curve.points)} sizes "
                    f"(first at {format_bytes(first.bytes)}: {first.verification.mismatched_bytes} "
                    f"wrong bytes, the first at offset {first.verification.first_mismatch}); those "
                    "figures are invalid",
                    first.verification.mismatched_bytes,
                )
            )
        if any(p.blocking_timed_out for p in curve.points):
            found.append(
                finding(
                    "blocking_timed_out",
                    WARNING,
                    label,
                    f"{label}: the blocking kernel timed out, so the host blocked while queueing "
                    "copies; the device times of those points are suspect",
                    cause="the stream's queue filled before the copies were released",
                    fix="measure fewer copies per trial (a shorter --target-time)",
                )
            )
        noisy = [p for p in curve.points if p.stopped_by == STOP_MAX_TRIALS]
        if noisy:
            worst = max(noisy, key=lambda p: p.rel_noise)
            found.append(
                finding(
                    "noisy",
                    WARNING,
                    label,
                    f"{label}: {len(noisy)} sizes stayed noisier than "
                    f"{options.noise_bound:.0%} after {options.max_trials} trials (worst "
                    f"{worst.rel_noise:.0%} at "
                    f"{format_bytes(worst.bytes)})",
                    cause="another process may be using the GPU or the CPU",
                    fix="measure on an idle machine, or raise --max-trials",
                    value=worst.rel_noise,
                    reference=options.noise_bound,
                )
            )
        limited = [p for p in curve.points if p.status in (CUT_SHORT, ESTIMATED)]
        if limited:
            found.append(
                finding(
                    "budget",
                    WARNING,
                    label,
                    f"{label}: {len(limited)} sizes did not fit the {options.budget_s:g} s "
                    "budget and were cut short or estimated (labelled in the results)",
                    fix="raise --budget",
                )
            )
    return found + alignment_findings(curves)


def pool(first: Curve, second: Curve) -> Curve:
    """One curve from two rounds of it: each size's trials together (the second round's
    repeat count and verification, unless the first's failed), the worse status."""
    earlier = {p.bytes: p for p in first.points}
    points = []
    for p in second.points:
        e = earlier.pop(p.bytes, None)
        if e is None:
            points.append(p)
            continue
        failed = e.verification is not None and not e.verification.ok
        points.append(
            replace(
                p,
                samples_s=e.samples_s + p.samples_s,
                verification=e.verification if failed else p.verification,
                blocking_timed_out=e.blocking_timed_out or p.blocking_timed_out,
                status=p.status if e.status == MEASURED else e.status,
            )
        )
    points += earlier.values()
    order = ("complete", "interrupted", "failed")
    worse = max(first.status, second.status, key=lambda s: order.index(s) if s in order else 1)
    return replace(
        second,
        points=tuple(sorted(points, key=lambda p: p.bytes)),
        status=worse,
        error=second.error or first.error,
        wall_s=first.wall_s + second.wall_s,
    )


@dataclass(frozen=True, slots=True)
class SweepPlan:
    """The curves a sweep measures and the combinations it skips, with why."""

    configs: list[CurveConfig]
    skipped: list[str]


def prepare_sweep(
    engine: Engine, options: SweepOptions, sizes_from: str = "--sizes", blame: str = "--sizes"
) -> SweepPlan:
    """The curves to measure, after every check that can refuse the options (GPUs, memory, for
    which `sizes_from` is named, and a plan too large to measure and write, for which `blame`
    is): the CLI calls it before it makes any output directory."""
    configs, skipped = options.configs()
    if not configs:
        raise OptionError("--mechanism", "no curve can run: " + "; ".join(skipped))
    for device in options.devices:
        check_device(engine, device)
    configs, waived = waive(engine, configs)
    skipped = skipped + waived
    if not configs:
        raise OptionError("-m/--memory", "no curve can run on this machine: " + "; ".join(waived))
    curves, sizes, rounds = len(configs), len(options.sizes), options.rounds
    limits.check_plan(
        blame,
        curves * sizes * rounds,
        f"{curves} curves x {sizes} sizes x {rounds} rounds",
        "fewer --steps or sizes, a narrower range, fewer curves or rounds",
    )
    check_memory(engine, options, configs, sizes_from)
    return SweepPlan(configs, skipped)


def waive(engine: Engine, configs: list[CurveConfig]) -> tuple[list[CurveConfig], list[str]]:
    """The curves this machine can run, and a note for each memory kind it lacks
    (cases.memory_waiver: what the GPU or the host does not have), said once per kind and GPU."""
    kept: list[CurveConfig] = []
    notes: list[str] = []
    for c in configs:
        host_side = c.direction not in cases.DEVICE_DIRECTIONS
        why = memory_refusal(engine, c.device, c.memory) if host_side else None
        if why is None:
            kept.append(c)
            continue
        gpu = f" gpu{c.device}" if c.device else ""
        note = f"-m {c.memory}{gpu}: waived on this machine: {why}"
        if note not in notes:
            notes.append(note)
    return kept, notes


def run_sweep(
    engine: Engine,
    options: SweepOptions,
    progress: Progress = QUIET,
    planned: SweepPlan | None = None,
) -> SweepResult:
    """Measures every curve of the plan (made here when not given: the CLI prepares it once,
    before any output directory exists)."""
    plan = planned or prepare_sweep(engine, options)
    configs, skipped = plan.configs, plan.skipped
    created = now()
    meta = machine.collect(engine, list(options.devices))
    start = engine.clock()
    measured: dict[CurveConfig, Curve] = {}
    interrupted = False
    # Rounds alternate the order and pool their trials, so drift during the run (caches and
    # the driver warming up, other load) falls on every curve alike.
    for round_ in range(options.rounds):
        for config in configs if round_ % 2 == 0 else reversed(configs):
            run = measure_curve(engine, config, options, progress)
            earlier = measured.get(config)
            measured[config] = run.curve if earlier is None else pool(earlier, run.curve)
            interrupted = run.interrupted
            if interrupted:
                break
        if interrupted:
            break
    curves = [measured[c] for c in configs if c in measured]
    chases: tuple[ChasePoint, ...] = ()
    if options.chase and not interrupted:
        try:
            for device in options.devices:
                progress.begin(f"gpu{device} pointer chases")
                memories = readable(engine, device, options.memories)
                for point in chase_points(engine, device, CHASE_TRIALS, memories, options.devices):
                    chases += (point,)
                progress.step(f"gpu{device} latency seen from the GPU")
        except KeyboardInterrupt:
            interrupted = True
    return SweepResult(
        created=created,
        simulated=engine.simulated,
        machine=meta,
        options=options.to_dict(),
        curves=tuple(curves),
        chases=chases,
        interrupted=interrupted,
        wall_s=engine.clock() - start,
        findings=tuple(_findings(curves, skipped, options)),
    )
