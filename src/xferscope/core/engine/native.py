"""The native engine over the compiled module (xferscope._engine): every handle it opens, each
closed by close_native() whatever path left it open. Translates the module's exceptions into
xferscope's one-line errors; every measuring call first looks whether a stop was requested
(interrupt.check)."""

from __future__ import annotations

import time
import weakref
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
from .placement import Placement
from .protocols import (
    Batch,
    ChaseResult,
    Copier,
    Gemm,
    GemmVerification,
    GlContext,
    GlSession,
    GpuOverlapResult,
    ManyCopier,
    OverlapSample,
    PairComm,
    PinningCosts,
    Pitched,
    RotationResult,
    StagedPlan,
    Transfer,
    TrialTiming,
    Verification,
)

# Every native transfer and copier not yet closed. close_native() closes them, so their buffers
# are freed and the staged copier's threads joined before the interpreter finalizes, whatever
# path (Ctrl-C, an error) left one open.
_open_handles: weakref.WeakSet[_NativeHandle] = weakref.WeakSet()


def close_native() -> None:
    """Closes every native transfer and copier still open (the CLI calls it before exiting)."""
    for handle in list(_open_handles):
        handle.close()


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
    def _translated(self) -> Iterator[None]:
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
        with self._translated():
            yield

    def device_count(self) -> int:
        with self._translated():
            return int(self._engine.device_count())

    def device_info(self, index: int) -> dict[str, Any]:
        if index not in self._info:
            with self._translated():
                self._info[index] = dict(self._engine.device_info(index))
        return dict(self._info[index])

    def memory_info(self, index: int) -> tuple[int, int]:
        with self._translated():
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
        with self._translated():
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
        raw addresses, .close(). xferscope.pageable.staged wraps it for NumPy arrays. Copies
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
        with self._translated():
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
        with self._translated():
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


class _NativeHandle:
    """A native object with its errors translated, closed by close_native if left open: the
    one base of every handle the native engine opens."""

    _tracked = True  # closed by close_native (a GL session is closed with its context)

    def __init__(self, handle: Any, engine: NativeEngine) -> None:
        self._handle = handle
        self._engine = engine
        if self._tracked:
            _open_handles.add(self)

    def _measure(self, method: str, *args: Any) -> Any:
        """The handle's `method`, refused after a stop, its errors translated."""
        with self._engine._measuring():
            return getattr(self._handle, method)(*args)

    def close(self) -> None:
        self._handle.close()
        _open_handles.discard(self)


class _NativeCopier(_NativeHandle):
    """The native staged copier."""

    def __init__(self, handle: Any, engine: NativeEngine) -> None:
        super().__init__(handle, engine)
        self.plan: StagedPlan = handle.plan

    def to_device(self, device_destination: int, host_source: int, bytes: int) -> None:
        self._measure("to_device", device_destination, host_source, bytes)

    def to_host(self, host_destination: int, device_source: int, bytes: int) -> None:
        self._measure("to_host", host_destination, device_source, bytes)


class _NativeTransfer(_NativeHandle):
    def __init__(
        self,
        handle: Any,
        engine: NativeEngine,
        device: int,
        direction: str,
        peer: int | None,
        placed: Placement | None = None,
    ) -> None:
        super().__init__(handle, engine)
        self.device = device
        self.direction = direction
        self.peer = peer
        self.copies_per_iteration = int(handle.copies_per_iteration)
        self.blocks_for_device_timing = bool(handle.blocks_for_device_timing)
        self._placed = placed

    def host_node(self) -> int:
        return int(self._handle.host_node())

    def close(self) -> None:
        try:
            super().close()
        finally:
            if self._placed is not None:
                self._placed.undo()

    def fill(self, seed: int) -> None:
        self._measure("fill", seed)

    def time(self, timing: str, bytes: int, iterations: int) -> TrialTiming:
        return self._measure("time", timing, bytes, iterations)  # type: ignore[no-any-return]

    def verify(self, bytes: int, inject_fault: bool = False) -> Verification:
        return self._measure("verify", bytes, inject_fault)  # type: ignore[no-any-return]

    def overlap_cpu(self, bytes: int, work_s: float) -> OverlapSample:
        return self._measure("overlap_cpu", bytes, work_s)  # type: ignore[no-any-return]

    def inject_copy_failure(self) -> None:
        self._handle.inject_copy_failure()

    @property
    def staged_plan(self) -> StagedPlan | None:
        return self._handle.staged_plan  # type: ignore[no-any-return]


class _NativeGlSession(_NativeHandle):
    _tracked = False

    def __init__(self, handle: Any, engine: NativeEngine) -> None:
        super().__init__(handle, engine)
        self.scenario = handle.scenario

    def verify(self) -> Any:
        return self._measure("verify")

    def run(self, frames: int, work_s: float = 0.0, log: bool = False) -> Any:
        return self._measure("run", frames, work_s, log)

    def close(self) -> None:
        with self._engine._translated():
            self._handle.close()


class _NativeGl(_NativeHandle):
    """The native GL context; its sessions are closed with it (close_native closes both)."""

    def __init__(self, handle: Any, engine: NativeEngine) -> None:
        super().__init__(handle, engine)
        self._sessions: list[_NativeGlSession] = []

    def info(self) -> dict[str, Any]:
        with self._engine._translated():
            return dict(self._handle.info())

    def session(self, scenario: Any) -> GlSession:
        with self._engine._measuring():
            s = _NativeGlSession(
                self._engine._engine.GlSession(self._handle, scenario), self._engine
            )
        self._sessions.append(s)
        return s

    def close(self) -> None:
        for s in self._sessions:
            s.close()
        self._sessions = []
        super().close()


class _NativeBatch(_NativeHandle):
    """A native batch (batch.hpp)."""

    @property
    def bytes(self) -> int:
        return int(self._handle.bytes)

    def time(self, method: str, iterations: int, as_copy_many: bool = False) -> tuple[float, float]:
        host, device = self._measure("time", method, iterations, as_copy_many)
        return float(host), float(device)

    def verify(self, method: str, as_copy_many: bool = False) -> int:
        return int(self._measure("verify", method, as_copy_many))


class _NativePairComm(_NativeHandle):
    """A native NCCL communicator (pairs.hpp)."""

    def stream(self, source: int, destination: int, bytes: int, iterations: int) -> float:
        return float(self._measure("stream", source, destination, bytes, iterations))

    def ping_pong(self, a: int, b: int, bytes: int, iterations: int) -> float:
        return float(self._measure("ping_pong", a, b, bytes, iterations))

    def mismatches(self, bytes: int) -> int:
        return int(self._measure("mismatches", bytes))


class _NativePitched(_NativeHandle):
    """A native 2D copy (pitch.hpp)."""

    @property
    def bytes(self) -> int:
        return int(self._handle.bytes)

    @property
    def device_pitch(self) -> int:
        return int(self._handle.device_pitch)

    @property
    def depth(self) -> int:
        return int(self._handle.depth)

    def time(self, method: str, iterations: int) -> tuple[float, float]:
        host, device = self._measure("time", method, iterations)
        return float(host), float(device)

    def verify(self, method: str) -> tuple[int, int]:
        v = self._measure("verify", method)
        return int(v.wrong_rows), int(v.gap_bytes)


class _NativeMany(_NativeHandle):
    """The native copier of copy_many."""

    def __init__(self, handle: Any, engine: NativeEngine) -> None:
        super().__init__(handle, engine)
        self.closed = False

    def copy(
        self,
        method: str,
        upload: bool,
        destinations: Any,
        sources: Any,
        sizes: Any,
        pinned: bool,
        mapped: Any = None,
    ) -> None:
        with self._engine._translated():  # the caller's data: copied even while stopping
            self._handle.copy(method, upload, destinations, sources, sizes, pinned, mapped)

    def copy_resolved(self, method: str, batch: Any) -> None:
        """Copies a batch read by the native reader (xferscope._engine.resolve_pairs)."""
        try:  # no context manager on the way of every call: the errors translated alike
            self._engine._engine.copy_resolved(self._handle, method, batch)
        except Exception:
            with self._engine._translated():
                raise

    def close(self) -> None:
        self.closed = True
        super().close()


class _NativeGemm(_NativeHandle):
    """A native GEMM."""

    def __init__(self, handle: Any, engine: NativeEngine) -> None:
        super().__init__(handle, engine)
        self.algorithm: dict[str, Any] = dict(handle.algorithm)
        self.copies = int(handle.copies)
        self.footprint_bytes = int(handle.footprint_bytes)

    def time(self, iterations: int) -> float:
        return float(self._measure("time", iterations))

    def verify(self, samples: int = 256, inject_fault: bool = False) -> GemmVerification:
        return self._measure("verify", samples, inject_fault)  # type: ignore[no-any-return]

    def time_with_transfers(
        self, pinned: bool, tiles: int, streams: int, iterations: int, check_delivery: bool = True
    ) -> tuple[float, bool]:
        seconds, delivered = self._measure(
            "time_with_transfers", pinned, tiles, streams, iterations, check_delivery
        )
        return float(seconds), bool(delivered)

    def time_padded(self, m: int, n: int, k: int, iterations: int) -> float:
        return float(self._measure("time_padded", m, n, k, iterations))
