"""`xferscope gl`: seed 000's OpenGL upload and readback explorer, registered on the CLI group."""

from __future__ import annotations

from typing import Any

import click

from ..core import limits
from ..core.engine import Engine
from ..core.errors import OptionError
from ..gl.measure import check_plan, measure, steps
from ..gl.records import SCHEMA_NAME, GlResult, dumps_csv, dumps_json, from_dict, to_dict
from ..gl.states import (
    ALIGNMENTS,
    DEFAULT_LIMIT_S,
    DRAW_MODES,
    FORMATS,
    INTERNAL_FORMATS,
    MAX_PBOS,
    READBACK_METHODS,
    TARGETS,
    TYPES,
    UPLOAD_METHODS,
    USAGES,
    GlOptions,
    parse_options,
)
from ..report.drawing import Drawing
from ..report.gl_tables import print_gl
from . import common  # looked up at run time, so tests can replace open_engine
from .app import cli, described, stdout
from .common import parse_seed, resolve_devices
from .measured import DocumentKind, Measurement, register, run_measurement
from .options import flag, measured_options, option
from .outputs import Destination, Named, Output, text

# The state options: --survey runs its own scenarios, so none of these may come with it.
STATE_OPTIONS = (
    "op",
    "size",
    "alignment",
    "row_offset",
    "method",
    "format",
    "type",
    "internal",
    "target",
    "fbo",
    "shader",
    "pbos",
    "usage",
    "draw",
)


def _listing(values: tuple[str, ...] | tuple[int, ...]) -> str:
    return ", ".join(str(v) for v in values)


@cli.command(
    "gl",
    **described(
        "OpenGL uploads and readbacks under every state, headless.",
        "xferscope gl --survey",
        "xferscope gl --op readback --size 512,1024 --pbos 1,2,4 --type float --internal rgba32f",
    ),
)
@option("--op", default="upload,readback", help="upload, readback.")
@option("--size", default="2048", help="Pixel sizes: N (square) or WxH.")
@option("--alignment", default="4", help=f"GL_UNPACK/PACK_ALIGNMENT: {_listing(ALIGNMENTS)}.")
@option(
    "--row-offset",
    default="0",
    help="Bytes from a page boundary to the image in host memory (0-4095).",
)
@option(
    "--method",
    help=f"Upload: {_listing(UPLOAD_METHODS)}; readback: {_listing(READBACK_METHODS)} "
    "[default: texsubimage, readpixels].",
)
@option("--format", default="rgba", help=f"{_listing(FORMATS)}.")
@option("--type", default="ubyte", help=f"{_listing(TYPES)}.")
@option(
    "--internal",
    default="rgba8",
    help=f"Internal format: {_listing(INTERNAL_FORMATS)} (none: the default framebuffer).",
)
@option("--target", default="2d", help=f"{_listing(TARGETS)}.")
@option(
    "--fbo",
    default="on",
    help="on: a texture-attached framebuffer object; off: the pbuffer's default framebuffer.",
)
@option(
    "--shader", default="off", help="on: a pass-through fragment shader; off: the fixed function."
)
@option(
    "--pbos",
    default="0",
    help=f"Pixel buffer objects in rotation, 0-{MAX_PBOS} (0: client memory).",
)
@option(
    "--pbo-usage",
    "usage",
    default="none",
    help=f"The PBOs' usage hint: {_listing(USAGES)} (none: stream_draw for uploads, "
    "stream_read for readbacks).",
)
@option(
    "--draw",
    default="quad",
    help=f"What each readback frame draws: {_listing(DRAW_MODES)} (pixel: a full-window "
    "DrawPixels, upload traffic contending with the readback; repeat: nothing, the same frame "
    "read again).",
)
@option(
    "--work",
    help="Asynchronous mode: CPU work per frame, such as 0,1ms,5ms, or auto (0 to twice the "
    "frame's transfer time).",
)
@option(
    "--bytes",
    "bytes_text",
    help="Bytes each scenario moves [default: 6.25GiB; 512MiB with --quick].",
)
@option(
    "--limit",
    default=DEFAULT_LIMIT_S,
    bounds=limits.GL_LIMIT,
    help="Seconds a scenario may take; a longer one is estimated from its first 10 frames.",
)
@flag("--log-frames", help="Keep every frame's blocking times (JSON).")
@flag(
    "--survey",
    help="Run a survey of scenario groups (PBOs, methods, formats and types, padding, sizes, "
    "GetTexImage, PBO counts with CPU work) and state the findings for this GPU.",
)
@flag("--quick", help="512 MiB per scenario: a first look.")
@flag("--no-baseline", help="Skip CUDA pinned memcpy of the same bytes.")
@measured_options("gl", "PREFIX-rates.png and PREFIX-async.png", gpu="GPU index (CUDA's).")
@click.pass_context
def gl_command(ctx: click.Context, /, **kw: Any) -> None:
    """Upload pixel data to a GPU through OpenGL and read it back, headless (EGL), under every
    state that decides the speed; every option takes a comma-separated list and the scenarios
    are their cross product. Each scenario's test frame is compared exactly first (a mismatch
    names the internal format the driver chose); each moves --bytes frame by frame; --work
    adds CPU work per frame and prints, per amount of work, the time blocked in map and read,
    the work, the rate and the share of the work hidden. CUDA pinned memcpy of the same bytes
    is the baseline."""
    from ..gl.survey import survey

    given = [
        name
        for name in STATE_OPTIONS
        if ctx.get_parameter_source(name) is not click.core.ParameterSource.DEFAULT
    ]
    if kw["survey"] and given:
        flag = "--" + given[0].replace("_", "-")
        raise OptionError(flag, "--survey runs its own scenarios; leave the state options out")

    def plan(engine: Engine) -> Measurement[GlResult]:
        (device,) = resolve_devices(engine, kw["device"], one=True)
        states = {name: kw[name] for name in STATE_OPTIONS}
        options: GlOptions = parse_options(
            **states,
            work=kw["work"],
            bytes_text=kw["bytes_text"],
            limit=kw["limit"],
            quick=kw["quick"],
            log_frames=kw["log_frames"],
            baseline=not kw["no_baseline"],
            device=device,
            seed=parse_seed(kw["seed"]),
        )
        if kw["survey"]:
            options = GlOptions(
                ops=(),
                bytes=options.bytes,
                limit_s=options.limit_s,
                log_frames=options.log_frames,
                baseline=options.baseline,
                device=device,
                seed=options.seed,
                work=options.work,
                preset="survey",
                extra=survey(),
            )
        scenarios, _ = check_plan(options)
        return Measurement(lambda bar: measure(engine, options, bar), steps(options, scenarios))

    run_measurement(GL, kw, plan)


def gl_named(kw: dict[str, Any] | None = None) -> dict[str, Named]:
    return common.result_files("gl", kw, ("-rates.png", "-async.png"))


def gl_outputs(result: GlResult, dest: Destination) -> list[Output]:
    from ..report import gl_plots

    outputs = [
        dest.output("json", text(lambda: dumps_json(result))),
        dest.output("csv", text(lambda: dumps_csv(result))),
    ]
    if any(s.rate for s in result.scenarios):
        outputs.append(
            dest.output(
                "plot",
                Drawing("xferscope.report.gl_plots:plot_rates", (result,)),
                "-rates.png",
                render=True,
            )
        )
    if gl_plots.has_async(result):
        outputs.append(
            dest.output(
                "plot",
                Drawing("xferscope.report.gl_plots:plot_async", (result,)),
                "-async.png",
                render=True,
            )
        )
    return outputs


def _none_ran(result: GlResult) -> str | None:
    if result.scenarios and all(s.status == "failed" for s in result.scenarios):
        return "every scenario failed (the warnings say why); nothing measured"
    return None


GL: DocumentKind[GlResult] = DocumentKind(
    "gl",
    from_dict,
    lambda r: print_gl(r, stdout),
    gl_named,
    gl_outputs,
    document=to_dict,
    measured=lambda r: bool(r.scenarios),
    failure=_none_ran,
    # a GL mismatch is a finding (down-conversion), not a fault: it never sets the exit status
    mode=lambda r: str(r.options.get("preset") or "gl"),
)
register(SCHEMA_NAME, GL)
