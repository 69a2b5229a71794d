"""A simulated engine: the native engine's protocol over a link model (latency + size /
bandwidth, with multiplicative noise), on a virtual clock so CI runs in milliseconds.

It accepts and refuses what the native engine does, with the same words, because both ask the
case table (cases.py); it returns the engine's own result classes; its rotation follows the
engine's limits. Nothing it produces is a measurement: every result built on it is marked
simulated.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np

from .. import cases, interrupt
from ..cases import DEFAULT_SEED
from ..compiled import engine_module, result
from ..errors import AllocationError, BlasError, EngineError, NoDeviceError
from .devices import memory_refusal
from .placement import numa_refusal
from .simulated_handles import (
    LAUNCH_FAILURE,
    SimulatedCopier,
    SimulatedPairComm,
    SimulatedTransfer,
)
from .simulated_link import _model

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
    "pageable_memory_access": False,  # x86 without HMM, as the lent machines
    "host_register_read_only": False,
    "managed_memory": True,
    "concurrent_managed_access": True,
}


_POINTER_KINDS: tuple[str, ...] = tuple(engine_module().POINTER_KINDS)
_PINNED = _POINTER_KINDS.index("pinned")


PACED_SLICE_S = 0.05  # the longest a paced call sleeps before it looks for a stop again


class SimulatedEngine:
    """`corrupt` makes every verification fail, as a broken copy path would; `interrupt_after`
    asks for a stop after that many engine calls, as Ctrl-C does (interrupt.request); the GPUs
    in `failing_devices` fail every transfer with a CUDA error, as a GPU fallen off the bus does.
    `pace` > 0 makes the engine take real time too, that share of the modelled time (tests
    interrupt a paced run at random moments; the CLI reads XFERSCOPE_SIMULATE_PACE). Like the
    native engine, every measuring call is refused once a stop was requested."""

    simulated = True
    classifies_natively = False  # copy_many asks classify_pointers (the memory map below)

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
        link_widths: dict[int, int] | None = None,
        confidential_computing: bool = False,
    ) -> None:
        self.rng = np.random.default_rng(seed)
        # lanes the simulated PCIe link trained to (of 16): host copies slow down in proportion;
        # `link_widths` sets it GPU by GPU (the others: link_width)
        self.link_width = link_width
        self.link_widths = dict(link_widths or {})
        # a confidential computing system: host copies go through encrypted bounce buffers
        self.confidential_computing = confidential_computing
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

    def now(self) -> float:
        """The virtual clock: the modelled seconds passed."""
        return self._now

    def advance(self, seconds: float) -> None:
        """Every measuring call ends here: the modelled time passes (and, paced, real time)."""
        interrupt.check()
        self._now += seconds + 5e-6  # each call costs a little host time
        self._trials += 1
        if self.pace > 0:
            if self._paced_from is None:
                self._paced_from = (time.perf_counter(), self._now)
            real, modelled = self._paced_from
            until = real + (self._now - modelled) * self.pace
            # sleeping less than 1 ms costs more than it keeps; in slices, so that a stop asked
            # meanwhile (Ctrl-C, or mpirun's SIGTERM, a second before its SIGKILL) is heard
            while (behind := until - time.perf_counter()) > 1e-3 and not interrupt.requested():
                time.sleep(min(behind, PACED_SLICE_S))
            interrupt.check()
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
        rank: int = -1,
    ) -> Any:
        """The simulated GEMM (simulated_gemm.py)."""
        from .simulated_gemm import simulated_gemm

        self._launch(device)
        return simulated_gemm(
            self, device, precision, m, n, k, trans_a, trans_b, rotation_bytes, tune, rank
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

    def device_buffer(self, device: int, bytes: int) -> Any:
        """Device memory that holds nothing (simulated_handles.SimulatedDeviceBuffer):
        AllocationError past the simulated GPU's free memory, as cudaMalloc's."""
        from .simulated_handles import SimulatedDeviceBuffer

        self._gpu(device)
        free, _ = self.memory_info(device)
        if bytes > free:
            raise AllocationError(f"cudaMalloc of {bytes} B on GPU {device}: out of memory")
        buffer = SimulatedDeviceBuffer(bytes)
        self.register_memory(buffer.data_ptr(), buffer.bytes, "device", device)
        return buffer

    def register_memory(self, address: int, size: int, kind: str, device: int = -1) -> None:
        """Tells classify_pointers that [address, address + size) is memory of `kind` (one of
        the engine's POINTER_KINDS: pinned, device, managed; the rest is pageable), as the
        driver would know it."""
        self.memory_ranges.append((address, size, _POINTER_KINDS.index(kind), device))

    def classify_pointers(self, addresses: Any) -> tuple[Any, Any, Any]:
        addresses = np.asarray(addresses, dtype=np.uint64)
        kind = np.zeros(len(addresses), dtype=np.int8)
        device = np.full(len(addresses), -1, dtype=np.int32)
        mapped = np.zeros(len(addresses), dtype=np.uint64)
        for start, size, k, d in self.memory_ranges:
            inside = (addresses >= start) & (addresses < start + size)
            kind[inside], device[inside] = k, d
            if k == _PINNED:
                mapped[inside] = addresses[inside]  # unified addressing: the same address
        return kind, device, mapped

    def gl_context(self, device: int) -> Any:
        """The simulated GL (simulated_gl.py)."""
        from .simulated_gl import SimulatedGl

        self._gpu(device)
        return SimulatedGl(self, device)

    def chase(
        self,
        device: int,
        memory: str,
        bytes: int,
        stride: int,
        reads: int,
        trials: int,
        peer: int = -1,
        seed: int = 42,
    ) -> Any:
        """A pointer chase modelled on an H100's (benchmarks/pointer_chase.cu, 256 MiB by 4 KiB
        strides): 140 ns a read of device memory, 1230 ns of host memory over PCIe 5; another
        GPU's memory over NVLink, never measured on a lent machine, as 700 ns. Caches are not
        modelled. The engine's rules refuse what it refuses."""
        self._launch(device)
        remote = 0 <= peer != device
        if remote:
            self._gpu(peer)
        try:
            why = engine_module().chase_refusal(memory, remote, bytes, stride, reads, trials)
        except ValueError as exc:  # an unknown kind: the engine's UsageError, as native.py's
            raise EngineError(str(exc)) from None
        if why:
            raise EngineError(why)
        each_s = (700e-9 if remote else 140e-9) if memory == "device" else 1230e-9
        slots = bytes // stride
        if reads <= 0:
            limits = engine_module().CHASE_LIMITS
            reads = int(limits["trial_s"] / each_s)
            reads = min(max(reads, limits["least_reads"]), limits["most_reads"])
        ns = [each_s * 1e9 * float(self.rng.lognormal(0.0, self.noise)) for _ in range(trials)]
        self.advance(each_s * reads * (trials + 1))
        return result("ChaseResult", ns_per_read=ns, reads=reads, slots=slots, verified=True)

    def blas_version(self) -> int:
        raise BlasError("the simulated engine runs its GEMMs without cuBLASLt")

    def preload(self) -> None:
        """The model loads no library."""

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
        if self.width_of(index) != 16:
            info["pcie_width"] = self.width_of(index)
        return info

    def width_of(self, index: int) -> int:
        """The lanes GPU `index`'s simulated link trained to."""
        return self.link_widths.get(index, self.link_width)

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
        numa_node: int = -1,
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
        why = memory_refusal(self, device, memory) or numa_refusal(numa_node)
        if why:
            raise EngineError(why)
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
            numa_node,
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

    @contextmanager
    def translated(self) -> Iterator[None]:
        """The model raises xferscope's errors itself: nothing to translate."""
        yield

    @contextmanager
    def keeping_buffers(self) -> Iterator[None]:
        """The native engine keeps large buffers for reuse inside; the model allocates none."""
        yield

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
