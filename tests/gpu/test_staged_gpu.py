"""The staged copier on a real GPU, through the public API: every byte arrives, for sizes around
the 4 MiB chunk and unaligned views, with PyTorch tensors as the device side; and it beats the
driver's pageable copy. Skipped without a GPU or without PyTorch."""

from __future__ import annotations

import statistics
import time

import numpy as np
import pytest

from xferscope.transfer.staged import StagedCopier, copy_to_device, copy_to_host

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")

MiB = 1 << 20
SIZES = (1, 4 * MiB - 1, 4 * MiB + 1, 64 * MiB + 3)


@pytest.fixture(scope="module")
def copier(native_engine):
    if not torch.cuda.is_available():
        pytest.skip("PyTorch sees no CUDA device")
    with StagedCopier(0, engine=native_engine) as c:
        yield c


def random_bytes(size: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, size, dtype=np.uint8)


def on_gpu(size: int) -> torch.Tensor:
    tensor = torch.full((size,), 0xA5, dtype=torch.uint8, device="cuda")
    torch.cuda.synchronize()  # the copier's streams do not wait for PyTorch's
    return tensor


@pytest.mark.parametrize("size", SIZES)
def test_round_trip_is_bit_exact(copier, size):
    host = random_bytes(size, size)
    device = on_gpu(size)
    copier.to_device(device.data_ptr(), host)
    assert np.array_equal(device.cpu().numpy(), host)
    back = np.zeros(size, dtype=np.uint8)
    copier.to_host(back, device.data_ptr())
    assert np.array_equal(back, host)


@pytest.mark.parametrize("size", SIZES)
def test_unaligned_host_views_and_guard_bytes(copier, size):
    source = random_bytes(size + 7, 7 * size)
    view = source[3 : 3 + size]  # starts 3 bytes past an aligned address
    device = on_gpu(size + 1)
    copier.to_device(device.data_ptr() + 1, view)  # and an odd device address
    got = device.cpu().numpy()
    assert got[0] == 0xA5 and np.array_equal(got[1:], view)

    landing = np.full(size + 10, 0x5A, dtype=np.uint8)
    copier.to_host(landing[5:], device.data_ptr() + 1, size)
    assert np.array_equal(landing[5 : 5 + size], view)
    assert (landing[:5] == 0x5A).all() and (landing[5 + size :] == 0x5A).all()


def test_tensors_through_the_cuda_array_interface(copier):
    host = np.random.default_rng(3).standard_normal((1000, 513)).astype(np.float32)
    device = torch.zeros((1000, 513), dtype=torch.float32, device="cuda")
    torch.cuda.synchronize()
    copier.to_device(device, host)
    assert np.array_equal(device.cpu().numpy(), host)
    back = np.empty_like(host)
    copier.to_host(back, device)
    assert np.array_equal(back, host)


def test_bytearray_and_module_functions(native_engine):
    data = bytearray(random_bytes(5 * MiB + 11, 11).tobytes())
    device = on_gpu(len(data))
    copy_to_device(device.data_ptr(), data)
    assert device.cpu().numpy().tobytes() == bytes(data)
    back = bytearray(len(data))
    copy_to_host(back, device)
    assert back == data


def _median_seconds(step, repeats: int = 5) -> float:
    step()  # warm-up: page faults, driver staging buffers
    times = []
    for _ in range(repeats):
        begin = time.perf_counter()
        step()
        times.append(time.perf_counter() - begin)
    return statistics.median(times)


def test_staged_upload_beats_the_drivers_pageable_copy(copier):
    """On an H200: 52 GB/s staged against 10.3 GB/s for cudaMemcpy of pageable memory."""
    size = 1 << 30
    host = np.full(size, 7, dtype=np.uint8)  # written, so every page is present
    device = on_gpu(size)
    source = torch.from_numpy(host)  # pageable: torch has not pinned it

    def staged() -> None:
        copier.to_device(device.data_ptr(), host)

    def pageable() -> None:
        device.copy_(source)
        torch.cuda.synchronize()

    staged_s = _median_seconds(staged)
    pageable_s = _median_seconds(pageable)
    print(
        f"1 GiB H2D from pageable memory: staged {size / staged_s / 1e9:.1f} GB/s, "
        f"torch copy_ {size / pageable_s / 1e9:.1f} GB/s ({copier.plan.summary()})"
    )
    assert pageable_s > 2 * staged_s
    assert device[:: 1 << 20].eq(7).all().item()


def test_pinned_host_memory_is_copied_directly_not_staged(native_engine):
    """A pinned source or destination goes straight to the copy engines: the bytes arrive,
    and a 256 MiB copy runs at a pinned copy's rate, not a staged one's."""
    cupy = pytest.importorskip("cupy")
    n = 256 << 20
    pinned = cupy.cuda.alloc_pinned_memory(n)
    host = np.frombuffer(pinned, dtype=np.uint8, count=n)
    host[:] = np.random.default_rng(5).integers(0, 256, n, dtype=np.uint8)
    gpu = cupy.empty(n, dtype=cupy.uint8)
    back = np.frombuffer(cupy.cuda.alloc_pinned_memory(n), dtype=np.uint8, count=n)
    with StagedCopier(0, direct_below=0) as copier:
        copier.to_device(gpu.data.ptr, host, n)
        copier.to_host(back, gpu.data.ptr, n)
        assert np.array_equal(back, host)
        start = time.perf_counter()
        for _ in range(4):
            copier.to_device(gpu.data.ptr, host, n)
        rate = 4 * n / (time.perf_counter() - start)
    cupy.cuda.runtime.deviceSynchronize()
    start = time.perf_counter()
    for _ in range(4):
        cupy.cuda.runtime.memcpy(gpu.data.ptr, host.ctypes.data, n, 1)
    plain = 4 * n / (time.perf_counter() - start)
    print(f"pinned through the copier {rate / 1e9:.1f} GB/s, plain cudaMemcpy {plain / 1e9:.1f}")
    # the copier adds nothing to a pinned copy: its rate is measured against the plain copy's
    # in benchmarks (copyapi_bench); here a margin past the host's spread (single 1 GiB copies
    # 42.6-53.5 GB/s on one H100 host, 0.80 between the slowest and the fastest)
    assert rate > 0.75 * plain
