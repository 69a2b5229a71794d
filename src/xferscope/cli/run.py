"""`xferscope run`: the investigation of every GPU, its report and the history."""

from __future__ import annotations

from typing import Any

import click

from ..core.engine import Engine
from ..core.errors import OptionError
from ..core.version import __version__
from ..documents.envelope import dumps_document
from ..report import drawing
from ..report.style import plot_facts
from ..run.records import GpuSection, RunResult, run_from_dict, run_to_dict
from ..sweep.records import Curve, SweepResult
from .app import cli, described, stderr, stdout
from .common import history_file, parse_seed, resolve_devices, sweep_plots
from .measured import DocumentKind, Measurement, register, run_measurement
from .options import (
    flag,
    gpus_option,
    history_options,
    option,
    out_option,
    seed_option,
    simulate_option,
)
from .outputs import Delivery, Destination, Named, Output, text

# ---- run ---------------------------------------------------------------------------------------


def run_named(prometheus: str | None = None) -> dict[str, Named]:
    """The run's files: all in its directory, and a Prometheus textfile where asked."""
    named = {
        "json": Named("--out", None, "run.json"),
        "points": Named("--out", None, "points.csv"),
        "metrics": Named("--out", None, "metrics.csv"),
        "gpu": Named("--out", None, "gpu"),  # gpu0-bandwidth.png, ...
        "html": Named("--out", None, "report.html"),
    }
    if prometheus is not None:
        named["prometheus"] = Named("--prometheus", prometheus, replace=True)
    return named


def run_outputs(result: RunResult, dest: Destination) -> list[Output]:
    """run.json, points.csv, metrics.csv, the Prometheus textfile (where asked), two PNGs per GPU
    and the HTML report, which links to the others."""
    from ..documents.csv import run_metrics_csv, run_points_csv
    from ..documents.prometheus import file_mode, render_prometheus
    from ..run.records import run_to_dict

    outputs = [
        dest.output("json", text(lambda: dumps_document(run_to_dict(result), indent=2))),
        dest.output("points", text(lambda: run_points_csv(result))),
        dest.output("metrics", text(lambda: run_metrics_csv(result))),
    ]
    if "prometheus" in dest.places:
        path = dest.places["prometheus"].path
        outputs.append(
            dest.output("prometheus", text(lambda: render_prometheus(result)), mode=file_mode(path))
        )
    for gpu in result.gpus:
        outputs += [
            dest.output("gpu", drawn, f"{gpu.index}-{what}.png", render=True)
            for what, drawn in sweep_plots(gpu_view(result, gpu))
        ]

    outputs.append(dest.html("xferscope.report.run_html:render_html", result))
    return outputs


def gpu_view(result: RunResult, gpu: GpuSection) -> SweepResult:
    """One GPU's curves as a sweep result, for the sweep's plots."""
    facts = [g for g in result.machine.get("gpus", []) if g.get("index") == gpu.index]
    return plot_view(result.simulated, result.interrupted, facts, gpu.curves)


def plot_view(
    simulated: bool, interrupted: bool, gpus: list[dict[str, Any]], curves: tuple[Curve, ...]
) -> SweepResult:
    """Curves as a sweep result holding only what the sweep's plots read (report/style.py): a
    view made once a GPU's curves are measured equals the one made when the run ends, unless
    what a plot shows changed between them, so its plots may be drawn ahead."""
    return SweepResult(
        tool_version=__version__,
        created="",
        simulated=simulated,
        machine={"gpus": [plot_facts(g) for g in gpus]},
        options={},
        curves=curves,
        interrupted=interrupted,
        wall_s=0.0,
    )


def draw_ahead(engine: Engine, gpu: GpuSection) -> None:
    """A GPU's plots, drawn by the drawing workers while the rest of the run measures only the
    GPU (report/drawing.py), once its curves are measured."""
    from ..core import machine

    drawers = drawing.current()
    if drawers is None:
        return
    view = plot_view(engine.simulated, False, [machine.gpu_record(engine, gpu.index)], gpu.curves)
    for _, drawn in sweep_plots(view):
        drawers.ahead(drawn)


# Measured on one H100 with every check (GL and GEMM included), from the command to its exit,
# 2026-11-26 (benchmarks/results/run-h100-20261126.json): `run --quick` 7.9-9.0 s on a machine's
# first run (median 8.4 s of six; 9.7-10.0 s on the slowest H100 host lent), 8.3 s once the GEMM
# check's tuning is kept, `run` 28.9 s
TIMES_ON = "H100"
QUICK_S = 10
DEFAULT_S = 35


@cli.command(
    **described(
        "Start here: every GPU investigated, what is slow, why, the fix.",
        "xferscope run",
        "xferscope run --quick -g 0",
        "xferscope run --quick --prometheus /var/lib/node_exporter/xferscope.prom",
    )
)
@gpus_option
@flag(
    "--quick",
    help=f"A first look in about {QUICK_S} s per GPU "
    f"(the full run takes about {DEFAULT_S} s per GPU).",
)
@out_option(help="Directory in which each run gets its own directory, run-<time>.")
@history_options
@option(
    "--prometheus",
    "prometheus_path",
    help="Also write the headline figures here, in node_exporter's textfile format (replaced "
    "atomically each run).",
)
@seed_option
@option(
    "--resume",
    "resume_ref",
    metavar="RUN",
    help="Continue an interrupted run (its id in the history, its run.json or its directory) on "
    "the same GPUs: what it completed is kept, the rest measured now, into a new run directory.",
)
@simulate_option()
@click.pass_context
def run(
    ctx: click.Context,
    device: str | None,
    quick: bool,
    out: str,
    history_path: str | None,
    no_history: bool,
    prometheus_path: str | None,
    seed: str,
    resume_ref: str | None,
    simulate: bool,
) -> None:
    """Investigate every GPU: curves for every host memory kind, both directions, API and
    device time; device-to-device; copy engines against SM copies; H2D while D2H runs; pinning
    costs; with several GPUs the peer-to-peer matrix and all GPUs to the host at once. Then a
    diagnosis, an HTML report, and the run added to the history."""
    from ..run import resume
    from ..run.investigate import RunOptions, run_investigation, steps

    seed_value = parse_seed(seed)
    earlier = None
    if resume_ref is not None:
        given = [
            f"{flag}" for name, flag in (("device", "-g"), ("quick", "--quick"), ("seed", "--seed"))
            if ctx.get_parameter_source(name) is not click.core.ParameterSource.DEFAULT
        ]  # fmt: skip
        if given:
            raise OptionError(
                "--resume",
                f"it continues the run's own GPUs, mode and seed; leave out {', '.join(given)}",
            )
        earlier = resume.load_interrupted(resume_ref, history_file(history_path))

    def plan(engine: Engine) -> Measurement[RunResult]:
        if earlier is not None:
            options = resume.options_of(earlier)
            resume.check_same_gpus(engine, earlier, options.devices)
        else:
            options = RunOptions(
                devices=resolve_devices(engine, device), quick=quick, seed=seed_value
            )
        return Measurement(
            lambda bar: run_investigation(
                engine, options, bar, earlier, lambda gpu: draw_ahead(engine, gpu)
            ),
            steps(options, earlier),
            _say_where_the_report_is,
        )

    kw = {"simulate": simulate, "out": out, "history_path": history_path,
          "no_history": no_history, "prometheus_path": prometheus_path}  # fmt: skip
    run_measurement(RUN, kw, plan)


def _say_where_the_report_is(_result: RunResult, delivery: Delivery, dest: Destination) -> bool:
    page = dest.places["html"].path
    if page in delivery.written:
        stderr.print(f"report: {page}", soft_wrap=True)
    return True


RUN: DocumentKind[RunResult] = DocumentKind(
    "run",
    run_from_dict,
    lambda r: _print_run(r),
    lambda kw: run_named((kw or {}).get("prometheus_path")),
    run_outputs,
    document=run_to_dict,
    measured=lambda r: bool(r.measured),
    failed=lambda r: any(g.status == "failed" for g in r.gpus),
    unverified=lambda r: any(f.code == "verification_failed" for f in r.findings),
    mode=lambda r: r.mode,
    complete=lambda r: r.complete,
    html=True,
    noun="run",
)
register("xferscope-run", RUN)


def _print_run(result: RunResult) -> None:
    from ..report.run_tables import print_run

    print_run(result, stdout)
