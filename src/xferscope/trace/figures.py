"""One traced run's figures, the ones two traces of a program are compared by, all of its steady
state (its loop's steps, else its GPUs' span: phases.py): the steps and their span, and per kind
of copy, per finding and per line of the program, its calls, bytes, time in copies (GPU) and
host time blocked in copy calls; beside them its start-up and its wall time. `xferscope trace
--runs N` keeps N of them, so a comparison can weigh each change against the spread the runs
show."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from .analyze import Analysis
from .records import NO_CALLER, Copy, Trace, user_frame


def line_of(trace: Trace, c: Copy) -> tuple[str, str, str]:
    """A copy's line as a key that survives an edit above it: (file and function, the line's
    source text where it can be read, else its number), with the place as the trace says it,
    and its source text."""
    frame = user_frame(c.python)
    if frame is None:
        where = trace.line_of(c) or NO_CALLER
        return where, where, ""
    code = frame.source()
    key = f"{frame.file} ({frame.function}): {code}" if code else str(frame)
    return key, str(frame), code


def _totals(copies: list[Copy]) -> dict[str, float]:
    return {
        "calls": len(copies),
        "bytes": sum(c.bytes for c in copies),
        "gpu_s": sum(c.seconds for c in copies),
        "blocked_s": sum(c.blocked_s for c in copies),
    }


def run_figures(trace: Trace, analysis: Analysis, wall_s: float) -> dict[str, Any]:
    """The figures of one traced run, as a document keeps them."""
    kinds: dict[str, list[Copy]] = defaultdict(list)
    lines: dict[str, list[Copy]] = defaultdict(list)
    said: dict[str, tuple[str, str]] = {}
    for c in (analysis.view or trace).copies:  # the steady state's
        kinds[f"{c.direction} {c.host_memory}"].append(c)
        key, where, code = line_of(trace, c)
        lines[key].append(c)
        said[key] = (where, code)
    loop = analysis.loop
    return {
        "wall_s": wall_s,
        "span_s": analysis.steady_s,
        # the start-up of the process with the most GPU work: from its start to its first step
        "startup_s": next(
            (s.seconds for s in analysis.startup if loop and s.pid == loop.pid), None
        ),
        # the loop's mean step and how many, where one line repeats: compare's per-step figure
        "step_s": None if loop is None else loop.step_s,
        "steps": None if loop is None else loop.count,
        # the share of its steady steps the GPU waited for its input (Steps.input_share)
        "input_share": None if loop is None else loop.input_share,
        "kinds": {k: _totals(v) for k, v in sorted(kinds.items())},
        "findings": {
            f.code: {
                "title": f.title,
                "calls": f.calls,
                "bytes": f.bytes,
                "cost_s": f.cost_s,
                "saving_s": f.saving_s,
            }
            for f in analysis.findings
        },
        "lines": {
            k: {"where": said[k][0], "code": said[k][1], **_totals(v)} for k, v in lines.items()
        },
    }
