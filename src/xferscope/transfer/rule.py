"""copy_many's built-in rule: the method for a batch where this GPU has no calibration, drawn
from measurements on an H200 and H100s, never far slower than a loop of cudaMemcpyAsync."""

from __future__ import annotations

from ..core.units import format_bytes

# From `xferscope batch` on an H200 (PCIe Gen5): for pinned memory one SM copy kernel over the
# list beat the loop 30x at 1024 x 4 KiB and stayed ahead up to 64 KiB a copy;
# cudaMemcpyBatchAsync beat the loop about 3x at 64 KiB; from pageable memory packing into one
# pinned buffer won while the pieces were small. Past these sizes the copy engines' bandwidth
# decides and every method is about the loop.
RULE_KERNEL_MAX = 64 << 10
# On an H100 (copyapi_bench, PyTorch tensors) the kernel lost to PyTorch's loop at 4 x 64 KiB up
# (44.8 us against 28.7) and won from 16 pieces (16 x 64 KiB: 61.9 against 92.3) and at 4 x 4 KiB
# (23.5 against 29.1): few pieces larger than this go by the loop.
RULE_KERNEL_FEW, RULE_KERNEL_FEW_MAX = 16, 16 << 10
# Three pinned pieces: from 6 KiB the kernel lost to _foreach_copy_ (3 x 8 KiB up: 19.0 us
# against 18.5), and with the loop's pieces queued as they are read (copy_many's early pieces)
# the loop beat both (copyapi_early_probe.py, H100: 3 x 12 KiB up 17.5 us against the kernel's
# 21.2 and _foreach_copy_'s 19.8; 3 x 16 KiB 17.9 against 22.5 and 20.1).
RULE_KERNEL_THREE_MAX = 4 << 10
# On an H100 packing lost to a loop of cudaMemcpyAsync from 96 KiB a piece in most batches of
# 2-15 pieces (4 x 256 KiB up: 122 us against 89; 15 x 128 KiB down: 334 against 326)
RULE_PACK_MAX = 64 << 10
# The dense grid on an H100 (copyapi_dense.py, PyTorch tensors, interleaved with PyTorch's loop):
# two pieces went faster as two cudaMemcpyAsync than by any batch method (2 x 16 KiB pinned up:
# the kernel 18.9 us against 16.0; pageable up: packing 24.6 against 16.7), and 4 pageable
# pieces of 8-48 KiB packed lost by up to 14% (4 x 24 KiB: 31.1 against 26.6), while from 6
# pieces, or in pieces of at most 6 KiB, packing won 1.2-3x.
RULE_BATCH_FROM = 3
RULE_PACK_MANY, RULE_PACK_FEW_MAX = 6, 6 << 10
# From pageable memory the staged copy's threads reached 46-51 GB/s for 1 GiB on an H200 and beat
# one cudaMemcpy from 1 MiB, while packing on one thread ran at about 10 GB/s (5.8 GB/s for 1024 x
# 1 MiB, slower than the loop's 8.4): batches of pageable pieces this large in all are staged.
# Below it the staged copy is not chosen even where a calibration timed it fastest: calibration
# times calls back to back, and with 2 ms between calls (as a program makes them) its threads'
# wake-up cost it on an H200 at 1 MiB in all: 346-433 us against the loop's 235-276 (h2d 16 x
# 64 KiB, h2d and d2h 4 x 256 KiB), while at 4 MiB it still won (d2h 16 x 256 KiB: 457 us against
# 663).
RULE_STAGED_FROM = 4 << 20
# Up, on an H100 (PyTorch tensors, forced methods interleaved with PyTorch's loop): at 4 MiB in
# pieces over 256 KiB the staged copy only tied the loop and lost to PyTorch's (1 x 4 MiB: 376 us
# against 347; 4 x 1 MiB with 2 ms between calls: 403 against 366), while from 8 MiB it won (8 x
# 1 MiB: 540 against 776; 2 x 4 MiB: 500 against 607) and in small pieces it won from 4 MiB (64 x
# 64 KiB: 341 against 658). Down it won from 4 MiB in every shape (1 x 4 MiB: 286 against 383).
RULE_STAGED_UP_LARGE_FROM, RULE_STAGED_UP_PIECE_MAX = 8 << 20, 256 << 10


def staged_from(direction: str, size: int) -> int:
    """The bytes in all from which a pageable batch of pieces of `size` is staged by the rule."""
    large_up = direction == "h2d" and size > RULE_STAGED_UP_PIECE_MAX
    return RULE_STAGED_UP_LARGE_FROM if large_up else RULE_STAGED_FROM


def rule(direction: str, memory: str, count: int, size: int, batch_api: bool) -> tuple[str, str]:
    """(method, reason) without a calibration."""
    if memory == "pageable" and count * size >= staged_from(direction, size):
        return "staged", (
            f"pageable batches of {format_bytes(staged_from(direction, size))} or more (in "
            "pieces like these) move fastest through the staged copy's threads, which pack the "
            "pieces into pinned chunks while the copy engine moves the chunks before (built-in "
            "rule: no calibration here)"
        )
    if count < RULE_BATCH_FROM:
        return "loop", (
            f"fewer than {RULE_BATCH_FROM} copies are one cudaMemcpyAsync each (built-in rule: no "
            "calibration here)"
        )
    few = "three" if count == 3 else f"fewer than {RULE_KERNEL_FEW}"
    few_max = RULE_KERNEL_THREE_MAX if count == 3 else RULE_KERNEL_FEW_MAX
    if memory == "pinned" and size > few_max and count < RULE_KERNEL_FEW:
        return "loop", (
            f"{few} pinned pieces of over {format_bytes(few_max)} move as fast by a loop of "
            "cudaMemcpyAsync as by any batch method (built-in rule: no calibration here)"
        )
    if memory == "pinned" and size <= RULE_KERNEL_MAX:
        return "kernel", (
            f"pieces of at most {format_bytes(RULE_KERNEL_MAX)} in pinned memory move fastest "
            "by one SM copy kernel over the list (built-in rule: no calibration here; run "
            "`xferscope batch --calibrate` to measure this machine)"
        )
    if memory == "pinned" and batch_api:
        # on an H100 (PyTorch tensors, interleaved with PyTorch's loop) cudaMemcpyBatchAsync also
        # beat the loop for pinned pieces of 1 MiB: 16 up 344 us against 375, 1024 up 20.8 ms
        # against 22.7, 1024 down 20.8 against 21.9
        return "batch-stream", (
            f"{RULE_KERNEL_FEW} or more pinned pieces over {format_bytes(RULE_KERNEL_MAX)} go "
            "fastest as cudaMemcpyBatchAsync, handed to the driver in growing groups "
            "(built-in rule: no calibration here)"
        )
    few_large = count < RULE_PACK_MANY and size > RULE_PACK_FEW_MAX
    if memory == "pageable" and size <= RULE_PACK_MAX and not few_large:
        return "pack", (
            f"small pageable pieces (at most {format_bytes(RULE_PACK_MAX)}) are packed into one "
            "pinned buffer and moved by one copy (built-in rule: no calibration here)"
        )
    return "loop", (
        "pieces this large keep the copy engines busy whatever the method, and the loop costs "
        "no extra work (built-in rule: no calibration here)"
    )
