"""`xferscope batch`: many small copies, every method, which wins where."""

from __future__ import annotations

from typing import Any

import click

from ..batch.measure import (
    CALIBRATION_COUNTS,
    CALIBRATION_DIRECTIONS,
    CALIBRATION_SIZES,
    CALIBRATION_TARGET_S,
    CALIBRATION_TRIALS,
    DEFAULT_COUNTS,
    DEFAULT_TARGET_S,
    DEFAULT_TRIALS,
    METHODS,
    SCHEMA_NAME,
    STAGED_SIZES,
    BatchOptions,
    BatchResult,
    dumps_csv,
    dumps_json,
    from_dict,
    measure,
    memories_for,
    to_dict,
)
from ..batch.mix import parse_size_mix
from ..core.engine import Engine
from ..core.errors import OptionError
from ..core.units import parse_counts, parse_sizes
from ..report.batch_tables import print_batch
from ..transfer.policy import COPY_MANY_METHODS
from . import common
from .app import cli, described, stderr, stdout
from .common import parse_seed, resolve_devices
from .measured import DocumentKind, Measurement, register, run_measurement
from .options import (
    direction_option,
    flag,
    measured_options,
    memory_option,
    methods_option,
    option,
    target_time_option,
    trials_option,
)
from .outputs import Destination, Named, Output


@cli.command(
    "batch",
    **described(
        "Many small copies: which way of batching them is fastest.",
        "xferscope batch --counts 1,16,256,1024 --sizes 64,4KiB,64KiB,1MiB",
        "xferscope batch --counts 64,1024 --size-mix lognormal:16KiB:1.5",
        "xferscope batch --calibrate    # what xferscope.copy_many picks on this GPU",
    ),
)
@direction_option(
    ("h2d", "d2h", "d2d"), "h2d,d2h,d2d", "h2d, d2h, d2d (between two buffers of the GPU)."
)
@memory_option(
    ("pinned", "pageable"),
    "pinned,pageable",
    "Host memory: pinned, pageable (d2d batches are device memory at both ends).",
    measures="batch copies from pinned and pageable memory only, the kinds xferscope.copy_many "
    "takes",
)
@option("--counts", default=",".join(map(str, DEFAULT_COUNTS)), help="Copies per batch.")
@option("--sizes", default="64,512,4KiB,32KiB,256KiB,1MiB", help="Bytes per copy.")
@option(
    "--size-mix",
    metavar="SPEC",
    help="Mixed sizes instead of --sizes: each batch of N copies draws N sizes from "
    "lognormal:MEDIAN:SIGMA, uniform:MIN:MAX or file:PATH (sizes such as 4KiB, one or more a "
    "line; or a CSV's bytes column, such as the copies.csv of xferscope trace), with the seed.",
)
@methods_option(METHODS)
@flag("--scattered", help="Leave a gap after each piece (scattered addresses).")
@target_time_option(DEFAULT_TARGET_S, "Seconds a trial lasts.")
@trials_option(DEFAULT_TRIALS, "Trials per cell.")
@measured_options("batch", "PREFIX.png")
@flag(
    "--calibrate",
    help="Measure each batch as xferscope.copy_many makes it, over copy_many's grid (options "
    "left at their defaults), and store the result: copy_many then picks the fastest method "
    "for each count and size on this GPU.",
)
@click.pass_context
def batch_command(ctx: click.Context, /, **kw: Any) -> None:
    """N copies of S bytes, host to device and back (pinned and pageable memory) and within the
    GPU, by a loop of cudaMemcpyAsync, cudaMemcpyBatchAsync (each source access order), packing
    into one pinned buffer with a scatter kernel, the staged copy's threads (pageable memory),
    an SM copy kernel over the pointers, and a CUDA graph: each verified and timed; a map of
    which wins for each count and size."""
    partial: list[str] = []  # options that leave part of copy_many's grid unmeasured
    if kw["calibrate"]:
        grid = {
            "counts": ",".join(map(str, CALIBRATION_COUNTS)),
            "sizes": ",".join(map(str, CALIBRATION_SIZES)),
            "methods": COPY_MANY_METHODS,
            "target_time": CALIBRATION_TARGET_S,
            "direction": CALIBRATION_DIRECTIONS,
            "trials": CALIBRATION_TRIALS,
        }
        for name, value in grid.items():
            if ctx.get_parameter_source(name) is click.core.ParameterSource.DEFAULT:
                kw[name] = value
            elif name in ("counts", "sizes", "methods", "direction"):
                partial.append(f"--{name}")
        if ctx.get_parameter_source("memory") is not click.core.ParameterSource.DEFAULT:
            partial.append("--memory")
    directions, memories, methods = kw["direction"], kw["memory"], kw["methods"]
    if kw["calibrate"]:
        if "d2d" in directions:
            raise OptionError("--direction", "d2d: with --calibrate only h2d and d2h (copy_many's)")
        extra = [m for m in methods if m not in COPY_MANY_METHODS]
        if extra:
            raise OptionError(
                "--methods",
                f"{', '.join(extra)}: with --calibrate only copy_many's methods "
                f"({', '.join(COPY_MANY_METHODS)})",
            )
    counts = parse_counts("--counts", kw["counts"], 1)
    if max(counts) > 65536:
        raise OptionError("--counts", f"{max(counts)} copies: at most 65536 per batch")
    sizes = parse_sizes("--sizes", kw["sizes"])
    if kw["size_mix"] is not None:
        if kw["calibrate"]:
            raise OptionError("--size-mix", "not with --calibrate (its grid is of fixed sizes)")
        if ctx.get_parameter_source("sizes") is not click.core.ParameterSource.DEFAULT:
            raise OptionError("--size-mix", "give --sizes or --size-mix, not both")
        parse_size_mix(kw["size_mix"])  # a bad spec or file: one line, before any measuring
        sizes = ()

    def plan(engine: Engine) -> Measurement[BatchResult]:
        (device,) = resolve_devices(engine, kw["device"], one=True)
        options = BatchOptions(
            directions=directions,
            memories=memories,
            counts=counts,
            sizes=sizes,
            methods=methods,
            scattered=kw["scattered"],
            target_s=kw["target_time"],
            trials=kw["trials"],
            device=device,
            seed=parse_seed(kw["seed"]),
            as_copy_many=kw["calibrate"],
            size_mix=kw["size_mix"] or "",
        )
        steps = sum(len(memories_for(d, memories)) for d in directions)
        steps *= len(counts) * max(len(sizes), 1)
        if not kw["calibrate"]:
            return Measurement(lambda bar: measure(engine, options, bar), steps)
        check_calibration_store(engine, device)
        if partial:
            stderr.print(
                f"{', '.join(partial)} given: this measures part of copy_many's grid, which is "
                "written with the other files but not stored as its calibration",
                soft_wrap=True,
            )
        steps += len(directions) * len(STAGED_SIZES)
        return Measurement(
            lambda bar: measure(engine, options, bar),
            steps,
            lambda result, _delivery, _dest: store_calibration(engine, device, result),
        )

    run_measurement(BATCH, kw, plan)


def check_calibration_store(engine: Any, device: int) -> None:
    """Before measuring: where the calibration will be stored can be written."""
    from ..documents import files
    from ..transfer.calibration import calibration_dir_named_by, calibration_path, gpu_key

    path = calibration_path(gpu_key(engine.device_info(device)))
    named_by = calibration_dir_named_by()
    kind = files.special(path)
    if kind is not None:
        raise OptionError(named_by, f"cannot store the calibration: {path} is {kind}")
    files.probe(named_by, files.target(path).parent, path)


def store_calibration(engine: Any, device: int, result: BatchResult) -> bool:
    """Stores a complete, measured calibration for copy_many (any other is never used, and
    says why); False when storing it failed (its files are written all the same)."""
    from ..documents.files import reason as os_reason
    from ..transfer.calibration import calibration_dir_named_by, gpu_key, save, unusable

    reason = unusable(result)
    if reason is not None:
        stderr.print(
            f"calibration not stored: {reason}; copy_many keeps what it used before",
            soft_wrap=True,
        )
        return True
    try:
        path = save(result, gpu_key(engine.device_info(device)))
    except OSError as exc:
        click.echo(
            f"Error: {calibration_dir_named_by()}: cannot store the calibration: {os_reason(exc)}",
            err=True,
        )
        return False
    which = "the simulated GPU" if result.simulated else f"GPU {device}"
    stdout.print(f"calibration stored in {path}: xferscope.copy_many uses it on {which}")
    return True


def batch_named(kw: dict[str, Any] | None = None) -> dict[str, Named]:
    return common.result_files("batch", kw) | {"html": Named("--out", None, "report.html")}


def batch_outputs(result: BatchResult, dest: Destination) -> list[Output]:
    return [
        *dest.result(result, dumps_json, dumps_csv, "xferscope.report.batch_plots:plot_batch"),
        dest.html("xferscope.report.batch_html:render_batch_html", result),
    ]


BATCH: DocumentKind[BatchResult] = DocumentKind(
    "batch",
    from_dict,
    lambda r: print_batch(r, stdout),
    batch_named,
    batch_outputs,
    document=to_dict,
    measured=lambda r: any(c.status != "skipped" for c in r.cells),
    failed=lambda r: any(c.status == "failed" for c in r.cells),
    unverified=lambda r: any(c.status == "unverified" for c in r.cells),
    html=True,
)
register(SCHEMA_NAME, BATCH)
