"""The simulated engine's GEMM: the engine's own rules (gemm_refusal) and verification class,
and a model of an H200's cuBLASLt as measured there at 8192^3 (fp64 54, fp32 51, tf32 345, fp16
645, bf16 690, fp8 1,250 TFLOP/s), slower for small shapes and for shapes whose alignment class
(the largest power of two dividing m, n and k) is small, as seed 003's Table III shows."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from ...gemm.cpu_worker import beaten
from ...gemm.records import ELEMENT_BYTES, bytes_needed
from ..compiled import engine_module
from ..errors import AllocationError, EngineError
from ..units import alignment_class, format_bytes
from .devices import compute_capability
from .simulated_link import SimulatedHost

_e = engine_module()
PEAK_FLOPS = {
    "fp64": 54e12,
    "fp32": 51e12,
    "tf32": 345e12,
    "fp16": 645e12,
    "bf16": 690e12,
    "fp8": 1250e12,
}
LAUNCH_S = 6e-6


def efficiency(precision: str, m: int, n: int, k: int) -> float:
    """The modelled share of peak: small shapes cannot fill the GPU, and poorly aligned ones
    fall off the fast kernels."""
    size = float(m * n * k) ** (1 / 3)
    fill = size**2 / (size**2 + 1500.0**2)
    klass = alignment_class(m, n, k)
    aligned = {1: 0.35, 2: 0.45, 4: 0.6, 8: 0.82, 16: 0.9, 32: 0.95}.get(klass, 1.0)
    return float(fill * aligned)


HEURISTIC_ALGORITHMS = 8


class SimulatedGemm:
    def __init__(self, engine: SimulatedHost, spec: dict[str, Any]) -> None:
        self._engine = engine
        self.spec = spec
        p = spec["precision"]
        dims = (p, spec["m"], spec["n"], spec["k"])
        one = bytes_needed(*dims, 1) - bytes_needed(*dims, 0)  # the engine's rule
        rotation = int(spec["rotation_bytes"])
        self.copies = min(64, max(1, -(-rotation // one))) if rotation > one else 1
        self.footprint_bytes = bytes_needed(*dims, self.copies)
        free, _ = engine.memory_info(spec["device"])
        if self.footprint_bytes > free:
            raise AllocationError(
                f"cannot allocate {format_bytes(self.footprint_bytes)} of device memory: the "
                f"GEMM's matrices need it and GPU {spec['device']} has {format_bytes(free)} free"
            )
        # the model's heuristic offers 8 algorithms; one chosen before is kept, timed against none
        kept = 0 <= spec.get("rank", -1) < HEURISTIC_ALGORITHMS
        self.algorithm = {
            "id": 66,
            "tile": 248,
            "stages": 35,
            "split_k": 1,
            "workspace_bytes": 0,
            "rank": spec["rank"] if kept else 0,
            "candidates": 0 if kept or spec["tune"] <= 1 else spec["tune"],
        }
        m, n, k = spec["m"], spec["n"], spec["k"]
        self._per_gemm = LAUNCH_S + 2 * m * n * k / (PEAK_FLOPS[p] * efficiency(p, m, n, k))
        # a tuning as the engine's: one GEMM to size the passes, then a pass (GEMM_TUNING_PASS_S)
        # of each candidate forward and of the fastest backward
        candidates = self.algorithm["candidates"]
        count = max(1, min(1000, int(engine_module().GEMM_TUNING_PASS_S / self._per_gemm)))
        self.algorithm["tuned_s"] = (
            self._per_gemm * (1 + count * (candidates + 1)) if candidates > 1 else 0.0
        )
        engine.advance(self.algorithm["tuned_s"])

    def time(self, iterations: int) -> float:
        noise = 1.0 + abs(float(self._engine.rng.normal(0.0, self._engine.noise)))
        seconds = float(iterations * self._per_gemm * noise)
        self._engine.advance(seconds)
        return seconds

    def verify(self, samples: int = 256, inject_fault: bool = False) -> Any:
        bad = inject_fault or self._engine.corrupt
        samples = max(2, min(4096, samples))
        self._engine.advance(1e-4)
        return _e.GemmVerification(
            ok=not bad,
            samples=samples,
            failures=1 if bad else 0,
            worst_error=0.5 if bad else 1e-7,
            worst_row=0,
            worst_column=0,
        )

    def time_with_transfers(
        self, pinned: bool, tiles: int, streams: int, iterations: int, check_delivery: bool = True
    ) -> tuple[float, bool]:
        """Uploads of A and B and the download of C at the link's modelled rate (pinned 55 GB/s,
        pageable 10 GB/s up and 20 down), in sequence with the GEMM, or hidden behind it but
        for one tile's share when tiled."""
        if tiles > 1 and self.spec["trans_b"]:
            raise EngineError(
                "tiled transfers split op(B)'s columns: they need op(B) = B (nn or tn)"
            )
        m, n, k = self.spec["m"], self.spec["n"], self.spec["k"]
        inb, outb = ELEMENT_BYTES[self.spec["precision"]]
        up = (m * k + k * n) * inb / (55e9 if pinned else 10e9)
        down = m * n * outb / (55e9 if pinned else 20e9)
        compute = self._per_gemm
        if tiles > 1:
            share = 1 / tiles
            per = max(compute, up + down) + (up + down + compute) * share
        else:
            per = up + compute + down
        noise = 1.0 + abs(float(self._engine.rng.normal(0.0, self._engine.noise)))
        seconds = float(iterations * per * noise)
        self._engine.advance(seconds)
        return seconds, check_delivery and not self._engine.corrupt

    def time_padded(self, m: int, n: int, k: int, iterations: int) -> float:
        """This GEMM, plus copying the small shape's A and B in and its C out at the device
        memory's modelled 3 TB/s (each byte read and written)."""
        big = self.spec
        if not (0 < m <= big["m"] and 0 < n <= big["n"] and 0 < k <= big["k"]):
            raise EngineError("a padded GEMM's shape must fit in the GEMM it is padded to")
        inb, outb = ELEMENT_BYTES[big["precision"]]
        copies = 2 * ((m * k + k * n) * inb + m * n * outb) / 3e12
        noise = 1.0 + abs(float(self._engine.rng.normal(0.0, self._engine.noise)))
        seconds = float(iterations * (self._per_gemm + copies + 3 * LAUNCH_S) * noise)
        self._engine.advance(seconds)
        return seconds

    def close(self) -> None:
        pass


# The modelled CPU: one core's GEMM rate, threads scaling at 90% and small shapes slower.
CPU_FLOPS_PER_THREAD = {"fp64": 40e9, "fp32": 80e9}
SIMULATED_BLAS = {
    "internal_api": "simulated",
    "version": None,
    "threading_layer": None,
    "architecture": None,
    "num_threads": None,
    "filepath": None,
}


def simulated_cpu_worker(spec: dict[str, Any], threads: int) -> Iterator[dict[str, Any]]:
    """The CPU GEMM worker's records (gemm/cpu_worker.py) from a model instead of a BLAS, so
    simulated runs give the same figures on every machine."""
    rng = np.random.default_rng(int(spec["seed"]) + threads)
    beat = spec.get("beat") or []
    for index, (m, n, k) in enumerate(spec["shapes"]):
        size = float(m * n * k) ** (1 / 3)
        fill = size**2 / (size**2 + 96.0**2 * threads)
        rate = CPU_FLOPS_PER_THREAD[spec["precision"]] * threads**0.9 * fill
        per = 2.0 * m * n * k / rate + 2e-6
        seconds = [per * (1 + abs(float(rng.normal(0.0, 0.01)))) for _ in range(spec["trials"])]
        yield {"m": m, "n": n, "k": k, "seconds": seconds, "verified": True}
        if beaten(m, n, k, seconds, beat[index] if index < len(beat) else None):
            break
    yield {"blas": dict(SIMULATED_BLAS)}


def simulated_gemm(
    engine: SimulatedHost,
    device: int,
    precision: str,
    m: int,
    n: int,
    k: int,
    trans_a: bool,
    trans_b: bool,
    rotation_bytes: int,
    tune: int = 0,
    rank: int = -1,
) -> SimulatedGemm:
    """The engine's rules first, as the native engine applies them."""
    capability = compute_capability(engine, device)
    reason = _e.gemm_refusal(precision, m, n, k, trans_a, trans_b, capability)
    if reason:
        raise EngineError(reason)
    spec = {
        "device": device,
        "precision": precision,
        "m": m,
        "n": n,
        "k": k,
        "trans_a": trans_a,
        "trans_b": trans_b,
        "rotation_bytes": rotation_bytes,
        "tune": tune,
        "rank": rank,
    }
    return SimulatedGemm(engine, spec)
