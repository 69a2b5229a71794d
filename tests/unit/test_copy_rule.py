"""copy_many's built-in rule where the dense grid (benchmarks/copyapi_dense.py) measured it on
an H100: two pieces go by two copies, three pinned ones over 4 KiB too, and 3-5 pageable
pieces are packed only while small."""

from __future__ import annotations

import pytest

from xferscope.transfer import rule


@pytest.mark.parametrize(
    ("way", "memory", "count", "size", "method"),
    [
        ("h2d", "pinned", 2, 4 << 10, "loop"),  # the kernel lost 0.81-0.93
        ("d2h", "pageable", 2, 64, "loop"),  # packing lost 0.66-0.93
        ("h2d", "pinned", 3, 4 << 10, "kernel"),  # won 1.01-1.10
        ("h2d", "pinned", 3, 6 << 10, "loop"),  # the kernel lost from 6 KiB
        ("d2h", "pinned", 3, 16 << 10, "loop"),
        ("h2d", "pinned", 4, 16 << 10, "kernel"),
        ("h2d", "pageable", 4, 6 << 10, "pack"),
        ("h2d", "pageable", 5, 8 << 10, "loop"),  # 4 x 8-48 KiB packed lost 0.86-0.93
        ("h2d", "pageable", 6, 8 << 10, "pack"),  # from 6 pieces packing won 1.2-3x
    ],
)
def test_few_pieces_go_the_way_the_dense_grid_measured(way, memory, count, size, method):
    assert rule.rule(way, memory, count, size, True)[0] == method
