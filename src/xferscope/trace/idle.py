"""Why a GPU sat idle, gap by gap, as HTA splits it, with the host's side named:
- between launches: gaps shorter than LAUNCH_GAP_S, the cost of launching one piece of work
  after another;
- blocked: the host's main thread was inside a CUDA call that did not feed the GPU (pinning
  memory, a pageable copy's staging, a wait): which call, at which line;
- away: the host was away from CUDA (the input pipeline, the step's Python): named by the line
  where it came back to CUDA, the first recorded call of its main thread as the gap ended
  (kernel launches are not recorded, so a gap ended by one names no line), and by the lines
  its main thread was seen at meanwhile (samples.py: a look every 10 ms);
- after a wait: as away, where the gap began as the host came back from waiting for the GPU
  (`.item()`, a stream's synchronize): the GPU had nothing queued because the host had waited
  for it to drain, so what the host did next left it idle. Such idle is the wait's (the waits'
  finding prices it), not the input's, unless the looks found the host waiting for a batch.
The host side is read on each process's main thread (its thread id is the process id), where
Python runs a training loop."""

from __future__ import annotations

import bisect
import statistics
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from ..documents.records import OMIT_WHEN
from .costs import disjoint
from .records import Call, Copy, Trace
from .samples import Seen, lines_in

LAUNCH_GAP_S = 50e-6  # gaps shorter than this are launch latency (HTA's kernel wait)
RESUMED_WITHIN_S = 1e-3  # a call this soon after a gap's end is where the host came back
MOST_CAUSES = 8  # the largest causes kept per GPU
# a gap this many times a cause's usual (median) one is a long one: an epoch's start, where a
# DataLoader starts its workers again, or a step that did more than the others
LONG_GAP = 4.0
RECURS = 5  # a cause in fewer gaps than this does not recur step after step
# The share of a cause's looks that makes what they saw its cause (a loader's next, a value
# read): a gap after the host came back from it also holds the host's work up to the next
# launch, so what it waited in is seldom most of the looks
SEEN_SHARE = 0.25


def loader_waited(input_looks: int, looks: int) -> bool:
    """Whether the looks in some idle found the main thread waiting in a loader's next (a
    DataLoader's, DeviceLoader's), `input_looks` of `looks`, at least SEEN_SHARE of them: the
    input's idle, whatever call came before it (a stray look in one is no loader's wait)."""
    return input_looks > 0 and input_looks >= SEEN_SHARE * looks


NO_LINE = "(the GPU resumed with no CUDA call recorded: kernel launches are not)"
Stretches = tuple[tuple[int, int], ...]
Key = tuple[str, str, str, str]  # a cause: kind, function, line, the wait it followed


@dataclass(frozen=True, slots=True)
class IdleCause:
    """Idle time of one GPU with one cause: between launches, blocked in a call at a line, or
    away from CUDA until a line."""

    kind: str  # launch, blocked, away, after_wait
    function: str  # the CUDA call (blocked), the call the host came back with (away), or ""
    where: str  # the program's line, or ""
    # after_wait: the wait the gap followed, as "function at line"
    seconds: float
    gaps: int  # the gaps it took part in
    usual_s: float = 0.0  # its median gap
    long_gaps: int = 0  # its gaps over LONG_GAP times the usual one
    long_excess_s: float = 0.0  # what they took beyond a usual gap each
    # what its long gaps over LONG_GAP times their own usual one took beyond that: where the
    # long gaps are every step's wait (long only beside the gaps before a step's other copies),
    # an epoch's start among them
    longer_excess_s: float = 0.0
    # away: the looks at the main thread that fell in its time, those waiting for the next
    # batch (a DataLoader's or DeviceLoader's next), the program's lines they saw with how many
    # each (the most seen first), and the framework the waits for a batch went through
    looks: int = 0
    input_looks: int = 0
    seen_at: tuple[tuple[str, int], ...] = ()
    seen_framework: str | None = None
    waited_at: str = ""
    seen_doing: tuple[tuple[str, int], ...] = ()  # what the looks found it doing (samples.doing)
    value_looks: int = 0  # the looks that found it waiting for a value (samples.VALUE_READS)
    # away: the main thread's whole time away from CUDA in the stretches that hold its gaps,
    # from the end of its last call before each (each stretch once): the host's work there,
    # of which the GPU's idle is only the part after the GPU ran out of queued work
    host_s: float = 0.0
    # where: the host's stretches away (host_s's, merged) and the GPU's idle in its gaps
    # (away, after a wait), each (start, end) in ns in time order, for pricing step by step
    host_at: Stretches = field(default=(), metadata={OMIT_WHEN: lambda _: True})
    idle_at: Stretches = field(default=(), metadata={OMIT_WHEN: lambda _: True})

    @property
    def steady_s(self) -> float:
        """Its time less what its long gaps took beyond a usual one: what it costs every step,
        without a start-up's or an epoch's one long wait (none where it took part in fewer
        than RECURS gaps)."""
        return self.seconds - self.long_excess_s if self.gaps >= RECURS else 0.0


def joined(causes: Sequence[IdleCause]) -> IdleCause:
    """One cause of several in which the host was doing the same (the largest's kind, call and
    line): their time, gaps and looks summed, the lines seen and what the looks found it doing
    counted together. A JAX loop's wait while it made each batch with NumPy was two causes, the
    host back with a cudaMemsetAsync of JAX's in 905 gaps and with no call in 109, the same
    lines seen in both."""
    if len(causes) == 1:
        return causes[0]
    first = max(causes, key=lambda c: c.seconds)

    def counted(each: list[tuple[tuple[str, int], ...]]) -> tuple[tuple[str, int], ...]:
        total: Counter[str] = Counter()
        for pairs in each:
            for key, n in pairs:
                total[key] += n
        return tuple(total.most_common())

    return replace(
        first,
        seconds=sum(c.seconds for c in causes),
        gaps=sum(c.gaps for c in causes),
        long_gaps=sum(c.long_gaps for c in causes),
        long_excess_s=sum(c.long_excess_s for c in causes),
        longer_excess_s=sum(c.longer_excess_s for c in causes),
        looks=sum(c.looks for c in causes),
        input_looks=sum(c.input_looks for c in causes),
        value_looks=sum(c.value_looks for c in causes),
        host_s=sum(c.host_s for c in causes),
        host_at=tuple(sorted(ab for c in causes for ab in c.host_at)),
        idle_at=tuple(sorted(ab for c in causes for ab in c.idle_at)),
        seen_at=counted([c.seen_at for c in causes]),
        seen_doing=counted([c.seen_doing for c in causes]),
    )


class Lines:
    """The program's line of a recorded call, found when first asked: a wait's own stack, else
    the stack of the copy the call issued ("" where neither was recorded)."""

    def __init__(self, trace: Trace) -> None:
        self._trace = trace
        self._copies = {(c.call.thread, c.call.start_ns): c for c in trace.copies if c.call}
        self._found: dict[tuple[int, int], str] = {}

    def __call__(self, call: Call) -> str:
        key = (call.thread, call.start_ns)
        if key not in self._found:
            source: Call | Copy | None = call if call.frames or call.python else None
            source = source or self._copies.get(key)
            where = self._trace.where(source.frames, source.python) if source else None
            self._found[key] = where or ""
        return self._found[key]


def main_calls(trace: Trace, pids: set[int]) -> tuple[list[Call], list[int]]:
    """The recorded calls of the main threads of the processes `pids` in time order, and their
    starts: what split() reads a gap by."""
    main = sorted(
        (c for c in trace.calls if c.pid in pids and c.thread == c.pid), key=lambda c: c.start_ns
    )
    return main, [c.start_ns for c in main]


def waits_of(trace: Trace) -> Callable[[Call], bool]:
    """Whether a call waited for the GPU (Trace.waits: a synchronize, or a copy down that
    blocks the host), as split() is told: every reading of idle after a wait asks this."""
    waiting = {(c.thread, c.start_ns) for c in trace.waits()}
    return lambda c: (c.thread, c.start_ns) in waiting


def causes(
    trace: Trace, gaps: Sequence[tuple[int, int]], pids: set[int], lines: Lines
) -> tuple[IdleCause, ...]:
    """The causes of a GPU's idle `gaps`, from the main threads of the processes `pids` that
    ran work on it, each call's line from `lines`; the largest first."""
    main, starts = main_calls(trace, pids)
    waits = waits_of(trace)
    each: dict[Key, list[int]] = defaultdict(list)  # ns per gap, by cause
    away: dict[Key, list[tuple[int, int]]] = defaultdict(list)
    host: dict[Key, list[tuple[int, int]]] = defaultdict(list)

    def label(c: Call) -> tuple[str, str]:
        return c.name, lines(c)

    for g0, g1 in gaps:
        if g1 - g0 < LAUNCH_GAP_S * 1e9:
            each[("launch", "", "", "")].append(g1 - g0)
            continue
        for key, ns in split(main, starts, g0, g1, label, stretches=away, waits=waits,
                             hosts=host).items():  # fmt: skip
            each[key].append(ns)
    found = [_cause(key, ns, lines_in(trace.samples, pids, away.get(key, ())),
                    tuple(zip(*disjoint(host.get(key, ())), strict=True)),
                    tuple(sorted(away.get(key, ()))))
             for key, ns in each.items()]  # fmt: skip
    return tuple(sorted(found, key=lambda c: -c.seconds)[:MOST_CAUSES])


def _cause(key: Key, ns: list[int], seen: Seen, host: Stretches = (),
           idle: Stretches = ()) -> IdleCause:  # fmt: skip
    """A cause from its time in each gap (the total, the usual gap and the long ones), what
    the looks at the main thread saw in it and the host's whole stretches away that held it."""
    usual = statistics.median(ns)
    long = [x for x in ns if x > LONG_GAP * usual]
    usual_long = statistics.median(long) if long else 0
    longer = sum(x - usual_long for x in long if x > LONG_GAP * usual_long)
    kind, function, where, waited = key
    return IdleCause(kind, function, where, sum(ns) * 1e-9, len(ns), usual * 1e-9, len(long),
                     (sum(long) - usual * len(long)) * 1e-9, longer * 1e-9, seen.looks,
                     seen.input_looks, seen.lines, seen.framework, waited, seen.doing,
                     seen.value_looks, sum(b - a for a, b in host) * 1e-9, host,
                     idle)  # fmt: skip


def split(
    main: list[Call],
    starts: list[int],
    g0: int,
    g1: int,
    label: Callable[[Call], tuple[str, str]],
    nothing: tuple[str, str] = ("", NO_LINE),
    resumed_within_ns: int = int(RESUMED_WITHIN_S * 1e9),
    stretches: dict[Key, list[tuple[int, int]]] | None = None,
    waits: Callable[[Call], bool] = lambda c: c.synchronizes,
    hosts: dict[Key, list[tuple[int, int]]] | None = None,
) -> dict[Key, int]:
    """The gap [g0, g1) in ns by cause (kind, function, line, the wait it followed), each call
    named by `label` (its function and line): each stretch inside a call of the main thread
    blocked in it; each stretch before one, away until it; the rest away until the call the
    host came back with as the gap ended (within `resumed_within_ns`), else its last call in
    the gap (the GPU started what it issued), else `nothing`. Where the gap began as the host
    came back from a wait for the GPU (`waits`: Trace.waits, within a launch's gap of g0), its
    away stretches are after that wait. `stretches`, where given, gets each away stretch [a, b)
    by cause; `hosts`, each away stretch from where the host left CUDA (the end of its last
    call before the gap, for the gap's first)."""
    out: dict[Key, int] = defaultdict(int)
    i = max(bisect.bisect_left(starts, g0) - 1, 0)
    # where the host was already away as the gap began: since its last call before it ended
    left = main[i].end_ns if i < len(main) and main[i].end_ns <= g0 else g0
    waited = ""  # the wait the gap began with, as "function at line"
    if i < len(main) and waits(main[i]) and main[i].end_ns >= g0 - LAUNCH_GAP_S * 1e9:
        function, line = label(main[i])
        waited = f"{function} at {line}" if line else function
    kind = "after_wait" if waited else "away"

    def away(key: Key, a: int, b: int) -> None:
        out[key] += b - a
        if stretches is not None:
            stretches.setdefault(key, []).append((a, b))
        if hosts is not None:
            hosts.setdefault(key, []).append((left if a == g0 else a, b))

    cursor, last = g0, nothing  # the call the host came back to CUDA with, so far
    while i < len(main) and main[i].start_ns < g1:
        c = main[i]
        i += 1
        if c.end_ns <= cursor:
            continue
        named = label(c)
        if c.start_ns > cursor:
            away((kind, *named, waited), cursor, c.start_ns)
        out[("blocked", named[0], named[1], "")] += min(c.end_ns, g1) - max(c.start_ns, cursor)
        cursor, last = min(c.end_ns, g1), named
    if cursor < g1:
        if i < len(main) and main[i].start_ns <= g1 + resumed_within_ns:
            last = label(main[i])
        away((kind, *last, waited), cursor, g1)
    return out
