"""The simulated engine's 2D copy: the engine's own refusals (pitch_refusal), and a model, not a
measurement: a copy engine moves a row in no less than 2.5 ns whatever its width, so narrow rows
waste the link; the driver stages pageable rows through the CPU at 20 ns a row; a loop pays
2.3 us a call; packing costs the CPU 5 ns a row plus its bytes at 10 GB/s, then one copy and a
kernel. Pinned memory moves at 55 GB/s, pageable at 10 (up) and 5 (down), as on an H200."""

from __future__ import annotations

from typing import Any

from ..compiled import engine_module
from ..errors import EngineError
from .simulated_batch import PAGEABLE_BPS, PINNED_BPS
from .simulated_link import SimulatedHost

_e = engine_module()
ROW_S = 2.5e-9  # a copy engine's least time per row
PAGEABLE_ROW_S = 20e-9
CALL_S = {"2d": 10e-6, "2d-async": 4e-6, "3d": 5e-6, "contiguous": 4e-6}
LOOP_CALL_S = 2.3e-6
PACK_ROW_S = 5e-9
PACK_BPS = 10e9
KERNEL_S = 5e-6
DEVICE_BPS = 1e12
PITCH_ALIGNMENT = 512  # cudaMallocPitch's pitch on an H200


def slices_of(rows: int) -> int:
    """The largest divisor of `rows` no larger than its square root (pitch.cpp's 3d slices)."""
    best, d = 1, 1
    while d * d <= rows:
        if rows % d == 0:
            best = d
        d += 1
    return best


class SimulatedPitched:
    def __init__(self, engine: SimulatedHost, spec: dict[str, Any]) -> None:
        self._engine = engine
        self.spec = spec
        self.bytes = spec["width"] * spec["rows"]
        width = spec["width"]
        self.device_pitch = (
            -(-width // PITCH_ALIGNMENT) * PITCH_ALIGNMENT if spec["pitched"] else width
        )
        self.depth = slices_of(spec["rows"])

    def _seconds(self, method: str) -> float:
        s = self.spec
        width, rows = int(s["width"]), int(s["rows"])
        pinned = s["memory"] == "pinned"
        bps = PINNED_BPS if pinned else PAGEABLE_BPS[s["direction"]]
        total = float(self.bytes)
        if method == "contiguous":
            return CALL_S[method] + total / bps
        if method in ("2d", "2d-async", "3d"):
            per_row = max(width / bps, ROW_S) + (0.0 if pinned else PAGEABLE_ROW_S)
            return CALL_S[method] + rows * per_row
        if method == "loop":
            return rows * max(LOOP_CALL_S, width / bps + 1e-6)
        if method == "pack":
            kernel = KERNEL_S + 2 * total / DEVICE_BPS if s["pitched"] else 0.0
            return (
                rows * PACK_ROW_S
                + total / PACK_BPS
                + CALL_S["contiguous"]
                + total / PINNED_BPS
                + kernel
            )
        if method == "span":
            span = (rows - 1) * int(s["host_pitch"]) + width
            return CALL_S["contiguous"] + span / bps + KERNEL_S + 2 * total / DEVICE_BPS
        raise EngineError(f"unknown 2D copy method '{method}'")

    def _check(self, method: str) -> None:
        s = self.spec
        reason = _e.pitch_refusal(
            s["direction"],
            s["memory"],
            s["width"],
            s["rows"],
            s["host_pitch"],
            s["pitched"],
            method,
        )
        if reason:
            raise EngineError(reason)

    def time(self, method: str, iterations: int) -> tuple[float, float]:
        self._check(method)
        if iterations < 1:
            raise EngineError("a trial needs at least one iteration")
        noise = 1.0 + abs(float(self._engine.rng.normal(0.0, self._engine.noise)))
        seconds = self._seconds(method) * noise
        self._engine.advance(seconds * iterations)
        return seconds, seconds * 0.98

    def verify(self, method: str) -> tuple[int, int]:
        self._check(method)
        self._engine.advance(1e-4 + self._seconds(method))
        return (1, 0) if self._engine.corrupt else (0, 0)

    def close(self) -> None:
        pass
