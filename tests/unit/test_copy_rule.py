"""copy_many's built-in rule where the dense grid (benchmarks/copyapi_dense.py) measured it on
an H100: two or three pinned pieces by the loop, and more over a size growing with their count;
16-255 large pinned pieces down by the loop; 3-5 pageable pieces packed only while small."""

from __future__ import annotations

import pytest

from xferscope.transfer import rule


@pytest.mark.parametrize(
    ("way", "memory", "count", "size", "method"),
    [
        ("h2d", "pinned", 2, 4 << 10, "loop"),  # the kernel lost 0.81-0.93
        ("d2h", "pageable", 2, 64, "loop"),  # packing lost 0.66-0.93
        ("h2d", "pinned", 3, 64, "loop"),  # early pieces: the loop beat the kernel
        ("d2h", "pinned", 3, 16 << 10, "loop"),
        ("h2d", "pinned", 4, 8 << 10, "kernel"),  # tied
        ("h2d", "pinned", 4, 12 << 10, "loop"),
        ("h2d", "pinned", 6, 16 << 10, "kernel"),
        ("d2h", "pinned", 6, 24 << 10, "loop"),
        ("d2h", "pinned", 16, 512 << 10, "loop"),  # the batch call lost 1-4% down
        ("d2h", "pinned", 256, 512 << 10, "batch-stream"),
        ("h2d", "pinned", 16, 512 << 10, "batch-stream"),
        ("d2h", "pinned", 16, 256 << 10, "batch-stream"),
        ("h2d", "pageable", 4, 6 << 10, "pack"),
        ("h2d", "pageable", 5, 8 << 10, "loop"),  # 4 x 8-48 KiB packed lost 0.86-0.93
        ("h2d", "pageable", 6, 8 << 10, "pack"),  # from 6 pieces packing won 1.2-3x
    ],
)
def test_few_pieces_go_the_way_the_dense_grid_measured(way, memory, count, size, method):
    assert rule.rule(way, memory, count, size, True)[0] == method
