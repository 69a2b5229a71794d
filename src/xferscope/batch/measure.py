"""`xferscope batch`: N copies of S bytes each, host to device and back, from pinned and pageable
memory, by every method the engine has (batch.hpp), each verified and timed NetPIPE's way
(a calibration run, trials of a target time, the median; host time per batch, first call to
completion, and device time). The result is, per direction and memory, a map of which method
wins for each (count, size), by how much, against the loop of cudaMemcpyAsync that a program
writes first, and where cudaMemcpyBatchAsync starts and stops beating it."""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from typing import Any

from ..core import machine, plan
from ..core.cases import DEFAULT_SEED
from ..core.compiled import engine_module
from ..core.engine import Engine
from ..core.errors import AllocationError, EngineError
from ..core.findings import INFO, Finding
from ..core.progress import QUIET, Progress
from ..core.units import format_bytes
from ..documents.envelope import now
from ..documents.records import (
    Column,
    attribute_columns,
    dumps_columns,
    median_text,
)
from ..transfer.batch_document import (
    CALIBRATION_COUNTS,
    CALIBRATION_DIRECTIONS,
    CALIBRATION_SIZES,
    SCHEMA_NAME,
    SCHEMA_VERSION,
    SIMPLEST_FIRST,
    BatchResult,
    Cell,
    StagedPoint,
    direct_below,
    dumps_json,
    from_dict,
    to_dict,
)
from .mix import parse_size_mix

__all__ = [  # the document's names, read from here by the batch command's reports
    "CALIBRATION_COUNTS",
    "CALIBRATION_DIRECTIONS",
    "CALIBRATION_SIZES",
    "SCHEMA_NAME",
    "SCHEMA_VERSION",
    "SIMPLEST_FIRST",
    "BatchResult",
    "Cell",
    "StagedPoint",
    "direct_below",
    "dumps_json",
    "from_dict",
    "to_dict",
]

_e = engine_module()
METHODS: tuple[str, ...] = tuple(_e.BATCH_METHODS)
DEFAULT_COUNTS = (1, 4, 16, 64, 256, 1024)
DEFAULT_SIZES = (64, 512, 4096, 32768, 262144, 1 << 20)
DEFAULT_TARGET_S = 0.02
DEFAULT_TRIALS = 3


@dataclass(frozen=True, slots=True)
class BatchOptions:
    directions: tuple[str, ...] = ("h2d", "d2h", "d2d")
    memories: tuple[str, ...] = ("pinned", "pageable")
    counts: tuple[int, ...] = DEFAULT_COUNTS
    sizes: tuple[int, ...] = DEFAULT_SIZES
    methods: tuple[str, ...] = METHODS
    scattered: bool = False
    target_s: float = DEFAULT_TARGET_S
    trials: int = DEFAULT_TRIALS
    device: int = 0
    seed: int = DEFAULT_SEED
    # each batch made as xferscope.copy_many makes it (its methods only): a calibration
    as_copy_many: bool = False
    # sizes drawn per batch instead of `sizes` (mix.py's spec: lognormal:..., uniform:..., file:...)
    size_mix: str = ""


# `xferscope batch --calibrate`: quick trials over copy_many's grid (transfer.batch_document)
CALIBRATION_TARGET_S = 0.005
# pageable copies vary by 5-30% from trial to trial; trials are cheap (verifying and calibrating
# each method take most of a cell's time)
CALIBRATION_TRIALS = 9


# copy_to_device and copy_to_host (the staged copy): where it starts to beat one plain
# cudaMemcpy of pageable memory, measured by `batch --calibrate`
STAGED_SIZES = tuple(1 << k for k in range(18, 26))  # 256 KiB .. 32 MiB


def memories_for(direction: str, memories: tuple[str, ...]) -> tuple[str, ...]:
    """The memories a direction's batches run from: the host's, or the device's for d2d."""
    return ("device",) if direction == "d2d" else memories


def _seconds_of(batch: Any, method: str, many: bool, n: int) -> float:
    """The seconds n iterations of a batch's method take (calibration's run)."""
    return float(batch.time(method, n, many)[0]) * n


def measure_methods(
    batch: Any, options: BatchOptions, methods: list[str]
) -> tuple[dict[str, plan.Outcome], bool]:
    """Each method verified and its repeats calibrated, then the trials interleaved, each in an
    order of its own (plan.trial_order): the methods of a cell are compared with each other, so
    neither what ran just before a method nor drift over the cell's seconds (pageable copies vary
    5-30% from one trial to the next) may favour one. Returns the outcomes and whether a Ctrl-C
    stopped it (the trials done are kept, the methods marked interrupted)."""
    many = options.as_copy_many
    out: dict[str, plan.Outcome] = {}
    repeats: dict[str, int] = {}
    for method in methods:
        try:
            wrong = batch.verify(method, many)
            if wrong:
                out[method] = ("unverified", f"{wrong} copies arrived wrong", (), ())
                continue
            calibration = plan.calibrate(
                functools.partial(_seconds_of, batch, method, many), least_s=options.target_s / 4
            )
            repeats[method] = plan.repeats_for(options.target_s, calibration.per_iteration_s)
        except (AllocationError, EngineError) as exc:
            out[method] = ("failed", str(exc), (), ())
    timed, interrupted = plan.timed_outcomes(
        lambda m: batch.time(m, repeats[m], many),
        dict.fromkeys(repeats, options.trials),
        options.seed,
        (AllocationError, EngineError),
    )
    return out | timed, interrupted


def measure(engine: Engine, options: BatchOptions, progress: Progress = QUIET) -> BatchResult:
    created = now()
    start = engine.clock()
    driver = engine.driver_version()
    pageable = bool(engine.device_info(options.device).get("pageable_memory_access"))
    cells: list[Cell] = []
    staged: tuple[StagedPoint, ...] = ()
    interrupted = False
    mix = parse_size_mix(options.size_mix) if options.size_mix else None
    axis = (mix.mean(),) if mix else options.sizes
    try:
        for direction in options.directions:
            for memory in memories_for(direction, options.memories):
                progress.begin(f"{direction} {memory}")
                for count in options.counts:
                    for size in axis:
                        sizes = mix.draw(count, options.seed) if mix else [size] * count
                        base = Cell(direction, memory, count, size, "", "skipped")
                        if mix:
                            base = replace(base, mix=mix.label, mixed_bytes=sum(sizes))
                        try:
                            batch = engine.batch(
                                options.device,
                                direction,
                                memory,
                                sizes,
                                options.scattered,
                                options.seed,
                            )
                        except (AllocationError, EngineError) as exc:
                            cells += [
                                replace(base, method=m, status="failed", error=str(exc))
                                for m in options.methods
                            ]
                            continue
                        try:
                            refused = {
                                m: (
                                    _e.copy_many_refusal(direction, memory, sizes, m, driver)
                                    if options.as_copy_many
                                    else _e.batch_refusal(
                                        direction, memory, sizes, m, driver, pageable
                                    )
                                )
                                for m in options.methods
                            }
                            measured, stopped = measure_methods(
                                batch, options, [m for m in options.methods if not refused[m]]
                            )
                            for method in options.methods:
                                if refused[method]:
                                    cells.append(
                                        replace(base, method=method, error=refused[method])
                                    )
                                elif method in measured:
                                    status, error, host, device = measured[method]
                                    cells.append(
                                        replace(
                                            base,
                                            method=method,
                                            status=status,
                                            error=error,
                                            host_s=host,
                                            device_s=device,
                                        )
                                    )
                            if stopped:
                                raise KeyboardInterrupt
                        finally:
                            batch.close()
                        progress.step(f"{direction} {memory} {base.what}")
        if options.as_copy_many:
            staged = measure_staged(engine, options, progress)
    except KeyboardInterrupt:
        interrupted = True
    result = BatchResult(
        tuple(cells),
        staged=staged,
        created=created,
        simulated=engine.simulated,
        machine=machine.collect(engine, [options.device]),
        options=_options_dict(options),
        interrupted=interrupted,
        wall_s=engine.clock() - start,
    )
    return replace(result, findings=tuple(findings(result)))


def _api_seconds(transfer: Any, size: int, iterations: int) -> float:
    return float(transfer.time("api", size, iterations).seconds)


def _per_copy(transfers: dict[str, Any], size: int, iterations: int, name: str) -> float:
    return _api_seconds(transfers[name], size, iterations) / iterations


def measure_staged(
    engine: Engine, options: BatchOptions, progress: Progress = QUIET
) -> tuple[StagedPoint, ...]:
    """Pageable copies of STAGED_SIZES by one plain cudaMemcpy and by the staged copy (every
    copy staged), trials interleaved in plan.trial_order, each verified: where copy_to_device
    and copy_to_host should switch. An error leaves the crossover unmeasured (the built-in one
    stays)."""
    points: list[StagedPoint] = []
    most = max(STAGED_SIZES)
    for direction in (d for d in options.directions if d in CALIBRATION_DIRECTIONS):
        progress.begin(f"{direction} staged copy against cudaMemcpy")
        try:
            plain = engine.open_transfer(
                options.device, direction, "pageable", "memcpy", most, plan.ROTATION_BYTES
            )
            staged = engine.open_transfer(
                options.device, direction, "pageable", "staged", most, plan.ROTATION_BYTES,
                staged_direct_below=0,
            )  # fmt: skip
        except (AllocationError, EngineError):
            return ()
        both = {"plain": plain, "staged": staged}
        try:
            for t in (plain, staged):
                t.fill(options.seed)
            for size in STAGED_SIZES:
                if not (plain.verify(size).ok and staged.verify(size).ok):
                    return ()
                calibration = plan.calibrate(
                    functools.partial(_api_seconds, staged, size), least_s=options.target_s / 4
                )
                n = plan.repeats_for(options.target_s, calibration.per_iteration_s)
                times, _, stopped = plan.interleave(
                    functools.partial(_per_copy, both, size, n),
                    dict.fromkeys(both, options.trials),
                    options.seed,
                )
                if stopped:
                    raise KeyboardInterrupt
                points.append(
                    StagedPoint(direction, size, tuple(times["plain"]), tuple(times["staged"]))
                )
                progress.step(f"{direction} staged against cudaMemcpy, {format_bytes(size)}")
        except EngineError:
            return ()
        finally:
            plain.close()
            staged.close()
    return tuple(points)


def _options_dict(options: BatchOptions) -> dict[str, Any]:
    from dataclasses import asdict

    return asdict(options)


def crossovers(
    result: BatchResult, method: str = "batch-any"
) -> dict[tuple[str, str, int], int | None]:
    """Per (direction, memory, count): the largest size up to which `method` beats the loop at
    every size measured, from the smallest (None: not even at the smallest)."""
    by = {(c.direction, c.memory, c.count, c.size, c.method): c for c in result.cells}
    keys = sorted({(c.direction, c.memory, c.count) for c in result.cells})
    out: dict[tuple[str, str, int], int | None] = {}
    for d, m, n in keys:
        reach: int | None = None
        for size in sorted(
            {c.size for c in result.cells if (c.direction, c.memory, c.count) == (d, m, n)}
        ):
            mine, loop = by.get((d, m, n, size, method)), by.get((d, m, n, size, "loop"))
            if not (mine and loop and mine.seconds and loop.seconds):
                break
            if mine.seconds >= loop.seconds:
                break
            reach = size
        if by.get((d, m, n, min(c.size for c in result.cells), method)) is not None:
            out[(d, m, n)] = reach
    return out


def crossover_line(
    result: BatchResult,
    direction: str,
    memory: str,
    counts: list[int],
    sizes: list[int],
    method: str = "batch-any",
) -> tuple[list[float | None], list[float | None]]:
    """The line a map of counts (rows 0, 1, ...) against sizes (columns) draws where `method`
    stops beating the loop: a step down each row at the edge of the last size it wins (left of
    the first column where it never does), None between rows it has nothing for. Empty when the
    batches have mixed sizes (one column: no size to cross at)."""
    if any(c.mix for c in result.cells):
        return [], []
    reach = crossovers(result, method)
    xs: list[float | None] = []
    ys: list[float | None] = []
    for row, count in enumerate(counts):
        if (direction, memory, count) not in reach:
            xs.append(None)
            ys.append(None)
            continue
        limit = reach[(direction, memory, count)]
        edge = -0.5 if limit is None else sizes.index(limit) + 0.5
        xs += [edge, edge]
        ys += [row - 0.5, row + 0.5]
    return (xs, ys) if any(x is not None for x in xs) else ([], [])


def findings(result: BatchResult) -> list[Finding]:
    out = []
    winners = result.winners()
    for direction in dict.fromkeys(c.direction for c in result.cells):
        for memory in dict.fromkeys(c.memory for c in result.cells):
            mine = {k: v for k, v in winners.items() if k[:2] == (direction, memory)}
            if not mine:
                continue
            _, (best, gain) = max(mine.items(), key=lambda kv: kv[1][1] or 0.0)
            if gain:
                out.append(
                    Finding(
                        f"batch_best_{direction}_{memory}",
                        INFO,
                        result.options.get("device"),
                        f"{direction} {memory}",
                        gain,
                        None,
                        f"{direction} from {memory} memory: {best.what} are "
                        f"{gain:.1f}x as fast by {best.method} as by a loop of cudaMemcpyAsync "
                        f"({(best.seconds or 0) * 1e6:.0f} us a batch)",
                    )
                )
    mixed = any(c.mix for c in result.cells)  # one column of mixed sizes: no size to cross at
    for (direction, memory, count), size in ({} if mixed else crossovers(result)).items():
        if count < 4:
            continue
        out.append(
            Finding(
                f"batch_api_crossover_{direction}_{memory}_{count}",
                INFO,
                result.options.get("device"),
                f"{direction} {memory} {count}",
                None if size is None else float(size),
                None,
                f"{direction} from {memory} memory, {count} copies: cudaMemcpyBatchAsync "
                + (
                    "never beats the loop"
                    if size is None
                    else f"beats the loop up to {format_bytes(size)} a copy"
                ),
            )
        )
    return out


# ---- documents ---------------------------------------------------------------------------------


CSV_COLUMNS: tuple[Column[Cell], ...] = (
    *attribute_columns("direction", "memory", "count", "size", "method", "status"),
    Column("host_s", lambda c: median_text(c.host_s)),
    Column("device_s", lambda c: median_text(c.device_s)),
    Column("error", lambda c: c.error or ""),
    *attribute_columns("bytes", "mix"),
)


def dumps_csv(result: BatchResult) -> str:
    return dumps_columns(CSV_COLUMNS, result.cells)
