"""Immutable records of an `xferscope run` investigation and their JSON form.

Schema history (bump RUN_SCHEMA_VERSION on any change a reader must know about):
  1  first version: per-GPU sections (curves, concurrent streams, pinning costs), multi-GPU
     measurements, findings. Added later, optional: pinning costs' host_copy_s (0 when
     absent), each GPU's overlap points (empty when absent) and elapsed_s, the real seconds the
     run took (wall_s is the engine's clock: the model's for a simulated run; null when
     absent), each GPU's GL check and its GEMM check (null when absent), each GPU's phases_s:
     the seconds each kind of check took by the engine's clock, as wall_s (curves, concurrent,
     pinning, overlap, chase, gl, gemm; empty when absent), each GPU's chase: latency seen
     from the GPU, pointer chases through device, pinned and a peer's memory (empty when
     absent, as in --quick runs), each GPU's numa: curves of one size with host memory placed on
     each NUMA node (empty when absent, as on a host of one node).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from ..core import stats
from ..documents.envelope import Envelope
from ..documents.records import OMIT_DEFAULT, Derived, read_result, result_document
from ..gemm.check import GemmCheck
from ..gl.check import GlCheck
from ..sweep.chase import ChasePoint
from ..sweep.records import Curve

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
    DERIVED: ClassVar[tuple[Derived, ...]] = (
        Derived("bandwidth_gbps", lambda s: s.bandwidth / 1e9),
    )

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
    status: str = "complete"  # complete, failed
    error: str | None = None
    streams: tuple[Stream, ...] = field(kw_only=True)
    DERIVED: ClassVar[tuple[Derived, ...]] = (
        Derived("total_bandwidth_gbps", lambda c: c.total_bandwidth / 1e9 if c.streams else None),
    )

    @property
    def total_bandwidth(self) -> float:
        return sum(s.bandwidth for s in self.streams)


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
    DERIVED: ClassVar[tuple[Derived, ...]] = (
        Derived("alloc_break_even", lambda p: p.alloc_break_even),
        Derived("register_break_even", lambda p: p.register_break_even),
    )

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
    DERIVED: ClassVar[tuple[Derived, ...]] = (Derived("hidden", lambda o: o.hidden),)

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
    scope: str = field(default="full", metadata={OMIT_DEFAULT: True})
    # the seconds each kind of check took by the engine's clock (the host's on a GPU, the
    # model's when simulated): curves, concurrent, pinning, overlap, gl, gemm (where
    # `xferscope run`'s time goes)
    phases_s: dict[str, float] = field(default_factory=dict)
    # NVML's clock event reasons right after the curves, while the link was being measured (the
    # machine's record is read after every check, the GEMMs' power draw included); None: unknown
    clock_event_reasons: int | None = field(default=None, metadata={OMIT_DEFAULT: True})
    # host memory placed on each NUMA node in turn (investigate.NUMA_CURVES at one size); empty
    # on a host of one node
    numa: tuple[Curve, ...] = field(default=(), metadata={OMIT_DEFAULT: True})
    # latency seen from the GPU (pointer chases); empty in --quick runs (RunPlan.chase_trials)
    chase: tuple[ChasePoint, ...] = field(default=(), metadata={OMIT_DEFAULT: True})

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
    DERIVED: ClassVar[tuple[Derived, ...]] = (Derived("complete", lambda r: r.complete),)

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

# The run document's header, in the order it has always had; the GPUs and the measurements on
# several GPUs follow.
_HEADER = (
    "schema",
    "schema_version",
    "tool_version",
    "created",
    "simulated",
    "mode",
    "interrupted",
    "complete",
    "wall_s",
    "elapsed_s",
    "notes",
    "machine",
    "options",
    "findings",
)


def run_to_dict(r: RunResult) -> dict[str, Any]:
    d = result_document(RUN_SCHEMA_NAME, RUN_SCHEMA_VERSION, r)
    return {k: d[k] for k in _HEADER} | {k: v for k, v in d.items() if k not in _HEADER}


def run_from_dict(d: dict[str, Any]) -> RunResult:
    """A run document read back; SchemaError names the field that is wrong."""
    return read_result(RunResult, d, RUN_SCHEMA_NAME, RUN_SCHEMA_VERSION)
