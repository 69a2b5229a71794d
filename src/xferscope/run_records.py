"""Immutable records of an `xferscope run` investigation and their JSON form.

Schema history (bump RUN_SCHEMA_VERSION on any change a reader must know about):
  1  first version: per-GPU sections (curves, concurrent streams, pinning costs), multi-GPU
     measurements, findings. Added later, optional: pinning costs' host_copy_s (0 when
     absent) and each GPU's overlap points (empty when absent).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from . import stats
from .records import Curve, check_schema, curve_from_dict, curve_to_dict

RUN_SCHEMA_NAME = "xferscope-run"
RUN_SCHEMA_VERSION = 1

# Severities of a finding, mildest first.
OK, INFO, WARNING, ERROR = "ok", "info", "warning", "error"
SEVERITIES = (OK, INFO, WARNING, ERROR)


@dataclass(frozen=True, slots=True)
class Stream:
    """One stream of copies, measured while the other streams of its measurement ran."""

    label: str  # "h2d pinned gpu0", "gpu0->gpu1"
    device: int  # the GPU whose engine or SMs did the copies
    direction: str  # h2d, d2h, p2p
    peer: int | None  # the other GPU of a p2p copy
    bytes: int  # per copy
    samples_s: tuple[float, ...]  # per-copy time of each trial, concurrently
    alone_s: float | None  # median per-copy time of the same stream measured alone

    @property
    def bandwidth(self) -> float:
        return self.bytes / stats.median(self.samples_s)

    @property
    def alone_bandwidth(self) -> float | None:
        return None if not self.alone_s else self.bytes / self.alone_s

    @property
    def rel_noise(self) -> float:
        return stats.relative_noise(self.samples_s)


@dataclass(frozen=True, slots=True)
class Concurrent:
    """Several streams of copies running at once: H2D while D2H runs, every GPU to the host at
    once, or a peer-to-peer copy (one stream, or both directions)."""

    kind: str  # bidirectional, all_gpus_host, p2p
    label: str
    mechanism: str  # async (copy engines) or kernel (SMs)
    peer_access: bool | None  # p2p only
    streams: tuple[Stream, ...]
    status: str = "complete"  # complete, failed
    error: str | None = None

    @property
    def total_bandwidth(self) -> float:
        return sum(s.bandwidth for s in self.streams)


@dataclass(frozen=True, slots=True)
class PinningCost:
    """What pinning costs and when it pays: one allocation, registration and copy of `bytes`."""

    device: int
    bytes: int
    host_alloc_s: float  # cudaMallocHost
    host_free_s: float  # cudaFreeHost
    register_s: float  # cudaHostRegister of pageable memory
    unregister_s: float  # cudaHostUnregister
    pageable_copy_s: float  # one H2D copy from pageable memory
    pinned_copy_s: float  # one H2D copy from pinned memory
    registered_copy_s: float  # one H2D copy from registered memory
    host_copy_s: float = 0.0  # memcpy of pageable data into the pinned buffer, once

    @property
    def alloc_break_even(self) -> float | None:
        """Transfers after which allocating pinned memory has paid for itself against pageable
        copies; None when pinned copies are not faster."""
        saving = self.pageable_copy_s - self.pinned_copy_s
        return (self.host_alloc_s + self.host_free_s) / saving if saving > 0 else None

    @property
    def register_break_even(self) -> float | None:
        saving = self.pageable_copy_s - self.registered_copy_s
        return (self.register_s + self.unregister_s) / saving if saving > 0 else None


@dataclass(frozen=True, slots=True)
class OverlapPoint:
    """Can the CPU work during a copy? One readback alone, then with CPU work of half its time
    between issuing it and waiting for it (seed 000's asynchronous readback)."""

    device: int
    direction: str
    memory: str
    bytes: int
    alone_s: float  # the copy with no work (median)
    work_s: float  # the CPU work done while it ran
    issue_s: float  # blocked in the issuing call
    total_s: float  # issue, work and wait together

    @property
    def hidden(self) -> float:
        """Share of the work hidden behind the copy: 1 when the total did not grow."""
        return max(0.0, min(1.0, (self.alone_s + self.work_s - self.total_s) / self.work_s))


@dataclass(frozen=True, slots=True)
class Finding:
    """A verdict or a warning: what was seen (with the figure that triggered it), the likely
    cause and the fix."""

    code: str  # typed: see diagnose.py
    severity: str  # ok, info, warning, error
    gpu: int | None
    figure: str  # the metric that triggered it
    value: float | None
    reference: float | None  # the limit or the figure it was compared with
    message: str
    cause: str = ""
    fix: str = ""


@dataclass(frozen=True, slots=True)
class GpuSection:
    index: int
    status: str  # complete, failed, interrupted, not_run
    error: str | None
    curves: tuple[Curve, ...]
    concurrent: tuple[Concurrent, ...]
    pinning: PinningCost | None
    overlap: tuple[OverlapPoint, ...] = ()

    def curve(self, direction: str, memory: str, mechanism: str, timing: str) -> Curve | None:
        return next(
            (
                c
                for c in self.curves
                if (c.config.direction, c.config.memory, c.config.mechanism, c.config.timing)
                == (direction, memory, mechanism, timing)
            ),
            None,
        )


@dataclass(frozen=True, slots=True)
class RunResult:
    tool_version: str
    created: str  # ISO 8601, UTC
    simulated: bool
    mode: str  # default, quick
    machine: dict[str, Any]
    options: dict[str, Any]
    gpus: tuple[GpuSection, ...]
    multi: tuple[Concurrent, ...]  # peer-to-peer matrix and all GPUs to and from the host
    findings: tuple[Finding, ...]
    interrupted: bool
    wall_s: float
    notes: tuple[str, ...] = field(default=())

    @property
    def complete(self) -> bool:
        return not self.interrupted and all(g.status == "complete" for g in self.gpus)


# ---- JSON form -------------------------------------------------------------------------------


def _stream_to_dict(s: Stream) -> dict[str, Any]:
    return {
        "label": s.label,
        "device": s.device,
        "direction": s.direction,
        "peer": s.peer,
        "bytes": s.bytes,
        "samples_s": list(s.samples_s),
        "alone_s": s.alone_s,
        "bandwidth_gbps": s.bandwidth / 1e9,  # derived; ignored when loading
    }


def _concurrent_to_dict(c: Concurrent) -> dict[str, Any]:
    return {
        "kind": c.kind,
        "label": c.label,
        "mechanism": c.mechanism,
        "peer_access": c.peer_access,
        "status": c.status,
        "error": c.error,
        "streams": [_stream_to_dict(s) for s in c.streams],
        "total_bandwidth_gbps": c.total_bandwidth / 1e9 if c.streams else None,
    }


def _concurrent_from_dict(d: dict[str, Any]) -> Concurrent:
    return Concurrent(
        kind=d["kind"],
        label=d["label"],
        mechanism=d["mechanism"],
        peer_access=d["peer_access"],
        status=d["status"],
        error=d["error"],
        streams=tuple(
            Stream(
                label=s["label"],
                device=int(s["device"]),
                direction=s["direction"],
                peer=s["peer"],
                bytes=int(s["bytes"]),
                samples_s=tuple(float(x) for x in s["samples_s"]),
                alone_s=s["alone_s"],
            )
            for s in d["streams"]
        ),
    )


_PINNING_FIELDS = (
    "device", "bytes", "host_alloc_s", "host_free_s", "register_s", "unregister_s",
    "pageable_copy_s", "pinned_copy_s", "registered_copy_s", "host_copy_s",
)  # fmt: skip
_OVERLAP_FIELDS = (
    "device", "direction", "memory", "bytes", "alone_s", "work_s", "issue_s", "total_s",
)  # fmt: skip
_FINDING_FIELDS = (
    "code", "severity", "gpu", "figure", "value", "reference", "message", "cause", "fix",
)  # fmt: skip


def run_to_dict(r: RunResult) -> dict[str, Any]:
    return {
        "schema": RUN_SCHEMA_NAME,
        "schema_version": RUN_SCHEMA_VERSION,
        "tool_version": r.tool_version,
        "created": r.created,
        "simulated": r.simulated,
        "mode": r.mode,
        "interrupted": r.interrupted,
        "complete": r.complete,
        "wall_s": r.wall_s,
        "notes": list(r.notes),
        "machine": r.machine,
        "options": r.options,
        "findings": [{f: getattr(x, f) for f in _FINDING_FIELDS} for x in r.findings],
        "gpus": [
            {
                "index": g.index,
                "status": g.status,
                "error": g.error,
                "curves": [curve_to_dict(c) for c in g.curves],
                "concurrent": [_concurrent_to_dict(c) for c in g.concurrent],
                "pinning": None
                if g.pinning is None
                else {f: getattr(g.pinning, f) for f in _PINNING_FIELDS}
                | {
                    "alloc_break_even": g.pinning.alloc_break_even,
                    "register_break_even": g.pinning.register_break_even,
                },
                "overlap": [
                    {f: getattr(o, f) for f in _OVERLAP_FIELDS} | {"hidden": o.hidden}
                    for o in g.overlap
                ],
            }
            for g in r.gpus
        ],
        "multi": [_concurrent_to_dict(c) for c in r.multi],
    }


def run_from_dict(d: dict[str, Any]) -> RunResult:
    check_schema(d, RUN_SCHEMA_NAME, RUN_SCHEMA_VERSION)
    return RunResult(
        tool_version=d["tool_version"],
        created=d["created"],
        simulated=bool(d["simulated"]),
        mode=d["mode"],
        machine=d["machine"],
        options=d["options"],
        gpus=tuple(
            GpuSection(
                index=int(g["index"]),
                status=g["status"],
                error=g["error"],
                curves=tuple(curve_from_dict(c) for c in g["curves"]),
                concurrent=tuple(_concurrent_from_dict(c) for c in g["concurrent"]),
                pinning=None
                if g["pinning"] is None
                else PinningCost(
                    **{f: g["pinning"][f] for f in _PINNING_FIELDS if f in g["pinning"]}
                ),
                overlap=tuple(
                    OverlapPoint(**{f: o[f] for f in _OVERLAP_FIELDS}) for o in g.get("overlap", ())
                ),
            )
            for g in d["gpus"]
        ),
        multi=tuple(_concurrent_from_dict(c) for c in d["multi"]),
        findings=tuple(Finding(**{f: x[f] for f in _FINDING_FIELDS}) for x in d["findings"]),
        interrupted=bool(d["interrupted"]),
        wall_s=float(d["wall_s"]),
        notes=tuple(d.get("notes", ())),
    )
