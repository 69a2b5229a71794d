"""`xferscope gemm`: seed 003's GEMM study, registered on the CLI group."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ..core import limits
from ..core.engine import Engine
from ..core.errors import OptionError
from ..core.units import parse_counts
from ..gemm.cpu import check_blas, thread_counts, usable_cores
from ..gemm.measure import check_plan, measure
from ..gemm.records import (
    DEFAULT_PAD,
    DEFAULT_SAMPLES,
    DEFAULT_TARGET_S,
    DEFAULT_TRIALS,
    DEFAULT_TUNE,
    LADDER,
    PRECISIONS,
    QUICK_TARGET_S,
    SCHEMA_NAME,
    GemmOptions,
    GemmResult,
    dumps_csv,
    dumps_json,
    from_dict,
    steps,
    to_dict,
)
from ..gemm.shapes import Shape, parse_shapes, parse_sizes, read_shapes
from ..report.gemm_tables import print_gemm
from . import common  # looked up at run time, so tests can replace open_engine
from .app import cli, described, stdout
from .common import parse_seed, resolve_devices
from .measured import DocumentKind, Measurement, register, run_measurement
from .options import (
    flag,
    measured_options,
    names_option,
    option,
    target_time_option,
    trials_option,
)
from .outputs import Destination, Named, Output

LAYOUTS = {"nn": (False, False), "nt": (False, True), "tn": (True, False), "tt": (True, True)}


@cli.command(
    "gemm",
    **described(
        "GEMM speed in every precision, with and without transfers.",
        "xferscope gemm",
        "xferscope gemm --precision bf16,fp8 --sizes 1024:8192:1024",
        "xferscope gemm --shapes 4096x1024x8192 --transfers pinned,pageable --cpu auto",
    ),
)
@names_option(
    "--precision",
    accepted=PRECISIONS,
    default="fp64,fp32,tf32,bf16",
    help=f"{', '.join(PRECISIONS)} (fp8 runs as TN, its cuBLASLt layout).",
)
@option(
    "--sizes",
    help="Square sizes: N, FIRST:LAST:STEP, or presets near-8k (8128-8180 by 8: alignment "
    "classes 8 to 64 at nearly one size), sizes (1024-8192) [default: near-8k].",
)
@option("--shapes", help="M x N x K shapes, such as 4096x1024x8192,128x4096x4096.")
@option("--shapes-file", help="A file of shapes, one M N K per line.")
@names_option(
    "--trans",
    accepted=tuple(LAYOUTS),
    blank=(),
    help="op(A) op(B): nn, nt, tn or tt [default: nn; fp8 tn].",
)
@option("--alpha", default=1.0, bounds=limits.SCALAR, help="alpha.")
@option("--beta", default=0.0, bounds=limits.SCALAR, help="beta.")
@target_time_option(DEFAULT_TARGET_S, "Seconds one trial lasts.")
@trials_option(DEFAULT_TRIALS, "Trials per GEMM.")
@option(
    "--samples",
    default=DEFAULT_SAMPLES,
    bounds=limits.SAMPLES,
    help="Outputs checked against a double-precision reference (2-4096).",
)
@names_option(
    "--transfers",
    accepted=("pinned", "pageable", "none"),
    default="pinned",
    help="Also time each GEMM with A and B uploaded and C downloaded, from pinned and/or "
    "pageable memory (none: compute only), in sequence and in tiles over streams.",
)
@option("--tiles", default=8, bounds=limits.TILES, help="Column tiles of B and C.")
@option("--streams", default=3, bounds=limits.STREAMS, help="Streams for the tiles.")
@option(
    "--cpu",
    "cpu_threads",
    help="Also run the GEMMs on the CPU through NumPy's BLAS: thread counts, or auto (1, 2, 4, "
    "... every core), threads pinned.",
)
@option("--cpu-sizes", help="Sizes for the CPU's scaling [default: the GPU's].")
@option(
    "--ladder",
    help="Sizes of the offload ladder run with --cpu: the GPU with its transfers against the "
    f"CPU on one and on all threads, to find where offloading pays [default: "
    f"{LADDER[0]}-{LADDER[-1]}, steps of 1.5x].",
)
@option(
    "--pad",
    default=str(DEFAULT_PAD),
    help="Also time each shape whose alignment class is below this power of two padded to its "
    "multiples, the copies in and out included (off: never).",
)
@option(
    "--tune",
    default=DEFAULT_TUNE,
    bounds=limits.TUNE,
    help="Time this many of cuBLASLt's heuristic algorithms for each GEMM and keep the fastest "
    "(0: the heuristic's first choice).",
)
@flag("--quick", help=f"{QUICK_TARGET_S:g} s trials: a first look.")
@measured_options("gemm", "PREFIX.png")
def gemm_command(**kw: Any) -> None:
    """GEMM through cuBLASLt in every precision: throughput of each shape, timed on the GPU
    with random inputs and verified against a double-precision reference, and the mean
    throughput per alignment class (the largest power of two dividing M, N and K) on this
    GPU."""
    precisions = kw["precision"]
    shapes: tuple[Shape, ...] = ()
    if kw["sizes"]:
        shapes += parse_sizes("--sizes", kw["sizes"])
    if kw["shapes"]:
        shapes += parse_shapes("--shapes", kw["shapes"])
    if kw["shapes_file"]:
        shapes += read_shapes("--shapes-file", kw["shapes_file"])
    if not shapes:
        shapes = parse_sizes("--sizes", "near-8k")
    trans_a = trans_b = None
    if kw["trans"]:
        trans_a, trans_b = LAYOUTS[kw["trans"][0]]
    target = QUICK_TARGET_S if kw["quick"] else kw["target_time"]
    cpu_threads: tuple[int, ...] = ()
    if kw["cpu_threads"]:
        cores = len(usable_cores())
        if kw["cpu_threads"].strip().lower() == "auto":
            cpu_threads = thread_counts(cores)
        else:
            cpu_threads = parse_counts("--cpu", kw["cpu_threads"], 1)
            if max(cpu_threads) > cores:
                raise OptionError(
                    "--cpu", f"{max(cpu_threads)} threads: this process may use {cores} cores"
                )
    for name, given in (("--cpu-sizes", kw["cpu_sizes"]), ("--ladder", kw["ladder"])):
        if given is not None and not cpu_threads:
            raise OptionError(name, "measures the CPU: give it with --cpu")
    cpu_shapes = parse_sizes("--cpu-sizes", kw["cpu_sizes"]) if kw["cpu_sizes"] else None
    ladder: tuple[int, ...] = LADDER
    if kw["ladder"]:
        ladder = tuple(sorted({s.m for s in parse_sizes("--ladder", kw["ladder"])}))
    pad = _pad(kw["pad"])
    transfers = kw["transfers"]
    if "none" in transfers and len(transfers) > 1:
        raise OptionError("--transfers", "none cannot be listed with pinned or pageable")

    def plan(engine: Engine) -> Measurement[GemmResult]:
        (device,) = resolve_devices(engine, kw["device"], one=True)
        options = GemmOptions(
            precisions=precisions,
            shapes=tuple(dict.fromkeys(shapes)),
            trans_a=trans_a,
            trans_b=trans_b,
            alpha=kw["alpha"],
            beta=kw["beta"],
            target_s=target,
            trials=kw["trials"],
            samples=kw["samples"],
            device=device,
            seed=parse_seed(kw["seed"]),
            cpu_threads=cpu_threads,
            cpu_shapes=cpu_shapes,
            transfers=tuple(t for t in transfers if t != "none"),
            tiles=kw["tiles"],
            streams=kw["streams"],
            pad=pad,
            ladder=ladder,
            tune=kw["tune"],
        )
        if kw["quick"]:  # a first look waits neither for the power limit nor for a steady rate
            options = replace(options, heat_s=0.0, settle_s=0.0)
        check_plan(engine, options)
        if cpu_threads and not engine.simulated:
            check_blas()
        return Measurement(lambda bar: measure(engine, options, bar), steps(options))

    run_measurement(GEMM, kw, plan)


def _pad(text: str) -> int:
    value = text.strip().lower()
    if value in ("off", "none"):
        return 0
    if not value.isdigit() or int(value) < 2 or int(value) & (int(value) - 1) or int(value) > 4096:
        raise OptionError("--pad", f"'{text}' is not a power of two from 2 to 4096, or off")
    return int(value)


def gemm_named(kw: dict[str, Any] | None = None) -> dict[str, Named]:
    return common.result_files("gemm", kw) | {"html": Named("--out", None, "report.html")}


def gemm_outputs(result: GemmResult, dest: Destination) -> list[Output]:
    measured = any(result.measured(p) for p in dict.fromkeys(p.precision for p in result.points))
    outputs = dest.result(
        result, dumps_json, dumps_csv, "xferscope.report.gemm_plots:plot_gemm" if measured else None
    )
    outputs.append(dest.html("xferscope.report.gemm_html:render_gemm_html", result))
    return outputs


GEMM: DocumentKind[GemmResult] = DocumentKind(
    "gemm",
    from_dict,
    lambda r: print_gemm(r, stdout),
    gemm_named,
    gemm_outputs,
    document=to_dict,
    measured=lambda r: any(p.status != "skipped" for p in r.points),
    failed=lambda r: any(p.status == "failed" for p in r.points),
    unverified=lambda r: any(p.verified is False for p in r.points),
    html=True,
)
register(SCHEMA_NAME, GEMM)
