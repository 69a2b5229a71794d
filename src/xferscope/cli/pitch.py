"""`xferscope pitch`: 2D and 3D copies by row width and pitch, every method, where they fall."""

from __future__ import annotations

from typing import Any

from ..core.engine import Engine
from ..core.errors import OptionError
from ..core.units import format_bytes, parse_counts, parse_size_option, parse_sizes
from ..pitch.measure import (
    DEFAULT_HOST_PITCHES,
    DEFAULT_TARGET_S,
    DEFAULT_TOTAL,
    DEFAULT_TRIALS,
    DEFAULT_WIDTHS,
    LAYOUTS,
    METHODS,
    SCHEMA_NAME,
    PitchOptions,
    PitchResult,
    check_plan,
    dumps_csv,
    dumps_json,
    from_dict,
    measure,
    to_dict,
)
from ..report.pitch_tables import print_pitch
from . import common
from .app import cli, described, stdout
from .common import parse_seed, resolve_devices
from .measured import DocumentKind, Measurement, register, run_measurement
from .options import (
    direction_option,
    measured_options,
    memory_option,
    methods_option,
    names_option,
    option,
    target_time_option,
    trials_option,
)
from .outputs import Destination, Named, Output

MOST_TOTAL = 1 << 30


@cli.command(
    "pitch",
    **described(
        "2D and 3D copies: rows of W bytes, by every method.",
        "xferscope pitch",
        "xferscope pitch --memory pinned --layout pitched --widths 1,16,256,4KiB --host-pitch 1,4",
    ),
)
@direction_option(("h2d", "d2h"), "h2d,d2h", "h2d, d2h.")
@memory_option(
    ("pinned", "pageable"),
    "pinned,pageable",
    "pinned, pageable.",
    measures="pitch copies rows from pinned and pageable memory only",
)
@names_option(
    "--layout",
    accepted=LAYOUTS,
    default=",".join(LAYOUTS),
    help="Device rows: pitched (cudaMallocPitch) or packed (rows back to back).",
)
@option(
    "--total",
    default=format_bytes(DEFAULT_TOTAL).replace(" ", ""),
    help="Bytes per copy, the same at every width (rows = total / width).",
)
@option(
    "--widths",
    default=",".join(format_bytes(w).replace(" ", "") for w in DEFAULT_WIDTHS),
    help="Row widths in bytes (at most --total).",
)
@option(
    "--host-pitch",
    default=",".join(map(str, DEFAULT_HOST_PITCHES)),
    help="Host rows this many widths apart (1: back to back; 2: half of each row copied).",
)
@methods_option(METHODS)
@target_time_option(DEFAULT_TARGET_S, "Seconds a trial lasts.")
@trials_option(DEFAULT_TRIALS, "Trials per cell.")
@measured_options("pitch", "PREFIX.png")
def pitch_command(**kw: Any) -> None:
    """The same bytes as rows of W bytes, W from 1 B to the whole, between host rows a pitch
    apart (pinned or pageable) and pitched or packed device rows: by cudaMemcpy2D,
    cudaMemcpy2DAsync, cudaMemcpy3DAsync, a loop of cudaMemcpyAsync, packing plus one copy and
    a kernel, or one copy of the span plus a kernel, each verified and timed; the widths where
    each method's rate falls (the cliffs), and where another beats the 2D copy."""
    directions, memories, layouts = kw["direction"], kw["memory"], kw["layout"]
    total = parse_size_option("--total", kw["total"])
    if total > MOST_TOTAL:
        raise OptionError("--total", f"{format_bytes(total)}: at most {format_bytes(MOST_TOTAL)}")
    widths = parse_sizes("--widths", kw["widths"])
    if max(widths) > total:
        raise OptionError(
            "--widths", f"{format_bytes(max(widths))} is wider than --total {format_bytes(total)}"
        )
    pitches = parse_counts("--host-pitch", kw["host_pitch"], 1)
    if max(pitches) > 64:
        raise OptionError("--host-pitch", f"{max(pitches)}: at most 64 widths apart")

    def plan(engine: Engine) -> Measurement[PitchResult]:
        (device,) = resolve_devices(engine, kw["device"], one=True)
        options = PitchOptions(
            directions=directions,
            memories=memories,
            layouts=layouts,
            total=total,
            widths=widths,
            host_pitches=pitches,
            methods=kw["methods"],
            target_s=kw["target_time"],
            trials=kw["trials"],
            device=device,
            seed=parse_seed(kw["seed"]),
        )
        check_plan(options)
        steps = len(directions) * len(memories) * len(layouts) * len(pitches) * len(widths)
        return Measurement(lambda progress: measure(engine, options, progress), steps)

    run_measurement(PITCH, kw, plan)


def pitch_named(kw: dict[str, Any] | None = None) -> dict[str, Named]:
    return common.result_files("pitch", kw)


def pitch_outputs(result: PitchResult, dest: Destination) -> list[Output]:
    return dest.result(result, dumps_json, dumps_csv, "xferscope.report.pitch_plots:plot_pitch")


PITCH: DocumentKind[PitchResult] = DocumentKind(
    "pitch",
    from_dict,
    lambda r: print_pitch(r, stdout),
    pitch_named,
    pitch_outputs,
    document=to_dict,
    measured=lambda r: any(c.status != "skipped" for c in r.cells),
    failed=lambda r: any(c.status == "failed" for c in r.cells),
    unverified=lambda r: any(c.status == "unverified" for c in r.cells),
)
register(SCHEMA_NAME, PITCH)
