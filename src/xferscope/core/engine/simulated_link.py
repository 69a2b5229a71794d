"""The simulated engine's link model (latency + size / bandwidth, shaped after the anchors
measured on H200 machines) and the engine as the simulated models of GEMM, GL, batches and
pitched copies see it: the bottom of the simulated engine, which imports none of it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from .. import cases

# The PCIe link every simulated GPU trained to.
SIMULATED_LINK = {"generation": 5, "width": 16}


class SimulatedHost(Protocol):
    """What a simulated model asks of the simulated engine: its virtual clock, its noise,
    whether it corrupts every copy, and its GPU's facts."""

    rng: Any  # numpy.random.Generator
    noise: float
    corrupt: bool
    link_width: int
    confidential_computing: bool

    def width_of(self, index: int) -> int: ...
    def advance(self, seconds: float) -> None: ...
    def now(self) -> float: ...
    def driver_version(self) -> int: ...
    def memory_info(self, index: int) -> tuple[int, int]: ...
    def device_info(self, index: int) -> dict[str, Any]: ...


@dataclass(frozen=True, slots=True)
class LinkModel:
    latency_s: float
    bandwidth: float  # bytes per second
    # copies under `below_bytes` follow `below` instead (the staged copy's plain call)
    below_bytes: int = 0
    below: LinkModel | None = None

    def seconds(self, size: int) -> float:
        if self.below is not None and size < self.below_bytes:
            return self.below.seconds(size)
        return self.latency_s + size / self.bandwidth


def staged_model(direction: str, timing: str, direct_below: int) -> LinkModel:
    """Host threads through a pinned pool (52 GB/s up, 49 down on an H200, 40 us to hand a copy
    over), and the plain pageable call below `direct_below`, as the engine's copier does."""
    return LinkModel(
        40e-6,
        52e9 if direction == "h2d" else 49e9,
        direct_below,
        _model(direction, "pageable", "memcpy", timing),
    )


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
    if mechanism == "staged":
        return staged_model(direction, timing, int(cases.LIMITS["staged_direct_below"]))
    # malloc-like memory the driver stages; the other host kinds are modelled as pinned (not
    # measured apart on the model's H200: a huge page or a portable flag changes no figure here)
    pageable = memory in cases.DRIVER_STAGED
    bandwidth = (10.5e9 if direction == "h2d" else 20e9) if pageable else 55.4e9
    if mechanism == "kernel":
        bandwidth = min(bandwidth, 52e9)
    if memory == "wc" and direction == "d2h":
        bandwidth = 50e9
    latency = {"api": 6.6e-6, "device": 1.8e-6}[timing]
    if pageable:
        latency += 2e-6
    return LinkModel(latency, bandwidth)


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple
