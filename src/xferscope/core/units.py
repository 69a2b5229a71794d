"""Parsing and formatting of sizes, times and rates. Inside, everything is SI base units
(bytes, seconds, bytes per second); these helpers are used only at the edges."""

from __future__ import annotations

import math
import re

from .compiled import engine_module
from .errors import OptionError
from .limits import MOST_BYTES

_BINARY = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([a-zA-Z]*)\s*$")

SIZE_HELP = (
    "a byte count such as 4096, 64KiB, 1MiB, 1GiB (K/M/G = KiB/MiB/GiB; KB/MB/GB = 10^3/6/9)"
)


def parse_size(text: str) -> int:
    """Parses a size in bytes. KiB/MiB/GiB and bare K/M/G are powers of 1024; kB/KB/MB/GB are
    powers of 1000 (dd's convention). Raises ValueError with a readable reason."""
    match = _SIZE.match(text)
    if not match:
        raise ValueError(f"'{text}' is not {SIZE_HELP}")
    number, unit = float(match.group(1)), match.group(2).lower()
    if unit.endswith("ib") and unit[:-2] in _BINARY and unit[:-2]:
        factor = _BINARY[unit[:-2]]
    elif unit.endswith("b") and unit[:-1] in _DECIMAL:
        factor = _DECIMAL[unit[:-1]]
    elif unit in ("", "b"):
        factor = 1
    elif unit in _BINARY:
        factor = _BINARY[unit]
    else:
        raise ValueError(f"'{text}' has an unknown unit '{match.group(2)}'; use {SIZE_HELP}")
    value = number * factor
    if not math.isfinite(value) or value != int(value):
        raise ValueError(f"'{text}' is not a whole number of bytes")
    if value > MOST_BYTES:
        raise ValueError(
            f"'{text}' is more than {format_bytes(MOST_BYTES)}, more than any machine holds"
        )
    return int(value)


def alignment_class(*dims: int) -> int:
    """The largest power of two dividing every dimension (1 for odd ones): a GEMM shape's
    alignment class, by which seed 003's Table III groups sizes."""
    g = 0
    for d in dims:
        g = math.gcd(g, d)
    return g & -g if g else 1


def format_bytes(n: float) -> str:
    """Binary units, the way transfer sizes are usually chosen: 4 KiB, 1.5 MiB, 1 GiB. The
    engine's rule (format_bytes in engine/src/error.cpp), so its messages name sizes the same
    way."""
    return str(engine_module().format_bytes(float(n)))


def format_seconds(seconds: float) -> str:
    if seconds < 1e-3:
        return f"{seconds * 1e6:.2f} µs"
    if seconds < 1:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds:.2f} s"


def format_rate(bytes_per_second: float) -> str:
    """GB/s means 10^9 bytes per second."""
    gbps = bytes_per_second / 1e9
    return f"{gbps:.3g} GB/s" if gbps < 100 else f"{gbps:.0f} GB/s"


def format_flops(flops: float) -> str:
    """TFLOP/s means 10^12 floating-point operations per second; GFLOP/s below one."""
    if flops >= 1e12:
        return f"{flops / 1e12:.3g} TFLOP/s" if flops < 1e14 else f"{flops / 1e12:.0f} TFLOP/s"
    return f"{flops / 1e9:.3g} GFLOP/s"


_SECONDS = {"": 1.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
_SECONDS |= {"m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0}  # a schedule's periods
_TIME = re.compile(r"^\s*([+-]?[0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([a-zA-Zµ]*)\s*$")
TIME_HELP = "a time such as 0, 500us, 2ms, 0.1s, 30m or 6h (a bare number is seconds)"


def parse_seconds(option: str, text: str) -> float:
    """A duration in seconds: a number with an optional unit s, ms, us (µs) or ns."""
    match = _TIME.match(text)
    if not match or match.group(2).lower() not in _SECONDS:
        raise OptionError(option, f"'{text.strip()}' is not {TIME_HELP}")
    value = float(match.group(1)) * _SECONDS[match.group(2).lower()]
    if not math.isfinite(value) or value < 0:
        raise OptionError(option, f"'{text.strip()}' is not a finite time of 0 or more")
    return value


def parse_seconds_list(option: str, text: str) -> tuple[float, ...]:
    items = [item for item in text.split(",") if item.strip()]
    if not items:
        raise OptionError(option, f"give one or more times, each {TIME_HELP}")
    return tuple(sorted({parse_seconds(option, item) for item in items}))


def parse_counts(option: str, text: str, least: int) -> tuple[int, ...]:
    """A comma-separated list of whole numbers of at least `least`, sorted, without duplicates."""
    items = [item.strip() for item in text.split(",") if item.strip()]
    if not items:
        raise OptionError(option, f"give one or more whole numbers of at least {least}")
    values: set[int] = set()
    for item in items:
        if not re.fullmatch(r"\+?[0-9]+", item) or int(item) < least:
            raise OptionError(option, f"'{item}' is not a whole number of at least {least}")
        values.add(int(item))
    return tuple(sorted(values))


# ---- lists, sizes and GPUs, the one rule each for every option -----------------------------


def parse_list(option: str, text: str, accepted: tuple[str, ...]) -> tuple[str, ...]:
    """A comma-separated list of names from `accepted`, duplicates dropped, order kept."""
    items = [item.strip().lower() for item in text.split(",") if item.strip()]
    if not items:
        raise OptionError(option, f"give one or more of {', '.join(accepted)}")
    for item in items:
        if item not in accepted:
            raise OptionError(option, f"unknown value '{item}' (accepted: {', '.join(accepted)})")
    return tuple(dict.fromkeys(items))


def parse_size_option(option: str, text: str) -> int:
    try:
        size = parse_size(text)
    except ValueError as exc:
        raise OptionError(option, str(exc)) from None
    if size < 1:
        raise OptionError(option, f"'{text}' is not a size of at least 1 byte")
    return size


def parse_sizes(option: str, text: str) -> tuple[int, ...]:
    items = [item for item in text.split(",") if item.strip()]
    if not items:
        raise OptionError(option, f"give one or more sizes, each {SIZE_HELP}")
    return tuple(sorted({parse_size_option(option, item) for item in items}))


def parse_devices(option: str, text: str) -> tuple[int, ...]:
    """GPU indices, comma-separated: the one rule for every command's -g/--device."""
    if not text.strip():
        raise OptionError(option, "give one or more GPU indices (0, 1, ...), comma-separated")
    devices: list[int] = []
    for item in (i.strip() for i in text.split(",")):
        if not item.isdigit():
            raise OptionError(option, f"'{item}' is not a GPU index (0, 1, ...)")
        devices.append(int(item))
    return tuple(dict.fromkeys(devices))


def parse_device(option: str, text: str) -> int:
    """One GPU index: parse_devices' rule, for the commands that run on one GPU."""
    devices = parse_devices(option, text)
    if len(devices) != 1:
        raise OptionError(option, f"'{text}': give one GPU index; this runs on one GPU")
    return devices[0]
