"""Tables at a terminal's width (report/fit.py): a number or a key is never cut, text wraps,
what does not fit is left out and named, and a sweep's curves go to as many tables as need be.
Checked on what rich draws, at 80 columns and wider."""

from __future__ import annotations

import io
import json

import pytest
from rich.console import Console

from xferscope.report.fit import Column, fitted, packed, table_width


def drawn(table: object, width: int) -> list[str]:
    console = Console(width=width, file=io.StringIO(), color_system=None, highlight=False)
    console.print(table)
    return console.file.getvalue().splitlines()  # type: ignore[attr-defined]


def test_numbers_stay_whole_text_wraps_and_what_is_left_out_is_named():
    columns = (
        Column("run", "right", keep=9),
        Column("a long description", whole=False, keep=8, least=12),
        Column("bandwidth GB/s", "right", keep=7),
        Column("host", keep=1),
    )
    long = "pinned memory by cudaMemcpyAsync on a copy engine, device time"
    rows = [("17", long, "0.00015", "a" * 30), ("2", "short", "102,734.5", "b" * 30)]
    lines = drawn(fitted("t", columns, rows, 60), 60)
    text = "\n".join(lines)
    assert all(len(line) <= 60 for line in lines), text
    assert "0.00015" in text and "102,734.5" in text and "…" not in text
    assert "left out to fit 60 columns: host" in text.replace("\n", " ")
    wide = "\n".join(drawn(fitted("t", columns, rows, 200), 200))
    assert "a" * 30 in wide and "left out" not in wide  # room for all


def test_column_groups_are_packed_into_tables_of_the_width():
    assert table_width([4, 6]) == 4 + 3 + 6 + 3 + 1
    groups = [[10, 8]] * 5  # 24 characters a group
    assert packed([7], groups, 80) == [2, 2, 1]  # 10 + 3 x 24 + 1 = 83 > 80
    assert packed([7], groups, 40) == [1] * 5 and packed([7], groups, 10) == [1] * 5
    assert packed([7], groups, 1000) == [5]


@pytest.mark.parametrize("width", [80, 100])
def test_sweep_tables_cut_no_number(width):
    from xferscope.report.sweep_tables import _point_cells, points_tables

    from .run_samples import _curves

    result = _curves(0, 1)
    tables = points_tables(result, width)
    text = "\n".join(line for t in tables for line in drawn(t, width))
    assert all(len(line) <= width for line in text.splitlines())
    assert "…" not in text
    for curve in result.curves:
        for p in curve.points:
            for cell in _point_cells(curve, p.bytes):
                assert cell in text
    assert len(tables) > 1  # 12 curves do not fit one table at these widths


def test_cases_at_80_columns_keep_every_key_whole(capsys, monkeypatch):
    from xferscope import cli
    from xferscope.cli.app import stdout

    monkeypatch.setattr(stdout, "width", 80)
    assert cli.main(["cases", "--simulate", "--json"]) == 0
    keys = [r["key"] for r in json.loads(capsys.readouterr().out)["cases"]]
    assert cli.main(["cases", "--simulate"]) == 0
    out = capsys.readouterr().out
    assert all(len(line) <= 80 for line in out.splitlines())
    assert all(k in out for k in keys)  # each on one line, never split
    assert "on this" in out and "machine" in out  # the waiver column stays


@pytest.mark.parametrize(
    ("columns", "terminal", "width"),
    [("80", False, 80), (" 120 ", True, 120), ("0", True, 40), ("1", False, 40),
     ("-5", False, 160), ("abc", False, 160), ("", True, None), ("99999999", False, 99999999)],
)  # fmt: skip
def test_the_output_width_follows_columns_within_reason(columns, terminal, width):
    from xferscope.cli.app import output_width

    assert output_width(columns, terminal) == width
