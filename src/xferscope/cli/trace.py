"""`xferscope trace -- COMMAND`: an unmodified program's copies, what they cost and what each fix
would save on this machine."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

import click

from ..core import interrupt, limits, machine
from ..core.errors import OptionError, XferscopeError
from ..core.units import parse_device
from ..documents.envelope import now
from ..report.trace_tables import print_trace
from ..trace.analyze import analyze
from ..trace.document import (
    SCHEMA_NAME,
    TraceResult,
    chrome_trace,
    copy_dict,
    dumps_csv,
    dumps_json,
    findings_of,
    from_dict,
    summary_dict,
    to_dict,
)
from ..trace.figures import run_figures
from ..trace.records import read_trace
from ..trace.reference import Reference, calibrate, from_history
from ..trace.runner import (
    DEFAULT_LIMIT,
    KERNEL_WINDOW_MS,
    KERNELS_DEFAULT,
    Ran,
    kernels_setting,
    run_traced,
)
from . import common
from .app import cli, described, stderr, stdout
from .common import (
    HistorySaver,
    _history_file,
    begin_measuring,
    check_history,
    deliver,
    prepare_renderers,
)
from .measured import DocumentKind, entry, register
from .options import gpu_option, history_options, option, out_option
from .outputs import Destination, Named, Output, text

REFERENCES = ("auto", "history", "measure", "none")


@cli.command(
    "trace",
    **described(
        "Run a program and show what its data transfers cost, and the fix.",
        "xferscope trace -- ./my_app --input data.bin",
        "xferscope trace --export chrome-trace -- python3 train.py",
    ),
    context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False},
)
@option(
    "--reference",
    default="auto",
    help="This machine's copy rates that price the fixes: history (the newest `xferscope run` "
    "of this GPU), measure (a 10 s sweep after the program), auto (history, else measure), none.",
)
@option(
    "--limit",
    default=DEFAULT_LIMIT,
    bounds=limits.ROWS,
    help="Records of each kind kept; beyond, only counted (the totals stay exact).",
)
@option(
    "--export",
    help="Also write chrome-trace: trace.json, which the Perfetto UI and chrome://tracing open.",
)
@option(
    "--kernels",
    default=KERNELS_DEFAULT,
    help="How kernels are recorded: sampled (windows of {} ms, one every {} ms at most, each "
    "opened by a copy: a recorded kernel costs its launch time), all, none, or ON/PERIOD in "
    "milliseconds. Copies are always all recorded.".format(*KERNEL_WINDOW_MS),
)
@option(
    "--runs",
    default=1,
    bounds=limits.RUNS,
    help="Run the program this many times, each traced: the first run's copies and findings are "
    "shown, every run's figures kept, so `xferscope compare` can weigh a change against their "
    "spread (3 or more for a verdict on times).",
)
@gpu_option("GPU the reference is for.")
@out_option("trace")
@history_options
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def trace_command(**kw: Any) -> None:
    """Run COMMAND unchanged (after --) with a CUPTI library injected, record every copy,
    memset, kernel, synchronization and pinned allocation, and say how much time goes to moving
    data, why, and what each fix would save on this machine. COMMAND's own output is untouched
    and its exit status is xferscope's."""
    if kw["reference"] not in REFERENCES:
        raise OptionError(
            "--reference", f"'{kw['reference']}' is not one of {', '.join(REFERENCES)}"
        )
    if kw["export"] not in (None, "chrome-trace"):
        raise OptionError("--export", f"'{kw['export']}' is not chrome-trace")
    kernels_setting(kw["kernels"])  # a bad --kernels is said before the program runs
    kw["device"] = str(parse_device("--device", kw["device"]))
    history = None if kw["no_history"] else _history_file(kw["history_path"])
    if history is not None:
        check_history(history)
    command = list(kw["command"])
    prepare_renderers(html=True, workers=False)
    with (
        tempfile.TemporaryDirectory(prefix="xferscope-trace-") as scratch,
        Destination.prepare(kw["out"], "trace", trace_named(kw), False) as dest,
    ):
        created = now()
        begin_measuring()  # a stop after the program ends cuts the pricing, not the trace
        ran = run_traced(command, _run_directory(Path(scratch), 1), kw["limit"], kw["kernels"])
        trace = read_trace(ran.files)
        if not ran.files or not (trace.copies or trace.intervals or trace.calls):
            dest.discard()
            stderr.print(
                "no CUDA activity was seen: the program did not use CUDA (or did not get as "
                "far as initializing it); nothing written"
            )
            sys.exit(ran.exit_status)
        more = _more_runs(command, Path(scratch), kw, ran)
        reference, engine = _reference(kw, trace)
        analysis = analyze(trace, ran.wall_s, reference)
        runs = [run_figures(trace, analysis, ran.wall_s)]
        for other in more:
            again = read_trace(other.files)
            runs.append(run_figures(again, analyze(again, other.wall_s, reference), other.wall_s))
        result = TraceResult(
            created=created,
            simulated=False,
            machine=_machine(engine, kw),
            options={
                "command": list(ran.command),
                "limit": kw["limit"],
                "kernels": kw["kernels"],
                "reference": kw["reference"],
                "runs": kw["runs"],
            },
            interrupted=ran.interrupted or ran.returncode < 0 or len(runs) < kw["runs"],
            wall_s=ran.wall_s,
            returncode=ran.returncode,
            signal=ran.signal,
            processes=trace.processes,
            summary=summary_dict(
                analysis, trace, None if reference is None else reference.to_dict()
            ),
            copies=tuple(copy_dict(trace, c) for c in trace.copies),
            findings=tuple(findings_of(analysis)),
            runs=tuple(runs),
        )
        saver = HistorySaver(history, lambda: entry(TRACE, result), "trace")
        outputs = trace_outputs(result, dest)
        if kw["export"]:
            outputs.append(dest.output("chrome", text(lambda: chrome_trace(trace))))
        delivery = deliver(outputs, dest, lambda: print_trace(result, stdout), saver)
    if ran.signal:
        stderr.print(f"the program ended on {ran.signal}; its trace up to then is kept")
    if interrupt.requested():
        sys.exit(interrupt.exit_status())
    if not delivery.ok or saver.failed:
        sys.exit(1 if ran.exit_status == 0 else ran.exit_status)
    sys.exit(ran.exit_status)


def _run_directory(scratch: Path, run: int) -> Path:
    """Where run `run`'s records go: a directory of its own."""
    directory = scratch / f"run{run}"
    directory.mkdir()
    return directory


def _more_runs(command: list[str], scratch: Path, kw: dict[str, Any], first: Ran) -> list[Ran]:
    """The runs after the first, while each ends well and no stop is asked for."""
    runs: list[Ran] = []
    if first.returncode != 0 or first.interrupted:
        return runs
    for i in range(2, kw["runs"] + 1):
        if interrupt.requested():
            break
        stderr.print(f"run {i} of {kw['runs']}")
        ran = run_traced(command, _run_directory(scratch, i), kw["limit"], kw["kernels"])
        if ran.interrupted:  # the Ctrl-C went to the program: the command stops as for run 1
            interrupt.request()
            break
        if ran.returncode != 0:
            stderr.print(f"run {i} ended with status {ran.exit_status}: no further runs")
            break
        runs.append(ran)
    return runs


def _reference(kw: dict[str, Any], trace: Any) -> tuple[Reference | None, Any]:
    """This machine's rates, and the engine that measured or identified the GPU (None where
    no GPU could be opened: the trace is still summarized, its fixes unpriced)."""
    if kw["reference"] == "none":
        return None, None
    try:
        engine = common.open_engine(False)
        device = int(kw["device"])
        uuid = str(engine.device_info(device)["uuid"])
    except (XferscopeError, ValueError) as exc:
        stderr.print(f"no reference rates: {exc}")
        return None, None
    if kw["reference"] in ("auto", "history") and not kw["no_history"]:
        ref = from_history(_history_file(kw["history_path"]), uuid)
        if ref is not None or kw["reference"] == "history":
            return ref, engine
    stderr.print("measuring this machine's copy rates (about 10 s; --reference none skips it)")
    try:
        return calibrate(engine, device), engine
    except XferscopeError as exc:
        stderr.print(f"no reference rates: {exc}")
    except KeyboardInterrupt:
        stderr.print("the calibration was interrupted: the trace is kept, its fixes not priced")
    return None, engine


def _machine(engine: Any, kw: dict[str, Any]) -> dict[str, Any]:
    if engine is None:
        return {"host": machine.host_facts(), "gpus": []}
    return machine.collect(engine, [int(kw["device"])])


def trace_named(kw: dict[str, Any] | None = None) -> dict[str, Named]:
    named = {
        "json": Named("--out", None, "trace-summary.json"),
        "csv": Named("--out", None, "copies.csv"),
        "html": Named("--out", None, "report.html"),
    }
    if kw and kw.get("export"):
        named["chrome"] = Named("--export", None, "trace.json")
    return named


def trace_outputs(result: TraceResult, dest: Destination) -> list[Output]:

    return [
        dest.output("json", text(lambda: dumps_json(result))),
        dest.output("csv", text(lambda: dumps_csv(result))),
        dest.html("xferscope.report.trace_html:render_trace_html", result),
    ]


TRACE: DocumentKind[TraceResult] = DocumentKind(
    "trace",
    from_dict,
    lambda r: print_trace(r, stdout),
    trace_named,
    trace_outputs,
    document=to_dict,
    html=True,
)
register(SCHEMA_NAME, TRACE)
