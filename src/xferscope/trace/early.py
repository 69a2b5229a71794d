"""A stopped program's trace read and analyzed while the program makes its own way out.

After a Ctrl-C, the injection library writes each process's records to their "end" line at
once, and the program then takes its own time to end: a DataLoader loop of 4 workers took
1.1-1.5 s after the terminal's Ctrl-C untraced on an H200 host, and xferscope read, priced and
wrote its trace in 0.84 s more after that (benchmarks/results/trace-h200-20261128b.json). From
the forwarded signal, a thread waits for every process's records to end, then reads them,
finds this machine's rates as a stopped trace finds them (from the history alone) and analyzes
them; the pipeline takes what it found when the program has ended, where the records are still
those it read (the same files, sizes and times of change), and otherwise reads them again."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from .analyze import Analysis, analyze
from .reading import read_trace
from .records import Trace
from .reference import Reference
from .runner import Ran, records_of
from .samples import with_samples

POLL_S = 0.02  # how often the records are looked at for their ends
JOIN_S = 120.0  # the most the pipeline waits for the thread (it reads what it would have read)
END = b'{"t":"end"'  # a process's records end with this line (engine/src/trace/writer.cpp)

Files = frozenset[tuple[str, int, int]]


def _state(paths: tuple[Path, ...]) -> Files | None:
    """Each file's name, size and time of change; None where one cannot be read."""
    try:
        return frozenset((str(p), (s := p.stat()).st_size, s.st_mtime_ns) for p in paths)
    except OSError:
        return None


def _ended(path: Path) -> bool:
    """Whether a process's records end with their "end" line (written last, then closed)."""
    try:
        with path.open("rb") as f:
            f.seek(max(path.stat().st_size - 256, 0))
            tail = f.read().rstrip(b"\n").rsplit(b"\n", 1)[-1]
    except OSError:
        return False
    return tail.startswith(END)


@dataclass(frozen=True, slots=True)
class Found:
    """What the thread found: the records read, the rates and engine, the analysis (its wall
    time set when the program has ended), and the files they were read from."""

    trace: Trace
    reference: Reference | None
    engine: Any
    analysis: Analysis
    files: Files


class EarlyAnalysis:
    """Started from the runner's stop (runner.run_traced's `on_stop`); `found(ran)` after the
    program has ended gives what it found, or None: then the pipeline reads as it would have.
    `rates` finds the machine's rates and engine as a stopped trace does; `region` as
    analyze takes it."""

    def __init__(self, rates: Callable[[], tuple[Reference | None, Any]], region: str) -> None:
        self._rates = rates
        self._region = region
        self._ended = threading.Event()  # the program has ended: stop waiting for the records
        self._thread: threading.Thread | None = None
        self._found: Found | None = None
        self._rates_found: tuple[Reference | None, Any] | None = None

    def start(self, directory: Path, started_ns: int) -> None:
        """Begins, once; from a signal handler, so it only starts the thread."""
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run, args=(directory, started_ns), name="xferscope-early", daemon=True
            )
            self._thread.start()

    def _run(self, directory: Path, started_ns: int) -> None:
        while True:  # until every process's records have ended, or the program has
            files, samples = records_of(directory)
            if files and all(_ended(p) for p in files):
                break
            if self._ended.wait(POLL_S):
                return
        state = _state(files + samples)
        if state is None:
            return
        try:
            trace = with_samples(read_trace(files), samples)
            self._rates_found = reference, engine = self._rates()
            analysis = analyze(trace, 0.0, reference, self._region, started_ns)
        except Exception:  # whatever went wrong here, the pipeline reads them again as without it
            return
        self._found = Found(trace, reference, engine, analysis, state)

    def found(self, ran: Ran) -> Found | None:
        """What the thread found for `ran`'s records, its wall time set; None where it did
        not start, found nothing, or the records changed since it read them."""
        if self._thread is None:
            return None
        self._ended.set()
        started = time.monotonic()
        while self._thread.is_alive():  # in steps, so that a Ctrl-C here is taken at once
            self._thread.join(0.05)
            if time.monotonic() - started > JOIN_S:
                return None
        got = self._found
        if got is None or got.files != _state(ran.files + ran.samples):
            return None
        return replace(got, analysis=replace(got.analysis, wall_s=ran.wall_s))

    def rates(self) -> tuple[Reference | None, Any] | None:
        """The rates and engine the thread found, where it got as far (after `found`): not
        looked for, nor said, twice."""
        return None if self._thread is None or self._thread.is_alive() else self._rates_found
