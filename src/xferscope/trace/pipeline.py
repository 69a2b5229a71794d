"""A traced program, end to end: run it (`runs` times) with the injection library, read its
records, price them with this machine's rates (from the history, or measured), and build the
result document. What `xferscope trace` runs, and what a caller of the package runs the same way:

    traced = trace_program(TraceOptions(command=("python3", "train.py")), scratch)
    print(traced.result.summary["fixes"] if traced.result else "no CUDA activity")
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..core import interrupt, machine
from ..core.errors import XferscopeError
from ..documents.envelope import now
from .analyze import analyze
from .document import TraceResult, copy_dict, findings_of, summary_dict
from .early import EarlyAnalysis
from .figures import run_figures
from .kept import (
    keep,
    keep_frames,
    keep_rates,
    keep_sources,
    kept_frames,
    kept_rates,
    read_kept,
    use_kept_sources,
)
from .reading import read_trace
from .records import Trace
from .reference import Reference, calibrate, from_history
from .runner import DEFAULT_LIMIT, KERNELS_DEFAULT, SAMPLE_S, Ran, run_traced
from .samples import with_samples

REFERENCES = ("auto", "history", "measure", "none")


@dataclass(frozen=True, slots=True)
class TraceOptions:
    """How a program is traced and priced (the options of `xferscope trace`)."""

    command: tuple[str, ...]
    limit: int = DEFAULT_LIMIT  # records of each kind kept
    kernels: str = KERNELS_DEFAULT  # sampled, all, none or ON/PERIOD
    reference: str = "auto"  # REFERENCES: where this machine's rates come from
    runs: int = 1  # the program is run this many times, each traced
    device: int = 0  # the GPU the rates are for
    history: Path | None = None  # where the rates are looked for (None: never)
    region: str = ""  # FILE:LINE: the line whose calls mark the steps ("": found)
    look_every: float = SAMPLE_S  # seconds between looks at each Python main thread (0: none)
    records: Path | None = None  # where each run's raw records are kept (kept.py), or None
    replay: Path | None = None  # kept runs analyzed again instead of running the program


@dataclass(frozen=True, slots=True)
class Traced:
    """What tracing a program gave: its first run, its records, the result document (None
    where no CUDA activity was seen: nothing to write), and the run a signal was forwarded to
    (None: none), which ends the command as a stop does."""

    ran: Ran
    trace: Trace
    result: TraceResult | None
    stopped: Ran | None = None


def trace_program(
    options: TraceOptions,
    scratch: Path,
    open_engine: Callable[[], Any],
    say: Callable[[str], None] = lambda _line: None,
) -> Traced:
    """Runs the program as `options` say, its records kept in `scratch`; `open_engine` opens
    the engine that identifies the GPU and measures its rates (None from it where there is
    none); `say` hears each step a person should know of."""
    created = now()
    kept = read_kept(options.replay) if options.replay is not None else []
    # a stopped program's records read and priced while it makes its own way out
    early = EarlyAnalysis(lambda: _reference(options, open_engine, say, False), options.region)
    ran = kept[0] if kept else _run(options, scratch, 1, early.start)
    found = early.found(ran)
    trace = _read(ran, options, 1, found.trace if found else None)
    if not ran.files or not (trace.copies or trace.intervals or trace.calls):
        return Traced(ran, trace, None, ran if ran.interrupted else None)
    more, stopped = (kept[1:], None) if kept else _more_runs(options, scratch, ran, say)
    if options.replay is not None and options.reference == "auto":  # priced as it was
        reference, engine = kept_rates(options.replay), None
    else:  # a program stopped by Ctrl-C here is not followed by seconds of measuring
        reference, engine = early.rates() or _reference(options, open_engine, say, stopped is None)
    rates = None if reference is None else reference.to_dict()
    if options.records is not None:
        keep_rates(rates, options.records)
    region = options.region
    analysis = (found.analysis if found is not None
                else analyze(trace, ran.wall_s, reference, region, ran.started_ns))  # fmt: skip
    runs = [run_figures(trace, analysis, ran.wall_s)]
    for i, other in enumerate(more, 2):
        again = _read(other, options, i)
        judged = analyze(again, other.wall_s, reference, region, other.started_ns)
        runs.append(run_figures(again, judged, other.wall_s))
    wanted = len(kept) or options.runs  # the runs asked for (or kept)
    summary = summary_dict(analysis, trace, rates, region)
    result = TraceResult(
        created=created,
        simulated=False,
        machine=_machine(engine, options.device),
        options={
            "command": list(ran.command),
            "limit": options.limit,
            "kernels": options.kernels,
            "reference": options.reference,
            "runs": wanted,
            "region": region or None,
        },
        interrupted=ran.interrupted or ran.returncode < 0 or len(runs) < wanted,
        wall_s=ran.wall_s,
        returncode=ran.returncode,
        signal=ran.signal,
        processes=trace.processes,
        summary=summary,
        copies=tuple(copy_dict(trace, c) for c in trace.copies),
        findings=tuple(findings_of(analysis, float(summary["span_s"]) or ran.wall_s)),
        runs=tuple(runs),
    )
    return Traced(ran, trace, result, stopped)


def _read(ran: Ran, options: TraceOptions, i: int, read: Trace | None = None) -> Trace:
    """Run `i`'s records read (or `read`, as early.py read them), its native callers named as
    where it ran: kept with its records (--records), or read back from them (--replay)."""
    trace = read if read is not None else with_samples(read_trace(ran.files), ran.samples)
    if options.replay is not None:
        use_kept_sources(ran)
        named = kept_frames(ran)
        return replace(trace, frames=trace.frames | named) if named else trace
    if options.records is not None:
        keep_frames(trace.frames, options.records, i)
        keep_sources(trace, options.records, i)
    return trace


def _run_directory(scratch: Path, run: int) -> Path:
    """Where run `run`'s records go: a directory of its own."""
    directory = scratch / f"run{run}"
    directory.mkdir()
    return directory


def _more_runs(
    options: TraceOptions, scratch: Path, first: Ran, say: Callable[[str], None]
) -> tuple[list[Ran], Ran | None]:
    """The runs after the first, while each ends well and no stop is asked for; and the run
    a signal was forwarded to (its Ctrl-C or SIGTERM went to the program), else None."""
    runs: list[Ran] = []
    if first.returncode != 0 or first.interrupted:
        return runs, first if first.interrupted else None
    for i in range(2, options.runs + 1):
        if interrupt.requested():
            break
        say(f"run {i} of {options.runs}")
        ran = _run(options, scratch, i)
        if ran.interrupted:  # the Ctrl-C went to the program: the command stops as for run 1
            return runs, ran
        if ran.returncode != 0:
            say(f"run {i} ended with status {ran.exit_status}: no further runs")
            break
        runs.append(ran)
    return runs, None


def _run(
    options: TraceOptions,
    scratch: Path,
    i: int,
    on_stop: Callable[[Path, int], None] | None = None,
) -> Ran:
    """Run `i` of the program, traced as `options` say; its records kept where they say;
    `on_stop` as run_traced takes it."""
    ran = run_traced(list(options.command), _run_directory(scratch, i), options.limit,
                     options.kernels, options.look_every, on_stop=on_stop)  # fmt: skip
    if options.records is not None:
        keep(ran, options.records, i)
    return ran


def _reference(
    options: TraceOptions,
    open_engine: Callable[[], Any],
    say: Callable[[str], None],
    measure: bool = True,
) -> tuple[Reference | None, Any]:
    """This machine's rates, and the engine that measured or identified the GPU (None where
    no GPU could be opened: the trace is still summarized, its findings unpriced); without
    `measure` (the program was stopped), only rates the history holds."""
    if options.reference == "none":
        return None, None
    try:
        engine = open_engine()
        uuid = str(engine.device_info(options.device)["uuid"])
    except (XferscopeError, ValueError) as exc:
        say(f"no reference rates: {exc}")
        return None, None
    if options.reference in ("auto", "history") and options.history is not None:
        ref = from_history(options.history, uuid)
        if ref is not None or options.reference == "history":
            return ref, engine
    if not measure:
        say(
            "stopped: this machine's copy rates are not measured (about 10 s), the findings "
            "not priced; a trace after `xferscope trace --reference measure` once prices them"
        )
        return None, engine
    say("measuring this machine's copy rates (about 10 s; --reference none skips it)")
    try:
        return calibrate(engine, options.device), engine
    except XferscopeError as exc:
        say(f"no reference rates: {exc}")
    except KeyboardInterrupt:
        say("the calibration was interrupted: the trace is kept, its findings not priced")
    return None, engine


def _machine(engine: Any, device: int) -> dict[str, Any]:
    if engine is None:
        return {"host": machine.host_facts(), "gpus": []}
    return machine.collect(engine, [device])
