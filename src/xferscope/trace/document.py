"""The result of `xferscope trace`: the record, its JSON (schema xferscope-trace), CSV (one row
per copy), the Chrome trace-event file Perfetto opens, and the findings as every command states
them."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from ..core.findings import INFO, WARNING, Finding
from ..documents.envelope import Envelope, document_header, dumps_table, header_fields
from ..documents.reader import Field, check_schema
from .analyze import Analysis, Fix, Group, KindRow
from .records import Copy, Trace

SCHEMA_NAME = "xferscope-trace"
SCHEMA_VERSION = 1
# Schema history (bump SCHEMA_VERSION on any change a reader must know about):
#   1  first version.

MOST_SPANS = 20_000  # kernels and memsets kept for the timeline (the longest)
WORTH = 0.01  # a fix saving this share of the program's time is a warning, not a note


@dataclass(frozen=True, slots=True)
class TraceResult(Envelope):
    returncode: int
    signal: str | None
    processes: tuple[dict[str, Any], ...]
    summary: dict[str, Any]  # table, groups, fixes, reference, totals, notes
    copies: tuple[dict[str, Any], ...]  # every copy kept, as copy_dict writes it


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
    }


def findings_of(analysis: Analysis) -> list[Finding]:
    out = []
    for f in analysis.fixes:
        share = f.saving_s / analysis.wall_s if analysis.wall_s > 0 else 0.0
        where = f" at {f.where[0]}" if f.where else ""
        out.append(
            Finding(
                f"trace_{f.code}",
                WARNING if share >= WORTH else INFO,
                None,
                f.code,
                f.saving_s,
                f.cost_s,
                f"{f.title}: {f.calls} calls ({f.sizes}){where} cost {f.cost_s * 1e3:.3g} ms; "
                f"the fix saves about {f.saving_s * 1e3:.3g} ms ({share:.1%} of the run)",
                f.detail,
                f.fix,
            )
        )
    return out


def summary_dict(
    analysis: Analysis, trace: Trace, reference: dict[str, Any] | None
) -> dict[str, Any]:
    return {
        "table": [
            {
                "kind": r.name,
                "calls": r.calls,
                "total_s": r.total_s,
                "avg_s": r.avg_s,
                "min_s": r.min_s,
                "max_s": r.max_s,
                "time_share": r.share,
            }
            for r in analysis.table
        ],
        "groups": [
            {
                "direction": g.direction,
                "memory": g.memory,
                "calls": g.calls,
                "bytes": g.bytes,
                "gpu_s": g.gpu_s,
                "rate_bps": g.rate,
                "expected_s": g.expected_s,
                "of_reach": g.of_reach,
                "blocked_s": g.blocked_s,
                "overlapped_s": g.overlapped_s,
            }
            for g in analysis.groups
        ],
        "fixes": [f.to_dict() for f in analysis.fixes],
        "saving_s": analysis.saving_s,
        "copy_gpu_s": analysis.copy_gpu_s,
        "kernels": len(trace.kernels()),
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
        "reference": reference,
        "notes": list(analysis.notes),
        "warnings": list(trace.warnings),
    }


def to_dict(result: TraceResult) -> dict[str, Any]:
    return document_header(SCHEMA_NAME, SCHEMA_VERSION, result) | {
        "returncode": result.returncode,
        "signal": result.signal,
        "processes": list(result.processes),
        "summary": result.summary,
        "copies": list(result.copies),
    }


def from_dict(d: dict[str, Any]) -> TraceResult:
    check_schema(d, SCHEMA_NAME, SCHEMA_VERSION)
    r = Field(d)
    return TraceResult(
        **header_fields(r),
        returncode=r["returncode"].integer(),
        signal=r["signal"].optional_string(),
        processes=tuple(p.object() for p in r["processes"].items()),
        summary=r["summary"].object(),
        copies=tuple(c.object() for c in r["copies"].items()),
    )


def dumps_json(result: TraceResult) -> str:
    from ..documents.envelope import dumps_document

    return dumps_document(to_dict(result))


CSV_COLUMNS = (
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
)


def dumps_csv(result: TraceResult) -> str:
    def rows() -> Iterator[Sequence[object]]:
        for c in result.copies:
            yield (["" if c.get(k) is None else c[k] for k in CSV_COLUMNS])

    return dumps_table(CSV_COLUMNS, rows())


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


__all__ = ["Fix", "Group", "KindRow"]
