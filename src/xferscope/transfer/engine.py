"""The engine a program's copies run on: the native one, made on the first copy (so importing
xferscope.transfer needs no GPU or driver), or the one `use_engine` sets (tests and tools set
the simulated engine)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..core.engine import Engine

_engine: list[Engine] = []  # the engine in use, once made or set


def default_engine() -> Engine:
    """The engine copy_many, copy_to_device, copy_to_host and StagedCopier use when given none."""
    if not _engine:
        from ..core.engine import NativeEngine

        _engine.append(NativeEngine())
    return _engine[0]


def use_engine(engine: Engine | None) -> None:
    """Makes `engine` the one the runtime API uses when given none (None: the native engine,
    made again on the next copy)."""
    _engine[:] = [] if engine is None else [engine]


def chosen() -> Engine | None:
    """The engine in use, or None where none is made or set yet (nothing is made here)."""
    return _engine[0] if _engine else None
