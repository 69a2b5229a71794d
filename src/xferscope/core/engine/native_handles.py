"""The handles the native engine opens (a transfer, the staged copier, a GEMM, a batch, a 2D
copy, an NCCL communicator, a GL context and its sessions), each with its errors translated by
the engine and closed by close_native() whatever path left it open."""

from __future__ import annotations

import weakref
from contextlib import AbstractContextManager
from typing import Any, Protocol

from .placement import Placement
from .protocols import (
    GemmVerification,
    GlSession,
    OverlapSample,
    StagedPlan,
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


class _Owner(Protocol):
    """What a handle asks of the engine that opened it (native.NativeEngine): the compiled
    module, and its guards that translate errors and refuse to measure after a stop."""

    _engine: Any

    def translated(self) -> AbstractContextManager[None]: ...

    def _measuring(self) -> AbstractContextManager[None]: ...


class _NativeHandle:
    """A native object with its errors translated, closed by close_native if left open: the
    one base of every handle the native engine opens."""

    _tracked = True  # closed by close_native (a GL session is closed with its context)

    def __init__(self, handle: Any, engine: _Owner) -> None:
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

    def __init__(self, handle: Any, engine: _Owner) -> None:
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
        engine: _Owner,
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

    def __init__(self, handle: Any, engine: _Owner) -> None:
        super().__init__(handle, engine)
        self.scenario = handle.scenario

    def verify(self) -> Any:
        return self._measure("verify")

    def run(self, frames: int, work_s: float = 0.0, log: bool = False) -> Any:
        return self._measure("run", frames, work_s, log)

    def close(self) -> None:
        with self._engine.translated():
            self._handle.close()


class _NativeGl(_NativeHandle):
    """The native GL context; its sessions are closed with it (close_native closes both)."""

    def __init__(self, handle: Any, engine: _Owner) -> None:
        super().__init__(handle, engine)
        self._sessions: list[_NativeGlSession] = []

    def info(self) -> dict[str, Any]:
        with self._engine.translated():
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

    def __init__(self, handle: Any, engine: _Owner) -> None:
        super().__init__(handle, engine)
        self.closed = False

    @property
    def native(self) -> Any:
        """The compiled copier, which copy_many's native path copies through without Python."""
        return self._handle

    def copy_resolved(self, method: str, batch: Any) -> str:
        """Copies a batch read by the native reader (xferscope._engine.resolve_pairs); the
        method that made it (the loop for a staged batch while the staged copier is made)."""
        try:  # no context manager on the way of every call: the errors translated alike
            return str(self._engine._engine.copy_resolved(self._handle, method, batch))
        except Exception:
            with self._engine.translated():
                raise

    def finish(self) -> None:
        """Returns once every copy this copier queued without waiting has landed."""
        with self._engine.translated():
            self._handle.finish()

    def pinned_bytes(self) -> int:
        """Pinned host memory this copier holds for later calls."""
        with self._engine.translated():
            return int(self._handle.pinned_bytes())

    def prepare_staged(self) -> None:
        """Makes the staged copy's threads and pinned chunks now, or waits for their making
        (begun by the first staged batch) to end."""
        with self._engine.translated():
            self._handle.prepare_staged()

    def read_to_device(
        self,
        fd: int,
        device_destination: int,
        file_offsets: Any,
        sizes: Any,
        offsets: Any,
        readers: int = 0,
    ) -> None:
        """Ranges of the open file `fd` to offsets of the device range, read with pread into
        the staged copy's pinned chunks (xferscope.load); ReadError (an OSError) as it is."""
        self._measure(
            "read_to_device", fd, device_destination, file_offsets, sizes, offsets, readers
        )

    @property
    def staged_prepared(self) -> bool:
        """Whether the staged copy's threads and chunks are made (its batches go staged)."""
        return bool(self._handle.staged_ready())

    def close(self) -> None:
        self.closed = True
        super().close()


class _NativeDeviceBuffer(_NativeHandle):
    """Device memory: its address for copies into it (DeviceBuffer)."""

    def __init__(self, handle: Any, engine: _Owner) -> None:
        super().__init__(handle, engine)
        self.bytes = int(handle.bytes)
        self._address = int(handle.address)

    def data_ptr(self) -> int:
        return self._address


class _NativeGemm(_NativeHandle):
    """A native GEMM."""

    def __init__(self, handle: Any, engine: _Owner) -> None:
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
