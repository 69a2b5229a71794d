"""Tables that fit the terminal's width. A number or a key is never cut or wrapped: where a
table is too wide, text columns wrap down to their narrowest, then the columns that matter least
are left out (the table's caption names them), or a table of column groups (a sweep's curves) is
split into several tables of as many groups as fit."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from rich.table import Table
from rich.text import Text


@dataclass(frozen=True, slots=True)
class Column:
    """One column: `whole` (a number, a key, a date) is never cut; otherwise the text wraps,
    down to `least` characters. Where the width is short, columns of the lowest `keep` go
    first."""

    name: str
    justify: Literal["left", "right"] = "left"
    whole: bool = True
    keep: int = 1
    least: int = 12


def cell_width(text: str) -> int:
    """Characters the cell takes on screen: its widest line, markup not counted."""
    return max((Text.from_markup(line).cell_len for line in text.split("\n")), default=0)


def natural_width(column: Column, cells: Sequence[str]) -> int:
    """The width a column needs to show every cell (and its name) unwrapped."""
    return max([cell_width(column.name), *(cell_width(c) for c in cells)])


def table_width(widths: Sequence[int]) -> int:
    """Characters a rich table of these column widths takes: one space of padding each side of
    a cell, a border between columns and at each end."""
    return sum(w + 3 for w in widths) + 1


def least_width(column: Column, cells: Sequence[str]) -> int:
    """The narrowest a column may be: all of it when whole, else `least` (or its name's longest
    word: a heading wraps between words)."""
    natural = natural_width(column, cells)
    longest_word = max((cell_width(w) for w in column.name.split()), default=0)
    return natural if column.whole else min(natural, max(column.least, longest_word))


def fitted(
    title: str, columns: Sequence[Column], rows: Sequence[Sequence[str]], width: int
) -> Table:
    """A table of these columns and rows that fits `width` characters: text wraps; where that
    is not enough, columns of the lowest `keep` are left out, and the caption says which."""
    cells = [[row[i] for row in rows] for i in range(len(columns))]
    shown = list(range(len(columns)))

    def needed(kept: list[int]) -> int:
        return table_width([least_width(columns[i], cells[i]) for i in kept])

    while len(shown) > 1 and needed(shown) > width:
        shown.remove(min(shown, key=lambda i: (columns[i].keep, -i)))
    # whole columns at their natural width; what is left shared out evenly by the text
    # columns, none past its natural width (a short column then shows whole)
    widths = {i: least_width(columns[i], cells[i]) for i in shown}
    natural = {i: natural_width(columns[i], cells[i]) for i in shown}
    spare = width - table_width(list(widths.values()))
    growing = [i for i in shown if not columns[i].whole and widths[i] < natural[i]]
    while spare > 0 and growing:
        share = max(1, spare // len(growing))
        for i in growing:
            grow = min(share, natural[i] - widths[i], spare)
            widths[i] += grow
            spare -= grow
        growing = [i for i in growing if widths[i] < natural[i]]
    table = Table(title=title, title_justify="left")
    for i in shown:
        c = columns[i]
        table.add_column(
            c.name,
            justify=c.justify,
            no_wrap=c.whole,
            width=widths[i],
            overflow="ellipsis" if c.whole else "fold",
        )
    for row in rows:
        table.add_row(*(row[i] for i in shown))
    left_out = [columns[i].name for i in range(len(columns)) if i not in shown]
    if left_out:
        table.caption = (
            f"left out to fit {width} columns: {', '.join(left_out)} (a wider terminal or "
            "--json shows them)"
        )
        table.caption_justify = "left"
    return table


def packed(fixed: Sequence[int], groups: Sequence[Sequence[int]], width: int) -> list[int]:
    """Column groups (each a list of column widths) packed in order into tables of `width`
    characters beside the fixed columns: how many groups each table takes (at least one)."""
    counts: list[int] = []
    start = 0
    while start < len(groups):
        n = 1
        while (
            start + n < len(groups)
            and table_width([*fixed, *(w for g in groups[start : start + n + 1] for w in g)])
            <= width
        ):
            n += 1
        counts.append(n)
        start += n
    return counts
