"""What `xferscope checkpoint` measured, as a record and as its JSON and CSV documents: the
checkpoint's files, each repeat's rates of the path's stages (the disk from cold, the page cache,
host memory, the link) and its load times cold and warm, and the bound each load hit: the
slowest stage it passes through, named, with the load's share of it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

from ..core import stats
from ..documents.envelope import Envelope, dumps_document
from ..documents.records import Column, Derived, dumps_columns, read_result, result_document

SCHEMA_NAME = "xferscope-checkpoint"
SCHEMA_VERSION = 1
# Schema history (bump SCHEMA_VERSION on any change a reader must know about):
#   1  first version.

# The stages a load passes through, by state: from cold, the disk; warm, the page cache. Either
# way its headers (parsed while the data are read: data bytes over the parse's time), host memory
# (the copies into pinned chunks) and the link (pinned host-to-GPU).
STAGES = {
    "cold": ("disk", "headers", "host memory", "link"),
    "warm": ("page cache", "headers", "host memory", "link"),
}
STATES = ("cold", "warm")


@dataclass(frozen=True, slots=True)
class CheckpointFile:
    path: str
    bytes: int  # the file's size
    data_bytes: int  # from the header's end: what a load reads
    tensors: int


@dataclass(frozen=True, slots=True)
class Samples:
    """One figure per repeat of each stage and load (bytes a second; seconds for the loads)."""

    disk_bps: tuple[float, ...] = ()  # threads of pread from cold
    page_cache_bps: tuple[float, ...] = ()  # the same from warm
    headers_bps: tuple[float, ...] = ()  # data bytes over the time to read and check the headers
    host_memory_bps: tuple[float, ...] = ()  # threads of memcpy between host buffers
    link_bps: tuple[float, ...] = ()  # pinned host-to-GPU copies, by device time
    load_cold_s: tuple[float, ...] = ()
    load_warm_s: tuple[float, ...] = ()
    resident_after_drop: tuple[float, ...] = ()  # the share in the page cache once dropped


class Bound(NamedTuple):
    """A load's bound: the slowest stage of its path, its rate, the load's rate and share."""

    state: str
    stage: str
    stage_bps: float
    load_bps: float

    @property
    def share(self) -> float:
        return self.load_bps / self.stage_bps if self.stage_bps > 0 else 0.0


@dataclass(frozen=True, slots=True)
class CheckpointResult(Envelope):
    device: int
    files: tuple[CheckpointFile, ...]
    samples: Samples
    verified: bool | None  # sampled ranges of the GPU's bytes against the files; None: not checked

    DERIVED: ClassVar[tuple[Derived, ...]] = (
        Derived("data_bytes", lambda r: r.data_bytes, after="files"),
        Derived("medians", lambda r: r.medians(), after="samples"),
        Derived("bounds", lambda r: [b._asdict() | {"share": b.share} for b in r.bounds()]),
    )

    @property
    def data_bytes(self) -> int:
        return sum(f.data_bytes for f in self.files)

    def medians(self) -> dict[str, float | None]:
        """Each sample's median (None where it was not measured)."""
        return {
            name: (stats.median(values) if values else None)
            for name, values in (
                (f, getattr(self.samples, f)) for f in Samples.__dataclass_fields__
            )
        }

    def rate(self, stage: str) -> float | None:
        """A stage's median rate in bytes a second (None: not measured)."""
        values = getattr(self.samples, stage.replace(" ", "_") + "_bps")
        return stats.median(values) if values else None

    def load_bps(self, state: str) -> float | None:
        values = getattr(self.samples, f"load_{state}_s")
        return self.data_bytes / stats.median(values) if values else None

    def bounds(self) -> list[Bound]:
        """For each state measured, the slowest of its stages measured."""
        out = []
        for state in STATES:
            load = self.load_bps(state)
            rates = {s: self.rate(s) for s in STAGES[state]}
            known = {s: r for s, r in rates.items() if r is not None}
            if load is not None and known:
                stage = min(known, key=known.__getitem__)
                out.append(Bound(state, stage, known[stage], load))
        return out


def to_dict(result: CheckpointResult) -> dict[str, Any]:
    return result_document(SCHEMA_NAME, SCHEMA_VERSION, result)


def from_dict(d: dict[str, Any]) -> CheckpointResult:
    """A checkpoint document read back; SchemaError names the field that is wrong."""
    return read_result(CheckpointResult, d, SCHEMA_NAME, SCHEMA_VERSION)


def dumps_json(result: CheckpointResult) -> str:
    return dumps_document(to_dict(result), indent=2)


class _Row(NamedTuple):
    """A CSV row: one repeat of one stage or load."""

    result: CheckpointResult
    figure: str  # a Samples field
    repeat: int
    value: float


_COLUMNS: tuple[Column[_Row], ...] = (
    Column("simulated", lambda r: int(r.result.simulated)),
    Column("device", lambda r: r.result.device),
    Column("data_bytes", lambda r: r.result.data_bytes),
    Column("figure", lambda r: r.figure),
    Column("repeat", lambda r: r.repeat),
    Column("value", lambda r: f"{r.value:.9g}"),
)
CSV_COLUMNS = tuple(c.name for c in _COLUMNS)


def dumps_csv(result: CheckpointResult) -> str:
    """One row per repeat of each figure (rates in bytes a second, loads in seconds)."""
    rows = (
        _Row(result, name, k, value)
        for name in Samples.__dataclass_fields__
        for k, value in enumerate(getattr(result.samples, name))
    )
    return dumps_columns(_COLUMNS, rows)
