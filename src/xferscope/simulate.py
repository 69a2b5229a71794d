"""A simulated engine: the native engine's interface over a link model (latency + size /
bandwidth, with multiplicative noise), on a virtual clock so CI runs in milliseconds.

Nothing it produces is a measurement: every result built on it is marked simulated.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from .errors import AllocationError, EngineError

SIMULATED_MEMORY_BYTES = 141 * 10**9
SIMULATED_GPU: dict[str, Any] = {
    "index": 0,
    "name": "Simulated H200-like GPU",
    "uuid": "GPU-00000000-0000-0000-0000-000000000000",
    "pci_bus_id": "0000:00:00.0",
    "compute_capability": "9.0",
    "sm_count": 132,
    "total_memory_bytes": SIMULATED_MEMORY_BYTES,
    "l2_cache_bytes": 60 * 10**6,
    "memory_bus_width_bits": 6144,
    "memory_clock_khz": 3_200_000,
    "async_engine_count": 3,
    "can_map_host_memory": True,
    "unified_addressing": True,
    "pageable_memory_access": False,
}
SIMULATED_LINK = {"generation": 5, "width": 16}


@dataclass(frozen=True, slots=True)
class LinkModel:
    latency_s: float
    bandwidth: float  # bytes per second

    def seconds(self, size: int) -> float:
        return self.latency_s + size / self.bandwidth


# Shaped after the anchors measured on H200 machines: fast pinned copies, pageable copies that
# the driver stages, synchronous calls that cost more than device time.
def _model(direction: str, memory: str, mechanism: str, timing: str) -> LinkModel:
    if direction == "d2d":
        return LinkModel(2.5e-6 if timing == "api" else 1.5e-6, 2.1e12)
    pageable = memory == "pageable"
    bandwidth = (10.5e9 if direction == "h2d" else 20e9) if pageable else 55.4e9
    if mechanism == "kernel":
        bandwidth = min(bandwidth, 52e9)
    if memory == "wc" and direction == "d2h":
        bandwidth = 50e9
    latency = {"api": 6.6e-6, "device": 1.8e-6}[timing]
    if pageable:
        latency += 2e-6
    return LinkModel(latency, bandwidth)


class SimulatedTransfer:
    def __init__(
        self,
        engine: SimulatedEngine,
        direction: str,
        memory: str,
        mechanism: str,
        capacity: int,
        rotate: bool = True,
    ) -> None:
        self._engine = engine
        self._rotate = rotate
        self._direction = direction
        self._memory = memory
        self._mechanism = mechanism
        self._capacity = capacity
        self.copies_per_iteration = 2 if direction == "roundtrip" else 1
        pageable = direction != "d2d" and memory == "pageable"
        self.blocks_for_device_timing = mechanism != "memcpy" and not pageable
        self._closed = False

    def _check(self, size: int) -> None:
        if self._closed:
            raise EngineError("this transfer is closed")
        if not 1 <= size <= self._capacity:
            raise EngineError(f"size {size} is outside this transfer's 1..{self._capacity} bytes")

    def fill(self, seed: int) -> None:
        self._engine.advance(self._capacity / 20e9)

    def time(self, timing: str, bytes: int, iterations: int) -> dict[str, Any]:
        self._check(bytes)
        model = _model(self._direction, self._memory, self._mechanism, timing)
        per_copy = model.seconds(bytes)
        copies = iterations * self.copies_per_iteration
        noise = float(self._engine.rng.lognormal(0.0, self._engine.noise))
        seconds = per_copy * copies * noise
        self._engine.advance(seconds)
        return {
            "seconds": seconds,
            "iterations": iterations,
            "copies_per_iteration": self.copies_per_iteration,
            "blocking_kernel": timing == "device" and self.blocks_for_device_timing,
            "blocking_timed_out": False,
            "footprint_bytes": self._places(bytes, iterations) * (math.ceil(bytes / 64) * 64),
        }

    def _places(self, size: int, iterations: int) -> int:
        """Where copies of `size` go, as the native engine rotates them."""
        if not self._rotate or size < 64 << 10:
            return 1
        return min(iterations, 1 + (max(self._capacity, 256 << 20) - size) // size)

    def verify(self, bytes: int, inject_fault: bool = False) -> dict[str, Any]:
        self._check(bytes)
        self._engine.advance(bytes / 20e9)
        bad = inject_fault or self._engine.corrupt
        return {
            "ok": not bad,
            "bytes_checked": bytes,
            "mismatched_bytes": 1 if bad else 0,
            "first_mismatch": bytes // 2 if bad else -1,
        }

    def close(self) -> None:
        self._closed = True


class SimulatedEngine:
    """`corrupt` makes every verification fail, as a broken copy path would; `interrupt_after`
    raises KeyboardInterrupt after that many engine calls, as Ctrl-C would."""

    simulated = True

    def __init__(
        self,
        seed: int = 1,
        noise: float = 0.01,
        corrupt: bool = False,
        interrupt_after: int | None = None,
        devices: int = 1,
    ) -> None:
        self.rng = np.random.default_rng(seed)
        self.noise = noise
        self.corrupt = corrupt
        self.interrupt_after = interrupt_after
        self._devices = devices
        self._now = 0.0
        self._trials = 0

    def advance(self, seconds: float) -> None:
        self._now += seconds + 5e-6  # each call costs a little host time
        self._trials += 1
        if self.interrupt_after is not None and self._trials > self.interrupt_after:
            raise KeyboardInterrupt

    def clock(self) -> float:
        return self._now

    def device_count(self) -> int:
        return self._devices

    def device_info(self, index: int) -> dict[str, Any]:
        return dict(SIMULATED_GPU, index=index)

    def memory_info(self, index: int) -> tuple[int, int]:
        return SIMULATED_MEMORY_BYTES - (1 << 30), SIMULATED_MEMORY_BYTES

    def runtime_version(self) -> int:
        return 13000

    def driver_version(self) -> int:
        return 13000

    def open_transfer(
        self,
        device: int,
        direction: str,
        memory: str,
        mechanism: str,
        capacity: int,
        rotation_bytes: int,
        rotate: bool = True,
    ) -> SimulatedTransfer:
        free, _ = self.memory_info(device)
        if capacity * 2 > free:
            raise AllocationError(
                f"cannot allocate {capacity} bytes of device memory: out of memory"
            )
        return SimulatedTransfer(self, direction, memory, mechanism, capacity, rotate)
