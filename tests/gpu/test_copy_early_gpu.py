"""copy_many's early pieces on a real GPU: where a shape of pinned batch last went by the loop,
its pieces are queued as they are read. Every byte still lands both ways; a batch that turns
pageable or is refused partway is whole or waited for; switched off, the same bytes land.
Skipped without a GPU."""

from __future__ import annotations

import pytest

from xferscope.transfer import calibration
from xferscope.transfer.copy import copies_of, copy_many
from xferscope.transfer.engine import default_engine

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")

SIZES = [96 << 10, 256 << 10, 1 << 20, 3 << 18, 200003]  # few pieces over 16 KiB: the loop


def pinned(n: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(1, 255, (n,), dtype=torch.uint8, generator=g).pin_memory()


@pytest.fixture
def early(native_engine, tmp_path, monkeypatch):
    monkeypatch.setenv(calibration.CALIBRATION_ENV, str(tmp_path / "calibration"))  # the rule
    copies = copies_of(default_engine())
    was = copies.early
    copies.early = True
    yield copies
    copies.early = was


def test_a_loop_shape_copied_again_lands_whole_both_ways(early):
    hosts = [pinned(n, i) for i, n in enumerate(SIZES)]
    for rounds in range(3):  # the first decides; the later ones go early
        gpu = [torch.zeros(n, dtype=torch.uint8, device="cuda") for n in SIZES]
        torch.cuda.synchronize()
        assert copy_many(list(zip(gpu, hosts, strict=True))).method == "loop"
        assert all(torch.equal(g.cpu(), h) for g, h in zip(gpu, hosts, strict=True)), rounds
        back = [torch.zeros(n, dtype=torch.uint8).pin_memory() for n in SIZES]
        assert copy_many(list(zip(back, gpu, strict=True))).method == "loop"
        assert all(torch.equal(b, h) for b, h in zip(back, hosts, strict=True)), rounds


def test_a_batch_that_turns_pageable_lands_whole(early):
    """Pieces 0-2 pinned go early; piece 3 is pageable this time, so it and the rest go by the
    method decided for the whole (pageable) batch."""
    hosts = [pinned(n, i) for i, n in enumerate(SIZES)]
    gpu = [torch.zeros(n, dtype=torch.uint8, device="cuda") for n in SIZES]
    copy_many(list(zip(gpu, hosts, strict=True)))
    hosts[3] = hosts[3].clone()  # pageable now
    for g in gpu:
        g.zero_()
    torch.cuda.synchronize()
    assert copy_many(list(zip(gpu, hosts, strict=True))).memory == "pageable"
    assert all(torch.equal(g.cpu(), h) for g, h in zip(gpu, hosts, strict=True))


def test_a_batch_refused_partway_has_waited_for_its_early_pieces(early):
    """Pair 0 (64 MiB, about a millisecond to copy) goes early; pair 2 has both ends on the GPU,
    so the batch is refused naming it, and by then pair 0 has landed: nothing the refused call
    queued still reads or writes the caller's memory."""
    sizes = [64 << 20, 1 << 20, 1 << 20]
    hosts = [pinned(n, i) for i, n in enumerate(sizes)]
    gpu = [torch.zeros(n, dtype=torch.uint8, device="cuda") for n in sizes]
    copy_many(list(zip(gpu, hosts, strict=True)))  # the shape goes by the loop
    for g in gpu:
        g.zero_()
    torch.cuda.synchronize()
    pairs = [(gpu[0], hosts[0]), (gpu[1], hosts[1]), (gpu[2], gpu[1])]
    with pytest.raises(ValueError, match="pair 2: both ends are GPU memory"):
        copy_many(pairs)
    landed = gpu[0].cpu()  # PyTorch's stream: nothing orders it after copy_many's
    assert torch.equal(landed, hosts[0])


def test_switched_off_the_same_bytes_land(early):
    hosts = [pinned(n, i + 7) for i, n in enumerate(SIZES)]
    early.early = False
    for _ in range(2):
        gpu = [torch.zeros(n, dtype=torch.uint8, device="cuda") for n in SIZES]
        torch.cuda.synchronize()
        assert copy_many(list(zip(gpu, hosts, strict=True))).method == "loop"
        assert all(torch.equal(g.cpu(), h) for g, h in zip(gpu, hosts, strict=True))
