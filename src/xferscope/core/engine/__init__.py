"""The engine every command drives: its protocol (protocols.py), the native implementation
over the compiled module (native.py, its handles native_handles.py; core/compiled.py loads the
module), the simulated one that runs everything without a GPU (simulated*.py: a link model with
the same result classes), and `open_engine`, which picks one. Which combinations an engine
accepts is the case table's to say (core/cases.py): both engines ask it."""

from __future__ import annotations

import os
from typing import Any

from ..compiled import engine_module, result
from ..errors import OptionError
from ..units import parse_devices
from . import protocols
from .devices import check_device, compute_capability, format_cuda_version, memory_refusal
from .native import NativeEngine
from .native_handles import close_native
from .protocols import *  # noqa: F403 (the Protocols are this package's types)

__all__ = [
    *protocols.__all__,
    "NativeEngine",
    "check_device",
    "close_native",
    "compute_capability",
    "engine_module",
    "format_cuda_version",
    "memory_refusal",
    "open_engine",
    "result",
]


PACE_VARIABLE = "XFERSCOPE_SIMULATE_PACE"
GPUS_VARIABLE = "XFERSCOPE_SIMULATE_GPUS"
LINKS_VARIABLE = "XFERSCOPE_SIMULATE_LINKS"
BUSY_VARIABLE = "XFERSCOPE_SIMULATE_BUSY"
FAIL_VARIABLE = "XFERSCOPE_SIMULATE_FAIL"
CC_VARIABLE = "XFERSCOPE_SIMULATE_CC"


def simulated_busy() -> tuple[int, ...]:
    """$XFERSCOPE_SIMULATE_BUSY: simulated GPUs another job keeps busy ("0,2"), as the exporter
    sees them."""
    text = os.environ.get(BUSY_VARIABLE, "").strip()
    return parse_devices(BUSY_VARIABLE, text) if text else ()


def simulated_links(text: str) -> dict[int, int]:
    """$XFERSCOPE_SIMULATE_LINKS: the lanes some simulated GPUs' links trained to, "1:8,3:4"
    (GPU 1 at x8, GPU 3 at x4; the others x16)."""
    widths: dict[int, int] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        gpu, _, width = part.partition(":")
        if not (gpu.isdigit() and width.isdigit() and int(width) in (1, 2, 4, 8, 16)):
            raise OptionError(
                LINKS_VARIABLE, f"'{part}' is not GPU:LANES with LANES 1, 2, 4, 8 or 16 (1:8)"
            )
        widths[int(gpu)] = int(width)
    return widths


def open_engine(simulate: bool = False, **simulated: Any) -> protocols.Engine:
    """The native engine, or the simulated one. $XFERSCOPE_SIMULATE_PACE (a number, 0 or more)
    makes the simulated engine take that share of its modelled time in real time, so its
    progress can be watched and interrupted (tests do); $XFERSCOPE_SIMULATE_GPUS (1 to 64)
    gives it that many GPUs, all peers of each other (an 8-GPU node in CI);
    $XFERSCOPE_SIMULATE_LINKS trains some of their links down (simulated_links),
    $XFERSCOPE_SIMULATE_FAIL ("1,3") makes those GPUs fail every transfer, as GPUs fallen off
    the bus do, and $XFERSCOPE_SIMULATE_CC=1 models a confidential computing system.
    `simulated` sets the simulated engine's other parameters (a fleet's ranks: their seed, a
    slow link, ...)."""
    if simulate:
        from .simulated import SimulatedEngine  # loaded when asked for: it needs NumPy

        text = os.environ.get(PACE_VARIABLE, "0").strip() or "0"
        try:
            pace = float(text)
        except ValueError:
            pace = -1.0
        if not 0 <= pace < 1e3:  # also refuses nan and inf
            raise OptionError(PACE_VARIABLE, f"'{text}' is not a number from 0 to 1000")
        gpus = os.environ.get(GPUS_VARIABLE, "1").strip() or "1"
        if not gpus.isdigit() or not 1 <= int(gpus) <= 64:
            raise OptionError(GPUS_VARIABLE, f"'{gpus}' is not a count of GPUs from 1 to 64")
        links = simulated_links(os.environ.get(LINKS_VARIABLE, ""))
        given: dict[str, Any] = {"pace": pace, "devices": int(gpus), "link_widths": links}
        failing = os.environ.get(FAIL_VARIABLE, "").strip()
        if failing:  # GPUs fallen off the bus: every transfer fails with a CUDA error
            given["failing_devices"] = parse_devices(FAIL_VARIABLE, failing)
        cc = os.environ.get(CC_VARIABLE, "").strip()
        if cc not in ("", "0", "1"):
            raise OptionError(
                CC_VARIABLE, f"'{cc}' is not 1 (a confidential computing system) or 0"
            )
        given["confidential_computing"] = cc == "1"
        return SimulatedEngine(**(given | simulated))
    return NativeEngine()
