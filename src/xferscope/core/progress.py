"""The one progress protocol every measurement reports to: `begin` when a stretch of work
starts, `step` when a unit of it is done. The CLI draws a bar from it; QUIET ignores it."""

from __future__ import annotations

from typing import Protocol


class Progress(Protocol):
    def begin(self, label: str) -> None:
        """A stretch of work starts (a curve, an experiment): `label` says which."""

    def step(self, label: str) -> None:
        """One unit of work is done: `label` says what, with its figure where it has one."""


class _Quiet:
    def begin(self, label: str) -> None:
        pass

    def step(self, label: str) -> None:
        pass


QUIET: Progress = _Quiet()
