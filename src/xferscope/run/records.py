"""Immutable records of an `xferscope run` investigation and their JSON form.

Schema history (bump RUN_SCHEMA_VERSION on any change a reader must know about):
  1  first version: per-GPU sections (curves, concurrent streams, pinning costs), multi-GPU
     measurements, findings. Added later, optional: pinning costs' host_copy_s (0 when
     absent), each GPU's overlap points (empty when absent) and elapsed_s, the real seconds the
     run took (wall_s is the engine's clock: the model's for a simulated run; null when
     absent), each GPU's GL check and its GEMM check (null when absent).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..core import stats
from ..core.findings import Finding
from ..documents.envelope import Envelope
from ..documents.reader import Field, check_schema
from ..gemm.check import GemmCheck
from ..gl.check import GlCheck
from ..sweep.records import Curve, curve_from, curve_to_dict

RUN_SCHEMA_NAME = "xferscope-run"
RUN_SCHEMA_VERSION = 1


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

    @classmethod
    def of(cls, device: int, bytes: int, costs: Any) -> PinningCost:
        """The record of the engine's PinningCosts for `bytes` on `device`."""
        return cls(device, bytes, **{key: float(getattr(costs, key)) for key in PINNING_KEYS})

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
class GpuSection:
    index: int
    status: str  # complete, failed, interrupted, not_run
    error: str | None
    curves: tuple[Curve, ...]
    concurrent: tuple[Concurrent, ...]
    pinning: PinningCost | None
    overlap: tuple[OverlapPoint, ...] = ()
    gl: GlCheck | None = None
    gemm: GemmCheck | None = None
    # full: every check; headline: the headline curves and H2D beside D2H only (`run --quick`
    # on many GPUs measures every check on the first GPU, the headline on the others)
    scope: str = "full"

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
class RunResult(Envelope):
    mode: str  # default, quick
    gpus: tuple[GpuSection, ...]
    multi: tuple[Concurrent, ...]  # peer-to-peer matrix and all GPUs to and from the host
    notes: tuple[str, ...] = field(default=())
    elapsed_s: float | None = None  # real seconds, by the host's clock

    @property
    def measured(self) -> bool:
        """Whether anything at all was measured (a Ctrl-C can come before the first copy)."""
        return bool(self.multi) or any(
            any(c.points for c in g.curves) or g.concurrent or g.pinning or g.overlap
            for g in self.gpus
        )

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


def _concurrent_from(d: Field) -> Concurrent:
    return Concurrent(
        kind=d["kind"].string(),
        label=d["label"].string(),
        mechanism=d["mechanism"].string(),
        peer_access=d["peer_access"].optional_boolean(),
        status=d["status"].string(),
        error=d["error"].optional_string(),
        streams=tuple(
            Stream(
                label=s["label"].string(),
                device=s["device"].integer(),
                direction=s["direction"].string(),
                peer=s["peer"].optional_integer(),
                bytes=s["bytes"].integer(),
                samples_s=s["samples_s"].numbers(),
                alone_s=s["alone_s"].optional_number(),
            )
            for s in d["streams"].items()
        ),
    )


# The engine's pinning costs (measure_pinning's keys), in the order they are reported.
PINNING_KEYS = (
    "host_alloc_s",
    "host_free_s",
    "register_s",
    "unregister_s",
    "pageable_copy_s",
    "pinned_copy_s",
    "registered_copy_s",
    "host_copy_s",
)
_PINNING_FIELDS = ("device", "bytes", *PINNING_KEYS)
_OVERLAP_FIELDS = (
    "device",
    "direction",
    "memory",
    "bytes",
    "alone_s",
    "work_s",
    "issue_s",
    "total_s",
)


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
        "elapsed_s": r.elapsed_s,
        "notes": list(r.notes),
        "machine": r.machine,
        "options": r.options,
        "findings": [x.to_dict() for x in r.findings],
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
                "gl": None if g.gl is None else g.gl.to_dict(),
                "gemm": None if g.gemm is None else g.gemm.to_dict(),
                **({} if g.scope == "full" else {"scope": g.scope}),
            }
            for g in r.gpus
        ],
        "multi": [_concurrent_to_dict(c) for c in r.multi],
    }


def _pinning_from(p: Field) -> PinningCost | None:
    if p.null:
        return None
    optional = {"host_copy_s"}  # added later: 0 when absent
    return PinningCost(
        device=p["device"].integer(),
        bytes=p["bytes"].integer(),
        **{
            f: p.get(f, 0.0).number() if f in optional else p[f].number()
            for f in _PINNING_FIELDS[2:]
        },
    )


def _gpu_from(g: Field) -> GpuSection:
    return GpuSection(
        index=g["index"].integer(),
        status=g["status"].string(),
        error=g["error"].optional_string(),
        curves=tuple(curve_from(c) for c in g["curves"].items()),
        concurrent=tuple(_concurrent_from(c) for c in g["concurrent"].items()),
        pinning=_pinning_from(g["pinning"]),
        overlap=tuple(
            OverlapPoint(
                device=o["device"].integer(),
                direction=o["direction"].string(),
                memory=o["memory"].string(),
                bytes=o["bytes"].integer(),
                **{f: o[f].number() for f in _OVERLAP_FIELDS[4:]},
            )
            for o in g.get("overlap", []).items()
        ),
        gl=GlCheck.read(g.get("gl")),
        gemm=GemmCheck.read(g.get("gemm")),
        scope=g.get("scope", "full").string(),
    )


def run_from_dict(d: dict[str, Any]) -> RunResult:
    """A run document read back; SchemaError names the field that is wrong."""
    check_schema(d, RUN_SCHEMA_NAME, RUN_SCHEMA_VERSION)
    r = Field(d)
    return RunResult(
        tool_version=r["tool_version"].string(),
        created=r["created"].string(),
        simulated=r["simulated"].boolean(),
        mode=r["mode"].string(),
        machine=r["machine"].object(),
        options=r["options"].object(),
        gpus=tuple(_gpu_from(g) for g in r["gpus"].items()),
        multi=tuple(_concurrent_from(c) for c in r["multi"].items()),
        findings=tuple(Finding.read(x) for x in r["findings"].items()),
        interrupted=r["interrupted"].boolean(),
        wall_s=r["wall_s"].number(),
        notes=r.get("notes", []).strings(),
        elapsed_s=r.get("elapsed_s").optional_number(),
    )
