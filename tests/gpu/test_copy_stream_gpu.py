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
