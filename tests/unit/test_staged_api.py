"""The public staged-copy API on the simulated engine: which buffers it accepts, the addresses
and sizes it hands the engine, and a clear TypeError or ValueError for every bad argument."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from collections.abc import Iterator
from typing import Any, ClassVar

import numpy as np
import pytest

from xferscope.core.engine.simulated import SimulatedEngine
from xferscope.core.engine.simulated_batch import STAGED_MAKE_S
from xferscope.core.engine.simulated_handles import SIMULATED_STAGED_PLAN, SimulatedCopier
from xferscope.core.errors import CudaError, EngineError, NoDeviceError
from xferscope.transfer import staged
from xferscope.transfer.engine import use_engine
from xferscope.transfer.policy import CopyRefused
from xferscope.transfer.staged import StagedCopier, StagedPlan

DEVICE = 0x7F00_0000_0000  # a made-up device address: the simulated engine moves no bytes


class RecordingCopier(SimulatedCopier):
    """Remembers each copy the wrapper asks of the engine."""

    def __init__(self, engine: SimulatedEngine, direct_below: int | None = None) -> None:
        super().__init__(engine, direct_below)
        self.calls: list[tuple[str, int, int, int]] = []

    def to_device(self, device_destination: int, host_source: int, bytes: int) -> None:
        self.calls.append(("to_device", device_destination, host_source, bytes))
        super().to_device(device_destination, host_source, bytes)

    def to_host(self, host_destination: int, device_source: int, bytes: int) -> None:
        self.calls.append(("to_host", host_destination, device_source, bytes))
        super().to_host(host_destination, device_source, bytes)


class RecordingEngine(SimulatedEngine):
    def __init__(self, devices: int = 1) -> None:
        super().__init__(devices=devices)
        self.made: list[tuple[int, int, int]] = []
        self.copiers: list[RecordingCopier] = []

    def staged_copier(
        self, device: int, threads: int = 0, chunk_bytes: int = 0, direct_below: int | None = None
    ) -> Any:
        self.made.append((device, threads, chunk_bytes))
        copier = RecordingCopier(self, direct_below)
        self.copiers.append(copier)
        return copier


class CudaArray:
    """A stand-in for a torch or CuPy device array: just __cuda_array_interface__."""

    def __init__(
        self,
        ptr: int,
        shape: tuple[int, ...],
        typestr: str = "<f4",
        strides: tuple[int, ...] | None = None,
        read_only: bool = False,
    ) -> None:
        self.__cuda_array_interface__ = {
            "data": (ptr, read_only),
            "shape": shape,
            "typestr": typestr,
            "strides": strides,
            "version": 3,
        }


@pytest.fixture
def engine() -> RecordingEngine:
    return RecordingEngine()


@pytest.fixture
def copier(engine: RecordingEngine) -> Iterator[StagedCopier]:
    with StagedCopier(engine=engine) as c:
        yield c


def calls(engine: RecordingEngine) -> list[tuple[str, int, int, int]]:
    return engine.copiers[-1].calls


def address(array: np.ndarray) -> int:
    return int(array.ctypes.data)


# ---- what it accepts ---------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.uint8, np.float32, np.float64, np.complex128, np.int16])
def test_numpy_arrays_of_any_dtype(copier, engine, dtype):
    host = np.zeros((3, 5), dtype=dtype)
    copier.to_device(DEVICE, host)
    copier.to_host(host, DEVICE)
    assert calls(engine) == [
        ("to_device", DEVICE, address(host), host.nbytes),
        ("to_host", address(host), DEVICE, host.nbytes),
    ]


def test_nbytes_may_be_less_than_the_array(copier, engine):
    host = np.zeros(1000, dtype=np.uint8)
    copier.to_device(DEVICE, host, nbytes=10)
    copier.to_host(host, DEVICE, 1000)
    assert [c[3] for c in calls(engine)] == [10, 1000]


def test_unaligned_contiguous_views(copier, engine):
    base = np.zeros(100, dtype=np.uint8)
    copier.to_device(DEVICE + 1, base[3:])
    copier.to_host(base[5:17], DEVICE)
    assert calls(engine) == [
        ("to_device", DEVICE + 1, address(base) + 3, 97),
        ("to_host", address(base) + 5, DEVICE, 12),
    ]


def test_bytearray_and_memoryview(copier, engine):
    data = bytearray(64)
    start = address(np.frombuffer(data, dtype=np.uint8))
    copier.to_device(DEVICE, data)
    copier.to_host(memoryview(data)[8:], DEVICE)
    copier.to_host(memoryview(data).cast("I"), DEVICE, 16)
    assert calls(engine) == [
        ("to_device", DEVICE, start, 64),
        ("to_host", start + 8, DEVICE, 56),
        ("to_host", start, DEVICE, 16),
    ]


def test_read_only_buffers_can_be_sources(copier, engine):
    copier.to_device(DEVICE, b"abcdef")
    frozen = np.arange(4)
    frozen.flags.writeable = False
    copier.to_device(DEVICE, frozen)
    assert [c[3] for c in calls(engine)] == [6, frozen.nbytes]


def test_objects_with_the_array_interface(copier, engine):
    array = np.zeros(32, dtype=np.float32)

    class Wrapped:
        __array_interface__ = array.__array_interface__

    copier.to_host(Wrapped(), DEVICE)
    assert calls(engine) == [("to_host", address(array), DEVICE, 128)]


def test_raw_addresses_with_nbytes(copier, engine):
    host = np.zeros(16, dtype=np.uint8)
    copier.to_device(DEVICE, address(host), 16)
    copier.to_host(np.uint64(address(host)), np.int64(DEVICE), nbytes=np.int32(8))
    assert calls(engine) == [
        ("to_device", DEVICE, address(host), 16),
        ("to_host", address(host), DEVICE, 8),
    ]


def test_cuda_array_interface_on_the_device_side(copier, engine):
    host = np.zeros((4, 8), dtype=np.float32)
    device = CudaArray(DEVICE, (4, 8), "<f4")
    copier.to_device(device, host)
    copier.to_host(host, device)
    copier.to_device(CudaArray(DEVICE, (4, 8), "<f4", strides=(32, 4)), host)  # C strides
    assert calls(engine) == [
        ("to_device", DEVICE, address(host), 128),
        ("to_host", address(host), DEVICE, 128),
        ("to_device", DEVICE, address(host), 128),
    ]


def test_zero_bytes_is_a_no_op(copier, engine):
    copier.to_device(DEVICE, np.zeros(0, dtype=np.uint8))
    copier.to_host(bytearray(), DEVICE)
    copier.to_device(DEVICE, np.zeros(8), nbytes=0)
    assert calls(engine) == []


# ---- what it refuses, and how it says so -------------------------------------------------------


@pytest.mark.parametrize(
    "host",
    [
        np.zeros(100)[::2],
        np.zeros((4, 4), order="F"),
        np.zeros((4, 4))[:, 1:],
    ],
    ids=["strided", "fortran", "sliced-columns"],
)
def test_non_contiguous_arrays_are_refused(copier, host):
    with pytest.raises(ValueError, match="not C-contiguous"):
        copier.to_device(DEVICE, host)
    with pytest.raises(ValueError, match="not C-contiguous"):
        copier.to_host(host, DEVICE)


def test_non_contiguous_memoryview_is_refused(copier):
    with pytest.raises(ValueError, match="not C-contiguous"):
        copier.to_host(memoryview(bytearray(10))[::2], DEVICE)


def test_read_only_destinations_are_refused(copier, engine):
    frozen = np.zeros(8)
    frozen.flags.writeable = False
    with pytest.raises(ValueError, match="read-only array"):
        copier.to_host(frozen, DEVICE)
    with pytest.raises(ValueError, match=r"read-only \(bytes\)"):
        copier.to_host(b"12345678", DEVICE)
    with pytest.raises(ValueError, match="read-only"):
        copier.to_device(CudaArray(DEVICE, (2,), read_only=True), np.zeros(2, np.float32))
    assert calls(engine) == []


def test_nbytes_beyond_a_buffer_is_refused(copier, engine):
    with pytest.raises(ValueError, match=r"nbytes 9 is more than the host buffer holds \(8 bytes"):
        copier.to_device(DEVICE, np.zeros(8, dtype=np.uint8), 9)
    with pytest.raises(ValueError, match="more than the device buffer holds"):
        copier.to_device(CudaArray(DEVICE, (2,), "<f4"), np.zeros(4, np.float32))
    with pytest.raises(ValueError, match="more than the device buffer holds"):
        copier.to_host(np.zeros(16, dtype=np.uint8), CudaArray(DEVICE, (8,), "|u1"))
    assert calls(engine) == []


def test_raw_host_address_needs_nbytes(copier):
    with pytest.raises(TypeError, match="nbytes is required when host is a raw address"):
        copier.to_device(DEVICE, 0x1000)
    with pytest.raises(TypeError, match="nbytes is required"):
        copier.to_host(0x1000, CudaArray(DEVICE, (8,)))


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda c: c.to_device(DEVICE, np.zeros(4), -1), ValueError, "nbytes -1 is negative"),
        (lambda c: c.to_device(DEVICE, np.zeros(4), 2.0), TypeError, "nbytes must be an integer"),
        (lambda c: c.to_device(DEVICE, -5, 4), ValueError, "host address -5 is negative"),
        (lambda c: c.to_device(-5, np.zeros(4)), ValueError, "device_ptr address -5 is negative"),
        (lambda c: c.to_device(0, np.zeros(4)), ValueError, "device address is null"),
        (lambda c: c.to_device(DEVICE, 0, 4), ValueError, "host address is null"),
        (lambda c: c.to_device("0x10", np.zeros(4)), TypeError, "__cuda_array_interface__"),
        (lambda c: c.to_device(True, np.zeros(4)), TypeError, "not bool"),
        (lambda c: c.to_device(DEVICE, [1, 2, 3]), TypeError, "buffer protocol"),
        (lambda c: c.to_host("text", DEVICE), TypeError, "NumPy array"),
        (
            lambda c: c.to_device(CudaArray(DEVICE, (4, 4), strides=(4, 16)), np.zeros(16)),
            ValueError,
            "not C-contiguous",
        ),
    ],
)
def test_bad_arguments_have_clear_messages(copier, engine, call, error, message):
    with pytest.raises(error, match=message):
        call(copier)
    assert calls(engine) == []


# ---- plan, explanation, lifetime ---------------------------------------------------------------


def test_plan_is_a_frozen_dataclass_of_the_engines_plan(copier):
    plan = copier.plan
    assert isinstance(plan, StagedPlan)
    assert plan.to_dict() == SIMULATED_STAGED_PLAN
    assert plan.staging_bytes == 8 * 3 * (4 << 20)
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.threads = 3  # type: ignore[misc]


def test_explain_mentions_threads_and_chunks(copier):
    text = copier.explain()
    assert "8 threads" in text and "4 MiB chunks" in text
    assert "3 buffers per thread" in text and "96 MiB pinned" in text
    assert "17 GB/s" in text and "63 GB/s" in text
    assert SIMULATED_STAGED_PLAN["explanation"] in text
    assert "8 threads" in repr(copier)


def test_threads_and_chunk_size_reach_the_engine(engine):
    StagedCopier(threads=3, chunk_bytes=1 << 20, engine=engine).close()
    StagedCopier(engine=engine).close()
    assert engine.made == [(0, 3, 1 << 20), (0, 0, 0)]


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"threads": 0}, ValueError, "threads 0"),
        ({"chunk_bytes": -1}, ValueError, "chunk_bytes -1"),
        ({"device": -1}, ValueError, "device -1"),
        ({"device": "0"}, TypeError, "device must be an integer"),
        ({"device": 2}, NoDeviceError, "no GPU with index 2; this machine has 0..0"),
    ],
)
def test_bad_construction(engine, kwargs, error, message):
    with pytest.raises(error, match=message):
        StagedCopier(engine=engine, **kwargs)
    assert engine.made == []


def test_close_is_idempotent_and_later_copies_fail(engine):
    with StagedCopier(engine=engine) as copier:
        assert not copier.closed
    assert copier.closed and engine.copiers[0]._closed
    copier.close()
    with pytest.raises(EngineError, match="closed"):
        copier.to_device(DEVICE, np.zeros(4))
    assert "closed" in repr(copier)


def test_the_native_copier_translates_engine_errors():
    """NativeEngine wraps the native copier so its CUDA errors become xferscope errors."""
    from xferscope import _engine
    from xferscope.core.engine.native import NativeEngine
    from xferscope.core.engine.native_handles import _NativeCopier

    class FailingHandle:
        plan: ClassVar[dict[str, int]] = {"threads": 2}

        def to_device(self, device_destination: int, host_source: int, bytes: int) -> None:
            raise _engine.CudaError(
                "cudaErrorInvalidValue: invalid argument", "cudaErrorInvalidValue", 1
            )

    copier = _NativeCopier(FailingHandle(), NativeEngine())
    with pytest.raises(CudaError, match="CUDA error: cudaErrorInvalidValue") as info:
        copier.to_device(DEVICE, 1, 4)
    assert info.value.name == "cudaErrorInvalidValue" and info.value.code == 1
    assert isinstance(info.value, EngineError)


@pytest.mark.parametrize(
    ("name", "code", "told"),
    [("cudaErrorStreamCaptureUnsupported", 900, True),
     ("cudaErrorStreamCaptureImplicit", 906, True), ("cudaErrorCapturedEvent", 907, True),
     ("cudaErrorInvalidValue", 1, False)],
)  # fmt: skip
def test_a_cuda_error_of_graph_capture_says_what_to_do(name, code, told):
    """A copy that waits for itself cannot run inside a CUDA graph capture: its CUDA error says
    so, and what to call there instead; other CUDA errors are left as they are."""
    error = CudaError(f"{name}: the driver's words", name, code)
    assert ("CUDA graph was being captured" in str(error)) is told
    assert ("non_blocking=True" in str(error)) is told
    assert str(error).startswith(f"CUDA error: {name}: the driver's words")
    assert "\n" not in str(error) and error.code == code


# ---- module functions and the package ----------------------------------------------------------


def test_module_functions_copy_as_copy_many_copies_one_piece():
    """copy_to_device / copy_to_host go through copy_many's reader, rule and copier (one per
    GPU, kept): a plain copy for small pageable memory, the staged copy from 4 MiB, the size of
    an address taken from the other end, and arguments that go the other way refused before
    anything is copied."""
    from xferscope.transfer import copy as many

    gpu_base = 0x1000_0000_0000  # below where the host maps memory
    engine = SimulatedEngine(devices=2)
    for d in range(2):
        engine.register_memory(gpu_base + d * (1 << 40), 1 << 40, "device", d)
    use_engine(engine)
    host = np.zeros(64, dtype=np.uint8)
    big = np.zeros(4 << 20, dtype=np.uint8)
    for a in (host, big):  # pageable, wherever the host put them
        engine.register_memory(int(a.__array_interface__["data"][0]), a.nbytes, "pageable")
    staged.copy_to_device(gpu_base, host)
    staged.copy_to_host(host, gpu_base, 32)
    staged.copy_to_device(gpu_base + (1 << 40), host, device=1)
    staged.copy_to_host(big, gpu_base)  # by the loop while the staged copy is made
    engine.advance(STAGED_MAKE_S)
    staged.copy_to_host(big, gpu_base)
    first = many.copies_of(engine).copier(0)
    assert [c[:3] for c in first.calls] == [
        ("loop", True, 1),
        ("loop", False, 1),
        ("loop", False, 1),
        ("staged", False, 1),
    ]
    assert many.copies_of(engine).copier(1).calls == [("loop", True, 1, False)]
    with pytest.raises(CopyRefused, match="copy_to_device copies host to GPU, and these buffers"):
        staged.copy_to_device(host, gpu_base)
    assert len(first.calls) == 4
    use_engine(None)


def test_module_function_errors_are_the_same():
    with pytest.raises(ValueError, match="not C-contiguous"):
        staged.copy_to_device(DEVICE, np.zeros(8)[::2])
    with pytest.raises(TypeError, match="nbytes is required"):
        staged.copy_to_host(0x1000, DEVICE)


def test_package_exports_the_api_without_loading_numpy_or_the_engine():
    code = (
        "import sys, xferscope\n"
        "assert 'numpy' not in sys.modules and 'xferscope._engine' not in sys.modules\n"
        "from xferscope import StagedCopier, StagedPlan, copy_to_device, copy_to_host\n"
        "from xferscope.transfer import first, staged\n"
        "assert StagedCopier is staged.StagedCopier and copy_to_host is first.copy_to_host\n"
        "assert 'xferscope._engine' not in sys.modules\n"
        "try:\n    xferscope.nothing\nexcept AttributeError as e:\n    print(e)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "has no attribute 'nothing'" in proc.stdout
