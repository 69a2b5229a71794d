"""A simulated engine: the native engine's interface over a link model (latency + size /
bandwidth, with multiplicative noise), on a virtual clock so CI runs in milliseconds.

Nothing it produces is a measurement: every result built on it is marked simulated.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
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
def _model(
    direction: str, memory: str, mechanism: str, timing: str, peer_access: bool = True
) -> LinkModel:
    if direction == "d2d":
        return LinkModel(2.5e-6 if timing == "api" else 1.5e-6, 2.1e12)
    if direction == "p2p":  # NVLink 4: 395 GB/s by copy engine, 372 by SMs, 38 through the host
        bandwidth = 38e9 if not peer_access else (372e9 if mechanism == "kernel" else 395e9)
        return LinkModel(2.5e-6 if timing == "api" else 1.6e-6, bandwidth)
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
        device: int = 0,
        peer_access: bool = True,
        peer: int | None = None,
    ) -> None:
        self._engine = engine
        self.peer = peer
        self._rotate = rotate
        self.device = device
        self.direction = direction
        self.peer_access = peer_access
        self._direction = direction
        self._memory = memory
        self._mechanism = mechanism
        self._capacity = capacity
        self.copies_per_iteration = 2 if direction == "roundtrip" else 1
        pageable = direction not in ("d2d", "p2p") and memory == "pageable"
        staged = direction == "p2p" and not peer_access
        self.blocks_for_device_timing = mechanism != "memcpy" and not pageable and not staged
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
        per_copy = self.per_copy_s(timing, bytes)
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

    def per_copy_s(self, timing: str, size: int) -> float:
        model = _model(self._direction, self._memory, self._mechanism, timing, self.peer_access)
        return model.seconds(size)

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
    raises KeyboardInterrupt after that many engine calls, as Ctrl-C would; the GPUs in
    `failing_devices` fail every transfer with a CUDA error, as a GPU fallen off the bus does."""

    simulated = True

    def __init__(
        self,
        seed: int = 1,
        noise: float = 0.01,
        corrupt: bool = False,
        interrupt_after: int | None = None,
        devices: int = 1,
        failing_devices: tuple[int, ...] = (),
    ) -> None:
        self.rng = np.random.default_rng(seed)
        self.noise = noise
        self.corrupt = corrupt
        self.interrupt_after = interrupt_after
        self._devices = devices
        self.failing_devices = failing_devices
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
        peer: int = -1,
        peer_access: bool = True,
    ) -> SimulatedTransfer:
        if device in self.failing_devices:
            raise EngineError("CUDA error: cudaErrorLaunchFailure: unspecified launch failure")
        free, _ = self.memory_info(device)
        if capacity * 2 > free:
            raise AllocationError(
                f"cannot allocate {capacity} bytes of device memory: out of memory"
            )
        if direction == "p2p" and not (0 <= peer < self._devices and peer != device):
            raise EngineError("a p2p transfer needs a peer GPU other than its own")
        return SimulatedTransfer(
            self,
            direction,
            memory,
            mechanism,
            capacity,
            rotate,
            device,
            peer_access,
            None if peer < 0 else peer,
        )

    def time_concurrently(
        self, transfers: Sequence[Any], bytes: int, iterations: int
    ) -> tuple[list[float], bool]:
        """Streams in one direction share the host link (1.2 times one stream's rate in all,
        as two H200s moving to the host at once saw); H2D beside D2H on one GPU runs at 0.93 of
        its rate; peer-to-peer streams barely slow each other."""
        if not all(t.blocks_for_device_timing for t in transfers):
            raise EngineError(
                "concurrent streams need asynchronous copies of non-pageable memory (async or "
                "kernel mechanism)"
            )
        by_direction: dict[str, int] = {}
        for t in transfers:
            by_direction[t.direction] = by_direction.get(t.direction, 0) + 1
        seconds = []
        for t in transfers:
            alone = t.per_copy_s("device", bytes) * iterations * t.copies_per_iteration
            sharing = by_direction[t.direction]
            factor = 1.0
            if t.direction in ("h2d", "d2h") and sharing > 1:
                factor = sharing / 1.2
            if t.direction in ("h2d", "d2h") and len(by_direction.keys() & {"h2d", "d2h"}) == 2:
                factor /= 0.93
            if t.direction == "p2p" and len(transfers) > 1:
                factor = 1.01
            noise = float(self.rng.lognormal(0.0, self.noise))
            seconds.append(alone * factor * noise)
        self.advance(max(seconds))
        return seconds, False

    def measure_pinning(self, device: int, bytes: int) -> dict[str, float]:
        """Per GB as measured on an H200: cudaMallocHost 316 ms, cudaFreeHost 62 ms, register
        38 ms, unregister 12 ms."""
        gb = bytes / 1e9
        pinned = _model("h2d", "pinned", "memcpy", "api").seconds(bytes)
        costs = {
            "host_alloc_s": 0.316 * gb, "host_free_s": 0.0624 * gb, "register_s": 0.0385 * gb,
            "unregister_s": 0.012 * gb,
            "pageable_copy_s": _model("h2d", "pageable", "memcpy", "api").seconds(bytes),
            "pinned_copy_s": pinned, "registered_copy_s": pinned * 1.02,
            "host_copy_s": bytes / 12.7e9,
        }  # fmt: skip
        self.advance(sum(costs.values()) + 2 * costs["pinned_copy_s"])
        return costs

    def can_access_peer(self, device: int, peer: int) -> bool:
        return device != peer
