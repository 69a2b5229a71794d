"""Click's side of core/limits.py and core/units.py: a parameter type per kind of value, so an
option is parsed and checked as it is read, with the one message every command gives."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import click

from ..core.errors import OptionError
from ..core.limits import Range
from ..core.units import parse_list


def option_name(param: click.Parameter | None) -> str:
    """The option as a person types it: its longest name (--target-time, not -t)."""
    if param is None:
        return "value"
    names = [n for n in getattr(param, "opts", ()) if n.startswith("-")]
    return max(names, key=len) if names else (param.name or "value").upper()


class Bounded(click.ParamType):  # type: ignore[type-arg]
    """A number within a core.limits.Range; counts come back as int, the rest as float."""

    def __init__(self, bounds: Range) -> None:
        self.bounds = bounds
        self.name = "integer" if bounds.kind == "count" else "number"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        option = option_name(param)
        if isinstance(value, bool):
            value = str(value)
        if isinstance(value, (int, float)):
            self.bounds.check(option, value)
        else:
            value = self.bounds.parse(option, str(value))
        return int(value) if self.bounds.kind == "count" else float(value)

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str:
        return "N" if self.bounds.kind == "count" else "X"


class Names(click.ParamType):  # type: ignore[type-arg]
    """A comma-separated list of names from `accepted`, by core.units.parse_list's rule: a
    tuple, duplicates dropped, order kept. `blank`, where given, is what an empty value means
    (else an empty value is refused)."""

    name = "text"  # shown as TEXT, as any list of words

    def __init__(
        self,
        accepted: tuple[str, ...],
        blank: tuple[str, ...] | None = None,
        refused: Mapping[str, str] | None = None,
    ) -> None:
        self.accepted = accepted
        self.blank = blank
        self.refused = refused or {}  # names known elsewhere that this option refuses: why

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        text = ",".join(value) if isinstance(value, (tuple, list)) else str(value)
        if self.blank is not None and not text.strip():
            return self.blank
        for item in (i.strip().lower() for i in text.split(",")):
            if item in self.refused:
                raise OptionError(option_name(param), f"'{item}': {self.refused[item]}")
        return parse_list(option_name(param), text, self.accepted)
