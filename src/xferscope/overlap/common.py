"""What the three overlap experiments share: their schema version, their results' envelope and
document (`OverlapResult`), failures, the checks of options and of host and device memory, a
measurement under way (`Measuring`), points of several trials (`Trials`), and CSV columns.

Schema history (each experiment's document has its own name, overlap-cpu, -buffers and -gpu;
bump SCHEMA_VERSION on any change a reader must know about):
  1  first version: xferscope-overlap-cpu, xferscope-overlap-buffers, xferscope-overlap-gpu.
  2  "findings" (typed) replace the "warnings" strings; version 1 is still read.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, fields, replace
from typing import (
    TYPE_CHECKING,
    Any,
    ClassVar,
    Generic,
    ParamSpec,
    Protocol,
    TypeVar,
    overload,
)

from ..core import machine, stats
from ..core.engine import Engine
from ..core.errors import AllocationError, EngineError, OptionError
from ..core.findings import Finding
from ..core.units import format_bytes
from ..documents.envelope import Envelope, now
from ..documents.records import Column, read_result, result_document

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

SCHEMA_VERSION = 2
OLDEST_SCHEMA_VERSION = 1  # still read
# Pinned pages cannot be swapped or moved: a plan that pins more than this share of the
# machine's memory is refused, whatever --max-pinned says.
PINNED_SHARE = 0.5
# The directions of the experiments where the CPU works beside a copy (cpu and buffers).
CPU_DIRECTIONS = ("h2d", "d2h")

D = TypeVar("D", bound="DataclassInstance")
ResultT = TypeVar("ResultT", bound="OverlapResult")
T = TypeVar("T")
P = ParamSpec("P")


@dataclass(frozen=True, slots=True)
class Failure:
    """A part of the experiment the engine could not run (allocation or CUDA error)."""

    what: str
    error: str


# ---- results ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class OverlapResult(Envelope):
    """What every overlap result holds beside the envelope: the parts that failed and the GPU.
    Its document is the envelope's header, then these fields, then the experiment's own, under
    the name SCHEMA."""

    failures: tuple[Failure, ...] = ()
    device: int
    SCHEMA: ClassVar[str]

    def to_dict(self) -> dict[str, Any]:
        return result_document(self.SCHEMA, SCHEMA_VERSION, self)

    @classmethod
    def from_dict(cls: type[ResultT], d: dict[str, Any]) -> ResultT:
        """A document read back (version 1 too); a SchemaError names the field that is wrong."""
        return read_result(cls, d, cls.SCHEMA, SCHEMA_VERSION, OLDEST_SCHEMA_VERSION)


class Points:
    """A result of points that each say whether they are valid (buffers, gpu)."""

    __slots__ = ()
    points: tuple[Any, ...]

    @property
    def measured(self) -> bool:
        return bool(self.points)

    @property
    def valid(self) -> bool:
        return all(p.valid for p in self.points)


def with_findings(result: D, findings: list[Finding]) -> D:
    return replace(result, findings=tuple(findings))


# ---- points of several trials -------------------------------------------------------------------


class _Timed(Protocol):
    @property
    def total_s(self) -> float: ...


S = TypeVar("S", bound=_Timed)


class Typical:
    """A figure of a point that is its typical trial's: `wait_s = Typical()` reads
    `point.typical.wait_s`."""

    __slots__ = ("name",)

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, point: None, owner: type) -> Typical: ...

    @overload
    def __get__(self, point: Trials[Any], owner: type) -> float: ...

    def __get__(self, point: Trials[Any] | None, owner: type) -> Typical | float:
        if point is None:
            return self
        value: float = getattr(point.typical, self.name)
        return value


class Trials(Generic[S]):
    """A point measured in several trials (`samples`): its figures are those of its typical
    trial, the one with the median total (the lower middle one of an even count), so that its
    parts add up to its total as measured."""

    __slots__ = ()
    samples: tuple[S, ...]

    @property
    def typical(self) -> S:
        return stats.typical(self.samples, lambda s: s.total_s)

    total_s = Typical()

    @property
    def rel_noise(self) -> float:
        return stats.relative_noise([s.total_s for s in self.samples])


def from_engine(cls: type[D], raw: Any, **given: Any) -> D:
    """The record of class `cls` whose fields, but those `given`, are the engine's result's
    attributes of the same names."""
    copied = {f.name: getattr(raw, f.name) for f in fields(cls) if f.name not in given}
    return cls(**given, **copied)


# ---- measuring ----------------------------------------------------------------------------------


class Measuring:
    """An experiment under way on one GPU: when it began, the machine's facts, the engine's
    clock at its start, the parts that failed, and whether a Ctrl-C stopped it."""

    def __init__(self, engine: Engine, device: int) -> None:
        self.engine = engine
        self.device = device
        self.created = now()
        self.machine = machine.collect(engine, [device])
        self.start = engine.clock()
        self.failures: list[Failure] = []
        self.interrupted = False

    @contextmanager
    def until_interrupted(self) -> Iterator[None]:
        """Runs the body; a Ctrl-C ends it, and the result says it was interrupted."""
        try:
            yield
        except KeyboardInterrupt:
            self.interrupted = True

    def attempt(
        self, what: str, call: Callable[P, T], *args: P.args, **kwargs: P.kwargs
    ) -> T | None:
        """`call`'s value, or None (and a Failure of `what` kept) when the engine could not run
        it."""
        try:
            return call(*args, **kwargs)
        except (AllocationError, EngineError) as exc:
            self.failures.append(Failure(what, str(exc)))
            return None

    def result(self, cls: type[ResultT], options: dict[str, Any], **own: Any) -> ResultT:
        """The experiment's result: its envelope, failures and GPU, and its `own` fields."""
        return cls(
            created=self.created,
            simulated=self.engine.simulated,
            machine=self.machine,
            options=options,
            interrupted=self.interrupted,
            wall_s=self.engine.clock() - self.start,
            failures=tuple(self.failures),
            device=self.device,
            **own,
        )


# ---- checks -------------------------------------------------------------------------------------


def check_direction(direction: str) -> None:
    if direction not in CPU_DIRECTIONS:
        raise OptionError("--direction", f"'{direction}' is not one of {', '.join(CPU_DIRECTIONS)}")


def check_count(option: str, count: int) -> None:
    if count < 1:
        raise OptionError(option, f"{count} is not a count of at least 1")


def check_values(option: str, values: Sequence[int], least: int, what: str) -> None:
    """Refuses an empty list of values, or one holding a value under `least`."""
    if not values or min(values) < least:
        raise OptionError(option, f"give one or more {what}")


def check_host_memory(option: str, need: int, what: str, pinned: bool = True) -> None:
    """Refuses, before anything runs, host memory a plan cannot have: pinned memory beyond
    PINNED_SHARE of MemTotal, pageable memory beyond all of it."""
    total = machine.host_memory_total()
    if total is None:
        return
    limit = PINNED_SHARE * total if pinned else total
    if need > limit:
        share = f"half of this machine's {format_bytes(total)}" if pinned else format_bytes(total)
        kind = "pinned host memory" if pinned else "host memory"
        reason = "; pinned pages cannot be swapped, so the system would run short" if pinned else ""
        raise OptionError(
            option, f"{what}: {format_bytes(need)} of {kind} is more than {share}{reason}"
        )


def check_device_memory(engine: Engine, device: int, option: str, need: int, what: str) -> None:
    free, _ = engine.memory_info(device)
    if need > free:
        raise OptionError(
            option,
            f"{what} needs {format_bytes(need)} of device memory on GPU {device}, but "
            f"{format_bytes(free)} is free",
        )


# ---- CSV ----------------------------------------------------------------------------------------


def figure(value: float | None) -> str:
    """A figure in a CSV cell: 9 significant digits, empty for none."""
    return "" if value is None else f"{value:.9g}"


def as_is(of: str, *names: str) -> tuple[Column[Any], ...]:
    """Columns of the attributes `names` of a row's part `of` ("point", "point.typical"),
    written as they are."""
    return tuple(Column(name, operator.attrgetter(f"{of}.{name}")) for name in names)


def figures(of: str, *names: str) -> tuple[Column[Any], ...]:
    """Columns of the attributes `names` of a row's part `of`, written as figures."""
    return tuple(Column(name, _figure_of(f"{of}.{name}")) for name in names)


def _figure_of(path: str) -> Callable[[Any], str]:
    get = operator.attrgetter(path)
    return lambda row: figure(get(row))


# Every overlap CSV opens with these, of rows that carry their result (`row.result`).
HEAD: tuple[Column[Any], ...] = (
    Column("simulated", lambda row: int(row.result.simulated)),
    *as_is("result", "device"),
)
