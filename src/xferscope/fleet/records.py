"""What `xferscope fleet` gathers and writes: one small report per rank (its GPU's facts, the
headline metrics of its checks, its findings), and the fleet document rank 0 builds from them
(statistics per metric, outliers, threshold verdicts). Every rank's report stays a few
kilobytes, so a thousand nodes gather in seconds."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..documents.envelope import Stamp

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
        return {
            "rank": self.rank,
            "host": self.host,
            "local_rank": self.local_rank,
            "device": self.device,
            "status": self.status,
            "version": self.version,
            "error": self.error,
            "gpu": self.gpu,
            "metrics": self.metrics,
            "findings": list(self.findings),
            "wall_s": self.wall_s,
            "report_path": self.report_path,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RankReport:
        return cls(
            rank=int(d["rank"]),
            host=str(d["host"]),
            local_rank=int(d.get("local_rank", 0)),
            device=int(d.get("device", -1)),
            status=str(d["status"]),
            version=str(d.get("version", "")),
            error=d.get("error"),
            gpu=dict(d.get("gpu") or {}),
            metrics={str(k): float(v) for k, v in (d.get("metrics") or {}).items()},
            findings=tuple(d.get("findings") or ()),
            wall_s=float(d.get("wall_s", 0.0)),
            report_path=str(d.get("report_path", "")),
        )


@dataclass(frozen=True, slots=True)
class MetricStats:
    """One metric over the fleet: its median, spread, and each GPU's robust z-score."""

    name: str
    unit: str
    higher_is_better: bool
    median: float
    mad: float  # median absolute deviation
    minimum: float
    maximum: float
    z: dict[int, float]  # rank -> robust z-score (0.6745 (x - median) / MAD)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "unit": self.unit,
            "higher_is_better": self.higher_is_better,
            "median": self.median,
            "mad": self.mad,
            "min": self.minimum,
            "max": self.maximum,
            "z": {str(k): v for k, v in self.z.items()},
        }


@dataclass(frozen=True, slots=True)
class Outlier:
    rank: int
    metric: str
    value: float
    median: float
    z: float
    cause: str  # the likely cause, from the rank's own diagnosis and facts

    def to_dict(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "metric": self.metric,
            "value": self.value,
            "median": self.median,
            "z": self.z,
            "cause": self.cause,
        }


@dataclass(frozen=True, slots=True)
class Verdict:
    """One rank against the thresholds."""

    rank: int
    passed: bool
    failures: tuple[str, ...]  # one sentence per threshold missed

    def to_dict(self) -> dict[str, Any]:
        return {"rank": self.rank, "passed": self.passed, "failures": list(self.failures)}


@dataclass(frozen=True, slots=True)
class FleetResult(Stamp):
    ranks: tuple[RankReport, ...]
    stats: tuple[MetricStats, ...]
    outliers: tuple[Outlier, ...]
    verdicts: tuple[Verdict, ...]
    thresholds: dict[str, Any]
    gather_s: float
    pairs: tuple[Any, ...] = ()  # fleet.pairs.PairResult, both directions of each pair
    pairs_note: str = ""  # why pairs were not measured, where they were not

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


def to_dict(result: FleetResult) -> dict[str, Any]:
    return {
        "schema": SCHEMA_NAME,
        "schema_version": SCHEMA_VERSION,
        "tool_version": result.tool_version,
        "created": result.created,
        "simulated": result.simulated,
        "interrupted": result.interrupted,
        "options": result.options,
        "passed": result.passed,
        "gather_s": result.gather_s,
        "wall_s": result.wall_s,
        "thresholds": result.thresholds,
        "ranks": [r.to_dict() for r in result.ranks],
        "stats": [s.to_dict() for s in result.stats],
        "outliers": [o.to_dict() for o in result.outliers],
        "verdicts": [v.to_dict() for v in result.verdicts],
        "pairs": [p.to_dict() for p in result.pairs],
        "pairs_note": result.pairs_note,
    }


def dumps_json(result: FleetResult) -> str:
    from ..documents.envelope import dumps_document

    return dumps_document(to_dict(result))


def from_dict(d: dict[str, Any]) -> FleetResult:
    from ..documents.reader import check_schema
    from .pairs import PairResult

    check_schema(d, SCHEMA_NAME, SCHEMA_VERSION)
    return FleetResult(
        tool_version=str(d["tool_version"]),
        created=str(d["created"]),
        simulated=bool(d["simulated"]),
        options=dict(d.get("options") or {}),
        ranks=tuple(RankReport.from_dict(r) for r in d["ranks"]),
        stats=tuple(
            MetricStats(
                s["name"],
                s["unit"],
                bool(s["higher_is_better"]),
                float(s["median"]),
                float(s["mad"]),
                float(s["min"]),
                float(s["max"]),
                {int(k): float(v) for k, v in s["z"].items()},
            )
            for s in d.get("stats", [])
        ),
        outliers=tuple(Outlier(**o) for o in d.get("outliers", [])),
        verdicts=tuple(
            Verdict(int(v["rank"]), bool(v["passed"]), tuple(v["failures"]))
            for v in d.get("verdicts", [])
        ),
        thresholds=dict(d.get("thresholds") or {}),
        gather_s=float(d.get("gather_s", 0.0)),
        wall_s=float(d.get("wall_s", 0.0)),
        interrupted=bool(d.get("interrupted", False)),
        pairs=tuple(PairResult.from_dict(p) for p in d.get("pairs", [])),
        pairs_note=str(d.get("pairs_note", "")),
    )


CSV_COLUMNS = (
    "rank",
    "host",
    "device",
    "pci_bus_id",
    "uuid",
    "status",
    "metric",
    "value",
    "fleet_median",
    "z",
    "outlier",
    "passed",
)


def dumps_csv(result: FleetResult) -> str:
    """One row per GPU and metric (a GPU without metrics: one row with its status)."""
    from ..documents.envelope import dumps_table

    stats = {s.name: s for s in result.stats}
    outliers = {(o.rank, o.metric) for o in result.outliers}
    passed = {v.rank: v.passed for v in result.verdicts}
    rows: list[tuple[object, ...]] = []
    for r in result.ranks:
        base = (r.rank, r.host, r.device, r.gpu.get("pci_bus_id", ""), r.gpu.get("uuid", ""))
        verdict = "" if r.rank not in passed else int(passed[r.rank])
        if not r.metrics:
            rows.append((*base, r.status, "", "", "", "", "", verdict))
        for name, value in sorted(r.metrics.items()):
            s = stats.get(name)
            rows.append(
                (
                    *base,
                    r.status,
                    name,
                    f"{value:.9g}",
                    "" if s is None else f"{s.median:.9g}",
                    "" if s is None or r.rank not in s.z else f"{s.z[r.rank]:.3f}",
                    int((r.rank, name) in outliers),
                    verdict,
                )
            )
    return dumps_table(CSV_COLUMNS, rows)


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
