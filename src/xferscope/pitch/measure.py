"""`xferscope pitch`: the same bytes as rows of W bytes, W from 1 B to the whole, between host
rows a pitch apart (pinned or pageable) and device rows that are pitched (cudaMallocPitch) or
packed, by cudaMemcpy2D, cudaMemcpy2DAsync, cudaMemcpy3DAsync, a loop of cudaMemcpyAsync,
packing on the CPU plus one copy and a kernel, or one copy of the host span plus a kernel, each
verified and timed NetPIPE's way (a calibration run, trials of a target time, the median; host
time per copy, first call to completion, and device time), the trials of a width's methods
interleaved. The result names the cliffs: the
widths where a method's rate falls, and where packing starts to beat the 2D copy."""

from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass, replace
from typing import Any

from ..core import machine, plan, stats
from ..core.cases import DEFAULT_SEED
from ..core.compiled import engine_module
from ..core.engine import Engine
from ..core.errors import AllocationError, EngineError, OptionError
from ..core.findings import INFO, WARNING, Finding, corrupted, finding
from ..core.progress import QUIET, Progress
from ..core.units import format_bytes
from ..documents.envelope import Envelope, document_header, dumps_document, header_fields, now
from ..documents.reader import Field, check_schema
from ..documents.records import (
    Column,
    attribute_columns,
    dumps_columns,
    from_plain,
    median_text,
    to_plain,
)

SCHEMA_NAME = "xferscope-pitch"
SCHEMA_VERSION = 1

_e = engine_module()
METHODS: tuple[str, ...] = tuple(_e.PITCH_METHODS)
COPY_ENGINE_METHODS = ("2d", "2d-async", "3d")  # the driver's own 2D and 3D copies
LAYOUTS = ("pitched", "packed")  # device rows: cudaMallocPitch's pitch, or the width
DEFAULT_TOTAL = 4 << 20
DEFAULT_WIDTHS = tuple(4**i for i in range(12))  # 1 B .. 4 MiB
DEFAULT_HOST_PITCHES = (2,)  # host rows twice their width apart: half of each row is copied
DEFAULT_TARGET_S = 0.02
DEFAULT_TRIALS = 3
CLIFF = 0.5  # a rate below half of the next wider row's, or of a contiguous copy's


@dataclass(frozen=True, slots=True)
class PitchOptions:
    directions: tuple[str, ...] = ("h2d", "d2h")
    memories: tuple[str, ...] = ("pinned", "pageable")
    layouts: tuple[str, ...] = LAYOUTS
    total: int = DEFAULT_TOTAL
    widths: tuple[int, ...] = DEFAULT_WIDTHS
    host_pitches: tuple[int, ...] = DEFAULT_HOST_PITCHES  # multiples of the width
    methods: tuple[str, ...] = METHODS
    target_s: float = DEFAULT_TARGET_S
    trials: int = DEFAULT_TRIALS
    device: int = 0
    seed: int = DEFAULT_SEED


@dataclass(frozen=True, slots=True)
class Cell:
    """One (direction, memory, layout, host pitch, width, method)."""

    direction: str
    memory: str
    layout: str
    host_pitch: int  # multiple of the width
    width: int
    rows: int
    method: str
    status: str  # complete, skipped, failed, unverified, interrupted
    error: str | None = None
    device_pitch: int = 0
    host_s: tuple[float, ...] = ()  # per copy, each trial
    device_s: tuple[float, ...] = ()

    @property
    def group(self) -> tuple[str, str, str, int]:
        return (self.direction, self.memory, self.layout, self.host_pitch)

    @property
    def seconds(self) -> float | None:
        return stats.median(self.host_s) if self.host_s and self.status == "complete" else None

    @property
    def rate(self) -> float | None:
        """Bytes per second of payload, host time."""
        s = self.seconds
        return self.width * self.rows / s if s else None


def group_label(group: tuple[str, str, str, int]) -> str:
    direction, memory, layout, host_pitch = group
    return f"{direction} {memory}, device {layout}, host pitch {host_pitch}x"


@dataclass(frozen=True, slots=True)
class Cliff:
    """Where a method's rate falls, in one group."""

    group: tuple[str, str, str, int]
    method: str
    half_below: int | None  # the widest width under half the contiguous rate (None: none)
    drops: tuple[tuple[int, float], ...]  # (width, rate over the next wider width's) < CLIFF

    def to_dict(self) -> dict[str, Any]:
        direction, memory, layout, host_pitch = self.group
        return {
            "direction": direction,
            "memory": memory,
            "layout": layout,
            "host_pitch": host_pitch,
            "method": self.method,
            "half_below": self.half_below,
            "drops": [{"width": w, "ratio": r} for w, r in self.drops],
        }


@dataclass(frozen=True, slots=True)
class PitchResult(Envelope):
    cells: tuple[Cell, ...]

    def groups(self) -> list[tuple[str, str, str, int]]:
        return list(dict.fromkeys(c.group for c in self.cells))

    def reference(self, group: tuple[str, str, str, int]) -> Cell | None:
        """The group's contiguous copy of the same bytes."""
        return next(
            (c for c in self.cells if c.group == group and c.method == "contiguous" and c.rate),
            None,
        )

    def winners(self) -> dict[tuple[str, str, str, int, int], Cell]:
        """Per (group, width): the fastest verified method other than the contiguous reference;
        cudaMemcpy2DAsync unless another beats it by more than stats.CLEAR_WIN."""
        by: dict[tuple[str, str, str, int, int], list[Cell]] = {}
        for c in self.cells:
            if c.seconds and c.method != "contiguous":
                by.setdefault((*c.group, c.width), []).append(c)
        out = {}
        for key, cells in by.items():
            named = {c.method: c for c in cells}
            out[key] = named[
                stats.settle({m: c.seconds or 0.0 for m, c in named.items()}, ("2d-async",))
            ]
        return out

    def cliffs(self) -> list[Cliff]:
        """For each copy-engine method of each group: where its rate falls."""
        out = []
        for group in self.groups():
            reference = self.reference(group)
            for method in COPY_ENGINE_METHODS:
                cells = sorted(
                    (c for c in self.cells if c.group == group and c.method == method and c.rate),
                    key=lambda c: c.width,
                )
                if not cells:
                    continue
                half_below = None
                if reference is not None and reference.rate:
                    under = [c.width for c in cells if (c.rate or 0) < CLIFF * reference.rate]
                    half_below = max(under) if under else None
                drops = tuple(
                    (narrow.width, (narrow.rate or 0) / (wide.rate or 1))
                    for narrow, wide in itertools.pairwise(cells)
                    if (narrow.rate or 0) < CLIFF * (wide.rate or 0)
                )
                out.append(Cliff(group, method, half_below, drops))
        return out


def _prepare(pitched: Any, options: PitchOptions, method: str) -> tuple[int, int] | dict[str, Any]:
    """One method on one layout verified and calibrated: its (iterations per trial, trials),
    or the cell's fields when it cannot be timed."""
    try:
        wrong_rows, gap_bytes = pitched.verify(method)
        if wrong_rows or gap_bytes:
            error = f"{wrong_rows} rows arrived wrong" + (
                f", {format_bytes(gap_bytes)} between host rows overwritten" if gap_bytes else ""
            )
            return {"status": "unverified", "error": error}
        calibration = plan.calibrate(
            lambda n: pitched.time(method, n)[0] * n, least_s=options.target_s / 4
        )
    except (AllocationError, EngineError) as exc:
        return {"status": "failed", "error": str(exc)}
    n = plan.repeats_for(options.target_s, calibration.per_iteration_s)
    # a copy that takes seconds: one trial says as much as three
    return n, 1 if calibration.per_iteration_s > 10 * options.target_s else options.trials


def measure_cells(
    pitched: Any, options: PitchOptions, methods: list[str]
) -> tuple[dict[str, Any], bool]:
    """Several methods on one layout, each verified and calibrated, then their trials
    interleaved, each trial in an order of its own (plan.trial_order), so that drift and the
    method run just before fall on all alike. Per method, the cell's fields; and whether a
    Ctrl-C stopped it (a method short of its trials is marked interrupted, its trials kept)."""
    out: dict[str, dict[str, Any]] = {}
    repeats: dict[str, tuple[int, int]] = {}
    for method in methods:
        prepared = _prepare(pitched, options, method)
        if isinstance(prepared, dict):
            out[method] = prepared
        else:
            repeats[method] = prepared
    timed, stopped = plan.timed_outcomes(
        lambda m: pitched.time(m, repeats[m][0]),
        {m: k for m, (_, k) in repeats.items()},
        options.seed,
        (AllocationError, EngineError),
    )
    for method, (status, error, host, device) in timed.items():
        out[method] = (
            {"status": status, "error": error}
            if error is not None
            else {"status": status, "host_s": host, "device_s": device}
        )
    return {m: out[m] for m in methods}, stopped


def check_plan(options: PitchOptions) -> None:
    """Refuses, before measuring, a plan of which no cell can run, with the engine's reason."""
    reasons = [
        str(_e.pitch_refusal(d, m, w, max(1, options.total // w), w * f, layout == "pitched", me))
        for d in options.directions
        for m in options.memories
        for layout in options.layouts
        for f in options.host_pitches
        for w in options.widths
        for me in options.methods
    ]
    if all(reasons):
        raise OptionError("--methods", f"nothing in this plan can run: {reasons[0]}")


def measure(engine: Engine, options: PitchOptions, progress: Progress = QUIET) -> PitchResult:
    created = now()
    start = engine.clock()
    cells: list[Cell] = []
    interrupted = False
    try:
        for direction in options.directions:
            for memory in options.memories:
                for layout in options.layouts:
                    for factor in options.host_pitches:
                        progress.begin(group_label((direction, memory, layout, factor)))
                        for i, width in enumerate(sorted(options.widths, reverse=True)):
                            done, stopped = _measure_width(
                                engine, options, direction, memory, layout, factor, width, i == 0
                            )
                            cells += done
                            if stopped:
                                raise KeyboardInterrupt
                            progress.step(f"{direction} {memory} {layout} {format_bytes(width)}")
    except KeyboardInterrupt:
        interrupted = True
    result = PitchResult(
        tuple(cells),
        created=created,
        simulated=engine.simulated,
        machine=machine.collect(engine, [options.device]),
        options=asdict(options),
        interrupted=interrupted,
        wall_s=engine.clock() - start,
    )
    return replace(result, findings=tuple(findings(result)))


def _measure_width(
    engine: Engine,
    options: PitchOptions,
    direction: str,
    memory: str,
    layout: str,
    factor: int,
    width: int,
    first: bool,
) -> tuple[list[Cell], bool]:
    """Every method at one width; the contiguous reference only at the group's first. And
    whether a Ctrl-C stopped it (the cells hold the trials done)."""
    rows = max(1, options.total // width)
    host_pitch = width * factor
    base = Cell(direction, memory, layout, factor, width, rows, "", "skipped")
    methods = [m for m in options.methods if m != "contiguous" or first]
    try:
        pitched = engine.pitched(
            options.device, direction, memory, width, rows, host_pitch, layout == "pitched",
            options.seed,
        )  # fmt: skip
    except (AllocationError, EngineError) as exc:
        return [replace(base, method=m, status="failed", error=str(exc)) for m in methods], False
    out = []
    try:
        base = replace(base, device_pitch=pitched.device_pitch)
        refusals = {
            m: _e.pitch_refusal(direction, memory, width, rows, host_pitch, layout == "pitched", m)
            for m in methods
        }
        measured, stopped = measure_cells(pitched, options, [m for m in methods if not refusals[m]])
        for method in methods:
            fields = {"error": refusals[method]} if refusals[method] else measured[method]
            out.append(replace(base, method=method, **fields))
    finally:
        pitched.close()
    return out, stopped


METHOD_NAMES = {
    "contiguous": "one contiguous copy",
    "loop": "a loop of cudaMemcpyAsync",
    "2d": "cudaMemcpy2D",
    "2d-async": "cudaMemcpy2DAsync",
    "3d": "cudaMemcpy3DAsync",
    "pack": "packing on the CPU, one copy and a kernel",
    "span": "one copy of the span and a kernel",
}


def _rate(bps: float | None) -> str:
    return "?" if not bps else f"{bps / 1e9:.3g} GB/s"


def findings(result: PitchResult) -> list[Finding]:
    out: list[Finding] = []
    device = result.options.get("device")
    for c in result.cells:
        if c.status == "unverified":
            out.append(
                corrupted(
                    f"{group_label(c.group)} {c.method} {format_bytes(c.width)}",
                    f"{group_label(c.group)}, {c.method} at {format_bytes(c.width)} wide: "
                    f"verification FAILED ({c.error}); that figure is invalid",
                )
            )
    cliffs = {(c.group, c.method): c for c in result.cliffs()}
    for group in result.groups():
        out += _cliff_findings(result, group, cliffs, device)
        out += _beaten_findings(result, group, device)
    return out


def _widths(widths: list[int]) -> str:
    """'1 B-256 B', or '4 KiB' for one width."""
    low, high = format_bytes(min(widths)), format_bytes(max(widths))
    return low if low == high else f"{low}-{high}"


def _cliff_findings(
    result: PitchResult,
    group: tuple[str, str, str, int],
    cliffs: dict[tuple[tuple[str, str, str, int], str], Cliff],
    device: Any,
) -> list[Finding]:
    """Where cudaMemcpy2DAsync's rate falls in this group, and how cudaMemcpy2D and
    cudaMemcpy3DAsync compare with it."""
    cliff = cliffs.get((group, "2d-async"))
    if cliff is None or (cliff.half_below is None and not cliff.drops):
        return []
    label = group_label(group)
    rates = {(c.method, c.width): c.rate for c in result.cells if c.group == group and c.rate}
    mine = {w: r for (m, w), r in rates.items() if m == "2d-async"}
    reference = result.reference(group)
    parts = []
    if cliff.half_below is not None and reference is not None:
        parts.append(
            f"rows of {format_bytes(cliff.half_below)} and narrower move under half the rate of "
            f"one contiguous copy ({_rate(mine[cliff.half_below])} against "
            f"{_rate(reference.rate)})"
        )
    if cliff.drops:
        parts.append(
            "it halves at " + ", ".join(f"{format_bytes(w)} ({r - 1:+.0%})" for w, r in cliff.drops)
        )
    narrowest = min(mine)
    parts.append(f"{format_bytes(narrowest)} wide: {_rate(mine[narrowest])}")
    for other in ("2d", "3d"):
        ratios = [
            (rates.get((other, w)) or 0) / r for w, r in mine.items() if rates.get((other, w))
        ]
        if ratios:
            parts.append(f"{METHOD_NAMES[other]} at {stats.median(ratios):.2f}x its rate")
    return [
        finding(
            "pitch_cliff",
            INFO,
            label,
            f"{label}: cudaMemcpy2DAsync's cliffs: " + "; ".join(parts),
            gpu=device,
            value=None if cliff.half_below is None else float(cliff.half_below),
        )
    ]


BEATEN = 1.25  # a method this many times as fast as cudaMemcpy2DAsync is worth a warning
NOTED = 1.10  # and this many times, a note


def _beaten_findings(
    result: PitchResult, group: tuple[str, str, str, int], device: Any
) -> list[Finding]:
    """The widths at which another method beats cudaMemcpy2DAsync, for the method that beats it
    by most."""
    plain = {c.width: c for c in result.cells if c.group == group and c.method == "2d-async"}
    wins: dict[str, list[tuple[int, float]]] = {}
    for (*g, width), cell in result.winners().items():
        if tuple(g) == group and cell.method != "2d-async" and width in plain:
            gain = (plain[width].seconds or 0) / (cell.seconds or 1)
            if gain >= NOTED:
                wins.setdefault(cell.method, []).append((width, gain))
    if not wins:
        return []
    method, won = max(wins.items(), key=lambda kv: max(g for _, g in kv[1]))
    width, gain = max(won, key=lambda wg: wg[1])
    label = group_label(group)
    where = _widths([w for w, _ in won])
    return [
        finding(
            "pitch_beaten",
            WARNING if gain >= BEATEN else INFO,
            label,
            f"{label}: {METHOD_NAMES[method]} beats cudaMemcpy2DAsync at {where} wide "
            f"({len(won)} widths; {gain:.1f}x at {format_bytes(width)})",
            cause="the copy engine moves rows one at a time, and narrow rows waste the link",
            fix=f"for rows of {where}, use {METHOD_NAMES[method]}",
            gpu=device,
            value=gain,
            reference=BEATEN,
        )
    ]


# ---- documents ---------------------------------------------------------------------------------


def to_dict(result: PitchResult) -> dict[str, Any]:
    return document_header(SCHEMA_NAME, SCHEMA_VERSION, result) | {
        "cells": [to_plain(c) for c in result.cells],
        "winners": [
            {
                "direction": d,
                "memory": m,
                "layout": layout,
                "host_pitch": hp,
                "width": w,
                "method": best.method,
                "seconds": best.seconds,
                "bandwidth_bps": best.rate,
            }
            for (d, m, layout, hp, w), best in result.winners().items()
        ],
        "cliffs": [c.to_dict() for c in result.cliffs()],
    }


def from_dict(d: dict[str, Any]) -> PitchResult:
    check_schema(d, SCHEMA_NAME, SCHEMA_VERSION)
    r = Field(d)
    cells = tuple(from_plain(Cell, c) for c in r["cells"].items())
    return PitchResult(**header_fields(r), cells=cells)


def dumps_json(result: PitchResult) -> str:
    return dumps_document(to_dict(result))


CSV_COLUMNS: tuple[Column[Cell], ...] = (
    *attribute_columns(
        "direction",
        "memory",
        "layout",
        "host_pitch",
        "width",
        "rows",
        "device_pitch",
        "method",
        "status",
    ),
    Column("host_s", lambda c: median_text(c.host_s)),
    Column("device_s", lambda c: median_text(c.device_s)),
    Column("bandwidth_gbps", lambda c: "" if not c.rate else f"{c.rate / 1e9:.6g}"),
    Column("error", lambda c: c.error or ""),
)


def dumps_csv(result: PitchResult) -> str:
    return dumps_columns(CSV_COLUMNS, result.cells)
