"""Latency seen from the GPU: one GPU thread's dependent reads of a memory (the engine's pointer
chase, chase.hpp), beside the API latencies of the copies. `run` chases device memory, pinned
host memory and a peer's; `sweep --chase` every memory kind it sweeps that a GPU thread can
read. What one chase is, is decided here once: its buffer, stride and trials' length."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from ..core import stats
from ..core.compiled import engine_module
from ..core.engine import Engine, memory_refusal
from ..core.errors import AllocationError, EngineError
from ..documents.records import OMIT_DEFAULT, Derived

# A chain through 256 MiB, beyond every GPU's L2, one place every 4 KiB (a page: each read also
# misses the TLB, as a scattered read of host data would), as benchmarks/pointer_chase.cu is run
# to check it.
CHASE_BYTES = 256 << 20
CHASE_STRIDE = 4096
CHASE_TRIALS = 5  # of about 20 ms each (chase.hpp)


@dataclass(frozen=True, slots=True)
class ChasePoint:
    """Latency seen from the GPU: one GPU thread's dependent reads of `memory` (device memory of
    GPU `peer` when set), `bytes` visited one place every `stride` in a random order."""

    memory: str  # device, or a host kind a GPU thread can read (pinned, mapped, managed, ...)
    peer: int | None  # another GPU whose memory was read; None: this GPU's own, or the host's
    bytes: int
    stride: int
    reads: int  # a trial's
    ns_per_read: tuple[float, ...]  # one per trial
    verified: bool | None  # every trial ended where the chain predicts; None: not measured
    error: str | None = field(default=None, metadata={OMIT_DEFAULT: True})
    DERIVED: ClassVar[tuple[Derived, ...]] = (Derived("median_ns", lambda c: c.median_ns),)

    @property
    def median_ns(self) -> float | None:
        return stats.median(self.ns_per_read) if self.ns_per_read else None

    @property
    def label(self) -> str:
        if self.peer is not None:
            return f"GPU {self.peer}'s memory"
        return "device memory" if self.memory == "device" else f"{self.memory} host memory"


def readable(engine: Engine, device: int, memories: Sequence[str]) -> tuple[str, ...]:
    """Device memory, and the kinds of `memories` a GPU thread can read by address (the
    engine's rule, chase_refusal) that this machine has for GPU `device` (a kind it lacks is
    waived where the sweep says so)."""
    rule = engine_module().chase_refusal
    kept = [
        m
        for m in memories
        if m != "device"
        and not rule(m, False, CHASE_BYTES, CHASE_STRIDE, 0, 1)
        and not memory_refusal(engine, device, m)
    ]
    return ("device", *kept)


def chase_points(
    engine: Engine,
    device: int,
    trials: int,
    memories: Sequence[str],
    peers: Sequence[int] = (),
) -> Iterator[ChasePoint]:
    """One GPU thread's dependent reads of each of `memories` and of the first of `peers` it can
    reach, each point as it is measured (a stop, which goes on up, keeps those before it); each
    trial about 20 ms (chase.hpp's reads 0). A chase the engine refuses or that fails says why
    in its point."""
    wanted: list[tuple[str, int | None]] = [(m, None) for m in memories]
    reachable = [p for p in peers if p != device and engine.can_access_peer(device, p)]
    wanted += [("device", reachable[0])] if reachable else []
    for memory, peer in wanted:
        try:
            r = engine.chase(
                device, memory, CHASE_BYTES, CHASE_STRIDE, 0, trials, -1 if peer is None else peer
            )
        except (AllocationError, EngineError) as exc:
            yield ChasePoint(memory, peer, CHASE_BYTES, CHASE_STRIDE, 0, (), None, str(exc))
            continue
        yield ChasePoint(
            memory, peer, CHASE_BYTES, CHASE_STRIDE, r.reads, tuple(r.ns_per_read), r.verified
        )
