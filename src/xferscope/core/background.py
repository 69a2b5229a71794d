"""Work beside a measurement, and when it may run.

A command may start side work in other processes (the drawing workers that load matplotlib and
plotly: report/drawing.py). It must not run while a measurement times anything the host takes part
in: a pageable copy is the CPU's memcpy, and an H100's H2D from pageable memory fell from
7.7 GB/s to 4.7-5.0 while four workers loaded their libraries beside it. So side work waits
for `host_free()`, which a measurement calls where what follows is timed on the GPU alone (the
GEMMs of `run`'s check), and `host_timed()`, called before the host is timed again, pauses it
where it is (the processes stopped) until the host is free again or the command draws. Waiting
for it instead held an H100 `run --quick` up for 0.3-0.8 s before the CPU's GEMMs. A command
that never calls host_free gets its side work done after measuring.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Protocol


class Side(Protocol):
    def go(self) -> None:
        """The host is free: the side work may begin."""

    def pause(self) -> None:
        """The host is timed: the side work stops where it is until go()."""


class Ahead:
    """Side work in a thread of this process, such as loading a library a later step needs:
    begun when the host is free. A thread cannot be stopped where it is, so pause() waits for it
    to end: keep it short (`run` loads cuBLASLt and GL this way, about 0.5 s)."""

    def __init__(self, work: Callable[[], None]) -> None:
        self._work = work
        self._thread: threading.Thread | None = None

    def go(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._work, name="xferscope-ahead", daemon=True)
            self._thread.start()

    def pause(self) -> None:
        if self._thread is not None:
            self._thread.join()

    @property
    def begun(self) -> bool:
        return self._thread is not None


_sides: list[Side] = []


def attach(side: Side) -> None:
    if side not in _sides:
        _sides.append(side)


def detach(side: Side) -> None:
    if side in _sides:
        _sides.remove(side)


def host_free() -> None:
    """From here until host_timed(), only the GPU is timed: side work may run."""
    for side in list(_sides):
        side.go()


def host_timed() -> None:
    """The host is about to be timed: the side work begun is paused."""
    for side in list(_sides):
        side.pause()
