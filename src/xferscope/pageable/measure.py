"""Which way to move a pageable buffer to a GPU, with every setup cost counted.

A buffer of S bytes in ordinary (pageable) memory is sent to the GPU k times. Four ways:

  pageable    cudaMemcpy from the buffer as it is: the driver stages it through its own small
              pinned buffers.                         k * t_pageable
  pinned      cudaMallocHost a buffer, memcpy the data into it once, send it from there, and
              cudaFreeHost it.                        t_alloc + t_memcpy + k * t_pinned + t_free
  registered  cudaHostRegister the buffer in place, send it, cudaHostUnregister it.
                                                      t_register + k * t_registered + t_unregister
  staged      xferscope's staged copier (host threads and a pinned pool, made once and closed
              once).                                  t_setup + k * t_staged

Every term is measured on this machine (cudaMallocHost, cudaHostRegister and their frees through
the engine's measure_pinning; the staged copier's creation and its copies directly), medians of
a few repeats. The costs are linear in k, so where two ways cross is exact:
k* = (setup_a - setup_b) / (per_b - per_a).

The pinned way copies the data into pinned memory once: it models a buffer that does not change
between sends. A buffer rewritten before each send pays that memcpy every time, which is what the
staged copier does, overlapped with the DMA.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, fields
from typing import Any, ClassVar, NamedTuple

from ..core import machine, plan, stats
from ..core.cases import DEFAULT_SEED
from ..core.engine import Engine, check_device
from ..core.errors import AllocationError, OptionError, XferscopeError
from ..core.findings import Finding, corrupted
from ..core.progress import QUIET, Progress
from ..core.units import format_bytes
from ..documents.envelope import Envelope, dumps_document, now
from ..documents.records import (
    Column,
    Derived,
    dumps_columns,
    read_result,
    result_document,
    to_plain,
)
from ..transfer.staged import StagedPlan

SCHEMA_NAME = "xferscope-pageable"
SCHEMA_VERSION = 2
OLDEST_SCHEMA_VERSION = 1  # still read
# Schema history (bump SCHEMA_VERSION on any change a reader must know about):
#   1  first version: per size, the raw samples of every cost; the staged copier's setup and plan.
#   2  "findings" (typed) replace the "warnings" strings; version 1 is still read.

STRATEGIES = ("pageable", "pinned", "registered", "staged")
DEFAULT_SIZES = (1 << 20, 16 << 20, 256 << 20, 1 << 30)
DEFAULT_SENDS = (1, 2, 3, 5, 10, 20, 50, 100)
DEFAULT_REPEATS = 3
# One timed trial of staged copies lasts about this long (repeats of one copy, as NetPIPE does).
STAGED_TRIAL_S = 0.05


# ---- records -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Strategy:
    """One way to send the buffer: a cost paid once and a cost per send."""

    name: str
    setup_s: float  # everything paid once, the matching free or unregister included
    per_send_s: float
    parts: tuple[tuple[str, float], ...]  # what setup_s is made of, as (what, seconds)

    def total_s(self, sends: float) -> float:
        return self.setup_s + sends * self.per_send_s


@dataclass(frozen=True, slots=True)
class Crossover:
    """Two strategies cost the same at `sends` (a real number): `before` is cheaper for fewer
    sends, `after` for more."""

    before: str
    after: str
    sends: float
    DERIVED: ClassVar[tuple[Derived, ...]] = (Derived("from_send", lambda c: c.from_send),)

    @property
    def from_send(self) -> int:
        """The first whole number of sends at which `after` is strictly cheaper."""
        return max(1, math.floor(self.sends) + 1)


@dataclass(frozen=True, slots=True, kw_only=True)
class Samples:
    """The raw samples of each cost of one size (seconds): the engine's measure_pinning costs
    by their keys (run.records.PINNING_KEYS), one per repeat, then the staged copies'."""

    host_alloc_s: tuple[float, ...]
    host_free_s: tuple[float, ...]
    register_s: tuple[float, ...]
    unregister_s: tuple[float, ...]
    pageable_copy_s: tuple[float, ...]
    pinned_copy_s: tuple[float, ...]
    registered_copy_s: tuple[float, ...]
    host_copy_s: tuple[float, ...]
    staged_copy_s: tuple[float, ...]  # per copy, one per trial


# The pinning costs a size measures: every sample but the staged copies'.
_PINNING = tuple(f.name for f in fields(Samples) if f.name != "staged_copy_s")


@dataclass(frozen=True, slots=True)
class SizeResult:
    """What was measured for one size: the raw samples of each cost (seconds)."""

    bytes: int
    samples: Samples
    staged_iterations: int  # copies per trial
    staged_verified: bool | None  # the staged copy's destination checked; None: not checked

    @property
    def pinning(self) -> tuple[tuple[str, tuple[float, ...]], ...]:
        """Each measure_pinning key and its samples."""
        return tuple((key, getattr(self.samples, key)) for key in _PINNING)

    @property
    def staged_copy_s(self) -> tuple[float, ...]:
        return self.samples.staged_copy_s

    def median(self, key: str) -> float:
        return stats.median(getattr(self.samples, key))

    def strategies(self, staged_setup_s: float) -> tuple[Strategy, ...]:
        """Every way of sending this size that was measured (a Ctrl-C may have left the
        staged copy's trials out)."""
        m = self.median
        ways = (
            Strategy("pageable", 0.0, m("pageable_copy_s"), ()),
            Strategy(
                "pinned",
                m("host_alloc_s") + m("host_copy_s") + m("host_free_s"),
                m("pinned_copy_s"),
                (
                    ("cudaMallocHost", m("host_alloc_s")),
                    ("memcpy", m("host_copy_s")),
                    ("cudaFreeHost", m("host_free_s")),
                ),
            ),
            Strategy(
                "registered",
                m("register_s") + m("unregister_s"),
                m("registered_copy_s"),
                (("register", m("register_s")), ("unregister", m("unregister_s"))),
            ),
            Strategy(
                "staged",
                staged_setup_s,
                stats.median(self.staged_copy_s) if self.staged_copy_s else math.nan,
                (("make and close the copier", staged_setup_s),),
            ),
        )
        return ways if self.staged_copy_s else ways[:-1]


@dataclass(frozen=True, slots=True)
class PageableResult(Envelope):
    device: int
    direction: str  # h2d: measure_pinning times uploads
    staged_plan: dict[str, Any] | None
    staged_setup_s: tuple[float, ...]  # creating and closing a staged copier, each repeat
    sends: tuple[int, ...]
    sizes: tuple[SizeResult, ...]

    @property
    def staged_setup_median_s(self) -> float:
        return stats.median(self.staged_setup_s) if self.staged_setup_s else 0.0

    def strategies(self, size: SizeResult) -> tuple[Strategy, ...]:
        return size.strategies(self.staged_setup_median_s)


# ---- the arithmetic ----------------------------------------------------------------------------


def crossover(a: Strategy, b: Strategy) -> Crossover | None:
    """Where a and b cost the same, if they cross at a positive number of sends."""
    if a.per_send_s == b.per_send_s:
        return None
    k = (a.setup_s - b.setup_s) / (b.per_send_s - a.per_send_s)
    if not k > 0:
        return None
    cheap_setup, cheap_per_send = (a, b) if a.per_send_s > b.per_send_s else (b, a)
    return Crossover(cheap_setup.name, cheap_per_send.name, k)


def crossovers(strategies: Sequence[Strategy]) -> tuple[Crossover, ...]:
    """Every crossing of two strategies at a positive number of sends, fewest sends first."""
    found = [
        c
        for i, a in enumerate(strategies)
        for b in strategies[i + 1 :]
        if (c := crossover(a, b)) is not None
    ]
    return tuple(sorted(found, key=lambda c: c.sends))


def cheaper_from(a: Strategy, b: Strategy) -> int | None:
    """The fewest whole sends from which `a` costs less than `b` for every larger count too;
    None when it never stays cheaper."""
    if a.per_send_s > b.per_send_s:
        return None
    if a.per_send_s == b.per_send_s:
        return 1 if a.setup_s < b.setup_s else None
    k = (a.setup_s - b.setup_s) / (b.per_send_s - a.per_send_s)
    return max(1, math.floor(k) + 1)


def fastest(strategies: Sequence[Strategy], sends: int) -> Strategy:
    """The cheapest for `sends` sends; a tie goes to the one listed first."""
    return min(strategies, key=lambda s: s.total_s(sends))


# ---- measuring ---------------------------------------------------------------------------------


def steps(sizes: Sequence[int]) -> int:
    """Progress steps of `measure`: the copier's setup, then two per size."""
    return 1 + 2 * len(sizes)


def check_memory(engine: Engine, device: int, sizes: Sequence[int]) -> None:
    """Refuses, before anything runs, sizes that cannot fit: measure_pinning holds the pageable
    buffer and its pinned copy at once, and a device buffer of the same size."""
    largest = max(sizes)
    free, _ = engine.memory_info(device)
    if 2 * largest > free:
        raise OptionError(
            "--sizes",
            f"{format_bytes(largest)} needs {format_bytes(2 * largest)} of device memory on GPU "
            f"{device}, but {format_bytes(free)} is free",
        )
    available = machine.host_memory_total()
    if available is not None and 2 * largest > available:
        raise OptionError(
            "--sizes",
            f"{format_bytes(largest)} needs {format_bytes(2 * largest)} of host memory (the "
            f"pageable buffer and a pinned copy), but this machine has {format_bytes(available)}",
        )


def _staged_setup(engine: Engine, device: int, repeats: int) -> tuple[dict[str, Any], list[float]]:
    """The copier's plan, and the time to make one and close it, each repeat. A first one is
    made untimed: the CUDA context and first-touch costs are not the copier's."""
    first = engine.staged_copier(device)
    plan_dict = StagedPlan.of(first.plan).to_dict()
    first.close()
    samples = []
    for _ in range(repeats):
        start = engine.clock()
        engine.staged_copier(device).close()
        samples.append(engine.clock() - start)
    return plan_dict, samples


def _staged_copies(
    engine: Engine, device: int, size: int, repeats: int, seed: int
) -> tuple[list[float], int, bool | None, bool]:
    """Per-copy seconds of staged uploads of one pageable buffer (the same one each time, as
    sending one buffer k times does): a warm-up that sizes the trials, then `repeats` trials;
    and whether a Ctrl-C stopped them (the trials done are kept, unverified)."""
    try:
        transfer = engine.open_transfer(device, "h2d", "pageable", "staged", size, 0, rotate=False)
    except KeyboardInterrupt:
        return [], 0, None, True
    iterations, samples = 0, list[float]()
    try:
        try:
            transfer.fill(seed)
            copies = transfer.copies_per_iteration
            calibration = plan.calibrate(lambda n: transfer.time("api", size, n).seconds)
            iterations = plan.repeats_for(STAGED_TRIAL_S, calibration.per_iteration_s)
        except KeyboardInterrupt:
            return [], 0, None, True
        samples, stopped = plan.trials_until_stopped(
            lambda: transfer.time("api", size, iterations).seconds / (iterations * copies),
            repeats,
        )
        verified = None
        if not stopped:
            try:
                verified = transfer.verify(size).ok
            except KeyboardInterrupt:
                stopped = True
    finally:
        transfer.close()
    return samples, iterations, verified, stopped


def _pinning(
    engine: Engine, device: int, size: int, repeats: int
) -> tuple[dict[str, list[float]], bool]:
    """Each pinning cost, one sample per repeat, and whether a Ctrl-C stopped them."""
    runs, stopped = plan.trials_until_stopped(lambda: engine.measure_pinning(device, size), repeats)
    return {key: [float(getattr(costs, key)) for costs in runs] for key in _PINNING}, stopped


def _cannot_pin(size: int, device: int, exc: AllocationError) -> XferscopeError:
    return AllocationError(
        f"{format_bytes(size)} cannot be allocated, pinned or registered for GPU {device}: "
        f"{exc}; try smaller --sizes"
    )


def measure(
    engine: Engine,
    sizes: Sequence[int] = DEFAULT_SIZES,
    sends: Sequence[int] = DEFAULT_SENDS,
    device: int = 0,
    repeats: int = DEFAULT_REPEATS,
    seed: int = DEFAULT_SEED,
    progress: Progress = QUIET,
) -> PageableResult:
    """Measures every cost for each size, largest first (an allocation that fails, fails
    before the small sizes took their time). Ctrl-C keeps the sizes measured so far."""
    if not sizes or min(sizes) < 1:
        raise OptionError("--sizes", "give one or more sizes of at least 1 byte")
    if not sends or min(sends) < 1:
        raise OptionError("--sends", "give one or more counts of at least 1")
    if repeats < 1:
        raise OptionError("--repeats", f"{repeats} is not a count of at least 1")
    check_device(engine, device)
    check_memory(engine, device, sizes)
    created = now()
    meta = machine.collect(engine, [device])
    start = engine.clock()
    results: list[SizeResult] = []
    staged_plan: dict[str, Any] | None = None
    setup: list[float] = []
    interrupted = False
    found: list[Finding] = []
    try:
        progress.begin("staged copier: setup")
        staged_plan, setup = _staged_setup(engine, device, repeats)
        progress.step("staged copier: made and closed")
        for size in sorted(set(sizes), reverse=True):
            progress.begin(f"{format_bytes(size)}: allocate, pin, register, copy")
            try:
                pinning, stopped = _pinning(engine, device, size, repeats)
            except AllocationError as exc:
                raise _cannot_pin(size, device, exc) from None
            progress.step(f"{format_bytes(size)}: pinning costs measured")
            staged: list[float] = []
            iterations, verified = 0, None
            if not stopped:
                staged, iterations, verified, stopped = _staged_copies(
                    engine, device, size, repeats, seed
                )
                progress.step(f"{format_bytes(size)}: staged copies measured")
            if verified is False:
                found.append(
                    corrupted(
                        f"{format_bytes(size)} staged",
                        f"{format_bytes(size)}: the staged copy's destination did not match its "
                        "source; its times are invalid",
                    )
                )
            # A Ctrl-C in the middle of a size keeps its trials done (verified None): a cost
            # measured at least once is a cost measured.
            if pinning[_PINNING[0]]:
                results.append(
                    SizeResult(
                        bytes=size,
                        samples=Samples(
                            **{k: tuple(v) for k, v in pinning.items()}, staged_copy_s=tuple(staged)
                        ),
                        staged_iterations=iterations,
                        staged_verified=verified,
                    )
                )
            if stopped:
                raise KeyboardInterrupt
    except KeyboardInterrupt:
        interrupted = True
    return PageableResult(
        created=created,
        simulated=engine.simulated,
        machine=meta,
        options={
            "sizes": sorted(set(sizes)),
            "sends": sorted(set(sends)),
            "device": device,
            "repeats": repeats,
            "seed": seed,
        },
        device=device,
        direction="h2d",
        staged_plan=staged_plan,
        staged_setup_s=tuple(setup),
        sends=tuple(sorted(set(sends))),
        sizes=tuple(sorted(results, key=lambda r: r.bytes)),
        interrupted=interrupted,
        wall_s=engine.clock() - start,
        findings=tuple(found),
    )


# ---- JSON and CSV ------------------------------------------------------------------------------


def _strategy_dict(s: Strategy, size: int) -> dict[str, Any]:
    return {
        "name": s.name,
        "setup_s": s.setup_s,
        "per_send_s": s.per_send_s,
        "per_send_gbps": size / s.per_send_s / 1e9 if s.per_send_s > 0 else None,
        "setup_parts": dict(s.parts),
    }


def _implied(result: PageableResult, r: SizeResult) -> dict[str, Any]:
    """What a size's costs imply at the result's sends: its entries in the document after its
    fields. Derived, for readers that do not want to recompute; ignored when loading. (Not the
    size's DERIVED: they need the result's sends and staged setup too.)"""
    strategies = result.strategies(r)
    by_name = {s.name: s for s in strategies}
    return {
        "strategies": [_strategy_dict(s, r.bytes) for s in strategies],
        "totals": [
            {
                "sends": k,
                "total_s": {s.name: s.total_s(k) for s in strategies},
                "fastest": fastest(strategies, k).name,
            }
            for k in result.sends
        ],
        "crossovers": [to_plain(c) for c in crossovers(strategies)],
        "cheaper_than_pageable_from": {
            s.name: cheaper_from(s, by_name["pageable"]) for s in strategies if s.name != "pageable"
        },
    }


def to_dict(result: PageableResult) -> dict[str, Any]:
    document = result_document(SCHEMA_NAME, SCHEMA_VERSION, result)
    document["sizes"] = [
        size | _implied(result, r) for size, r in zip(document["sizes"], result.sizes, strict=True)
    ]
    return document


def from_dict(d: dict[str, Any]) -> PageableResult:
    """A pageable document read back; SchemaError names the field that is wrong."""
    return read_result(PageableResult, d, SCHEMA_NAME, SCHEMA_VERSION, OLDEST_SCHEMA_VERSION)


def dumps_json(result: PageableResult) -> str:
    return dumps_document(to_dict(result), indent=2)


class _Row(NamedTuple):
    """A CSV row: one strategy of one size at one number of sends."""

    result: PageableResult
    size: SizeResult
    sends: int
    strategy: Strategy
    fastest: str  # the cheapest strategy's name at these sends
    pageable: Strategy  # what `cheaper_than_pageable_from` compares with


def _cheaper_than_pageable(r: _Row) -> object:
    beats = None if r.strategy is r.pageable else cheaper_from(r.strategy, r.pageable)
    return "" if beats is None else beats


_COLUMNS: tuple[Column[_Row], ...] = (
    Column("simulated", lambda r: int(r.result.simulated)),
    Column("device", lambda r: r.result.device),
    Column("bytes", lambda r: r.size.bytes),
    Column("sends", lambda r: r.sends),
    Column("strategy", lambda r: r.strategy.name),
    Column("setup_s", lambda r: f"{r.strategy.setup_s:.9g}"),
    Column("per_send_s", lambda r: f"{r.strategy.per_send_s:.9g}"),
    Column("total_s", lambda r: f"{r.strategy.total_s(r.sends):.9g}"),
    Column("fastest", lambda r: int(r.strategy.name == r.fastest)),
    Column("cheaper_than_pageable_from", _cheaper_than_pageable),
)
CSV_COLUMNS = tuple(c.name for c in _COLUMNS)


def _rows(result: PageableResult) -> Iterator[_Row]:
    for r in result.sizes:
        strategies = result.strategies(r)
        for k in result.sends:
            best = fastest(strategies, k).name
            for s in strategies:
                yield _Row(result, r, k, s, best, strategies[0])


def dumps_csv(result: PageableResult) -> str:
    """One row per size, number of sends and strategy."""
    return dumps_columns(_COLUMNS, _rows(result))


def size_tag(size: int) -> str:
    """A size for a file name, exact: 1GiB, 16MiB, 1000B."""
    for unit, factor in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size % factor == 0:
            return f"{size // factor}{unit}"
    return f"{size}B"
