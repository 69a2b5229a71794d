"""Misaligned copies on a GPU: every mechanism moves every byte from and to offsets off any
boundary, the comparison reads the pattern from where the copy started, and a flipped byte is
still caught."""

from __future__ import annotations

import pytest

from xferscope.core import cases

pytestmark = pytest.mark.gpu
SIZES = (1, 7, 4096 + 3, (1 << 20) + 5)
OFFSETS = ((1, 0), (0, 1), (4095, 3), (13, 4095))


@pytest.mark.parametrize(
    "direction,memory,mechanism",
    [
        ("h2d", "pinned", "async"),
        ("h2d", "pageable", "memcpy"),
        ("d2h", "pinned", "kernel"),
        ("d2h", "pageable", "staged"),
        ("roundtrip", "pinned", "driver-async"),
        ("d2d", "device", "async"),
        ("d2d", "device", "kernel"),
    ],
)
def test_misaligned_copies_arrive_whole(native_engine, direction, memory, mechanism):
    for host_offset, device_offset in OFFSETS:
        t = native_engine.open_transfer(
            0, direction, memory, mechanism, max(SIZES), 8 << 20,
            host_offset=host_offset, device_offset=device_offset,
        )  # fmt: skip
        try:
            t.fill(0xA11)
            for size in SIZES:
                v = t.verify(size)
                assert v.ok and v.bytes_checked == size, (host_offset, device_offset, size)
                bad = t.verify(size, inject_fault=True)
                assert not bad.ok and bad.first_mismatch == size // 2, (host_offset, size)
            timing = "device" if t.blocks_for_device_timing else "api"
            assert t.time(timing, max(SIZES), 8).seconds > 0
        finally:
            t.close()


def test_an_offset_past_a_page_is_refused(native_engine):
    most = int(cases.LIMITS["most_offset"])
    with pytest.raises(Exception, match="offset"):
        native_engine.open_transfer(0, "h2d", "pinned", "async", 4096, 0, host_offset=most + 1)
