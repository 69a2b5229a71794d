"""A simulated engine: the native engine's protocol over a link model (latency + size /
bandwidth, with multiplicative noise), on a virtual clock so CI runs in milliseconds.

It accepts and refuses what the native engine does, with the same words, because both ask the
case table (cases.py); it returns the engine's own result classes; its rotation follows the
engine's limits. Nothing it produces is a measurement: every result built on it is marked
simulated.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import cases, interrupt
from ..cases import DEFAULT_SEED
from ..compiled import engine_module, result
from ..errors import AllocationError, CudaError, EngineError, NoDeviceError
from .simulated_link import _model, _round_up, staged_model

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
    "clock_khz": 1_980_000,
    "async_engine_count": 3,
    "can_map_host_memory": True,
    "unified_addressing": True,
    "pageable_memory_access": False,
}
SIMULATED_LINK = {"generation": 5, "width": 16}
SIMULATED_STAGED_PLAN: dict[str, Any] = {
    "threads": 8,
    "chunk_bytes": 4 << 20,
    "buffers_per_thread": 3,
    "direct_below": int(cases.LIMITS["staged_direct_below"]),
    "single_thread_copy_bps": 17e9,
    "target_bps": 63e9,
    "explanation": "simulated: 8 threads, 4096 KiB chunks, 3 per thread",
}


class SimulatedCopier:
    """The staged copier's interface; it moves no bytes, only advances the virtual clock."""

    def __init__(self, engine: SimulatedEngine, direct_below: int | None = None) -> None:
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


class SimulatedTransfer:
    def __init__(
        self,
        engine: SimulatedEngine,
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
    ) -> None:
        self._engine = engine
        self._staged_direct_below = staged_direct_below
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
            self._memory == "pageable" and self.direction not in cases.DEVICE_DIRECTIONS
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
        seconds *= 16 / max(1, self._engine.link_width)  # a link trained down
        if self._memory == "pageable" and self._host_offset % 16:
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

    def __init__(self, engine: SimulatedEngine, rank: int, capacity: int) -> None:
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


class SimulatedEngine:
    """`corrupt` makes every verification fail, as a broken copy path would; `interrupt_after`
    asks for a stop after that many engine calls, as Ctrl-C does (interrupt.request); the GPUs
    in `failing_devices` fail every transfer with a CUDA error, as a GPU fallen off the bus does.
    `pace` > 0 makes the engine take real time too, that share of the modelled time (tests
    interrupt a paced run at random moments; the CLI reads XFERSCOPE_SIMULATE_PACE). Like the
    native engine, every measuring call is refused once a stop was requested."""

    simulated = True

    def __init__(
        self,
        seed: int = 1,
        noise: float = 0.01,
        corrupt: bool = False,
        interrupt_after: int | None = None,
        devices: int = 1,
        failing_devices: tuple[int, ...] = (),
        pace: float = 0.0,
        link_width: int = 16,
    ) -> None:
        self.rng = np.random.default_rng(seed)
        # lanes the simulated PCIe link trained to (of 16): host copies slow down in proportion
        self.link_width = link_width
        self.noise = noise
        self.corrupt = corrupt
        self.interrupt_after = interrupt_after
        self._devices = devices
        self.failing_devices = failing_devices
        self.memory_ranges: list[tuple[int, int, int, int]] = []  # register_memory
        self.pace = pace
        self._now = 0.0
        self._trials = 0
        self._paced_from: tuple[float, float] | None = None  # (real, modelled) at the first call

    def advance(self, seconds: float) -> None:
        """Every measuring call ends here: the modelled time passes (and, paced, real time)."""
        interrupt.check()
        self._now += seconds + 5e-6  # each call costs a little host time
        self._trials += 1
        if self.pace > 0:
            if self._paced_from is None:
                self._paced_from = (time.perf_counter(), self._now)
            real, modelled = self._paced_from
            behind = real + (self._now - modelled) * self.pace - time.perf_counter()
            if behind > 1e-3:  # sleeping less than this costs more than it keeps
                time.sleep(behind)
        if self.interrupt_after is not None and self._trials > self.interrupt_after:
            interrupt.request()
            interrupt.check()

    def clock(self) -> float:
        return self._now

    def gemm(
        self,
        device: int,
        precision: str,
        m: int,
        n: int,
        k: int,
        trans_a: bool = False,
        trans_b: bool = False,
        alpha: float = 1.0,
        beta: float = 0.0,
        seed: int | None = None,
        rotation_bytes: int = 0,
        tune: int = 0,
    ) -> Any:
        """The simulated GEMM (simulated_gemm.py)."""
        from .simulated_gemm import simulated_gemm

        self._launch(device)
        return simulated_gemm(
            self, device, precision, m, n, k, trans_a, trans_b, rotation_bytes, tune
        )

    def batch(
        self,
        device: int,
        direction: str,
        memory: str,
        sizes: list[int],
        scattered: bool = False,
        seed: int | None = None,
    ) -> Any:
        """The simulated batch of copies (simulated_batch.py)."""
        from .simulated_batch import SimulatedBatch

        self._launch(device)
        reason = engine_module().batch_refusal(direction, memory, list(sizes), "loop", 13000, False)
        if reason:
            raise EngineError(reason)
        spec = {"device": device, "direction": direction, "memory": memory, "sizes": list(sizes)}
        return SimulatedBatch(
            self, spec | {"scattered": scattered, "seed": DEFAULT_SEED if seed is None else seed}
        )

    def pitched(
        self,
        device: int,
        direction: str,
        memory: str,
        width: int,
        rows: int,
        host_pitch: int,
        pitched: bool = True,
        seed: int | None = None,
    ) -> Any:
        """The simulated 2D copy (simulated_pitch.py)."""
        from .simulated_pitch import SimulatedPitched

        self._launch(device)
        reason = engine_module().pitch_refusal(
            direction, memory, width, rows, host_pitch, pitched, "2d"
        )
        if reason:
            raise EngineError(reason)
        spec = {"device": device, "direction": direction, "memory": memory, "width": width}
        return SimulatedPitched(
            self,
            spec
            | {
                "rows": rows,
                "host_pitch": host_pitch,
                "pitched": pitched,
                "seed": DEFAULT_SEED if seed is None else seed,
            },
        )

    def nccl_unique_id(self) -> bytes:
        return bytes(128)

    def pair_comm(self, unique_id: bytes, ranks: int, rank: int, device: int, capacity: int) -> Any:
        """A modelled NCCL communicator: NVLink 4 between two H200s (370 GB/s one way, 9 us
        a message), whatever the ranks."""
        self._launch(device)
        return SimulatedPairComm(self, rank, capacity)

    def many_copier(self, device: int) -> Any:
        """copy_many's simulated copier (simulated_batch.py)."""
        from .simulated_batch import SimulatedManyCopier

        self._gpu(device)
        return SimulatedManyCopier(self, device)

    def register_memory(self, address: int, size: int, kind: int, device: int = -1) -> None:
        """Tells classify_pointers that [address, address + size) is memory of `kind` (1
        pinned, 2 device, 3 managed; the rest is pageable), as the driver would know it."""
        self.memory_ranges.append((address, size, kind, device))

    def classify_pointers(self, addresses: Any) -> tuple[Any, Any, Any]:
        addresses = np.asarray(addresses, dtype=np.uint64)
        kind = np.zeros(len(addresses), dtype=np.int8)
        device = np.full(len(addresses), -1, dtype=np.int32)
        mapped = np.zeros(len(addresses), dtype=np.uint64)
        for start, size, k, d in self.memory_ranges:
            inside = (addresses >= start) & (addresses < start + size)
            kind[inside], device[inside] = k, d
            if k == 1:
                mapped[inside] = addresses[inside]  # unified addressing: the same address
        return kind, device, mapped

    def gl_context(self, device: int) -> Any:
        """The simulated GL (simulated_gl.py)."""
        from .simulated_gl import SimulatedGl

        self._gpu(device)
        return SimulatedGl(self, device)

    def _gpu(self, device: int) -> None:
        """NoDeviceError for an index the model has no GPU at."""
        if not 0 <= device < self._devices:
            raise NoDeviceError(f"GPU index {device} out of range: {self._devices} GPU(s)")

    def _launch(self, device: int) -> None:
        """What opening work on a GPU meets first: a pending Ctrl-C, a GPU that is not there,
        and a GPU the test made fail."""
        interrupt.check()
        self._gpu(device)
        if device in self.failing_devices:
            raise LAUNCH_FAILURE

    def device_count(self) -> int:
        return self._devices

    def device_info(self, index: int) -> dict[str, Any]:
        info = dict(SIMULATED_GPU, index=index)
        if index:  # every simulated GPU has a UUID and bus id of its own
            info["uuid"] = f"{info['uuid'][:-12]}{index:012x}"
            info["pci_bus_id"] = f"0000:{index:02x}:00.0"
        if self.link_width != 16:
            info["pcie_width"] = self.link_width
        return info

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
        host_offset: int = 0,
        device_offset: int = 0,
        staged_direct_below: int | None = None,
    ) -> SimulatedTransfer:
        interrupt.check()
        if capacity == 0:
            raise EngineError("a transfer needs a capacity of at least one byte")
        most = int(cases.LIMITS["most_offset"])
        if not (0 <= host_offset <= most and 0 <= device_offset <= most):
            raise EngineError(f"a copy's offset is 0..{most} bytes")
        reason = cases.refusal(direction, memory, mechanism, None, peer_access)
        if reason:
            raise EngineError(reason)
        if direction == "p2p" and not (0 <= peer < self._devices and peer != device):
            raise EngineError(
                f"a p2p transfer needs a peer GPU other than its own, from 0 to {self._devices - 1}"
            )
        if device in self.failing_devices:
            raise LAUNCH_FAILURE
        free, _ = self.memory_info(device)
        if max(capacity, rotation_bytes) * 2 > free:
            raise AllocationError(
                f"cannot allocate {capacity} bytes of device memory: out of memory"
            )
        return SimulatedTransfer(
            self,
            direction,
            memory,
            mechanism,
            capacity,
            rotation_bytes,
            rotate,
            device,
            peer_access,
            None if peer < 0 else peer,
            host_offset,
            device_offset,
            staged_direct_below,
        )

    def time_concurrently(
        self, transfers: Sequence[Any], bytes: int, iterations: int
    ) -> tuple[list[float], bool]:
        """Streams in one direction share the host link (1.2 times one stream's rate in all,
        as two H200s moving to the host at once saw); H2D beside D2H on one GPU runs at 0.93 of
        its rate; peer-to-peer streams barely slow each other."""
        most = int(cases.LIMITS["most_held_copies"])
        for t in transfers:
            if not t.blocks_for_device_timing:
                raise EngineError(
                    "concurrent streams need asynchronous copies of non-pageable memory (async "
                    "or kernel mechanism)"
                )
            if iterations < 1 or iterations * t.copies_per_iteration > most:
                raise EngineError(f"concurrent streams take 1..{most} copies each")
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

    def measure_pinning(self, device: int, bytes: int) -> Any:
        """Per GB as measured on an H200: cudaMallocHost 316 ms, cudaFreeHost 62 ms, register
        38 ms, unregister 12 ms."""
        gb = bytes / 1e9
        pinned = _model("h2d", "pinned", "memcpy", "api").seconds(bytes)
        costs = {
            "host_alloc_s": 0.316 * gb,
            "host_free_s": 0.0624 * gb,
            "register_s": 0.0385 * gb,
            "unregister_s": 0.012 * gb,
            "pageable_copy_s": _model("h2d", "pageable", "memcpy", "api").seconds(bytes),
            "pinned_copy_s": pinned,
            "registered_copy_s": pinned * 1.02,
            "host_copy_s": bytes / 12.7e9,
        }
        self.advance(sum(costs.values()) + 2 * costs["pinned_copy_s"])
        return result("PinningCosts", **costs)

    def can_access_peer(self, device: int, peer: int) -> bool:
        return device != peer

    def rotate_buffers(
        self, device: int, upload: bool, buffers: int, chunk_bytes: int, chunks: int
    ) -> Any:
        """One buffer serialises copy and CPU work; two or more overlap them, minus a little."""
        if buffers < 1 or chunks < 1 or chunk_bytes < 8:
            raise EngineError("rotating buffers need at least 1 buffer, 1 chunk and 8 bytes")
        copy = 10e-6 + chunk_bytes / 55e9
        consume = chunk_bytes / (9.5e9 if upload else 10e9)
        if buffers == 1:
            total = chunks * (copy + consume)
        else:
            total = max(chunks * copy, chunks * consume) * (1 + 0.05 / buffers)
            total += min(copy, consume)
        wait = max(0.0, total - chunks * consume)
        self.advance(total)
        return result(
            "RotationResult",
            total_s=total,
            copy_s=copy,
            consume_s=consume,
            wait_s=wait,
            mismatched_chunks=1 if self.corrupt else 0,
        )

    def overlap_gpu(self, device: int, bytes: int, streams: int, chunks: int, work: int) -> Any:
        """Stages as on an H200; K streams pipeline them, gaining less as chunks get small."""
        if bytes < 4 or bytes % 4 or streams < 1 or chunks < 1 or work < 0:
            raise EngineError("overlap needs a multiple of 4 bytes, 1+ stream, 1+ chunk")
        h2d, d2h = bytes / 55.4e9, bytes / 55.3e9
        # Reads and writes each float once (4 TB/s of HBM traffic) and does `work` FMAs on it
        # (2 flops each, about 60 TFLOP/s of fp32).
        kernel = max(2 * bytes / 4.0e12, (bytes / 4) * work * 2 / 60e12)
        sequential = h2d + kernel + d2h
        if streams == 1:
            pipelined = sequential
        else:
            slowest = max(h2d, kernel, d2h)
            pipelined = slowest + (sequential - slowest) / chunks + 20e-6 * chunks
        self.advance(2 * (sequential + pipelined))
        return result(
            "GpuOverlapResult",
            h2d_s=h2d,
            kernel_s=kernel,
            d2h_s=d2h,
            sequential_s=sequential,
            pipelined_s=pipelined,
            verified=not self.corrupt,
        )

    def staged_copier(
        self, device: int, threads: int = 0, chunk_bytes: int = 0, direct_below: int | None = None
    ) -> SimulatedCopier:
        interrupt.check()
        return SimulatedCopier(self, direct_below)
