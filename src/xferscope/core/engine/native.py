"""The native engine over the compiled module (xferscope._engine); the handles it opens, each
closed by close_native() whatever path left it open, are native_handles.py's. Translates the
module's exceptions into xferscope's one-line errors; every measuring call first looks whether a
stop was requested (interrupt.check)."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import Any

from .. import interrupt, libraries
from ..compiled import engine_module
from ..errors import (
    AllocationError,
    BlasError,
    CudaError,
    EngineError,
    GlError,
    GlUnavailableError,
    NcclError,
    NoDeviceError,
    XferscopeError,
)
from .devices import memory_refusal
from .native_handles import (
    _NativeBatch,
    _NativeCopier,
    _NativeDeviceBuffer,
    _NativeGemm,
    _NativeGl,
    _NativeMany,
    _NativePairComm,
    _NativePitched,
    _NativeTransfer,
)
from .placement import Placement
from .protocols import (
    Batch,
    ChaseResult,
    Copier,
    DeviceBuffer,
    Gemm,
    GlContext,
    GpuOverlapResult,
    ManyCopier,
    PairComm,
    PinningCosts,
    Pitched,
    RotationResult,
    Transfer,
)


class NativeEngine:
    """The C++/CUDA engine. Translates its exceptions into xferscope's one-line errors. Every
    measuring call first looks whether a stop was requested (interrupt.check)."""

    simulated = False
    classifies_natively = True  # copy_many: pointer kinds from the driver, remembered natively

    def __init__(self) -> None:
        self._engine = engine_module()
        # a GPU's properties do not change while the process runs; reading them (the driver's
        # every attribute) at each curve took 60 ms of an H100 `run --quick`
        self._info: dict[int, dict[str, Any]] = {}

    def _seed(self, seed: int | None) -> int:
        """The seed given, else the engine's default (cases.hpp; core.cases.DEFAULT_SEED)."""
        return int(self._engine.DEFAULT_SEED) if seed is None else seed

    @contextmanager
    def translated(self) -> Iterator[None]:
        """Around a call into the compiled module: its exceptions as xferscope's one-line
        errors (others go through unchanged)."""
        e = self._engine
        try:
            yield
        except e.NoDeviceError as exc:
            message = str(exc)
            if self._engine.driver_version() == 0 and "index" not in message:
                message = "no CUDA device: no NVIDIA driver is loaded on this machine"
            raise NoDeviceError(message) from None
        except e.AllocationError as exc:
            raise AllocationError(str(exc)) from None
        except e.CudaError as exc:
            message, name, code = exc.args
            raise CudaError(message, name, code) from None
        except e.UsageError as exc:
            raise EngineError(str(exc)) from None
        except e.GlUnavailable as exc:
            raise GlUnavailableError(str(exc)) from None
        except e.GlError as exc:
            raise GlError(str(exc)) from None
        except e.BlasError as exc:
            raise BlasError(str(exc)) from None
        except e.NcclError as exc:
            raise NcclError(str(exc)) from None

    @contextmanager
    def _measuring(self) -> Iterator[None]:
        """Around a call that measures or allocates: refused once a stop was requested."""
        interrupt.check()
        with self.translated():
            yield

    def device_count(self) -> int:
        with self.translated():
            return int(self._engine.device_count())

    def device_info(self, index: int) -> dict[str, Any]:
        if index not in self._info:
            with self.translated():
                self._info[index] = dict(self._engine.device_info(index))
        return dict(self._info[index])

    def memory_info(self, index: int) -> tuple[int, int]:
        with self.translated():
            free, total = self._engine.memory_info(index)
            return int(free), int(total)

    def runtime_version(self) -> int:
        return int(self._engine.runtime_version())

    def driver_version(self) -> int:
        return int(self._engine.driver_version())

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
    ) -> Transfer:
        from .. import cases  # loads the engine module: not before an engine is made

        below = (
            int(cases.LIMITS["staged_direct_below"])
            if staged_direct_below is None
            else staged_direct_below
        )
        if cases.refusal(direction, memory, mechanism, None, peer_access) is None:
            why = memory_refusal(self, device, memory)
            if why:
                raise EngineError(why)
        # placed before the buffers exist, so that they are allocated and touched on the node
        placed = None if numa_node < 0 else Placement(numa_node, self._engine.bind_memory)
        try:
            with self._measuring():
                handle = self._engine.Transfer(
                    device,
                    direction,
                    memory,
                    mechanism,
                    capacity,
                    rotation_bytes,
                    rotate,
                    peer,
                    peer_access,
                    host_offset=host_offset,
                    device_offset=device_offset,
                    staged_direct_below=below,
                )
        except BaseException:
            if placed is not None:
                placed.undo()
            raise
        return _NativeTransfer(handle, self, device, direction, None if peer < 0 else peer, placed)

    def time_concurrently(
        self, transfers: Sequence[Transfer], bytes: int, iterations: int
    ) -> tuple[list[float], bool]:
        handles = [t._handle for t in transfers]  # type: ignore[attr-defined]
        with self._measuring():
            seconds, timed_out = self._engine.time_concurrently(handles, bytes, iterations)
        return list(seconds), bool(timed_out)

    @contextmanager
    def keeping_buffers(self) -> Iterator[None]:
        """Buffers of 64 MiB or more released inside are kept for the next allocation of the same
        kind, GPU and size, and freed on leaving: `run`'s curves share their 1 GiB buffers."""
        engine_module().keep_buffers(True)
        try:
            yield
        finally:
            engine_module().keep_buffers(False)

    def measure_pinning(self, device: int, bytes: int) -> PinningCosts:
        with self._measuring():
            return self._engine.measure_pinning(device, bytes)  # type: ignore[no-any-return]

    def can_access_peer(self, device: int, peer: int) -> bool:
        with self.translated():
            return bool(self._engine.can_access_peer(device, peer))

    def rotate_buffers(
        self, device: int, upload: bool, buffers: int, chunk_bytes: int, chunks: int
    ) -> RotationResult:
        with self._measuring():
            return self._engine.rotate_buffers(device, upload, buffers, chunk_bytes, chunks)  # type: ignore[no-any-return]

    def overlap_gpu(
        self, device: int, bytes: int, streams: int, chunks: int, work: int
    ) -> GpuOverlapResult:
        with self._measuring():
            return self._engine.overlap_gpu(device, bytes, streams, chunks, work)  # type: ignore[no-any-return]

    def staged_copier(
        self, device: int, threads: int = 0, chunk_bytes: int = 0, direct_below: int | None = None
    ) -> Copier:
        """The engine's staged copier: .plan, .to_device(dst, src, n), .to_host(dst, src, n) on
        raw addresses, .close(). xferscope.transfer.staged wraps it for NumPy arrays. Copies
        under `direct_below` bytes are plain cudaMemcpy calls (None: the engine's default)."""
        from .. import cases  # loads the engine module: not before an engine is made

        below = int(cases.LIMITS["staged_direct_below"]) if direct_below is None else direct_below
        with self._measuring():
            return _NativeCopier(
                self._engine.StagedCopier(device, threads, chunk_bytes, 0.0, below), self
            )

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
    ) -> Gemm:
        """One GEMM through cuBLASLt, its inputs random on the GPU."""
        libraries.point_engine_at("cublasLt", BlasError)
        with self._measuring():
            handle = self._engine.Gemm(
                device,
                precision,
                m,
                n,
                k,
                trans_a,
                trans_b,
                alpha,
                beta,
                self._seed(seed),
                rotation_bytes,
                tune,
                rank,
            )
        return _NativeGemm(handle, self)

    def batch(
        self,
        device: int,
        direction: str,
        memory: str,
        sizes: list[int],
        scattered: bool = False,
        seed: int | None = None,
    ) -> Batch:
        """Buffers for a batch of copies (batch.hpp)."""
        self.device_info(device)  # a clear NoDeviceError for a bad index
        with self._measuring():
            handle = self._engine.Batch(
                device, direction, memory, list(sizes), scattered, self._seed(seed)
            )
        return _NativeBatch(handle, self)

    def nccl_unique_id(self) -> bytes:
        libraries.point_engine_at("nccl", NcclError)
        with self.translated():
            return bytes(self._engine.nccl_unique_id())

    def pair_comm(
        self, unique_id: bytes, ranks: int, rank: int, device: int, capacity: int
    ) -> PairComm:
        """Joins the fleet's NCCL communicator (pairs.hpp); every rank calls it together."""
        libraries.point_engine_at("nccl", NcclError)
        with self._measuring():
            handle = self._engine.PairComm(unique_id, ranks, rank, device, capacity)
        return _NativePairComm(handle, self)

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
    ) -> Pitched:
        """Buffers for a 2D copy (pitch.hpp)."""
        self.device_info(device)  # a clear NoDeviceError for a bad index
        with self._measuring():
            handle = self._engine.Pitched(
                device, direction, memory, width, rows, host_pitch, pitched, self._seed(seed)
            )
        return _NativePitched(handle, self)

    def many_copier(self, device: int) -> ManyCopier:
        """The copier of xferscope.copy_many for `device` (many.hpp)."""
        self.device_info(device)  # a clear NoDeviceError for a bad index
        with self._measuring():
            return _NativeMany(self._engine.ManyCopier(device), self)

    def device_buffer(self, device: int, bytes: int) -> DeviceBuffer:
        """`bytes` of device memory on `device` (cudaMalloc; at least one byte), freed by its
        close(): AllocationError where the GPU has not that much free."""
        self.device_info(device)
        with self._measuring():
            return _NativeDeviceBuffer(self._engine.DeviceBuffer(device, max(bytes, 1)), self)

    def classify_pointers(self, addresses: Any) -> tuple[Any, Any, Any]:
        """What memory each address lies in, as the driver sees it."""
        return self._engine.classify_pointers(addresses)  # type: ignore[no-any-return]

    def gl_context(self, device: int) -> GlContext:
        """An OpenGL context on the EGL device that is CUDA device `device`."""
        self.device_info(device)  # a clear NoDeviceError for a bad index
        with self._measuring():
            return _NativeGl(self._engine.GlContext(device), self)

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
    ) -> ChaseResult:
        """A pointer chase: one GPU thread's dependent reads of `memory` (chase.hpp)."""
        with self._measuring():
            return self._engine.chase(device, memory, bytes, stride, reads, trials, peer, seed)  # type: ignore[no-any-return]

    def blas_version(self) -> int:
        """cuBLASLt's version: the library found (libraries.py) and loaded, once."""
        libraries.point_engine_at("cublasLt", BlasError)
        with self.translated():
            return int(self._engine.cublaslt_version())

    def preload(self) -> None:
        """Loads cuBLASLt and the GL libraries (0.3-0.5 s each on an H100 host) before the checks
        that use them: side work while the GPU alone is timed (core/background.py). One that does
        not load is left to its check, which says why."""
        for load in (self.blas_version, self._engine.gl_preload):
            with suppress(XferscopeError, RuntimeError):
                load()

    def clock(self) -> float:
        return time.perf_counter()
