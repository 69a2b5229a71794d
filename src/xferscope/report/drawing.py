"""Renderings (PNG, HTML) drawn by worker processes, in parallel, beside the command.

Drawing a run's plots and page took 3.8 s of an H100 `run --quick` (two PNGs of 1.6 s each and
the page), one after the other, and loading matplotlib and plotly 1.2 s more before measuring.
Here a few worker processes, started when the command prepares its renderers, load the drawing
libraries while only the GPU is timed (niced; core/background.py says when), and draw a
command's renderings side by side once its data files are written.

A rendering goes to a worker when it is a `Drawing` or a `Page`: a function named by its module
and name (imported where it is drawn, so the command's own process need not load matplotlib or
plotly at all) and arguments that pickle. A plot whose data are known before the command ends
(a run's curves, measured before its GEMM check) may be drawn `ahead`, while only the GPU is
timed, into a file of the workers' own; the command's rendering of an equal Drawing then copies
that file. `xferscope` decides the number of workers from the cores it may use: none below four
(everything is drawn in the command's own process, as before), else up to MOST_WORKERS, leaving
two cores free; $XFERSCOPE_DRAWERS sets it (0: none). A worker never sees a signal: Ctrl-C is
the command's to handle, and the command kills its workers when it stops waiting for them.
"""

from __future__ import annotations

import contextlib
import importlib
import multiprocessing
import os
import shutil
import signal
import tempfile
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

from ..core import background

ENV = "XFERSCOPE_DRAWERS"
NOT_SENT = "cannot send to a drawing worker"
MOST_WORKERS = 4
FEWEST_CORES = 4  # below this many usable cores everything is drawn in the command's process
NICENESS = 10  # workers yield the CPU to the measurement while they load their libraries


def named(reference: str) -> Callable[..., Any]:
    """The function a reference "package.module:function" names, its module imported."""
    module, _, name = reference.partition(":")
    function: Callable[..., Any] = getattr(importlib.import_module(module), name)
    return function


@dataclass(frozen=True, slots=True)
class Drawing:
    """A rendering that a worker process can make: `function(*args, path)` writes the file at
    `path`, where `function` is named "package.module:function" (named()); it travels where
    `args` pickle. Equal Drawings draw equal files (what `Drawers.ahead` relies on)."""

    function: str
    args: tuple[Any, ...] = ()

    def __call__(self, path: Path, _written: Sequence[Path]) -> None:
        named(self.function)(*self.args, path)


@dataclass(frozen=True, slots=True)
class Page:
    """An HTML page a worker process can make: `function(*args, names)` returns its text, where
    `function` is named as a Drawing's is and `names` are the files written beside it (earlier
    outputs in its directory), which it links."""

    function: str
    args: tuple[Any, ...] = ()

    def __call__(self, path: Path, written: Sequence[Path]) -> None:
        names = [p.name for p in written if p.parent == path.parent]
        path.write_text(named(self.function)(*self.args, names), encoding="utf-8")


def worker_count() -> int:
    """How many drawing workers to start: $XFERSCOPE_DRAWERS, else by the usable cores."""
    given = os.environ.get(ENV, "").strip()
    if given:
        try:
            return max(0, min(MOST_WORKERS, int(given)))
        except ValueError:
            return 0
    cores = len(os.sched_getaffinity(0))
    return 0 if cores < FEWEST_CORES else min(MOST_WORKERS, cores - 2)


GO = "go"
READY = "ready"


def _load(plots: bool, pages: bool) -> None:
    with contextlib.suppress(Exception):  # a missing library is reported when a drawing fails
        if plots:
            from . import plots as _  # noqa: F401
        if pages:
            from . import page

            page.prepare()


def _serve(connection: Connection, plots: bool, pages: bool) -> None:
    """A worker: waits for GO (the host is free: core/background.py), loads the drawing
    libraries of its part (matplotlib for `plots`, plotly for `pages`) and says READY; then
    draws what it is sent until told to stop. A drawing that needs what it has not loaded loads
    it itself."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    with contextlib.suppress(OSError):
        os.nice(NICENESS)
    while True:
        try:
            task = connection.recv()
        except (EOFError, OSError):
            return
        if task is None:
            return
        if task == GO:
            _load(plots, pages)
            connection.send(READY)
            continue
        make, path, written = task
        try:
            make(Path(path), tuple(Path(p) for p in written))
            connection.send(None)
        except BaseException as exc:
            connection.send(f"{type(exc).__name__}: {exc}")


Task = tuple[Callable[[Path, Sequence[Path]], None], Path, Sequence[Path]]


@dataclass(slots=True)
class _Ahead:
    """A Drawing drawn ahead into `path`: queued until the host is free, then sent (its
    worker owes the answer), then done (`error`: None, or what stopped it)."""

    make: Drawing
    path: Path
    sent: bool = False
    done: bool = False
    error: str | None = None


class Drawers:
    """The worker processes of one command: side work (core/background.py) until it draws.
    Each worker answers what it was sent in order; `_owed` holds, per worker, what its next
    answers are for: READY (its libraries loaded), an _Ahead, or the index of a task of draw()."""

    def __init__(self, count: int, html: bool) -> None:
        context = multiprocessing.get_context("spawn")
        self._workers: list[tuple[Any, Connection]] = []
        # With a page to draw and two workers or more, the last loads plotly for the page and
        # the others matplotlib for the plots (each loading both took an H100 host's workers
        # longer than the GEMMs they load beside); a lone worker loads both.
        self._pages: Connection | None = None
        self._owed: dict[Connection, deque[object]] = {}
        self._free = False  # between host_free() and host_timed()
        self._paused = False  # stopped by host_timed()
        self._went = False  # GO sent (once)
        self._ahead: list[_Ahead] = []
        self._scratch: Path | None = None  # where drawings ahead are drawn
        for i in range(count):
            pages = html and (count == 1 or i == count - 1)
            plots = not html or count == 1 or i < count - 1
            mine, theirs = context.Pipe()
            process = context.Process(target=_serve, args=(theirs, plots, pages), daemon=True)
            process.start()
            theirs.close()
            self._workers.append((process, mine))
            self._owed[mine] = deque()
            if pages and count > 1:
                self._pages = mine
        background.attach(self)

    def __len__(self) -> int:
        return len(self._workers)

    def _send(self, connection: Connection, message: object, owed: object) -> None:
        """Sends a worker `message`, whose answer it then owes (`owed` says what it is for);
        raises what sending raised (a closed pipe, a task that does not pickle)."""
        connection.send(message)
        self._owed[connection].append(owed)

    def _fits(self, connection: Connection, make: object) -> bool:
        """Whether the worker loaded what `make` needs: the page worker for a Page, another
        for a Drawing."""
        return (connection is self._pages) == isinstance(make, Page)

    def _least_busy(self, make: object) -> Connection | None:
        alive = [c for _, c in self._workers if c in self._owed]
        return min(alive, key=lambda c: (not self._fits(c, make), len(self._owed[c])), default=None)

    def _idle(self, make: object) -> Connection | None:
        """An idle worker for `make`, one that loaded what it needs first."""
        idle = [c for c, owed in self._owed.items() if not owed]
        return min(idle, key=lambda c: not self._fits(c, make), default=None)

    def go(self) -> None:
        """The host is free: every worker goes on, loads its libraries (once), and the drawings
        asked for ahead are sent."""
        self._free = True
        self._resume()
        if not self._went:
            self._went = True
            for _, connection in self._workers:
                with contextlib.suppress(OSError, ValueError):
                    self._send(connection, GO, READY)
        for ahead in self._ahead:
            self._start(ahead)

    def _start(self, ahead: _Ahead) -> None:
        connection = self._least_busy(ahead.make)
        if ahead.sent or connection is None:
            return
        with contextlib.suppress(Exception):  # unsent: drawn when asked for instead
            self._send(connection, (ahead.make, str(ahead.path), []), ahead)
            ahead.sent = True

    def pause(self) -> None:
        """The host is timed from here: every worker stops where it is (SIGSTOP) until the host
        is free again or the command draws."""
        self._free = False
        self._signal(signal.SIGSTOP)
        self._paused = True

    def _resume(self) -> None:
        if self._paused:
            self._paused = False
            self._signal(signal.SIGCONT)

    def _signal(self, number: int) -> None:
        for process, _ in self._workers:
            if process.pid is not None:
                with contextlib.suppress(OSError):
                    os.kill(process.pid, number)

    def ahead(self, make: Drawing) -> None:
        """Draws `make` once the host is free (now, if it is), for a later draw() of an equal
        Drawing to copy."""
        if any(a.make == make for a in self._ahead):
            return
        if self._scratch is None:
            self._scratch = Path(tempfile.mkdtemp(prefix="xferscope-drawn-"))
        ahead = _Ahead(make, self._scratch / f"{len(self._ahead)}.tmp")
        self._ahead.append(ahead)
        if self._free:
            self._start(ahead)

    def _answer(self, connection: Connection) -> tuple[object, str | None] | None:
        """Reads one answer of a worker: what it was for (READY, an _Ahead or a task's index)
        and its error, or None; None when the worker is gone, every answer it owed lost."""
        owed = self._owed[connection]
        try:
            message = connection.recv()
        except (EOFError, OSError):
            for lost in owed:
                if isinstance(lost, _Ahead):
                    lost.done, lost.error = True, "a drawing worker stopped"
            del self._owed[connection]
            return None
        what = owed.popleft()
        error = None if message in (None, READY) else str(message)
        if isinstance(what, _Ahead):
            what.done, what.error = True, error
        return what, error

    def draw(self, tasks: Sequence[Task]) -> Iterator[tuple[int, str | None]]:
        """Draws the tasks (make, path, written) on the workers; yields each task's index as it
        finishes with None, or with the error that stopped it. A task equal to a drawing begun
        ahead takes its file. A task that does not pickle, or finds no worker left, is reported
        at once with NOT_SENT (the caller draws it itself)."""
        self._resume()
        waiting: dict[int, _Ahead] = {}  # tasks whose drawing ahead is still being drawn
        queue: list[int] = []
        for index, (make, _path, _written) in enumerate(tasks):
            match = next((a for a in self._ahead if a.sent and a.make == make), None)
            if match is None:
                queue.append(index)
            else:
                waiting[index] = match
        sent: set[int] = set()
        while queue or waiting or sent:
            for index, ahead in list(waiting.items()):
                if ahead.done:
                    del waiting[index]
                    if ahead.error is None and self._copy(ahead.path, tasks[index][1]):
                        yield index, None
                    else:
                        queue.append(index)  # drawn again, here or by a worker
            while queue:
                connection = self._idle(tasks[queue[0]][0])
                if connection is None:
                    break
                index = queue.pop(0)
                make, path, written = tasks[index]
                try:
                    self._send(connection, (make, str(path), [str(p) for p in written]), index)
                except Exception as exc:
                    yield index, f"{NOT_SENT}: {type(exc).__name__}: {exc}"
                    continue
                sent.add(index)
            if not self._owed:  # every worker gone: the rest is drawn at home
                for index in [*queue, *waiting]:
                    yield index, f"{NOT_SENT}: no drawing worker left"
                return
            busy = [c for c, owed in self._owed.items() if owed]
            if not busy:
                continue
            for ready in wait(busy):
                worker: Connection = ready  # type: ignore[assignment]
                lost = [i for i in self._owed[worker] if isinstance(i, int)]
                answer = self._answer(worker)
                if answer is None:
                    for index in lost:
                        sent.discard(index)
                        yield index, "a drawing worker stopped"
                    continue
                what, error = answer
                if isinstance(what, int):
                    sent.discard(what)
                    yield what, error

    @staticmethod
    def _copy(source: Path, target: Path) -> bool:
        try:
            shutil.copyfile(source, target)
        except OSError:
            return False
        return True

    def _forget(self) -> None:
        background.detach(self)
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None

    def close(self) -> None:
        """Tells every worker to stop, without waiting for it: a worker ends by itself once told
        (or once the command's end closes its connection)."""
        self._forget()
        self._resume()
        for _, connection in self._workers:
            with contextlib.suppress(OSError, ValueError):
                connection.send(None)
        for _, connection in self._workers:
            connection.close()
        self._workers = []

    def kill(self) -> None:
        """Stops every worker at once (a drawing cut short by a signal)."""
        self._forget()
        for process, _ in self._workers:
            with contextlib.suppress(OSError, ValueError):
                process.kill()
        for process, connection in self._workers:
            process.join()
            connection.close()
        self._workers = []


_drawers: Drawers | None = None


def start(html: bool, workers: bool = True) -> None:
    """Starts the command's drawing workers (none where worker_count says so, or not
    `workers`)."""
    global _drawers
    stop()
    count = worker_count() if workers else 0
    if count > 0:
        try:
            _drawers = Drawers(count, html)
        except OSError:
            _drawers = None  # no processes to be had: everything is drawn here


def current() -> Drawers | None:
    return _drawers


def stop() -> None:
    global _drawers
    if _drawers is not None:
        _drawers.close()
        _drawers = None
