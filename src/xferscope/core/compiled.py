"""The compiled engine module (xferscope._engine), loaded on first use, and the results it
defines, which the simulated engine makes too."""

from __future__ import annotations

from functools import cache
from typing import Any

from .errors import NoDeviceError


@cache
def engine_module() -> Any:
    """The compiled engine module, loaded on first use: importing xferscope needs neither a
    GPU nor a driver, and loads no native code until something asks for it."""
    try:
        from .. import _engine  # type: ignore[attr-defined]  # built by CMake, a leaf module
    except ImportError as exc:  # pragma: no cover - only a broken install gets here
        raise NoDeviceError(f"the native engine is not built ({exc}); reinstall xferscope") from exc
    return _engine


def result(kind: str, **fields: Any) -> Any:
    """A result of the engine's class `kind`, made in Python (the simulated engine's)."""
    return getattr(engine_module(), kind)(**fields)
