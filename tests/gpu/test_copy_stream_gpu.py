"""The stream copy_many's loop copies go on, on a real GPU: a call that waits copies on the legacy
default stream, PyTorch's, so its copies follow the kernels queued there as PyTorch's copy_
does, early pieces or not; copies queued without waiting (queue_pairs) still come before a
later call's. Each case sets the GPU busy first (torch.cuda._sleep), so a copy that did not
follow the kernel would read or be overwritten before it ran. Skipped without a GPU."""

from __future__ import annotations

import pytest

from xferscope.transfer import calibration
from xferscope.transfer.copy import copies_of, copy_many, finish, queue_pairs
from xferscope.transfer.engine import default_engine

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")

BUSY_CYCLES = 50_000_000  # tens of milliseconds of a kernel that waits
SIZES = [64, 24 << 10, 256 << 10, 3 << 20]


def pinned(n: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(1, 255, (n,), dtype=torch.uint8, generator=g).pin_memory()


@pytest.fixture(params=[True, False], ids=["early", "not-early"])
def copies(native_engine, tmp_path, monkeypatch, request):
    monkeypatch.setenv(calibration.CALIBRATION_ENV, str(tmp_path / "calibration"))  # the rule
    copies = copies_of(default_engine())
    was = copies.early
    copies.early = request.param
    yield copies
    copies.early = was


@pytest.mark.parametrize("size", SIZES)
def test_a_download_reads_what_the_default_streams_kernel_wrote(copies, size):
    host = torch.zeros(size, dtype=torch.uint8).pin_memory()
    gpu = torch.empty(size, dtype=torch.uint8, device="cuda")
    for value in (3, 7):  # the second call of the shape goes early where early is on
        gpu.zero_()
        torch.cuda.synchronize()
        torch.cuda._sleep(BUSY_CYCLES)
        gpu.fill_(value)  # queued on PyTorch's stream behind the sleep
        assert copy_many([(host, gpu)]).method == "loop"
        assert bool((host == value).all()), (size, value)


@pytest.mark.parametrize("size", SIZES)
def test_an_upload_lands_after_the_default_streams_kernel(copies, size):
    source = pinned(size, size)
    gpu = torch.empty(size, dtype=torch.uint8, device="cuda")
    for _ in range(2):
        torch.cuda.synchronize()
        torch.cuda._sleep(BUSY_CYCLES)
        gpu.fill_(0)  # queued before the copy: the copy must land after it
        assert copy_many([(gpu, source)]).method == "loop"
        torch.cuda.synchronize()
        assert torch.equal(gpu.cpu(), source), size


def test_copies_queued_without_waiting_come_before_a_later_call(copies):
    """queue_pairs leaves its copies on the copier's own stream; a later call that waits goes
    there too, after them, not on the legacy stream beside them."""
    size = 64 << 20  # about a millisecond up
    source = pinned(size, 1)
    gpu = torch.zeros(size, dtype=torch.uint8, device="cuda")
    back = torch.zeros(size, dtype=torch.uint8).pin_memory()
    torch.cuda.synchronize()
    queue_pairs([(gpu, source)], 0)
    copy_many([(back, gpu)])
    finish(0)
    assert torch.equal(back, source)


def _pieces(count: int, size: int, seed: int) -> tuple[list, list]:
    """`count` pinned host pieces of `size` bytes (random, never zeros) and GPU tensors for
    them."""
    host = [pinned(size, seed + i) for i in range(count)]
    return host, [torch.empty(size, dtype=torch.uint8, device="cuda") for _ in range(count)]


SHAPES = [(1, 3 << 20), (1024, 4096), (64, 1 << 20)]  # one piece; what goes by the kernel; large


@pytest.mark.parametrize(("count", "size"), SHAPES)
@pytest.mark.parametrize("given", [True, False], ids=["stream=", "current"])
def test_a_queued_upload_follows_the_streams_kernel_and_the_next_kernel_follows_it(
    copies, count, size, given
):
    """On a side stream busy with a kernel that waits, then zeroes the destinations: copy_many
    with non_blocking=True returns while the stream still runs the kernel (the host never
    waits for it), the copies land after the zeroing, and a kernel queued next reads them."""
    host, gpu = _pieces(count, size, count)
    side = torch.cuda.Stream()
    torch.cuda.synchronize()
    with torch.cuda.stream(side):
        for _ in range(2):  # the second call of the shape goes early where early is on
            torch.cuda._sleep(BUSY_CYCLES)
            for g in gpu:
                g.zero_()
            stream = side if given else None
            copy_many(list(zip(gpu, host, strict=True)), non_blocking=True, stream=stream)
            assert not side.query(), "copy_many waited for the stream"
            sums = torch.stack([g.sum(dtype=torch.int64) for g in gpu])  # queued after the copies
            side.synchronize()
            want = torch.tensor([int(h.sum(dtype=torch.int64)) for h in host])
            assert torch.equal(sums.cpu(), want), (count, size)


@pytest.mark.parametrize(("count", "size"), SHAPES)
def test_a_queued_download_reads_what_the_streams_kernel_wrote(copies, count, size):
    gpu = [torch.zeros(size, dtype=torch.uint8, device="cuda") for _ in range(count)]
    host = [torch.zeros(size, dtype=torch.uint8).pin_memory() for _ in range(count)]
    side = torch.cuda.Stream()
    torch.cuda.synchronize()
    for value in (5, 9):
        with torch.cuda.stream(side):
            torch.cuda._sleep(BUSY_CYCLES)
            for g in gpu:
                g.fill_(value)  # behind the sleep: the copy must read it
        copy_many(list(zip(host, gpu, strict=True)), non_blocking=True, stream=side)
        assert not side.query(), "copy_many waited for the stream"
        side.synchronize()
        assert all(bool((h == value).all()) for h in host), (count, size, value)


def test_the_legacy_default_stream_takes_queued_copies_too(copies):
    """stream=0, CUDA's legacy default stream (PyTorch's default stream): the batch API refuses
    it, so every batch goes by the loop there, still ordered after its kernels."""
    host, gpu = _pieces(256, 64 << 10, 7)
    torch.cuda.synchronize()
    torch.cuda._sleep(BUSY_CYCLES)
    for g in gpu:
        g.zero_()
    made = copy_many(list(zip(gpu, host, strict=True)), non_blocking=True, stream=0)
    assert made.method == "loop"
    torch.cuda.synchronize()
    assert all(torch.equal(g.cpu(), h) for g, h in zip(gpu, host, strict=True))


def test_to_device_non_blocking_queues_a_batch_dict_on_the_current_stream(native_engine):
    """A pinned batch dict moved with non_blocking=True on a side stream busy with a kernel
    that waits: the call returns while the stream still runs it, the batch lands behind it,
    the step queued next reads it, and the sources are held until the stream has passed them
    (let go by a later call)."""
    import xferscope
    from xferscope.transfer import streams

    g = torch.Generator().manual_seed(11)
    batch = {
        "pixels": torch.rand(32, 3, 64, 64, generator=g).pin_memory(),
        "labels": torch.randint(0, 1000, (32,), generator=g).pin_memory(),
    }
    side = torch.cuda.Stream()
    torch.cuda.synchronize()
    with torch.cuda.stream(side):
        for _ in range(3):  # the first calls go PyTorch's way while xferscope sets up
            torch.cuda._sleep(BUSY_CYCLES)
            moved = xferscope.to_device(batch, "cuda", non_blocking=True)
            assert not side.query(), "to_device waited for the stream"
            total = moved["pixels"].double().sum() + moved["labels"].sum()  # the next step
            side.synchronize()
            want = batch["pixels"].double().sum() + batch["labels"].sum()
            assert float(total.cpu()) == pytest.approx(float(want), rel=1e-12)
    before = streams.held()
    xferscope.to_device(batch, "cuda", non_blocking=True)
    assert streams.held() <= max(before, 1) + 1  # the earlier calls', passed, let go
    torch.cuda.synchronize()


def test_to_host_non_blocking_reads_what_the_streams_kernel_wrote(native_engine):
    import xferscope

    on_gpu = {"a": torch.zeros(1 << 20, device="cuda"), "b": [torch.zeros(17, device="cuda")]}
    side = torch.cuda.Stream()
    torch.cuda.synchronize()
    for value in (2.0, 3.5, 4.25):
        with torch.cuda.stream(side):
            torch.cuda._sleep(BUSY_CYCLES)
            on_gpu["a"].fill_(value)
            on_gpu["b"][0].fill_(-value)
            host = xferscope.to_host(on_gpu, non_blocking=True)
            assert not side.query(), "to_host waited for the stream"
        side.synchronize()
        assert host["a"].is_pinned() and bool((host["a"] == value).all())
        assert bool((host["b"][0] == -value).all())


def test_to_device_on_a_stream_given_allocates_and_copies_there(native_engine):
    """stream= names a stream other than the current one: the destinations are that stream's
    (made while it is current) and the copies queue behind its kernel, not the current one's."""
    import xferscope

    batch = {"x": pinned(8 << 20, 3), "y": pinned(4096, 4)}
    side = torch.cuda.Stream()
    torch.cuda.synchronize()
    with torch.cuda.stream(side):
        torch.cuda._sleep(BUSY_CYCLES)
    moved = xferscope.to_device(batch, "cuda", non_blocking=True, stream=side)
    assert not side.query(), "to_device waited for the stream"
    assert torch.cuda.current_stream() != side
    side.synchronize()
    assert all(torch.equal(moved[k].cpu(), batch[k]) for k in batch)
