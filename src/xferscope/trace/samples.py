"""Where each traced Python process's main thread was, looked at every few milliseconds by
site/sitecustomize.py: read back, and asked which of the program's lines it was at within
stretches of time (a GPU's idle gaps with no CUDA call to name: the input pipeline's
`for x, y in loader`, or the step's own Python)."""

from __future__ import annotations

import bisect
import json
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from .records import PyFrame, Trace, user_frame

MOST_LINES = 3  # the lines named for one stretch of idle time
OWN = "/xferscope/"  # xferscope's own frames (DeviceLoader's __next__): the program's line named


@dataclass(frozen=True, slots=True)
class MainSamples:
    """One process's looks at its main thread: when (ns, CUPTI's clock), sorted, and the
    stack seen each time (innermost first)."""

    period_s: float
    ts: tuple[int, ...]
    stacks: tuple[tuple[PyFrame, ...], ...]


def read_samples(files: Iterable[Path]) -> dict[int, MainSamples]:
    """Each process's samples by pid; a line cut short (the process killed) is skipped."""
    found: dict[int, MainSamples] = {}
    for path in sorted(files):
        pid, period = 0, 0.0
        stacks: dict[int, tuple[PyFrame, ...]] = {}
        taken: list[tuple[int, int]] = []
        for text in path.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                r = json.loads(text)
            except ValueError:
                continue
            t = r.get("t")
            if t == "sample":
                taken.append((int(r["ts"]), int(r["id"])))
            elif t == "pystack":
                stacks[int(r["id"])] = tuple(PyFrame(str(f[0]), int(f[1]), str(f[2]))
                                             for f in r.get("f", ()))  # fmt: skip
            elif t == "samples":
                pid, period = int(r["pid"]), float(r.get("period_s", 0.0))
        taken.sort()
        if pid and taken:
            found[pid] = MainSamples(
                period, tuple(ts for ts, _ in taken), tuple(stacks.get(i, ()) for _, i in taken)
            )
    return found


def with_samples(trace: Trace, files: Iterable[Path]) -> Trace:
    """`trace` with its processes' samples read from `files` (runner.Ran.samples)."""
    return replace(trace, samples=read_samples(files))


def program_line(stack: Sequence[PyFrame]) -> str:
    """The program's own line in a stack: its innermost frame outside installed packages, the
    standard library and xferscope (a step waiting in DeviceLoader is at its `for` line)."""
    own = next((f for f in stack if not f.is_library and OWN not in f.file), None)
    frame = own or user_frame(stack)
    return "" if frame is None else str(frame)


def lines_in(
    samples: dict[int, MainSamples], pids: Iterable[int], stretches: Iterable[tuple[int, int]]
) -> tuple[int, tuple[tuple[str, int], ...]]:
    """(how many looks fell in the stretches [a, b) ns, the program's lines they saw with how
    many each, the most seen first, at most MOST_LINES) over the processes `pids`."""
    mine = [samples[p] for p in pids if p in samples]
    seen: Counter[str] = Counter()
    for a, b in stretches:
        for s in mine:
            for i in range(bisect.bisect_left(s.ts, a), bisect.bisect_left(s.ts, b)):
                seen[program_line(s.stacks[i])] += 1
    return sum(seen.values()), tuple(seen.most_common(MOST_LINES))
