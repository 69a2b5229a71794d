"""`xferscope overlap cpu|buffers|gpu`: how much of a copy hides under other work. Registered
on the CLI group when cli.py imports this module at its end."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from ..core import limits
from ..core.cases import HOST_MEMORY, MECHANISMS
from ..core.engine import Engine
from ..core.errors import OptionError
from ..core.units import (  # noqa: F401
    TIME_HELP,
    parse_counts,
    parse_seconds,
    parse_seconds_list,
    parse_size_option,
    parse_sizes,
)
from ..documents.envelope import dumps_document
from ..overlap import (
    BUFFERS_SCHEMA,
    CPU_DIRECTIONS,
    CPU_SCHEMA,
    DEFAULT_CHUNKS_PER_STREAM,
    DEFAULT_WORK_FACTORS,
    GPU_SCHEMA,
    AnyResult,
    GpuOverlapResult,
    OverlapCpuResult,
    RotationResult,
    check_cpu_plan,
    check_gpu_plan,
    check_rotation_plan,
    measure_overlap_cpu,
    measure_overlap_gpu,
    measure_rotation,
)
from ..report.drawing import Drawing
from ..report.overlap_tables import print_overlap
from .app import cli, described, stdout
from .common import resolve_devices
from .measured import DocumentKind, Measurement, register, run_measurement
from .options import (
    direction_option,
    measured_options,
    mechanism_option,
    memory_option,
    option,
    trials_option,
)
from .outputs import Destination, Named, Output, text

R = TypeVar("R", OverlapCpuResult, RotationResult, GpuOverlapResult)

# ---- parsing -----------------------------------------------------------------------------------


# ---- outputs ----------------------------------------------------------------------------------

PLOT_SUFFIXES = {"cpu": "-time.png", "buffers": "-efficiency.png", "gpu": "-speedup.png"}


def overlap_named(kind: str, kw: dict[str, Any] | None = None) -> dict[str, Named]:
    """An experiment's files: where the options put them (kw None: the default names)."""
    kw = kw or {}
    base = f"overlap-{kind}"
    return {
        "json": Named("--json", kw.get("json_path"), f"{base}.json"),
        "csv": Named("--csv", kw.get("csv_path"), f"{base}.csv"),
        "plot": Named("--plot", kw.get("plot_prefix"), base, (PLOT_SUFFIXES[kind],)),
    }


def overlap_outputs(result: AnyResult, dest: Destination) -> list[Output]:
    """JSON, CSV and the experiment's plot."""

    from ..report import overlap_plots

    outputs = [
        dest.output("json", text(lambda: dumps_document(result.to_dict(), indent=2))),
        dest.output("csv", text(result.to_csv)),
    ]
    suffix = overlap_plots.plot_suffix(result)
    if suffix is not None:
        outputs.append(
            dest.output(
                "plot",
                Drawing("xferscope.report.overlap_plots:write_plot", (result,)),
                suffix,
                render=True,
            )
        )
    return outputs


def _common(kind: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """The options every overlap command shares: GPU, simulation, history and outputs."""
    return measured_options(f"overlap-{kind}", f"PREFIX{PLOT_SUFFIXES[kind]}", seed=False)


# ---- running -----------------------------------------------------------------------------------


def _experiment(
    kind: str, kw: dict[str, Any], plan: Callable[[Engine, int], Measurement[R]]
) -> None:
    """Measures as every command does (measured.run_measurement) on the GPU -g names."""

    def planned(engine: Engine) -> Measurement[R]:
        return plan(engine, resolve_devices(engine, kw["device"], one=True)[0])

    run_measurement(KINDS_OF[kind], kw, planned)


def _first_failure(result: AnyResult) -> str | None:
    if result.failures:
        failure = result.failures[0]
        return f"{failure.what}: {failure.error}"
    return None


def _kind(kind: str, load: Callable[[dict[str, Any]], AnyResult]) -> DocumentKind[Any]:
    return DocumentKind(
        f"overlap-{kind}",
        load,
        lambda r: print_overlap(r, stdout),
        lambda kw: overlap_named(kind, kw),
        overlap_outputs,
        document=lambda r: r.to_dict(),
        # a part that failed leaves the rest to report; nothing at all is an error, or a stop
        measured=lambda r: r.measured or (not r.interrupted and not r.failures),
        failed=lambda r: bool(r.failures),
        unverified=lambda r: not r.valid,
        why_nothing=_first_failure,
    )


KINDS_OF = {
    "cpu": _kind("cpu", OverlapCpuResult.from_dict),
    "buffers": _kind("buffers", RotationResult.from_dict),
    "gpu": _kind("gpu", GpuOverlapResult.from_dict),
}
register(CPU_SCHEMA, KINDS_OF["cpu"])
register(BUFFERS_SCHEMA, KINDS_OF["buffers"])
register(GPU_SCHEMA, KINDS_OF["gpu"])


# ---- the group ---------------------------------------------------------------------------------


@cli.group(
    "overlap",
    **described(
        "How much of a copy hides under other work (cpu, buffers, gpu).",
        "xferscope overlap cpu --memory pinned,pageable --size 256MiB",
        "xferscope overlap buffers --buffers 1,2,4 --chunk-sizes 4MiB",
        "xferscope overlap gpu --streams 1,2,4,8 --work 1,1000",
    ),
)
def overlap() -> None:
    """How much of a copy hides under other work: CPU work during one asynchronous copy (cpu),
    a stream of chunks through N pinned buffers in rotation (buffers), and H2D, a kernel and
    D2H pipelined over K streams (gpu)."""


# ---- overlap cpu -------------------------------------------------------------------------------


@overlap.command(
    "cpu",
    **described(
        "CPU work under one asynchronous copy: issue the copy, work, then wait.",
        "xferscope overlap cpu",
        "xferscope overlap cpu -d d2h -m pinned,pageable --size 64MiB --work 0,1ms,5ms",
    ),
)
@direction_option(CPU_DIRECTIONS, "d2h", "h2d or d2h (d2h: asynchronous readback).", short=True)
@memory_option(
    HOST_MEMORY,
    "pinned,pageable",
    f"Host memory kinds, comma-separated, one series each: {', '.join(HOST_MEMORY)}.",
)
@mechanism_option(
    "async",
    "async (cudaMemcpyAsync), kernel (SM copy kernel), memcpy (synchronous "
    "cudaMemcpy), staged (pageable memory through xferscope's pinned pool).",
)
@option("--size", default="256MiB", help="Bytes per copy.")
@option(
    "--work",
    help="CPU work per copy, comma-separated times (0,1ms,2ms) [default: T0 x 0, 1/8, "
    "1/4, 1/2, 3/4, 1, 5/4, 3/2, 2, where T0 is the copy alone].",
)
@trials_option(5, "Trials per work value; the row is the trial of median total.")
@_common("cpu")
def cpu_command(**kw: Any) -> None:
    """Issue a copy asynchronously, run W of calibrated CPU work, then wait (asynchronous
    readback or upload). Reports the time blocked in the issuing call, the work, the time
    blocked waiting, the total and rate, and the share of the work hidden (ideal 1 until the
    work outlasts the copy)."""
    direction, memories, mechanism = kw["direction"], kw["memory"], kw["mechanism"]
    if len(direction) != 1:
        raise OptionError("--direction", "give one direction, h2d or d2h")
    if len(mechanism) != 1:
        raise OptionError("--mechanism", f"give one of {', '.join(MECHANISMS)}")
    size = parse_size_option("--size", kw["size"])
    works = None
    if kw["work"] is not None:
        works = parse_seconds_list("--work", kw["work"])
        for work in works:
            limits.WORK.check("--work", work)
    trials = kw["trials"]
    points = len({0.0, *works}) if works is not None else len(DEFAULT_WORK_FACTORS)

    def plan(engine: Engine, device: int) -> Measurement[OverlapCpuResult]:
        check_cpu_plan(engine, device, direction[0], memories, mechanism[0], size, works, trials)
        return Measurement(
            lambda progress: measure_overlap_cpu(
                engine,
                device,
                direction[0],
                memories,
                mechanism[0],
                size,
                works,
                trials,
                progress=progress,
            ),
            len(memories) * points,
        )

    _experiment("cpu", kw, plan)


# ---- overlap buffers ---------------------------------------------------------------------------


@overlap.command(
    "buffers",
    **described(
        "A stream of chunks through N rotating pinned buffers.",
        "xferscope overlap buffers",
        "xferscope overlap buffers -d d2h --buffers 1,2,4 --chunk-sizes 4MiB",
    ),
)
@direction_option(
    CPU_DIRECTIONS,
    "d2h,h2d",
    "d2h (readback: the CPU checksums each chunk), h2d (upload: the CPU writes each chunk), "
    "or both.",
    short=True,
)
@option(
    "--buffers",
    default="1,2,3,4,6,8",
    help="Numbers of pinned buffers in rotation (N), comma-separated.",
)
@option(
    "--chunk-sizes",
    default="1MiB,4MiB,16MiB",
    help="Bytes per chunk (and per buffer), comma-separated.",
)
@option("--chunks", default=64, bounds=limits.CHUNKS, help="Chunks in the stream.")
@trials_option(3, "Streams per point; the row is the one of median total.")
@option(
    "--max-pinned",
    help="Refuse a plan that pins more than this (buffers x chunk size) [default: "
    "half of the machine's memory, which is also the most allowed].",
)
@_common("buffers")
def buffers_command(**kw: Any) -> None:
    """A stream of chunks through N pinned buffers used in rotation while the CPU consumes
    (readback) or produces (upload) the others, as an application does with OpenGL pixel buffer
    objects in rotation.
    Efficiency = ideal / total, with ideal = chunks x max(copy, CPU) + min(copy, CPU)."""
    directions = kw["direction"]
    buffers = parse_counts("--buffers", kw["buffers"], 1)
    chunk_sizes = parse_sizes("--chunk-sizes", kw["chunk_sizes"])
    if chunk_sizes[0] < 8:
        raise OptionError(
            "--chunk-sizes", f"{chunk_sizes[0]} bytes is too small: a chunk is at least 8 bytes"
        )
    chunks, trials = kw["chunks"], kw["trials"]
    max_pinned = (
        None if kw["max_pinned"] is None else parse_size_option("--max-pinned", kw["max_pinned"])
    )

    def plan(engine: Engine, device: int) -> Measurement[RotationResult]:
        check_rotation_plan(
            engine, device, directions, buffers, chunk_sizes, chunks, trials, max_pinned
        )
        return Measurement(
            lambda progress: measure_rotation(
                engine,
                device,
                directions,
                buffers,
                chunk_sizes,
                chunks,
                trials,
                max_pinned,
                progress,
            ),
            len(directions) * len(buffers) * len(chunk_sizes),
        )

    _experiment("buffers", kw, plan)


# ---- overlap gpu -------------------------------------------------------------------------------


@overlap.command(
    "gpu",
    **described(
        "H2D, a kernel and D2H pipelined over K streams.",
        "xferscope overlap gpu",
        "xferscope overlap gpu --size 256MiB --streams 1,2,4,8 --work 1,1000",
    ),
)
@option("--size", default="1GiB", help="Bytes of the array of floats (a multiple of 4).")
@option("--streams", default="1,2,3,4,5,6,7,8", help="Stream counts K, comma-separated.")
@option(
    "--chunks-per-stream",
    default=DEFAULT_CHUNKS_PER_STREAM,
    bounds=limits.CHUNKS,
    help="Chunks per stream: the array goes in K x this many pieces.",
)
@option(
    "--work",
    default="1",
    help="Kernel FMAs per element, comma-separated: small is transfer-bound, large "
    "(thousands) compute-bound.",
)
@_common("gpu")
def gpu_command(**kw: Any) -> None:
    """H2D, a kernel and D2H over one large array: sequential on one stream against split into
    chunks round-robin over K streams, with the bound the stage times allow (their sum over the
    largest). Reports the speedup and its fraction of the bound."""
    size = parse_size_option("--size", kw["size"])
    if size % 4:
        raise OptionError("--size", f"{size} bytes is not a multiple of 4 (the array is floats)")
    streams = tuple(map(int, limits.STREAMS.parse_all("--streams", kw["streams"])))
    chunks_per_stream = kw["chunks_per_stream"]
    works = tuple(map(int, limits.GPU_WORK.parse_all("--work", kw["work"])))

    def plan(engine: Engine, device: int) -> Measurement[GpuOverlapResult]:
        check_gpu_plan(engine, device, size, streams, chunks_per_stream, works)
        return Measurement(
            lambda progress: measure_overlap_gpu(
                engine, device, size, streams, chunks_per_stream, works, progress
            ),
            len(works) * len(streams),
        )

    _experiment("gpu", kw, plan)
