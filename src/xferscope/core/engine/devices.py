"""Facts about an engine's GPUs that every layer asks the same way: the CUDA version as text,
the compute capability as the engine's rules take it, and the one check of a GPU index."""

from __future__ import annotations

from typing import Any, Protocol

from ..errors import OptionError
from .protocols import Engine


class _Facts(Protocol):
    def device_info(self, index: int) -> dict[str, Any]: ...


def format_cuda_version(version: int) -> str:
    """12040 -> '12.4'."""
    return f"{version // 1000}.{version % 1000 // 10}" if version else "none"


def compute_capability(engine: _Facts, device: int) -> int:
    """The GPU's compute capability as major * 10 + minor (9.0 -> 90), as the engine's rules
    take it."""
    major, minor = str(engine.device_info(device)["compute_capability"]).split(".")
    return int(major) * 10 + int(minor)


def check_device(engine: Engine, device: int, option: str = "--device") -> None:
    check_index(device, engine.device_count(), option)


def check_index(device: int, count: int, option: str = "--device") -> None:
    refusal = missing_device(device, count)
    if refusal is not None:
        raise OptionError(option, refusal)


def missing_device(device: int, count: int) -> str | None:
    """The one sentence for a GPU index the machine does not have (None: it has it)."""
    if 0 <= device < count:
        return None
    return f"no GPU with index {device}; this machine has " + (
        f"0..{count - 1}" if count else "none"
    )


def memory_refusal(engine: _Facts, device: int, memory: str) -> str | None:
    """Why this machine has no `memory` for GPU `device` (cases.memory_waiver): both engines
    refuse to open a transfer of it with these words, before allocating anything."""
    from .. import cases, host  # cases loads the engine module: not at import

    facts = host.host_facts() if memory in cases.HOST_FACT_KINDS else None
    return cases.memory_waiver(memory, engine.device_info(device), facts)
