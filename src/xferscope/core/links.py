"""Physical limits of the links data crosses, per direction, in bytes per second."""

from __future__ import annotations

# Transfer rate per lane (GT/s) and line-code efficiency by PCIe generation. Gen6 runs in FLIT
# mode, where 242 of every 256 bytes carry data.
_PCIE = {
    1: (2.5e9, 8 / 10),
    2: (5.0e9, 8 / 10),
    3: (8.0e9, 128 / 130),
    4: (16.0e9, 128 / 130),
    5: (32.0e9, 128 / 130),
    6: (64.0e9, 242 / 256),
}

NVLINK4_PER_LINK = 25e9  # H100/H200: 18 links, 450 GB/s per direction


def pcie_peak(generation: int | None, width: int | None) -> float | None:
    """Raw per-direction bandwidth of a PCIe link, before packet overhead (~88% is typical)."""
    if generation not in _PCIE or not width:
        return None
    rate, efficiency = _PCIE[generation]
    return rate * efficiency / 8 * width


def hbm_peak(memory_clock_khz: int, bus_width_bits: int) -> float | None:
    """Peak device memory traffic (read + write) from the memory clock and bus width (DDR)."""
    if memory_clock_khz <= 0 or bus_width_bits <= 0:
        return None
    return 2 * memory_clock_khz * 1e3 * bus_width_bits / 8
