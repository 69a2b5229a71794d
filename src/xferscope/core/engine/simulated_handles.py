"""The simulated engine's handles: a transfer on the link model, the staged copier and a pair
of ranks' communicator, each on the engine's virtual clock (simulated.py makes them)."""

from __future__ import annotations

from typing import Any

from .. import cases
from ..compiled import result
from ..errors import CudaError, EngineError
from .simulated_link import SimulatedHost, _model, _round_up, staged_model

SIMULATED_STAGED_PLAN: dict[str, Any] = {
    "threads": 8,
    "chunk_bytes": 4 << 20,
    "buffers_per_thread": 3,
    "direct_below": int(cases.LIMITS["staged_direct_below"]),
    "single_thread_copy_bps": 17e9,
    "target_bps": 63e9,
    "explanation": "simulated: 8 threads, 4096 KiB chunks, 3 per thread",
}


# How much longer a host copy takes on a modelled confidential computing system, whose CPU
# encrypts each copy into bounce buffers (a model of the mechanism, not a measurement).
CC_SLOWDOWN = 4.0
# How much longer a host copy takes from memory on the far socket of the modelled two-socket
# host (the GPUs hang off node 0): H2D halves, as nvbandwidth#53 reports, D2H loses a fifth (a
# model of the shape users report, not a measurement).
FAR_NODE_SLOWDOWN = {"h2d": 2.0, "d2h": 1.25, "roundtrip": 1.6}
GPU_NODE = 0


class SimulatedCopier:
    """The staged copier's interface; it moves no bytes, only advances the virtual clock."""

    def __init__(self, engine: SimulatedHost, direct_below: int | None = None) -> None:
        self._engine = engine
        plan = dict(SIMULATED_STAGED_PLAN)
        if direct_below is not None:
            plan["direct_below"] = direct_below
        self.plan = result("StagedPlan", **plan)
        self._closed = False

    def _copy(self, direction: str, bytes: int) -> None:
        if self._closed:
            raise EngineError("this staged copier is closed")
        model = staged_model(direction, "api", int(self.plan.direct_below))
        self._engine.advance(model.seconds(bytes))

    def to_device(self, device_destination: int, host_source: int, bytes: int) -> None:
        self._copy("h2d", bytes)

    def to_host(self, host_destination: int, device_source: int, bytes: int) -> None:
        self._copy("d2h", bytes)

    def close(self) -> None:
        self._closed = True


# What a GPU fallen off the bus answers.
LAUNCH_FAILURE = CudaError(
    "cudaErrorLaunchFailure: unspecified launch failure", "cudaErrorLaunchFailure", 719
)


class SimulatedDeviceBuffer:
    """Device memory that holds nothing: an address in a range no host pointer has, counted
    against the simulated GPU's free memory while open."""

    _next = 0x7E00_0000_0000

    def __init__(self, bytes: int) -> None:
        self.bytes = max(bytes, 1)
        self._address = SimulatedDeviceBuffer._next
        SimulatedDeviceBuffer._next += _round_up(self.bytes, 1 << 21)
        self.closed = False

    def data_ptr(self) -> int:
        return self._address

    def close(self) -> None:
        self.closed = True


class SimulatedTransfer:
    def __init__(
        self,
        engine: SimulatedHost,
        direction: str,
        memory: str,
        mechanism: str,
        capacity: int,
        rotation_bytes: int = 0,
        rotate: bool = True,
        device: int = 0,
        peer_access: bool = True,
        peer: int | None = None,
        host_offset: int = 0,
        device_offset: int = 0,
        staged_direct_below: int | None = None,
        numa_node: int = -1,
    ) -> None:
        self._engine = engine
        self._staged_direct_below = staged_direct_below
        self._numa_node = numa_node
        self._host_offset = host_offset
        self._device_offset = device_offset
        self.peer = peer
        self._rotate = rotate
        self.device = device
        self.direction = direction
        self.peer_access = peer_access
        self._memory = memory
        self._mechanism = mechanism
        self._capacity = capacity
        # as the native engine sizes them, less the room for the offset
        self._buffer_bytes = max(capacity, rotation_bytes)
        self.copies_per_iteration = 2 if direction == "roundtrip" else 1
        self.blocks_for_device_timing = cases.blocks_for_device_timing(
            direction, memory, mechanism, peer_access
        )
        self._fail_next = False
        self._closed = False

    def host_node(self) -> int:
        """Where the model's host pages are: the node asked for, else the GPU's own."""
        if self.direction in cases.DEVICE_DIRECTIONS:
            return -1
        return GPU_NODE if self._numa_node < 0 else self._numa_node

    def _check(self, size: int) -> None:
        if self._closed:
            raise EngineError("this transfer is closed")
        if not 1 <= size <= self._capacity:
            raise EngineError(f"size {size} is outside this transfer's 1..{self._capacity} bytes")
        if self._fail_next:
            self._fail_next = False
            raise CudaError(
                "cudaErrorInvalidValue: invalid argument (an injected copy failure)",
                "cudaErrorInvalidValue",
                1,
            )

    def fill(self, seed: int) -> None:
        self._engine.advance(self._buffer_bytes / 20e9)

    def time(self, timing: str, bytes: int, iterations: int) -> Any:
        if iterations < 1:
            raise EngineError("a trial needs at least one iteration")
        reason = cases.refusal(
            self.direction, self._memory, self._mechanism, timing, self.peer_access
        )
        if reason:
            raise EngineError(reason)
        self._check(bytes)
        per_copy = self.per_copy_s(timing, bytes)
        copies = iterations * self.copies_per_iteration
        noise = float(self._engine.rng.lognormal(0.0, self._engine.noise))
        seconds = per_copy * copies * noise
        self._engine.advance(seconds)
        return result(
            "TrialTiming",
            seconds=seconds,
            iterations=iterations,
            copies_per_iteration=self.copies_per_iteration,
            blocking_kernel=timing == "device" and self.blocks_for_device_timing,
            blocking_timed_out=False,
            footprint_bytes=min(self._slots(bytes), iterations)
            * _round_up(bytes, int(cases.LIMITS["cache_line"])),
        )

    @property
    def staged_plan(self) -> Any:
        return (
            result("StagedPlan", **SIMULATED_STAGED_PLAN) if self._mechanism == "staged" else None
        )

    def overlap_cpu(self, bytes: int, work_s: float) -> Any:
        """A copy the host must drive itself (pageable, synchronous or staged) blocks in the
        issuing call; an asynchronous one runs under the CPU's work."""
        self._check(bytes)
        copy = self.per_copy_s("api", bytes) * self.copies_per_iteration
        host_driven = self._mechanism in ("memcpy", "staged", "driver") or (
            self._memory in cases.DRIVER_STAGED and self.direction not in cases.DEVICE_DIRECTIONS
        )
        issue = copy if host_driven else 3e-6
        wait = 0.0 if host_driven else max(0.0, copy - work_s)
        self._engine.advance(issue + work_s + wait)
        return result(
            "OverlapSample",
            issue_s=issue,
            work_s=work_s,
            wait_s=wait,
            total_s=issue + work_s + wait,
        )

    def per_copy_s(self, timing: str, size: int) -> float:
        """The link model, and a model (not a measurement) of misaligned copies: the driver's
        CPU copies of pageable memory slow down when the host side is not 16-byte aligned, and
        a copy engine pays a little per copy for a start off a 64-byte line."""
        model = _model(self.direction, self._memory, self._mechanism, timing, self.peer_access)
        if self._mechanism == "staged" and self._staged_direct_below is not None:
            model = staged_model(self.direction, timing, self._staged_direct_below)
        seconds = model.seconds(size)
        if self.direction in cases.DEVICE_DIRECTIONS:
            return seconds
        seconds *= 16 / max(1, self._engine.width_of(self.device))  # a link trained down
        if self._engine.confidential_computing:  # a model: the CPU encrypts every copy
            seconds *= CC_SLOWDOWN
        if self._numa_node not in (-1, GPU_NODE):
            seconds *= FAR_NODE_SLOWDOWN[self.direction]
        if self._memory in cases.DRIVER_STAGED and self._host_offset % 16:
            seconds *= 1.12
        if self._host_offset % 64 or self._device_offset % 64:
            seconds += 0.3e-6
        return seconds

    def _slots(self, size: int) -> int:
        """Places copies of `size` rotate through, as the native engine counts them."""
        if not self._rotate or size < cases.LIMITS["min_rotated_bytes"]:
            return 1
        step = _round_up(size, int(cases.LIMITS["slot_alignment"]))
        return (self._buffer_bytes - size) // step + 1

    def verify(self, bytes: int, inject_fault: bool = False) -> Any:
        self._check(bytes)
        self._engine.advance(bytes / 20e9)
        bad = inject_fault or self._engine.corrupt
        return result(
            "Verification",
            ok=not bad,
            bytes_checked=bytes,
            mismatched_bytes=1 if bad else 0,
            first_mismatch=bytes // 2 if bad else -1,
        )

    def inject_copy_failure(self) -> None:
        self._fail_next = True

    def close(self) -> None:
        self._closed = True


class SimulatedPairComm:
    """The pair communicator's interface over the link model; it moves no bytes."""

    BANDWIDTH = 370e9
    LATENCY_S = 9e-6

    def __init__(self, engine: SimulatedHost, rank: int, capacity: int) -> None:
        self._engine = engine
        self._rank = rank
        self._capacity = capacity

    def _seconds(self, ranks: tuple[int, int], bytes: int, iterations: int, trips: int) -> float:
        if self._rank not in ranks:
            return 0.0
        if not 1 <= bytes <= self._capacity or ranks[0] == ranks[1] or iterations < 1:
            raise EngineError(f"a pair needs 1..{self._capacity} bytes and two ranks")
        noise = 1.0 + abs(float(self._engine.rng.normal(0.0, self._engine.noise)))
        seconds = iterations * trips * (self.LATENCY_S + bytes / self.BANDWIDTH) * noise
        self._engine.advance(seconds)
        return seconds

    def stream(self, source: int, destination: int, bytes: int, iterations: int) -> float:
        return self._seconds((source, destination), bytes, iterations, 1)

    def ping_pong(self, a: int, b: int, bytes: int, iterations: int) -> float:
        return self._seconds((a, b), bytes, iterations, 2)

    def mismatches(self, bytes: int) -> int:
        return 1 if self._engine.corrupt else 0

    def close(self) -> None:
        pass
