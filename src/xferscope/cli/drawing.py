"""Renderings (PNG, HTML) drawn by worker processes, in parallel, beside the command.

Drawing a run's plots and page took 3.8 s of an H100 `run --quick` (two PNGs of 1.6 s each and
the page), one after the other, and loading matplotlib and plotly 1.2 s more before measuring.
Here a few worker processes, started when the command prepares its renderers, load the drawing
libraries while only the GPU is timed (niced; core/background.py says when), and draw a
command's renderings side by side once its data files are written.

A rendering goes to a worker when it is a `Drawing`: a module-level function and arguments that
pickle. `xferscope` decides the number of workers from the cores it may use: none below four
(everything is drawn in the command's own process, as before), else up to MOST_WORKERS, leaving
two cores free; $XFERSCOPE_DRAWERS sets it (0: none). A worker never sees a signal: Ctrl-C is
the command's to handle, and the command kills its workers when it stops waiting for them.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import time
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


@dataclass(frozen=True, slots=True)
class Drawing:
    """A rendering that a worker process can make: `function(*args, path)` writes the file at
    `path`. `function` is a module-level function and `args` pickle, so it travels."""

    function: Callable[..., None]
    args: tuple[Any, ...] = ()

    def __call__(self, path: Path, _written: Sequence[Path]) -> None:
        self.function(*self.args, path)


@dataclass(frozen=True, slots=True)
class Page:
    """An HTML page a worker process can make: `function(*args, names)` returns its text, where
    `names` are the files written beside it (earlier outputs in its directory), which it links."""

    function: Callable[..., str]
    args: tuple[Any, ...] = ()

    def __call__(self, path: Path, written: Sequence[Path]) -> None:
        names = [p.name for p in written if p.parent == path.parent]
        path.write_text(self.function(*self.args, names), encoding="utf-8")


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


def _load(html: bool) -> None:
    with contextlib.suppress(Exception):  # a missing library is reported when a drawing fails
        from ..report import plots  # noqa: F401

        if html:
            from ..report import page

            page.prepare()


def _serve(connection: Connection, html: bool) -> None:
    """A worker: waits for GO (the host is free: core/background.py), loads the drawing
    libraries and says READY; then draws what it is sent until told to stop. A drawing that
    comes first loads them itself."""
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
            _load(html)
            connection.send(READY)
            continue
        make, path, written = task
        try:
            make(Path(path), tuple(Path(p) for p in written))
            connection.send(None)
        except BaseException as exc:
            connection.send(f"{type(exc).__name__}: {exc}")


class Drawers:
    """The worker processes of one command: side work (core/background.py) until it draws."""

    def __init__(self, count: int, html: bool) -> None:
        context = multiprocessing.get_context("spawn")
        self._workers: list[tuple[Any, Connection]] = []
        self._loading: set[Connection] = set()  # told GO, READY not yet read
        self._went = False
        for _ in range(count):
            mine, theirs = context.Pipe()
            process = context.Process(target=_serve, args=(theirs, html), daemon=True)
            process.start()
            theirs.close()
            self._workers.append((process, mine))
        background.attach(self)

    def __len__(self) -> int:
        return len(self._workers)

    def go(self) -> None:
        """The host is free: every worker loads its libraries now (once)."""
        if self._went:
            return
        self._went = True
        for _, connection in self._workers:
            with contextlib.suppress(OSError, ValueError):
                connection.send(GO)
                self._loading.add(connection)

    def settle(self, timeout_s: float) -> None:
        """Returns once every worker told GO has loaded its libraries (or after timeout_s)."""
        deadline = time.monotonic() + timeout_s
        while self._loading:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            for ready in wait(list(self._loading), left):
                try:
                    self._answer(ready)  # type: ignore[arg-type]
                except (EOFError, OSError):
                    self._loading.discard(ready)

    def _answer(self, connection: Connection) -> tuple[bool, str | None]:
        """(True, its error or None) when a drawing's answer was read from the worker; (False,
        None) when it was the worker's READY. EOFError/OSError: the worker is gone."""
        message = connection.recv()
        if message == READY:
            self._loading.discard(connection)
            return False, None
        return True, message

    def draw(
        self, tasks: Sequence[tuple[Callable[[Path, Sequence[Path]], None], Path, Sequence[Path]]]
    ) -> Iterator[tuple[int, str | None]]:
        """Draws the tasks (make, path, written) on the workers; yields each task's index as it
        finishes with None, or with the error that stopped it. A task that does not pickle is
        reported as failed at once (the caller may draw it itself)."""
        queue = list(enumerate(tasks))
        busy: dict[Connection, int] = {}
        idle = [connection for _, connection in self._workers]
        while queue or busy:
            while queue and idle:
                index, (make, path, written) = queue.pop(0)
                connection = idle.pop()
                try:
                    connection.send((make, str(path), [str(p) for p in written]))
                except Exception as exc:
                    idle.append(connection)
                    yield index, f"{NOT_SENT}: {type(exc).__name__}: {exc}"
                    continue
                busy[connection] = index
            if not busy:
                continue
            for ready in wait(list(busy)):
                connection = ready  # type: ignore[assignment]
                try:
                    answered, error = self._answer(connection)
                except (EOFError, OSError):
                    yield busy.pop(connection), "a drawing worker stopped"
                    continue  # that worker is gone: not idle again
                if not answered:
                    continue  # its READY: the drawing's answer comes next
                index = busy.pop(connection)
                idle.append(connection)
                yield index, error

    def close(self) -> None:
        """Tells every worker to stop, without waiting for it: a worker ends by itself once told
        (or once the command's end closes its connection)."""
        background.detach(self)
        for _, connection in self._workers:
            with contextlib.suppress(OSError, ValueError):
                connection.send(None)
        for _, connection in self._workers:
            connection.close()
        self._workers = []

    def kill(self) -> None:
        """Stops every worker at once (a drawing cut short by a signal)."""
        background.detach(self)
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
