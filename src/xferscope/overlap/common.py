"""What the three overlap experiments share: their schema version and header, failures, the
checks of host and device memory, and small formatting helpers.

Schema history (each experiment's document has its own name, overlap-cpu, -buffers and -gpu;
bump SCHEMA_VERSION on any change a reader must know about):
  1  first version: xferscope-overlap-cpu, xferscope-overlap-buffers, xferscope-overlap-gpu.
  2  "findings" (typed) replace the "warnings" strings; version 1 is still read.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, TypeVar

from ..core import machine
from ..core.engine import Engine
from ..core.errors import OptionError
from ..core.findings import Finding
from ..core.units import format_bytes
from ..documents.envelope import document_header, header_fields
from ..documents.reader import Field, check_schema

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

SCHEMA_VERSION = 2
OLDEST_SCHEMA_VERSION = 1  # still read
# Pinned pages cannot be swapped or moved: a plan that pins more than this share of the
# machine's memory is refused, whatever --max-pinned says.
PINNED_SHARE = 0.5


def _number(value: float | None) -> str:
    return "" if value is None else f"{value:.9g}"


@dataclass(frozen=True, slots=True)
class Failure:
    """A part of the experiment the engine could not run (allocation or CUDA error)."""

    what: str
    error: str


def check_host_memory(option: str, need: int, what: str, pinned: bool = True) -> None:
    """Refuses, before anything runs, host memory a plan cannot have: pinned memory beyond
    PINNED_SHARE of MemTotal, pageable memory beyond all of it."""
    total = machine.host_memory_total()
    if total is None:
        return
    limit = PINNED_SHARE * total if pinned else total
    if need > limit:
        share = f"half of this machine's {format_bytes(total)}" if pinned else format_bytes(total)
        kind = "pinned host memory" if pinned else "host memory"
        reason = "; pinned pages cannot be swapped, so the system would run short" if pinned else ""
        raise OptionError(
            option, f"{what}: {format_bytes(need)} of {kind} is more than {share}{reason}"
        )


def check_device_memory(engine: Engine, device: int, option: str, need: int, what: str) -> None:
    free, _ = engine.memory_info(device)
    if need > free:
        raise OptionError(
            option,
            f"{what} needs {format_bytes(need)} of device memory on GPU {device}, but "
            f"{format_bytes(free)} is free",
        )


def _header(schema: str, r: Any) -> dict[str, Any]:
    return document_header(schema, SCHEMA_VERSION, r) | {
        "failures": [{"what": f.what, "error": f.error} for f in r.failures]
    }


def _header_fields(d: Field) -> dict[str, Any]:
    failures = tuple(
        Failure(f["what"].string(), f["error"].string()) for f in d.get("failures", []).items()
    )
    return header_fields(d) | {"failures": failures}


def _check_schema(d: dict[str, Any], name: str) -> None:
    check_schema(d, name, SCHEMA_VERSION, OLDEST_SCHEMA_VERSION)


R = TypeVar("R", bound="DataclassInstance")


def with_findings(result: R, findings: list[Finding]) -> R:
    return replace(result, findings=tuple(findings))
