"""Why a GPU sat idle, gap by gap, as HTA splits it, with the host's side named:
- between launches: gaps shorter than LAUNCH_GAP_S, the cost of launching one piece of work
  after another;
- blocked: the host's main thread was inside a CUDA call that did not feed the GPU (pinning
  memory, a pageable copy's staging, a wait): which call, at which line;
- away: the host was away from CUDA (the input pipeline, the step's Python): named by the line
  where it came back to CUDA, the first recorded call of its main thread as the gap ended
  (kernel launches are not recorded, so a gap ended by one names no line).
The host side is read on each process's main thread (its thread id is the process id), where
Python runs a training loop."""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from .records import Call, Trace

LAUNCH_GAP_S = 50e-6  # gaps shorter than this are launch latency (HTA's kernel wait)
RESUMED_WITHIN_S = 1e-3  # a call this soon after a gap's end is where the host came back
MOST_CAUSES = 8  # the largest causes kept per GPU
NO_LINE = "(the GPU resumed with no CUDA call recorded: kernel launches are not)"


@dataclass(frozen=True, slots=True)
class IdleCause:
    """Idle time of one GPU with one cause: between launches, blocked in a call at a line, or
    away from CUDA until a line."""

    kind: str  # launch, blocked, away
    function: str  # the CUDA call (blocked), the call the host came back with (away), or ""
    where: str  # the program's line, or ""
    seconds: float
    gaps: int  # the gaps it took part in


def _places(trace: Trace) -> dict[tuple[int, int], str]:
    """The program's line of each recorded call, by (thread, start): a wait's own stack, a
    copy's or a pin's."""
    out: dict[tuple[int, int], str] = {}
    for c in trace.copies:
        if c.call is not None:
            out[(c.call.thread, c.call.start_ns)] = trace.where(c.frames, c.python) or ""
    for call in trace.calls:
        if call.frames or call.python:
            out[(call.thread, call.start_ns)] = trace.where(call.frames, call.python) or ""
    return out


def causes(trace: Trace, gaps: Sequence[tuple[int, int]], pids: set[int]) -> tuple[IdleCause, ...]:
    """The causes of a GPU's idle `gaps`, from the main threads of the processes `pids` that
    ran work on it; the largest first."""
    main = sorted(
        (c for c in trace.calls if c.pid in pids and c.thread == c.pid), key=lambda c: c.start_ns
    )
    starts = [c.start_ns for c in main]
    places = _places(trace)
    seconds: dict[tuple[str, str, str], float] = defaultdict(float)
    counted: dict[tuple[str, str, str], int] = defaultdict(int)
    for g0, g1 in gaps:
        if g1 - g0 < LAUNCH_GAP_S * 1e9:
            seconds[("launch", "", "")] += (g1 - g0) * 1e-9
            counted[("launch", "", "")] += 1
            continue
        for key, ns in _split(main, starts, g0, g1, places).items():
            seconds[key] += ns * 1e-9
            counted[key] += 1
    found = [IdleCause(k, f, w, s, counted[(k, f, w)]) for (k, f, w), s in seconds.items()]
    return tuple(sorted(found, key=lambda c: -c.seconds)[:MOST_CAUSES])


def _split(
    main: list[Call], starts: list[int], g0: int, g1: int, places: dict[tuple[int, int], str]
) -> dict[tuple[str, str, str], int]:
    """The gap [g0, g1) in ns by cause: each stretch inside a call of the main thread blocked
    in it; each stretch before one, away until it; the rest away until the call the host came
    back with as the gap ended, else its last call in the gap (the GPU started what it
    issued), else no line."""
    out: dict[tuple[str, str, str], int] = defaultdict(int)
    cursor, last = g0, ("", NO_LINE)  # the call the host came back to CUDA with, so far
    i = max(bisect.bisect_left(starts, g0) - 1, 0)
    while i < len(main) and main[i].start_ns < g1:
        c = main[i]
        i += 1
        if c.end_ns <= cursor:
            continue
        name, where = _name(c.function), places.get((c.thread, c.start_ns), "")
        if c.start_ns > cursor:
            out[("away", name, where)] += c.start_ns - cursor
        out[("blocked", name, where)] += min(c.end_ns, g1) - max(c.start_ns, cursor)
        cursor, last = min(c.end_ns, g1), (name, where)
    if cursor < g1:
        if i < len(main) and main[i].start_ns <= g1 + RESUMED_WITHIN_S * 1e9:
            c = main[i]
            last = (_name(c.function), places.get((c.thread, c.start_ns), ""))
        out[("away", last[0], last[1])] += g1 - cursor
    return out


def _name(function: str) -> str:
    """A call's name without CUPTI's version suffix: cudaMemcpyAsync_v3020 -> cudaMemcpyAsync."""
    head, _, tail = function.rpartition("_v")
    return head if head and tail.isdigit() else function
