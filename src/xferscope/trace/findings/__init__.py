"""The findings of a trace, one module each (as HTA has one analyzer per question): each holds
its CODE, its ADVICE in the words of each framework the calls go through (None: CUDA's own), its
ORDER among findings of equal price, and find(context) -> TraceFinding | None. registry() finds
them: a new finding is one module here, nothing else to edit."""

from __future__ import annotations

import importlib
import pkgutil
from functools import cache
from types import ModuleType

from .base import Context, Place, TraceFinding

FOUNDATION = ("base", "runs", "starving")  # the modules that are no finding


@cache
def registry() -> tuple[ModuleType, ...]:
    """Every finding's module, in ORDER."""
    found = [
        importlib.import_module(f"{__name__}.{info.name}")
        for info in pkgutil.iter_modules(__path__)
        if info.name not in FOUNDATION
    ]
    return tuple(sorted(found, key=lambda m: (m.ORDER, m.__name__)))


def find_all(context: Context) -> list[TraceFinding]:
    """What every finding of the registry finds in the trace, in ORDER."""
    return [f for kind in registry() if (f := kind.find(context)) is not None]


__all__ = ["Context", "Place", "TraceFinding", "find_all", "registry"]
