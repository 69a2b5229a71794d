"""The engine protocol every command drives: the engine, its handles and the result classes
the compiled module defines (read-only), which both engines return. A unit test holds the
protocols to the classes."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol

# The result classes of the engine (xferscope._engine), read-only, made by both engines. The
# protocols below give their fields to the type checker; a unit test holds them to the classes.


__all__ = [
    "RESULT_CLASSES",
    "Batch",
    "ChaseResult",
    "Copier",
    "Engine",
    "Gemm",
    "GemmVerification",
    "GlContext",
    "GlSession",
    "GpuOverlapResult",
    "ManyCopier",
    "OverlapSample",
    "PairComm",
    "PinningCosts",
    "Pitched",
    "RotationResult",
    "StagedPlan",
    "Transfer",
    "TrialTiming",
    "Verification",
]


class TrialTiming(Protocol):
    @property
    def seconds(self) -> float: ...  # all iterations together
    @property
    def iterations(self) -> int: ...
    @property
    def copies_per_iteration(self) -> int: ...
    @property
    def blocking_kernel(self) -> bool: ...  # held behind the blocking kernel
    @property
    def blocking_timed_out(self) -> bool: ...  # the kernel gave up: the figure is suspect
    @property
    def footprint_bytes(self) -> int: ...  # distinct bytes the copies touched in one buffer


class Verification(Protocol):
    @property
    def ok(self) -> bool: ...
    @property
    def bytes_checked(self) -> int: ...
    @property
    def mismatched_bytes(self) -> int: ...
    @property
    def first_mismatch(self) -> int: ...  # byte offset, -1 when none


class OverlapSample(Protocol):
    @property
    def issue_s(self) -> float: ...  # blocked in the issuing call
    @property
    def work_s(self) -> float: ...  # CPU work done meanwhile
    @property
    def wait_s(self) -> float: ...  # blocked waiting after the work
    @property
    def total_s(self) -> float: ...


class RotationResult(Protocol):
    @property
    def total_s(self) -> float: ...
    @property
    def copy_s(self) -> float: ...
    @property
    def consume_s(self) -> float: ...
    @property
    def wait_s(self) -> float: ...
    @property
    def mismatched_chunks(self) -> int: ...


class GpuOverlapResult(Protocol):
    @property
    def h2d_s(self) -> float: ...
    @property
    def kernel_s(self) -> float: ...
    @property
    def d2h_s(self) -> float: ...
    @property
    def sequential_s(self) -> float: ...
    @property
    def pipelined_s(self) -> float: ...
    @property
    def verified(self) -> bool: ...


class ChaseResult(Protocol):
    @property
    def ns_per_read(self) -> list[float]: ...  # one per trial
    @property
    def reads(self) -> int: ...  # dependent reads a trial
    @property
    def slots(self) -> int: ...  # places the chain visits
    @property
    def verified(self) -> bool: ...  # every trial ended where the chain predicts


class PinningCosts(Protocol):
    @property
    def host_alloc_s(self) -> float: ...
    @property
    def host_free_s(self) -> float: ...
    @property
    def register_s(self) -> float: ...
    @property
    def unregister_s(self) -> float: ...
    @property
    def pageable_copy_s(self) -> float: ...
    @property
    def pinned_copy_s(self) -> float: ...
    @property
    def registered_copy_s(self) -> float: ...
    @property
    def host_copy_s(self) -> float: ...


class StagedPlan(Protocol):
    @property
    def threads(self) -> int: ...
    @property
    def chunk_bytes(self) -> int: ...
    @property
    def buffers_per_thread(self) -> int: ...
    @property
    def direct_below(self) -> int: ...
    @property
    def single_thread_copy_bps(self) -> float: ...
    @property
    def target_bps(self) -> float: ...
    @property
    def explanation(self) -> str: ...


RESULT_CLASSES = (
    "TrialTiming",
    "Verification",
    "OverlapSample",
    "RotationResult",
    "GpuOverlapResult",
    "PinningCosts",
    "StagedPlan",
    "ChaseResult",
)


class Transfer(Protocol):
    device: int
    direction: str
    peer: int | None  # the other GPU of a p2p transfer
    copies_per_iteration: int
    blocks_for_device_timing: bool

    def fill(self, seed: int) -> None: ...
    def time(self, timing: str, bytes: int, iterations: int) -> TrialTiming: ...
    def overlap_cpu(self, bytes: int, work_s: float) -> OverlapSample: ...
    @property
    def staged_plan(self) -> StagedPlan | None: ...
    def host_node(self) -> int: ...  # the NUMA node of the host pages, -1 unknown or none
    def verify(self, bytes: int, inject_fault: bool = False) -> Verification: ...
    def inject_copy_failure(self) -> None: ...
    def close(self) -> None: ...


class Copier(Protocol):
    plan: StagedPlan

    def to_device(self, device_destination: int, host_source: int, bytes: int) -> None: ...
    def to_host(self, host_destination: int, device_source: int, bytes: int) -> None: ...
    def close(self) -> None: ...


class GlSession(Protocol):
    """One GL scenario's objects (gl.hpp's Session): verify a test frame, run frames."""

    @property
    def scenario(self) -> Any: ...  # the engine's GlScenario, normalised
    def verify(self) -> Any: ...  # GlVerification
    def run(self, frames: int, work_s: float = 0.0, log: bool = False) -> Any: ...  # GlRunTiming
    def close(self) -> None: ...


class GlContext(Protocol):
    """An OpenGL context on the GPU's EGL device."""

    def info(self) -> dict[str, Any]: ...
    def session(self, scenario: Any) -> GlSession: ...
    def close(self) -> None: ...


class GemmVerification(Protocol):
    @property
    def ok(self) -> bool: ...
    @property
    def samples(self) -> int: ...
    @property
    def failures(self) -> int: ...
    @property
    def worst_error(self) -> float: ...  # |C - reference| / sum |a b|, the largest sampled
    @property
    def worst_row(self) -> int: ...
    @property
    def worst_column(self) -> int: ...


class Gemm(Protocol):
    """One GEMM's matrices and algorithm on a GPU (gemm.hpp)."""

    @property
    def algorithm(self) -> dict[str, Any]: ...
    @property
    def copies(self) -> int: ...
    @property
    def footprint_bytes(self) -> int: ...
    def time(self, iterations: int) -> float: ...
    def verify(self, samples: int = 256, inject_fault: bool = False) -> GemmVerification: ...
    def time_with_transfers(
        self, pinned: bool, tiles: int, streams: int, iterations: int, check_delivery: bool = True
    ) -> tuple[float, bool]: ...  # seconds, whether C arrived whole (when checked)
    def time_padded(self, m: int, n: int, k: int, iterations: int) -> float: ...
    def close(self) -> None: ...


class Batch(Protocol):
    """N copies between host memory and a GPU, made by one of several methods (batch.hpp)."""

    @property
    def bytes(self) -> int: ...
    # host, device s per batch; as_copy_many: made as xferscope.copy_many makes it
    def time(
        self, method: str, iterations: int, as_copy_many: bool = False
    ) -> tuple[float, float]: ...
    def verify(self, method: str, as_copy_many: bool = False) -> int: ...  # copies wrong
    def close(self) -> None: ...


class Pitched(Protocol):
    """Rows of bytes between host and device memory, by one of several methods (pitch.hpp)."""

    @property
    def bytes(self) -> int: ...
    @property
    def device_pitch(self) -> int: ...
    @property
    def depth(self) -> int: ...  # 3d: slices
    def time(self, method: str, iterations: int) -> tuple[float, float]: ...  # host, device s
    def verify(self, method: str) -> tuple[int, int]: ...  # wrong rows, overwritten gap bytes
    def close(self) -> None: ...


class PairComm(Protocol):
    """An NCCL communicator over a fleet's ranks (pairs.hpp)."""

    def stream(self, source: int, destination: int, bytes: int, iterations: int) -> float: ...
    def ping_pong(self, a: int, b: int, bytes: int, iterations: int) -> float: ...
    def mismatches(self, bytes: int) -> int: ...
    def close(self) -> None: ...


class DeviceBuffer(Protocol):
    """Device memory on one GPU (cudaMalloc), freed by close(); `data_ptr()` is its address,
    as torch.Tensor.data_ptr() is a tensor's."""

    @property
    def bytes(self) -> int: ...
    def data_ptr(self) -> int: ...
    def close(self) -> None: ...


class ManyCopier(Protocol):
    """Copies many of the caller's buffers at once (many.hpp)."""

    closed: bool  # by close(), or by the engine closing its handles (the CLI does at its end)

    # the compiled copier (xferscope._engine.ManyCopier) that copy_many copies through without
    # Python, or None: copy_many calls copy_resolved
    @property
    def native(self) -> Any: ...

    # a batch read and checked by xferscope._engine.resolve_pairs / resolve_addresses; the
    # method that made it (a staged batch goes by the loop while the staged copier is made)
    def copy_resolved(self, method: str, batch: Any) -> str: ...
    # returns once every copy queued without waiting (copy_many's queue) has landed
    def finish(self) -> None: ...
    # the staged copy's threads and chunks made now, or their making waited for
    def prepare_staged(self) -> None: ...
    # ranges of an open file to offsets of a device range, through the staged copy's chunks
    def read_to_device(
        self,
        fd: int,
        device_destination: int,
        file_offsets: Any,
        sizes: Any,
        offsets: Any,
        readers: int = 0,
    ) -> None: ...
    @property
    def staged_prepared(self) -> bool: ...
    def pinned_bytes(self) -> int: ...
    def close(self) -> None: ...


class Engine(Protocol):
    simulated: bool
    # copy_many: the driver tells each pointer's memory, remembered natively per live object
    # (else copy_many asks classify_pointers)
    classifies_natively: bool

    # around a call into the engine: its own exceptions as xferscope's errors
    def translated(self) -> AbstractContextManager[None]: ...

    def device_count(self) -> int: ...
    def device_info(self, index: int) -> dict[str, Any]: ...
    def memory_info(self, index: int) -> tuple[int, int]: ...
    def runtime_version(self) -> int: ...
    def driver_version(self) -> int: ...
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
        staged_direct_below: int | None = None,  # None: the engine's default
        numa_node: int = -1,  # host memory and the calling thread on this node (placement.py)
    ) -> Transfer: ...
    def time_concurrently(
        self, transfers: Sequence[Transfer], bytes: int, iterations: int
    ) -> tuple[list[float], bool]: ...
    def keeping_buffers(self) -> AbstractContextManager[None]: ...
    def measure_pinning(self, device: int, bytes: int) -> PinningCosts: ...
    def can_access_peer(self, device: int, peer: int) -> bool: ...
    def rotate_buffers(
        self, device: int, upload: bool, buffers: int, chunk_bytes: int, chunks: int
    ) -> RotationResult: ...
    def overlap_gpu(
        self, device: int, bytes: int, streams: int, chunks: int, work: int
    ) -> GpuOverlapResult: ...
    def staged_copier(
        self, device: int, threads: int = 0, chunk_bytes: int = 0, direct_below: int | None = None
    ) -> Copier: ...
    def gl_context(self, device: int) -> GlContext: ...
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
    ) -> ChaseResult: ...  # reads 0: chosen for a trial of about 20 ms (chase.hpp)
    def blas_version(self) -> int: ...  # cuBLASLt's; BlasError where none loads
    def preload(self) -> None: ...  # the GEMM and GL checks' libraries, ahead of them
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
        tune: int = 0,  # time this many of the heuristic's algorithms and keep the fastest
        rank: int = -1,  # the heuristic's algorithm of this rank, untimed, where it runs
    ) -> Gemm: ...
    def batch(
        self,
        device: int,
        direction: str,
        memory: str,
        sizes: list[int],
        scattered: bool = False,
        seed: int | None = None,
    ) -> Batch: ...
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
    ) -> Pitched: ...
    def many_copier(self, device: int) -> ManyCopier: ...
    def device_buffer(self, device: int, bytes: int) -> DeviceBuffer: ...
    def nccl_unique_id(self) -> bytes: ...
    def pair_comm(
        self, unique_id: bytes, ranks: int, rank: int, device: int, capacity: int
    ) -> PairComm: ...
    # (kind, device, mapped) per address: 0 pageable, 1 pinned, 2 device, 3 managed
    def classify_pointers(self, addresses: Any) -> tuple[Any, Any, Any]: ...
    def clock(self) -> float: ...
