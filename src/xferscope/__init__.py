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
    "release",
    "to_device",
    "to_host",
    "warmup",
]

if TYPE_CHECKING:
    from .transfer.copy import copy_many
    from .transfer.moving import release, to_device, to_host, warmup
    from .transfer.staged import StagedCopier, StagedPlan, copy_to_device, copy_to_host
else:
    # Hidden from type checkers: a module __getattr__ would make every unresolved submodule,
    # the native _engine among them, look like an attribute of type Any.

    def __getattr__(name: str) -> object:
        """The staged-copy API, imported on first use: `import xferscope` loads neither NumPy
        nor the native engine, and needs no GPU or driver."""
        if name in ("StagedCopier", "StagedPlan", "copy_to_device", "copy_to_host"):
            from .transfer import staged

            return getattr(staged, name)
        if name == "copy_many":
            from .transfer.copy import copy_many

            return copy_many
        if name in ("release", "to_device", "to_host", "warmup"):
            from .transfer import moving

            return getattr(moving, name)
        raise AttributeError(f"module 'xferscope' has no attribute {name!r}")
