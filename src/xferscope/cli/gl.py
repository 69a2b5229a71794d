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
from ..report.gl_tables import print_gl
from . import common  # looked up at run time, so tests can replace open_engine
from .app import cli, described, stdout
from .common import parse_seed, resolve_devices
from .measured import DocumentKind, Measurement, register, run_measurement
from .options import measured_options
from .outputs import Destination, Named, Output, text
from .params import Bounded

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
        "OpenGL uploads and readbacks (seed 000's explorer).",
        "xferscope gl --survey",
        "xferscope gl --op readback --size 512,1024 --pbos 1,2,4 --type float --internal rgba32f",
    ),
)
@click.option("--op", default="upload,readback", show_default=True, help="upload, readback.")
@click.option("--size", default="2048", show_default=True, help="Pixel sizes: N (square) or WxH.")
@click.option(
    "--alignment",
    default="4",
    show_default=True,
    help=f"GL_UNPACK/PACK_ALIGNMENT: {_listing(ALIGNMENTS)}.",
)
@click.option(
    "--row-offset",
    default="0",
    show_default=True,
    help="Bytes from a page boundary to the image in host memory (0-4095).",
)
@click.option(
    "--method",
    default=None,
    help=f"Upload: {_listing(UPLOAD_METHODS)}; readback: {_listing(READBACK_METHODS)} "
    "[default: texsubimage, readpixels].",
)
@click.option("--format", default="rgba", show_default=True, help=f"{_listing(FORMATS)}.")
@click.option("--type", default="ubyte", show_default=True, help=f"{_listing(TYPES)}.")
@click.option(
    "--internal",
    default="rgba8",
    show_default=True,
    help=f"Internal format: {_listing(INTERNAL_FORMATS)} (none: the default framebuffer).",
)
@click.option("--target", default="2d", show_default=True, help=f"{_listing(TARGETS)}.")
@click.option(
    "--fbo",
    default="on",
    show_default=True,
    help="on: a texture-attached framebuffer object; off: the pbuffer's default framebuffer.",
)
@click.option(
    "--shader",
    default="off",
    show_default=True,
    help="on: a pass-through fragment shader; off: the fixed function.",
)
@click.option(
    "--pbos",
    default="0",
    show_default=True,
    help=f"Pixel buffer objects in rotation, 0-{MAX_PBOS} (0: client memory).",
)
@click.option(
    "--pbo-usage",
    "usage",
    default="none",
    show_default=True,
    help=f"The PBOs' usage hint: {_listing(USAGES)} (none: stream_draw for uploads, "
    "stream_read for readbacks).",
)
@click.option(
    "--draw",
    default="quad",
    show_default=True,
    help=f"What each readback frame draws: {_listing(DRAW_MODES)} (pixel: a full-window "
    "DrawPixels, upload traffic contending with the readback; repeat: nothing, the same frame "
    "read again).",
)
@click.option(
    "--work",
    default=None,
    help="Asynchronous mode: CPU work per frame, such as 0,1ms,5ms, or auto (0 to twice the "
    "frame's transfer time).",
)
@click.option(
    "--bytes",
    "bytes_text",
    default=None,
    help="Bytes each scenario moves [default: 6.25GiB, the paper's; 512MiB with --quick].",
)
@click.option(
    "--limit",
    default=DEFAULT_LIMIT_S,
    show_default=True,
    type=Bounded(limits.GL_LIMIT),
    help="Seconds a scenario may take; a longer one is estimated from its first 10 frames.",
)
@click.option("--log-frames", is_flag=True, help="Keep every frame's blocking times (JSON).")
@click.option(
    "--survey",
    is_flag=True,
    help="Run the groups seed 000 reports on (PBOs, methods, formats and types, padding, sizes, "
    "GetTexImage, PBO counts with CPU work) and state the findings for this GPU.",
)
@click.option("--quick", is_flag=True, help="512 MiB per scenario: a first look.")
@click.option("--no-baseline", is_flag=True, help="Skip CUDA pinned memcpy of the same bytes.")
@measured_options("gl", "PREFIX-rates.png and PREFIX-async.png", gpu="GPU index (CUDA's).")
@click.pass_context
def gl_command(ctx: click.Context, /, **kw: Any) -> None:
    """Upload pixel data to a GPU through OpenGL and read it back, headless (EGL), under every
    state that decides the speed; every option takes a comma-separated list and the scenarios
    are their cross product. Each scenario's test frame is compared exactly first (a mismatch
    names the internal format the driver chose); each moves --bytes frame by frame; --work
    adds CPU work per frame and prints the paper's Table 1. CUDA pinned memcpy of the same
    bytes is the baseline."""
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
                lambda path, _w: gl_plots.plot_rates(result, path),
                "-rates.png",
                render=True,
            )
        )
    if gl_plots.has_async(result):
        outputs.append(
            dest.output(
                "plot",
                lambda path, _w: gl_plots.plot_async(result, path),
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
