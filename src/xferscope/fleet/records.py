"""What `xferscope fleet` gathers and writes: one small report per rank (its GPU's facts, the
headline metrics of its checks, its findings), and the fleet document rank 0 builds from them
(statistics per metric, outliers, threshold verdicts, GPU to GPU pairs). Every rank's report
stays a few kilobytes, so a thousand nodes gather in seconds. Each record is written and read
from its fields (documents.records); the fleet document's header is its own (no machine), and
its statistics' z-scores are keyed by rank, written as strings (JSON's keys)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar, NamedTuple

from ..documents.envelope import Stamp
from ..documents.reader import Field, SchemaError, check_schema
from ..documents.records import KEY, Column, Derived, dumps_columns, from_plain, to_plain

SCHEMA_NAME = "xferscope-fleet"
SCHEMA_VERSION = 1

# Report statuses
COMPLETE = "complete"
FAILED = "failed"  # the rank ran and its checks failed (a CUDA error, a failed verification)
NO_GPU = "no_gpu"
TIMED_OUT = "timed_out"  # rank 0 stopped waiting for it


@dataclass(frozen=True, slots=True)
class RankReport:
    """One rank's GPU and what its checks measured."""

    rank: int
    host: str
    local_rank: int
    device: int  # the GPU's index on its node (-1: none)
    status: str
    version: str
    error: str | None = None
    gpu: dict[str, Any] = field(default_factory=dict)  # name, uuid, serial, bus id, link, counters
    metrics: dict[str, float] = field(default_factory=dict)  # fleet metric name -> value
    findings: tuple[dict[str, Any], ...] = ()  # code, severity, message, cause, fix
    wall_s: float = 0.0
    report_path: str = ""  # the GPU's own run report, relative to the fleet's directory

    @property
    def label(self) -> str:
        """'node7 gpu3 (0000:41:00.0)': how an operator finds the GPU."""
        bus = self.gpu.get("pci_bus_id")
        return f"{self.host} gpu{self.device}" + (f" ({bus})" if bus else "")

    def to_dict(self) -> dict[str, Any]:
        """The report as a rank sends it to rank 0."""
        return to_plain(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RankReport:
        return from_plain(cls, Field(d))


@dataclass(frozen=True, slots=True)
class MetricStats:
    """One metric over the fleet: its median, spread, and each GPU's robust z-score."""

    name: str
    unit: str
    higher_is_better: bool
    median: float
    mad: float  # median absolute deviation
    minimum: float = field(metadata={KEY: "min"})
    maximum: float = field(metadata={KEY: "max"})
    z: dict[int, float]  # rank -> robust z-score (0.6745 (x - median) / MAD)


def _metric_stats(d: Field) -> MetricStats:
    """A metric's statistics read back, their z-scores keyed by rank again."""
    z = d["z"]
    by_rank: dict[int, float] = {}
    for key in z.object():
        try:
            rank = int(key)
        except ValueError:
            raise SchemaError(f"{z.path}: {key!r} is not a rank") from None
        by_rank[rank] = z[key].number()
    return from_plain(MetricStats, d, z=by_rank)


@dataclass(frozen=True, slots=True)
class Outlier:
    rank: int
    metric: str
    value: float
    median: float
    z: float
    cause: str  # the likely cause, from the rank's own diagnosis and facts


@dataclass(frozen=True, slots=True)
class Verdict:
    """One rank against the thresholds."""

    rank: int
    passed: bool
    failures: tuple[str, ...]  # one sentence per threshold missed


@dataclass(frozen=True, slots=True)
class PairResult:
    """One direction of a pair of ranks, GPU to GPU (fleet.pairs measures them)."""

    source: int
    destination: int
    kind: str  # intra-node, inter-node
    bandwidth_bps: float | None
    latency_s: float | None
    verified: bool | None


@dataclass(frozen=True, slots=True, kw_only=True)
class FleetResult(Stamp):
    gather_s: float
    thresholds: dict[str, Any]
    ranks: tuple[RankReport, ...]
    stats: tuple[MetricStats, ...]
    outliers: tuple[Outlier, ...]
    verdicts: tuple[Verdict, ...]
    pairs: tuple[PairResult, ...] = ()  # both directions of each pair
    pairs_note: str = ""  # why pairs were not measured, where they were not
    DERIVED: ClassVar[tuple[Derived, ...]] = (Derived("passed", lambda r: r.passed),)

    @property
    def failed(self) -> list[RankReport]:
        return [r for r in self.ranks if r.status != COMPLETE]

    def report(self, rank: int) -> RankReport:
        return next(r for r in self.ranks if r.rank == rank)

    @property
    def machine(self) -> dict[str, Any]:
        """The fleet as the history lists a result: its nodes and GPUs."""
        nodes = sorted({r.host for r in self.ranks})
        return {
            "host": {"hostname": nodes[0] if len(nodes) == 1 else f"{len(nodes)} nodes"},
            "gpus": [r.gpu for r in self.ranks if r.gpu],
        }

    @property
    def findings(self) -> list[Any]:
        """A warning per outlier and an error per GPU that failed, for the history's counts."""
        from ..core.findings import ERROR, WARNING, finding

        out = [
            finding("fleet_outlier", WARNING, o.metric, f"rank {o.rank}: {o.metric} {o.cause}")
            for o in self.outliers
        ]
        out += [
            finding("fleet_failed", ERROR, f"rank {v.rank}", "; ".join(v.failures))
            for v in self.verdicts
            if not v.passed
        ]
        out += [
            finding("pair_corrupted", ERROR, f"{p.source}->{p.destination}", "data arrived wrong")
            for p in self.pairs
            if p.verified is False
        ]
        return out

    @property
    def passed(self) -> bool:
        return (
            not self.failed
            and all(v.passed for v in self.verdicts)
            and all(p.verified is not False for p in self.pairs)
        )


# ---- JSON form -------------------------------------------------------------------------------

# The fleet document's header after its schema, in the order it has always had: the stamp's
# fields (no machine, no findings), the verdict and the time the gathering took. The fleet's
# own records follow.
_HEADER = (
    "tool_version",
    "created",
    "simulated",
    "interrupted",
    "options",
    "passed",
    "gather_s",
    "wall_s",
)


def to_dict(result: FleetResult) -> dict[str, Any]:
    d = to_plain(result)
    header = {k: d.pop(k) for k in _HEADER}
    return {"schema": SCHEMA_NAME, "schema_version": SCHEMA_VERSION, **header, **d}


def dumps_json(result: FleetResult) -> str:
    from ..documents.envelope import dumps_document

    return dumps_document(to_dict(result))


def from_dict(d: dict[str, Any]) -> FleetResult:
    """A fleet document read back; SchemaError names the field that is wrong."""
    check_schema(d, SCHEMA_NAME, SCHEMA_VERSION)
    root = Field(d)
    stats = tuple(_metric_stats(s) for s in root["stats"].items())
    return from_plain(FleetResult, root, stats=stats)


# ---- CSV --------------------------------------------------------------------------------------


class _Row(NamedTuple):
    """A GPU and one of its metrics (none: a GPU without metrics, whose row has its status)."""

    report: RankReport
    metric: str | None
    stats: MetricStats | None  # the metric's over the fleet
    outlier: bool
    passed: bool | None  # its verdict (none: not judged)


def _rows(result: FleetResult) -> Iterator[_Row]:
    stats = {s.name: s for s in result.stats}
    outliers = {(o.rank, o.metric) for o in result.outliers}
    passed = {v.rank: v.passed for v in result.verdicts}
    for r in result.ranks:
        names: list[str | None] = [*sorted(r.metrics)] or [None]
        for name in names:
            s = None if name is None else stats.get(name)
            yield _Row(r, name, s, (r.rank, name) in outliers, passed.get(r.rank))


def _z(row: _Row) -> str:
    s, rank = row.stats, row.report.rank
    return "" if s is None or rank not in s.z else f"{s.z[rank]:.3f}"


_CSV: tuple[Column[_Row], ...] = (
    Column("rank", lambda r: r.report.rank),
    Column("host", lambda r: r.report.host),
    Column("device", lambda r: r.report.device),
    Column("pci_bus_id", lambda r: r.report.gpu.get("pci_bus_id", "")),
    Column("uuid", lambda r: r.report.gpu.get("uuid", "")),
    Column("status", lambda r: r.report.status),
    Column("metric", lambda r: r.metric or ""),
    Column("value", lambda r: "" if r.metric is None else f"{r.report.metrics[r.metric]:.9g}"),
    Column("fleet_median", lambda r: "" if r.stats is None else f"{r.stats.median:.9g}"),
    Column("z", _z),
    Column("outlier", lambda r: "" if r.metric is None else int(r.outlier)),
    Column("passed", lambda r: "" if r.passed is None else int(r.passed)),
)


def dumps_csv(result: FleetResult) -> str:
    """One row per GPU and metric (a GPU without metrics: one row with its status)."""
    return dumps_columns(_CSV, _rows(result))


def prometheus_text(result: FleetResult, host: str) -> str:
    """node_exporter's textfile format for one node's GPUs: every metric, the fleet median
    beside it, and a pass/fail gauge per GPU."""

    def label(r: RankReport) -> str:
        return (
            f'host="{r.host}",gpu="{r.device}",bus_id="{r.gpu.get("pci_bus_id", "")}",'
            f'uuid="{r.gpu.get("uuid", "")}"'
        )

    lines = [
        "# HELP xferscope_fleet_metric A GPU's figure from xferscope fleet (SI units).",
        "# TYPE xferscope_fleet_metric gauge",
    ]
    mine = [r for r in result.ranks if r.host == host]
    for r in mine:
        for name, value in sorted(r.metrics.items()):
            lines.append(f'xferscope_fleet_metric{{{label(r)},metric="{name}"}} {value:.9g}')
    lines += [
        "# HELP xferscope_fleet_median The fleet's median of the figure.",
        "# TYPE xferscope_fleet_median gauge",
    ]
    lines += [f'xferscope_fleet_median{{metric="{s.name}"}} {s.median:.9g}' for s in result.stats]
    lines += [
        "# HELP xferscope_fleet_gpu_ok 1 when the GPU completed its checks and met every "
        "threshold.",
        "# TYPE xferscope_fleet_gpu_ok gauge",
    ]
    passed = {v.rank: v.passed for v in result.verdicts}
    for r in mine:
        ok = r.status == COMPLETE and passed.get(r.rank, True)
        lines.append(f"xferscope_fleet_gpu_ok{{{label(r)}}} {int(ok)}")
    return "\n".join(lines) + "\n"
