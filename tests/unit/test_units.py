"""Parsing and formatting of sizes, times and rates (xferscope.core.units)."""

from __future__ import annotations

import pytest

from xferscope.core.units import format_bytes, format_rate, format_seconds, parse_size


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0", 0),
        ("1", 1),
        ("4096", 4096),
        ("1B", 1),
        ("4KiB", 4 << 10),
        ("1MiB", 1 << 20),
        ("1GiB", 1 << 30),
        ("1TiB", 1 << 40),
        ("64kib", 64 << 10),
        ("1K", 1 << 10),
        ("1M", 1 << 20),
        ("1G", 1 << 30),
        ("1k", 1 << 10),
        ("1KB", 10**3),
        ("1kB", 10**3),
        ("1MB", 10**6),
        ("1GB", 10**9),
        ("1.5KiB", 1536),
        ("0.5MiB", 1 << 19),
        ("1e3", 1000),
    ],
)
def test_parse_size_accepts(text: str, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["  4KiB", "4KiB  ", " 4 KiB ", "\t4\tKiB\n", "4 KiB"])
def test_parse_size_ignores_whitespace(text: str) -> None:
    assert parse_size(text) == 4096


def test_parse_size_returns_an_int() -> None:
    assert type(parse_size("1.5KiB")) is int
    assert type(parse_size("1e3")) is int


@pytest.mark.parametrize("text", ["abc", "", "   ", "1XB", "1Q", "KiB", "1iB", "0.5", "1.5", "-1"])
def test_parse_size_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        parse_size(text)


def test_parse_size_errors_are_readable() -> None:
    with pytest.raises(ValueError, match="unknown unit 'XB'"):
        parse_size("1XB")
    with pytest.raises(ValueError, match="whole number of bytes"):
        parse_size("0.5")
    with pytest.raises(ValueError, match="'abc' is not"):
        parse_size("abc")


@pytest.mark.parametrize(
    ("n", "expected"),
    [
        (0, "0 B"),
        (1, "1 B"),
        (1023, "1023 B"),
        (1024, "1 KiB"),
        (1536, "1.5 KiB"),
        (123456, "121 KiB"),
        (1 << 20, "1 MiB"),
        (3 << 29, "1.5 GiB"),
        (1 << 30, "1 GiB"),
        (1 << 40, "1 TiB"),
    ],
)
def test_format_bytes(n: int, expected: str) -> None:
    assert format_bytes(n) == expected


@pytest.mark.parametrize("n", [(1 << 20) - 1, (1 << 30) - 1, 1000 * 1024 + 1])
def test_format_bytes_never_uses_scientific_notation(n: int) -> None:
    assert "e+" not in format_bytes(n)


@pytest.mark.parametrize(
    ("seconds", "expected"),
    [
        (0.0, "0.00 µs"),
        (5e-7, "0.50 µs"),
        (1.5e-6, "1.50 µs"),
        (999e-6, "999.00 µs"),
        (1e-3, "1.00 ms"),
        (0.25, "250.00 ms"),
        (1.0, "1.00 s"),
        (12.345, "12.35 s"),
    ],
)
def test_format_seconds(seconds: float, expected: str) -> None:
    assert format_seconds(seconds) == expected


@pytest.mark.parametrize(
    ("rate", "expected"),
    [
        (0.0, "0 GB/s"),
        (2.5e8, "0.25 GB/s"),
        (5e9, "5 GB/s"),
        (55.4e9, "55.4 GB/s"),
        (123.4e9, "123 GB/s"),
        (1e12, "1000 GB/s"),
    ],
)
def test_format_rate_uses_decimal_gigabytes(rate: float, expected: str) -> None:
    assert format_rate(rate) == expected


@pytest.mark.parametrize(
    ("n", "expected"),
    [(143771 << 20, "140 GiB"), (100 << 20 | 1, "100 MiB"), (int(10.5 * (1 << 30)), "10.5 GiB")],
)
def test_format_bytes_keeps_the_digits_of_whole_numbers(n: int, expected: str) -> None:
    assert format_bytes(n) == expected
