"""`xferscope trace -- COMMAND`: an unmodified program's copies, what they cost and what each fix
would save on this machine.

A variant of the measured-command skeleton (measured.py's run_measurement), not a declaration on
it: the work is the user's program, run by trace.pipeline.trace_program, so the command exits
with the program's status (or its signal's), writes nothing when the program never used CUDA,
and keeps the trace when a stop cuts the pricing after it. What it shares with the skeleton it
takes from the same places: the DocumentKind registered below (how the document is read back,
shown and written), common's history, destination and delivery."""

from __future__ import annotations

import re
import sys
import tempfile
from pathlib import Path
from typing import Any

import click

from ..core import interrupt, limits
from ..core.errors import OptionError
from ..core.units import parse_device
from ..report.trace_tables import print_trace
from ..trace.document import (
    SCHEMA_NAME,
    TraceResult,
    chrome_trace,
    dumps_csv,
    dumps_json,
    from_dict,
    to_dict,
)
from ..trace.kept import check_records, read_kept
from ..trace.pipeline import REFERENCES, TraceOptions, trace_program
from ..trace.runner import (
    DEFAULT_LIMIT,
    FIRST_KERNELS,
    KERNEL_WINDOW_MS,
    KERNELS_DEFAULT,
    SAMPLE_S,
    kernels_setting,
)
from . import common
from .app import cli, described, stderr, stdout
from .common import (
    HistorySaver,
    begin_measuring,
    check_history,
    deliver,
    history_file,
    history_to_add_to,
    prepare_renderers,
)
from .measured import DocumentKind, entry, register
from .options import gpu_option, history_options, option, out_option
from .outputs import Destination, Named, Output, text

REGION = re.compile(r".+:[1-9][0-9]*")  # --region: FILE:LINE
NVTX_NAME = re.compile(r"[^\s/:.][^/:.]*")  # --region: an NVTX range's name (no file, no line)


@cli.command(
    "trace",
    **described(
        "Run a program: what its data transfers cost, and the fix.",
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
    help="How kernels are recorded: sampled (every kernel from the first copy for {2} ms or "
    "until {3:,} kernels, then windows of {0} ms, one every {1} ms at most, each opened by a "
    "copy: a recorded kernel costs its launch time), all, none, or ON/PERIOD[/FIRST[/COUNT]] "
    "(milliseconds; COUNT kernels). Copies are always all recorded.".format(
        *KERNEL_WINDOW_MS, FIRST_KERNELS
    ),
)
@option(
    "--region",
    default="",
    help="FILE:LINE, a line of the program run once a step (its batch copy, `loss.item()`), or "
    "the name of an NVTX range pushed once a step: its calls mark the steps, and the span from "
    "the first to the last is the steady state every share is of. Default: the line found to "
    "recur with the loop's period over most of the GPU's work (an NVTX range first).",
)
@option(
    "--look-every",
    default=SAMPLE_S,
    bounds=limits.LOOK_EVERY,
    help="Seconds between looks at where each traced Python process's main thread is, which name "
    "the program's line while the GPU sits idle with no CUDA call to name it (its input "
    "pipeline, its step's Python); 0: no looks.",
)
@option(
    "--records",
    default=None,
    help="Keep each run's raw records (the injection library's, one file per traced process, "
    "and the looks) in this new directory, to share or to analyze again with --replay.",
)
@option(
    "--replay",
    default=None,
    help="Analyze the runs kept by --records in this directory again, instead of running a "
    "program (no COMMAND); priced by the rates kept with them unless --reference says otherwise.",
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
    memset, kernel and pinned allocation, and say how much time goes to moving
    data, why, and what each fix would save on this machine. COMMAND's own output is untouched
    and its exit status is xferscope's; after a Ctrl-C, which goes to COMMAND, 130."""
    if kw["reference"] not in REFERENCES:
        raise OptionError(
            "--reference", f"'{kw['reference']}' is not one of {', '.join(REFERENCES)}"
        )
    if kw["export"] not in (None, "chrome-trace"):
        raise OptionError("--export", f"'{kw['export']}' is not chrome-trace")
    kernels_setting(kw["kernels"])  # a bad --kernels is said before the program runs
    if kw["region"] and not (REGION.fullmatch(kw["region"]) or NVTX_NAME.fullmatch(kw["region"])):
        raise OptionError(
            "--region",
            f"'{kw['region']}' is not FILE:LINE (such as train.py:41) nor an NVTX range's name",
        )
    for name in ("records", "replay"):
        if kw[name] is not None:
            if not kw[name].strip():
                raise OptionError(f"--{name}", "'' is not a directory: name one")
            kw[name] = Path(kw[name]).expanduser()
    if kw["replay"] is not None and kw["command"]:
        raise OptionError("--replay", "analyzes kept runs: give no COMMAND with it")
    if kw["replay"] is not None and kw["records"] is not None:
        raise OptionError("--records", "keeps the records of a run: not with --replay")
    if kw["records"] is not None:
        check_records(kw["records"])
    if kw["replay"] is not None:
        read_kept(kw["replay"])  # a directory with no kept run is said before anything else
    kw["device"] = str(parse_device("--device", kw["device"]))
    history = history_to_add_to(kw)
    if history is not None:
        check_history(history)
    options = TraceOptions(
        command=tuple(kw["command"]),
        limit=kw["limit"],
        kernels=kw["kernels"],
        reference=kw["reference"],
        runs=kw["runs"],
        device=int(kw["device"]),
        history=None if kw["no_history"] else history_file(kw["history_path"]),
        region=kw["region"],
        look_every=kw["look_every"],
        records=kw["records"],
        replay=kw["replay"],
    )
    prepare_renderers(html=True, workers=False)
    with (
        tempfile.TemporaryDirectory(prefix="xferscope-trace-") as scratch,
        Destination.prepare(kw["out"], "trace", trace_named(kw), False) as dest,
    ):
        begin_measuring()  # a stop after the program ends cuts the pricing, not the trace
        traced = trace_program(
            options,
            Path(scratch),
            lambda: common.open_engine(False),
            lambda line: stderr.print(line, soft_wrap=True),
        )
        ran, result = traced.ran, traced.result
        if traced.stopped:  # the program was given the Ctrl-C: the command ends as a stop ends it
            # (the report's drawing gets the grace every command's does, counted from the
            # Ctrl-C: after the program's own way out, it is drawn later from the JSON)
            interrupt.request(traced.stopped.stop_signal, traced.stopped.stopped_at)
        if result is None:
            dest.discard()
            stderr.print(
                f"no CUDA activity in the kept records of '{options.replay}'; nothing written"
                if options.replay is not None
                else "no CUDA activity was seen: the program did not use CUDA (or did not get "
                "as far as initializing it); nothing written"
            )
            sys.exit(interrupt.exit_status() if interrupt.requested() else ran.exit_status)
        saver = HistorySaver(history, lambda: entry(TRACE, result), "trace")
        outputs = trace_outputs(result, dest)
        if kw["export"]:
            trace = traced.trace
            outputs.append(dest.output("chrome", text(lambda: chrome_trace(trace))))
        delivery = deliver(outputs, dest, lambda: print_trace(result, stdout), saver)
    if ran.signal:
        stderr.print(f"the program ended on {ran.signal}; its trace up to then is kept")
    if interrupt.requested():
        sys.exit(interrupt.exit_status())
    if not delivery.ok or saver.failed:
        sys.exit(1 if ran.exit_status == 0 else ran.exit_status)
    sys.exit(ran.exit_status)


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
