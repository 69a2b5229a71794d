"""The result of `xferscope trace`: the record, its JSON (schema xferscope-trace), CSV (one row
per copy), the Chrome trace-event file Perfetto opens, and the findings as every command states
them."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ..core.findings import INFO, WARNING, Finding
from ..documents.envelope import Envelope, dumps_document
from ..documents.records import Column, dumps_columns, read_result, result_document, to_plain
from .analyze import WORTH, Analysis, Group, KindRow
from .findings import TraceFinding
from .findings.base import counted
from .loops import MIN_STEPS
from .ranks import ranks
from .records import Copy, Trace
from .timeline import Timelines

SCHEMA_NAME = "xferscope-trace"
SCHEMA_VERSION = 6
OLDEST_VERSION = 1
# Schema history (bump SCHEMA_VERSION on any change a reader must know about):
#   1  first version.
#   2  a copy's "where" is its line of the program's own Python code where there is one, with
#      "python" (its Python stack) and "native" (its native caller) beside it; a fix lists
#      "places" (per line: calls, bytes, cost, stack) instead of "where", and a fix that could
#      not be priced has "saving_s": null and says why in "unpriced"; "runs" keeps each run's
#      figures (--runs). Version 1 still reads.
#   3  "gpus": each GPU's timeline from its first activity to its last (span, busy and idle
#      time, the longest idle gaps, the idle's causes: between launches, blocked in a call at a
#      line, away from CUDA until a line), "span_s" the steady state over every GPU, "left_out" the
#      activity records with no usable times; each run's figures have "span_s" too, and "step_s"
#      and "steps" (its loop's mean step and count, or null), compare's per-step figure. Versions 1
#      and 2 still read (without a timeline). "steps": the loop's steps where one line repeats
#      (its line, count, mean step and idle share), or null; "region": the line `--region`
#      named, whose steps' span is then "span_s". "ranks": each GPU's time in NCCL's kernels
#      and how much of it waited; "straggler": the rank the others waited for, or null.
#      "waits": the host's waits for the GPU (synchronizations) with their lines, for the
#      timeline.
#   4  an idle cause has "looks", the looks at its process's main thread (one every 10 ms)
#      that fell in its time, "input_looks", those that found it waiting in a loader's next,
#      "seen_at", the program's lines they saw with how many each ([line, count], the most
#      seen first), and "seen_framework", the framework of the loader's waits (or null);
#      each run's figures have "input_share", its steps' share waiting for input (or null);
#      "steps" has "steady_step_s", the mean of its steps that are not long ones.
#      Version 3 still reads.
#   5  every finding, share and figure is of the steady state: each process's loop, from its
#      first step to its last ("span_s" its span, else the GPUs' first to last activity);
#      "steps" has "pid", "kind", "covers" (the share of its process's GPU work its steps span)
#      and "runners_up" (the other lines that recurred); "loops" each looping process's steps;
#      "startup" each looping process's start-up (its seconds, the GPU's idle in it, its
#      uploads, what the looks saw, what one pinned copy of its uploads would save);
#      "headline" the first finding to act on, or {"code": "none"}; a finding "straggler"; an
#      idle cause of kind "after_wait" with "waited_at", and "seen_doing"; each run's figures
#      have "startup_s". Version 4 still reads.
#   6  a fix has "change": the change of the program its fix is, where another finding's fix
#      can be the same change at the same line ("pin_memory=True in the DataLoader"), else "";
#      a fix priced with the parts of other findings at its line that its change takes away
#      lists each part in "each_fix" ([title, seconds], its own first). Version 5 still reads.
#      A process whose driver calls all came from runtime calls has "driver_calls_off_ns":
#      when the driver's callbacks were turned off (a driver call of its own after it: on the
#      GPU's records, its line not known). A place has "looks": where the looks at the main
#      thread found a line that made no call of its own, how many (its "calls" 0).

MOST_SPANS = 20_000  # kernels and memsets kept for the timeline (the longest)


@dataclass(frozen=True, slots=True)
class TraceResult(Envelope):
    returncode: int
    signal: str | None
    processes: tuple[dict[str, Any], ...]
    summary: dict[str, Any]  # table, groups, fixes, reference, totals, notes
    copies: tuple[dict[str, Any], ...]  # every copy kept, as copy_dict writes it
    # each run's figures (figures.run_figures), the first's first: what compare weighs
    runs: tuple[dict[str, Any], ...] = ()


def copy_dict(trace: Trace, c: Copy) -> dict[str, Any]:
    return {
        "pid": c.pid,
        "direction": c.direction,
        "src": c.src,
        "dst": c.dst,
        "bytes": c.bytes,
        "start_ns": c.start_ns,
        "end_ns": c.end_ns,
        "device": c.device,
        "stream": c.stream,
        "async": c.is_async,
        "function": None if c.call is None else c.call.function,
        "call_s": None if c.call is None else c.call.seconds,
        "thread": None if c.call is None else c.call.thread,
        "where": trace.where(c.frames, c.python),
        "python": [str(f) for f in c.python],
        "native": trace.native(c.frames),
    }


def steady_s(result: TraceResult) -> float:
    """The time a trace's shares are of: the span from its first GPU activity to its last (the
    steady state), else, for a document without one, the program's wall time."""
    return float(result.summary.get("span_s") or result.wall_s)


def findings_of(analysis: Analysis, steady: float) -> list[Finding]:
    """The trace's findings as every command states them, each saving a share of `steady`."""
    out = []
    for f in analysis.findings:
        where = f" at {f.places[0].where}" if f.places else ""
        what = counted(f.calls, f.sizes)
        said = (
            f"{f.title}: {what + ' ' if what else ''}{where.lstrip()} cost {f.cost_s * 1e3:.3g} ms"
        )
        if f.saving_s is None:
            share = f.cost_s / steady if steady > 0 else 0.0
            message = f"{said}; {f.unpriced}"
        else:
            share = f.saving_s / steady if steady > 0 else 0.0
            message = (
                f"{said}; the fix saves about {f.saving_s * 1e3:.3g} ms ({share:.1%} of the "
                "steady state)"
            )
            if f.each_fix:
                message += "; of it: " + "; ".join(
                    f"{fix}: {saving * 1e3:.3g} ms" for fix, saving in f.each_fix
                )
        out.append(
            Finding(
                f"trace_{f.code}",
                WARNING if share >= WORTH else INFO,
                None,
                f.code,
                f.saving_s,
                f.cost_s,
                message,
                f.detail,
                f.advice,
            )
        )
    return out


def timeline_dict(gpus: Timelines) -> dict[str, Any]:
    """The GPUs' timelines as the document keeps them."""
    return {
        "span_s": gpus.span_s,
        "left_out": gpus.left_out,
        "gpus": [
            {
                "device": g.device,
                "start_ns": g.start_ns,
                "end_ns": g.end_ns,
                "span_s": g.span_s,
                "busy_s": g.busy_s,
                "judged_s": g.judged_s,
                "idle_s": g.idle_s,
                "idle_share": g.idle_share,
                "gaps": [list(gap) for gap in g.gaps],
                "idle": [to_plain(cause) for cause in g.idle],
            }
            for g in gpus.gpus
        ],
    }


def summary_dict(
    analysis: Analysis, trace: Trace, reference: dict[str, Any] | None, region: str = ""
) -> dict[str, Any]:
    """The summary of a trace; `region`: the line that marks its steps (`trace --region`)."""
    gpus = analysis.gpus
    loop = analysis.loop
    job, straggler = ranks(analysis.view or trace, gpus)
    said = []
    if region and loop is None:
        said.append(
            f"--region {region}: no recorded CUDA call was made there {MIN_STEPS} times or "
            "more, so the steady state is the span from the first GPU activity to the last"
        )
    return {
        **timeline_dict(gpus),
        # the steady state: the region's steps where it marks some, else the GPUs' span
        "span_s": analysis.steady_s,
        "region": region or None,
        "headline": headline_dict(analysis),
        "startup": [to_plain(s) for s in analysis.startup],
        "loops": [to_plain(s) for s in analysis.loops],
        "ranks": [to_plain(r) for r in job],
        "straggler": None if straggler is None else to_plain(straggler),
        "steps": None if loop is None else to_plain(loop),
        "table": [to_plain(r) for r in analysis.table],
        "groups": [to_plain(g) for g in analysis.groups],
        "fixes": [to_plain(f) for f in analysis.findings],
        "saving_s": analysis.saving_s,
        "copy_gpu_s": analysis.copy_gpu_s,
        "kernels": len(trace.kernels()),
        # all, sampled (in windows: trace --kernels) or none
        "kernels_recorded": trace.kernel_coverage,
        "memsets": sum(1 for i in trace.intervals if i.what == "memset"),
        "pins": [
            {"how": p.how, "function": p.function, "bytes": p.bytes, "seconds": p.seconds}
            for p in trace.pins
        ],
        "totals": trace.totals,
        # kernels and memsets for the timeline, the longest MOST_SPANS of them
        "spans": [
            {
                "what": i.what,
                "name": i.name[:120],
                "pid": i.pid,
                "stream": i.stream,
                "start_ns": i.start_ns,
                "end_ns": i.end_ns,
            }
            for i in sorted(
                (i for i in trace.intervals if i.what in ("kernel", "memset")),
                key=lambda i: i.start_ns - i.end_ns,
            )[:MOST_SPANS]
        ],
        # the host's waits for the GPU, at their lines, the longest MOST_SPANS of them
        "waits": [
            {
                "function": c.function,
                "pid": c.pid,
                "thread": c.thread,
                "start_ns": c.start_ns,
                "end_ns": c.end_ns,
                "where": trace.where(c.frames, c.python),
            }
            for c in sorted(
                (c for c in trace.calls if c.synchronizes), key=lambda c: c.start_ns - c.end_ns
            )[:MOST_SPANS]
        ],
        "reference": reference,
        "notes": [*analysis.notes, *said],
        "warnings": list(trace.warnings),
    }


def headline_dict(analysis: Analysis) -> dict[str, Any]:
    """The first thing to change, as the document keeps it: its code, title, line, what it
    saves and its share of the steady state; {"code": "none"} where nothing is worth it."""
    first = analysis.headline
    if first is None:
        return {"code": "none"}
    steady = analysis.steady_s
    return {
        "code": first.code,
        "title": first.title,
        "where": first.places[0].where if first.places else None,
        "saving_s": first.saving_s,
        "share": (first.saving_s or 0.0) / steady if steady else None,
        "fix": first.advice,
    }


def to_dict(result: TraceResult) -> dict[str, Any]:
    return result_document(SCHEMA_NAME, SCHEMA_VERSION, result)


def from_dict(d: dict[str, Any]) -> TraceResult:
    """A trace document read back; SchemaError names the field that is wrong."""
    return read_result(TraceResult, d, SCHEMA_NAME, SCHEMA_VERSION, OLDEST_VERSION)


def dumps_json(result: TraceResult) -> str:
    return dumps_document(to_dict(result))


def _copy_column(key: str) -> Column[dict[str, Any]]:
    return Column(key, lambda c: "" if c.get(key) is None else c[key])


# One row per copy: its entries in the document (copy_dict), null as an empty cell.
_COLUMNS: tuple[Column[dict[str, Any]], ...] = tuple(
    _copy_column(key)
    for key in (
        "pid",
        "direction",
        "src",
        "dst",
        "bytes",
        "start_ns",
        "end_ns",
        "device",
        "stream",
        "async",
        "function",
        "call_s",
        "thread",
        "where",
        "native",
    )
)
CSV_COLUMNS = tuple(c.name for c in _COLUMNS)


def dumps_csv(result: TraceResult) -> str:
    return dumps_columns(_COLUMNS, result.copies)


def chrome_trace(trace: Trace) -> str:
    """Chrome's trace-event JSON (Perfetto's UI and chrome://tracing open it): copies, memsets
    and kernels as complete events per process and stream, microseconds from the first one."""
    spans: list[tuple[str, str, int, int, int, int, dict[str, Any]]] = [
        (
            f"{c.direction} {c.host_memory}",
            "copy",
            c.pid,
            c.stream,
            c.start_ns,
            c.end_ns,
            {"bytes": c.bytes, "function": c.call.function if c.call else None},
        )
        for c in trace.copies
    ]
    spans += [
        (
            i.name[:120],
            i.what,
            i.pid,
            i.stream,
            i.start_ns,
            i.end_ns,
            {"bytes": i.bytes} if i.bytes else {},
        )
        for i in trace.intervals
        if i.what in ("kernel", "memset")
    ]
    origin = min((s[4] for s in spans), default=0)
    events = [
        {
            "name": name,
            "cat": cat,
            "ph": "X",
            "pid": pid,
            "tid": stream,
            "ts": (start - origin) / 1e3,
            "dur": max(end - start, 0) / 1e3,
            "args": args,
        }
        for name, cat, pid, stream, start, end, args in spans
    ]
    threads = {(s[2], s[3]) for s in spans}
    events += [
        {
            "name": "thread_name",
            "ph": "M",
            "pid": pid,
            "tid": stream,
            "args": {"name": f"stream {stream}"},
        }
        for pid, stream in sorted(threads)
    ]
    return json.dumps({"traceEvents": events, "displayTimeUnit": "ms"}) + "\n"


__all__ = ["Group", "KindRow", "TraceFinding"]
