"""Staged copies of pageable memory, as a library: a pool of pinned buffers and host threads
that copy chunks in and out of them while the copy engines move the chunks before, so host
memcpy and DMA overlap and several cores share the memcpy. On an H200 this moved a pageable
1 GiB buffer at 52 GB/s to the GPU and about 49 GB/s back, where cudaMemcpy of the same buffer
managed 10.3 and 19.3 GB/s.

    import numpy as np, torch
    from xferscope import StagedCopier

    host = np.random.rand(1 << 27)                      # ordinary (pageable) memory
    gpu = torch.empty(1 << 27, dtype=torch.float64, device="cuda")
    with StagedCopier(device=0) as copier:
        print(copier.explain())
        copier.to_device(gpu, host)                     # or gpu.data_ptr() and nbytes
        copier.to_host(host, gpu)

`copy_to_device` and `copy_to_host` copy one buffer as `xferscope.copy_many` copies one piece
(its reader takes PyTorch and CuPy tensors too): one cudaMemcpyAsync, as `tensor.copy_()` makes
it, or the staged copy of copy_many's copier for pageable memory from rule.staged_from (4 MiB
down, 8 MiB up).

The host side is a NumPy array, any object with the buffer protocol (bytes, bytearray,
memoryview, array.array, ...) or a raw address with `nbytes`; it must be C-contiguous, and
writable when it receives data. The device side is a raw device address (torch's
`t.data_ptr()`, CuPy's `a.data.ptr`) or an object with `__cuda_array_interface__` (torch CUDA
tensors, CuPy and Numba arrays). Calls return once every byte has arrived. The copier's own
CUDA streams do not wait for work queued on other streams: if a kernel or copy queued by PyTorch
or CuPy still writes or reads the device buffer, synchronize first (torch.cuda.synchronize()).

The native engine is loaded by the first copier made, not when this module is imported, so
importing it needs no GPU or driver.
"""

from __future__ import annotations

import math
import numbers
import operator
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core.closing import Closing
from ..core.engine import Engine
from ..core.engine.devices import missing_device
from ..core.errors import EngineError, NoDeviceError, XferscopeError
from ..core.units import format_bytes, format_rate
from .engine import default_engine

__all__ = ["StagedCopier", "StagedPlan", "copy_to_device", "copy_to_host"]


@dataclass(frozen=True, slots=True)
class StagedPlan:
    """What a copier chose and why: `threads` host threads, each with `buffers_per_thread`
    pinned buffers of `chunk_bytes`, sized so that together they feed `target_bps`, given that
    one thread alone copies `single_thread_copy_bps` on this host; copies under
    `direct_below` bytes are one plain cudaMemcpy instead (0: none)."""

    threads: int
    chunk_bytes: int
    buffers_per_thread: int
    single_thread_copy_bps: float
    target_bps: float
    explanation: str
    direct_below: int = 0

    @property
    def staging_bytes(self) -> int:
        """Pinned memory the copier holds."""
        return self.threads * self.buffers_per_thread * self.chunk_bytes

    @classmethod
    def of(cls, plan: Any) -> StagedPlan:
        """The plan of the engine's StagedPlan (a read-only class of xferscope._engine)."""
        return cls(
            threads=int(plan.threads),
            chunk_bytes=int(plan.chunk_bytes),
            buffers_per_thread=int(plan.buffers_per_thread),
            single_thread_copy_bps=float(plan.single_thread_copy_bps),
            target_bps=float(plan.target_bps),
            explanation=str(plan.explanation),
            direct_below=int(plan.direct_below),
        )

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> StagedPlan:
        """A plan as to_dict writes it; one recorded before direct_below existed has none (0)."""
        from ..documents.reader import Field  # the documents' modules: not for a copy
        from ..documents.records import from_plain

        return from_plain(cls, Field(d))

    def to_dict(self) -> dict[str, Any]:
        from ..documents.records import to_plain

        return to_plain(self)

    def summary(self) -> str:
        """One line: '8 threads, 4 MiB chunks, 2 buffers per thread (64 MiB pinned)'."""
        return (
            f"{self.threads} threads, {format_bytes(self.chunk_bytes)} chunks, "
            f"{self.buffers_per_thread} buffers per thread "
            f"({format_bytes(self.staging_bytes)} pinned)"
        )


# ---- resolving the caller's buffers to addresses ----------------------------------------------


def _count(name: str, value: object) -> int:
    """An integer (int or NumPy integer, never bool), else TypeError."""
    if isinstance(value, bool):
        raise TypeError(f"{name} must be an integer, not bool")
    try:
        return operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise TypeError(f"{name} must be an integer, not {type(value).__name__}") from None


def _is_integer(value: object) -> bool:
    """int or a NumPy integer; not bool, and not an array that happens to have __index__."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


@dataclass(frozen=True, slots=True)
class _Region:
    """An address and how many bytes lie behind it (None: unknown, a raw address). `keep` holds
    the object that owns the memory for as long as the copy runs."""

    address: int
    nbytes: int | None
    keep: object = None


def _host_region(host: object, role: str, writable: bool) -> _Region:
    if _is_integer(host):
        address = _count(role, host)
        if address < 0:
            raise ValueError(f"{role} address {address} is negative")
        return _Region(address, None)
    if isinstance(host, np.ndarray):
        array = host
    elif hasattr(host, "__array_interface__"):
        array = np.asarray(host)  # a view of the same memory, not a copy
    else:
        try:
            view = memoryview(host)  # type: ignore[arg-type]
        except TypeError:
            raise TypeError(
                f"{role} must be a NumPy array, an object with the buffer protocol (bytearray, "
                f"memoryview, ...) or an integer address with nbytes, not {type(host).__name__}"
            ) from None
        if not view.c_contiguous:
            raise ValueError(
                f"{role} is not C-contiguous: a staged copy moves one contiguous range of "
                "bytes; copy it into a contiguous buffer first"
            )
        if writable and view.readonly:
            raise ValueError(
                f"{role} is read-only ({type(host).__name__}), so it cannot receive data; "
                "pass a writable buffer such as a bytearray or a NumPy array"
            )
        if view.nbytes == 0:
            return _Region(0, 0, view)
        array = np.frombuffer(view, dtype=np.uint8)
    if not array.flags.c_contiguous:
        raise ValueError(
            f"{role} is not C-contiguous (shape {array.shape}, strides {array.strides}): a staged "
            "copy moves one contiguous range of bytes; pass np.ascontiguousarray(...) or a "
            "contiguous slice"
        )
    if writable and not array.flags.writeable:
        raise ValueError(f"{role} is a read-only array, so it cannot receive data")
    return _Region(int(array.ctypes.data), int(array.nbytes), array)


def _cuda_array_region(obj: Any, role: str, writable: bool) -> _Region:
    interface = obj.__cuda_array_interface__
    try:
        address, read_only = interface["data"]
        shape = tuple(int(n) for n in interface["shape"])
        itemsize = np.dtype(interface["typestr"]).itemsize
    except (KeyError, TypeError, ValueError) as exc:
        raise TypeError(f"{role} has a malformed __cuda_array_interface__: {exc}") from None
    strides = interface.get("strides")
    if strides is not None:
        expected, step = [], itemsize
        for n in reversed(shape):
            expected.append(step)
            step *= n
        contiguous = tuple(strides) == tuple(reversed(expected))
        if not contiguous and math.prod(shape) > 1:
            raise ValueError(
                f"{role} is not C-contiguous (shape {shape}, strides {tuple(strides)}): a staged "
                "copy moves one contiguous range of bytes; make it contiguous first"
            )
    if writable and read_only:
        raise ValueError(f"{role} is read-only, so it cannot receive data")
    return _Region(int(address or 0), math.prod(shape) * itemsize, obj)


def _device_region(device: object, role: str, writable: bool) -> _Region:
    if _is_integer(device):
        address = _count(role, device)
        if address < 0:
            raise ValueError(f"{role} address {address} is negative")
        return _Region(address, None)
    if hasattr(device, "__cuda_array_interface__"):
        return _cuda_array_region(device, role, writable)
    raise TypeError(
        f"{role} must be an integer device address (torch: t.data_ptr(), CuPy: a.data.ptr) or "
        f"an object with __cuda_array_interface__, not {type(device).__name__}"
    )


def _size(nbytes: object, host: _Region, device: _Region) -> int:
    """The bytes to copy: `nbytes`, by default all of the host buffer; neither side may be
    smaller than that where its size is known."""
    if nbytes is None:
        if host.nbytes is None:
            raise TypeError("nbytes is required when host is a raw address")
        size = host.nbytes
    else:
        size = _count("nbytes", nbytes)
        if size < 0:
            raise ValueError(f"nbytes {size} is negative")
    for region, side in ((host, "host buffer"), (device, "device buffer")):
        if region.nbytes is not None and size > region.nbytes:
            raise ValueError(f"nbytes {size} is more than the {side} holds ({region.nbytes} bytes)")
    if size > 0:
        for region, side in ((host, "host"), (device, "device")):
            if region.address == 0:
                raise ValueError(f"the {side} address is null (0)")
    return size


# ---- the copier -------------------------------------------------------------------------------


def _calibrated_direct_below(engine: Engine, device: int) -> tuple[int | None, str]:
    """The plain-call threshold `xferscope batch --calibrate` measured on this GPU, or None
    (the engine's built-in 1 MiB), with the reason either way."""
    from .calibration import gpu_key, load

    try:
        calibration = load(gpu_key(engine.device_info(device)))
    except XferscopeError:
        calibration = None
    if calibration is None or calibration.direct_below is None:
        return None, (
            "built in: on an H200 the plain call was faster below 1 MiB; "
            "`xferscope batch --calibrate` measures this GPU"
        )
    return calibration.direct_below, (
        f"measured on this GPU by `xferscope batch --calibrate` ({calibration.created}): "
        "the plain call was faster below, the staged copy from there up"
    )


class StagedCopier(Closing):
    """Copies pageable host memory to and from one GPU through a pool of pinned buffers, with
    several host threads. Chunk size and thread count are chosen from a short measurement of
    this host's memcpy rate unless given; `plan` and `explain()` say what was chosen and why.
    Copies under `direct_below` bytes are one plain cudaMemcpy, which is faster there than
    handing them to the threads (None: the threshold `xferscope batch --calibrate` measured on
    this GPU, else the engine's default, 1 MiB; 0 stages every copy).
    Host memory that is already pinned (cudaHostAlloc, cudaHostRegister, torch's
    pin_memory()) is never staged: the copy engines reach it directly, so it is one plain
    cudaMemcpy whatever its size.

    Use it as a context manager, or call `close()`, to free its threads and pinned memory at a
    point you choose. One copier runs one copy at a time (calls from several threads wait for
    each other). Errors are xferscope errors (NoDeviceError, AllocationError, EngineError) for
    the GPU side, TypeError and ValueError for bad arguments.
    """

    def __init__(
        self,
        device: int = 0,
        threads: int | None = None,
        chunk_bytes: int | None = None,
        engine: Engine | None = None,
        direct_below: int | None = None,
    ) -> None:
        device = _count("device", device)
        if device < 0:
            raise ValueError(f"device {device} is not a GPU index (0, 1, ...)")
        if threads is not None and _count("threads", threads) < 1:
            raise ValueError(f"threads {threads} is not a count of at least 1 (None: choose)")
        if chunk_bytes is not None and _count("chunk_bytes", chunk_bytes) < 1:
            raise ValueError(f"chunk_bytes {chunk_bytes} is not a size of at least 1 byte")
        if direct_below is not None and _count("direct_below", direct_below) < 0:
            raise ValueError(
                f"direct_below {direct_below} is not a size in bytes (0: stage every copy; "
                "None: the engine's default)"
            )
        self._engine = engine if engine is not None else default_engine()
        missing = missing_device(device, self._engine.device_count())
        if missing is not None:
            raise NoDeviceError(missing)
        self.device = device
        self._lock = threading.Lock()
        # why copies under plan.direct_below are one plain cudaMemcpy
        self.direct_below_reason = "asked for"
        if direct_below is None:
            direct_below, self.direct_below_reason = _calibrated_direct_below(self._engine, device)
        self._handle: Any = self._engine.staged_copier(
            device,
            0 if threads is None else int(threads),
            0 if chunk_bytes is None else int(chunk_bytes),
            None if direct_below is None else int(direct_below),
        )
        self.plan = StagedPlan.of(self._handle.plan)

    # -- copies --

    def to_device(self, device_ptr: object, host: object, nbytes: int | None = None) -> None:
        """Copies `nbytes` (default: all of `host`) from host memory to the GPU at `device_ptr`.
        Returns once the data is on the GPU."""
        device = _device_region(device_ptr, "device_ptr", writable=True)
        source = _host_region(host, "host", writable=False)
        size = _size(nbytes, source, device)
        self._run("to_device", device.address, source.address, size)

    def to_host(self, host: object, device_ptr: object, nbytes: int | None = None) -> None:
        """Copies `nbytes` (default: all of `host`) from the GPU at `device_ptr` into `host`.
        Returns once the data is in host memory."""
        destination = _host_region(host, "host", writable=True)
        device = _device_region(device_ptr, "device_ptr", writable=False)
        size = _size(nbytes, destination, device)
        self._run("to_host", destination.address, device.address, size)

    def _run(self, method: str, destination: int, source: int, size: int) -> None:
        with self._lock:
            if self._handle is None:
                raise EngineError("this staged copier is closed")
            if size == 0:
                return
            getattr(self._handle, method)(destination, source, size)

    # -- explanation and lifetime --

    def explain(self) -> str:
        """Why this copier uses the threads and chunks it does, in sentences."""
        p = self.plan
        return (
            f"Staged copier for GPU {self.device}: {p.summary()}. "
            f"One host thread copies {format_rate(p.single_thread_copy_bps)} here, and the "
            f"threads are sized to feed {format_rate(p.target_bps)} together. "
            f"Engine's reasoning: {p.explanation}. "
            + (
                f"Copies under {format_bytes(p.direct_below)} are one plain cudaMemcpy "
                f"({self.direct_below_reason}). "
                if p.direct_below
                else "Every copy of pageable memory is staged. "
            )
            + "Host memory that is already pinned is always one plain cudaMemcpy."
        )

    @property
    def closed(self) -> bool:
        return self._handle is None

    def close(self) -> None:
        """Stops the threads and frees the pinned pool. Safe to call more than once."""
        with self._lock:
            handle, self._handle = self._handle, None
        if handle is not None:
            handle.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else self.plan.summary()
        return f"StagedCopier(device={self.device}: {state})"


def copy_to_device(
    device_ptr: object, host: object, nbytes: int | None = None, device: int = 0
) -> None:
    """Copies `nbytes` (default: all of `host`) from host memory to the GPU, as copy_many copies
    one piece: one cudaMemcpyAsync (what tensor.copy_() does), or, for pageable memory from
    rule.staged_from (8 MiB up), this module's staged copy. `host`: a NumPy array, a PyTorch
    or CuPy host tensor, any buffer, or an address; `device_ptr`: a tensor or array on the GPU,
    or an address."""
    _copy_one()(device_ptr, host, nbytes, device, True)


def copy_to_host(
    host: object, device_ptr: object, nbytes: int | None = None, device: int = 0
) -> None:
    """Copies `nbytes` (default: all of `host`) from the GPU into host memory, as
    copy_to_device does the other way."""
    _copy_one()(host, device_ptr, nbytes, device, False)


_one: list[Any] = []  # copy_many's copy_one, imported on the first copy (an import a call costs)


def _copy_one() -> Any:
    if not _one:
        from .copy import copy_one

        _one.append(copy_one)
    return _one[0]
