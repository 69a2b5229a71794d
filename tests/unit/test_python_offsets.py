"""The trace's table of CPython offsets (engine/src/trace/pystack.hpp, kLayouts) is what each
minor's own headers say: scripts/python-offsets compiles a program against the headers of every
CPython 3.10-3.14 this machine has and prints its row, which must be the table's. A minor
without its headers is skipped (tests/unit/test_pystack.py still reads its stacks)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from .offsets_script import offsets_script

HEADER = Path(__file__).resolve().parents[2] / "engine" / "src" / "trace" / "pystack.hpp"


def _table() -> dict[int, list[int]]:
    """kLayouts' rows by minor, read from the header."""
    text = HEADER.read_text()
    body = text[text.index("kLayouts[] = {") : text.index("};", text.index("kLayouts[] = {"))]
    rows = re.findall(r"\{(-?\d+(?:,\s*-?\d+)+)\}", body)
    table = {}
    for row in rows:
        minor, *values = (int(v) for v in row.split(","))
        table[minor] = values
    return table


def test_the_table_has_a_row_of_every_field_for_every_minor_read():
    script = offsets_script()
    assert sorted(_table()) == list(script.MINORS)
    assert all(len(v) == len(script.FIELDS) for v in _table().values())


@pytest.mark.parametrize("python", offsets_script().interpreters())
def test_each_minors_row_is_what_its_headers_say(python):
    found = offsets_script().row(python)
    if isinstance(found, str):
        pytest.skip(found)
    minor, values, version = found
    assert _table()[minor] == values, f"CPython {version}: its headers give {values}"
