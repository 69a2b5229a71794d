"""xferscope: how fast data really moves between host memory and NVIDIA GPUs, and why."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .core.version import __version__

__all__ = [
    "StagedCopier",
    "StagedPlan",
    "__version__",
    "copy_many",
    "copy_to_device",
    "copy_to_host",
    "load",
    "release",
    "to_device",
    "to_host",
    "warmup",
]

if TYPE_CHECKING:
    from .transfer.first import copy_many, copy_to_device, copy_to_host, to_device, to_host, warmup
    from .transfer.loading.load import load
    from .transfer.moving import release
    from .transfer.staged import StagedCopier, StagedPlan
else:
    # Hidden from type checkers: a module __getattr__ would make every unresolved submodule,
    # the native _engine among them, look like an attribute of type Any.

    from .transfer import first as _first  # light: a first call pays no import
    from .transfer import setting_up as _setting_up

    _FIRST = ("copy_many", "copy_to_device", "copy_to_host", "to_device", "to_host", "warmup")

    def __getattr__(name: str) -> object:
        """The copy API, imported on first use: `import xferscope` loads neither NumPy nor the
        native engine, and needs no GPU or driver. Until the copy API is set up, its calls
        are transfer.first's, which never wait for the setting up; then its own (kept here)."""
        if name in _FIRST:
            if not _setting_up.ready():
                return getattr(_first, name)
            fn = _setting_up.api(name)
            globals()[name] = fn
            return fn
        if name in ("StagedCopier", "StagedPlan"):
            from .transfer import staged

            return getattr(staged, name)
        if name == "release":
            from .transfer import moving

            return moving.release
        if name == "load":
            from .transfer.loading.load import load

            return load
        raise AttributeError(f"module 'xferscope' has no attribute {name!r}")
