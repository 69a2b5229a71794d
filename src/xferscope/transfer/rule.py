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
# With the loop's pieces queued as they are read (copy_many's early pieces) the loop beat the
# kernel and _foreach_copy_ for three pinned pieces of any size and four of 16 KiB, and tied the
# kernel at 4 x 8 KiB (copyapi_early_probe.py on an H100, medians: 3 x 64 B up 15.2 us against
# the kernel's 17.9 and _foreach_copy_'s 18.7; 3 x 4 KiB down 13.7 against 16.5 and 17.1; 4 x
# 16 KiB up 22.1 against 23.5 and 24.2; 4 x 8 KiB up 20.7 against 20.7 and 23.2). So pinned
# pieces go by the loop over a size that grows with their count: (up to this count, over this).
RULE_PINNED_LOOP_OVER = ((3, 0), (4, 8 << 10), (RULE_KERNEL_FEW - 1, RULE_KERNEL_FEW_MAX))
# Down, cudaMemcpyBatchAsync lost to PyTorch's loop by 1-4% for 16-128 pinned pieces of 384 KiB
# and over (the dense grid at e0eb92f on an H100: 16 x 512 KiB 0.96, 64 x 1 MiB 0.98, 128 x
# 1.5 MiB 0.98), the driver taking its pieces before it starts the first; from 256 it won
# (256 x 512 KiB 1.09). Those go by the loop, which copies the first piece at once.
RULE_DOWN_LOOP_FROM, RULE_DOWN_LOOP_COUNT = 384 << 10, 256
# On an H100 packing lost to a loop of cudaMemcpyAsync from 96 KiB a piece in most batches of
# 2-15 pieces (4 x 256 KiB up: 122 us against 89; 15 x 128 KiB down: 334 against 326)
RULE_PACK_MAX = 64 << 10
# The dense grid on an H100 (copyapi_dense.py, PyTorch tensors, interleaved with PyTorch's loop):
# two pageable pieces went faster as two cudaMemcpyAsync than packed (up: 24.6 us against 16.7;
# pinned pieces: RULE_PINNED_LOOP_OVER), and 4 pageable
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
    if memory == "pinned":
        over = next((o for most, o in RULE_PINNED_LOOP_OVER if count <= most), None)
        if over is not None and size > over:
            pieces = f"{count} pinned pieces" + (f" of over {format_bytes(over)}" if over else "")
            return "loop", (
                f"{pieces} move fastest by a loop of cudaMemcpyAsync, each queued as it is read "
                "(built-in rule: no calibration here)"
            )
        if direction == "d2h" and size >= RULE_DOWN_LOOP_FROM and count < RULE_DOWN_LOOP_COUNT:
            return "loop", (
                f"fewer than {RULE_DOWN_LOOP_COUNT} pinned pieces of "
                f"{format_bytes(RULE_DOWN_LOOP_FROM)} or more move down fastest by a loop of "
                "cudaMemcpyAsync, which starts the first copy at once (built-in rule: no "
                "calibration here)"
            )
    elif count < RULE_BATCH_FROM:
        return "loop", (
            f"fewer than {RULE_BATCH_FROM} copies are one cudaMemcpyAsync each (built-in rule: no "
            "calibration here)"
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
