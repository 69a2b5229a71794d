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

from typing import Protocol


class Side(Protocol):
    def go(self) -> None:
        """The host is free: the side work may begin."""

    def pause(self) -> None:
        """The host is timed: the side work stops where it is until go()."""


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
