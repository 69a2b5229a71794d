"""Ctrl-C (SIGINT) and SIGTERM, handled one way by every command, so nothing measured is lost.

A command's life has phases, and a signal does in each what that phase can afford:

  starting   (parsing options, opening the engine) the signal raises KeyboardInterrupt at once:
             nothing is measured yet, and leaving fast is all that matters.
  measuring  (after `record_only()`) the handler records the signal and returns. Engines call
             `check()` before every measuring call and raise KeyboardInterrupt there, where the
             measuring loops expect it and keep what was measured, so a result is never
             half-built by an exception landing in its bookkeeping.
  writing    (inside `writing()`) the data files (JSON, CSV, the history) are written whole
             after a first signal; a signal arriving while writing after an earlier one cuts
             the file being written (its temporary file is removed, whatever was at its path
             stays) and the ones after it.
  rendering  (inside `rendering()`) PNG and HTML files get at most GRACE_S after the first
             signal (SIGALRM raises `Deadline` then), and a second signal cuts them at once: a
             plot can always be drawn again from the JSON, so it never holds the exit up.

The state is the process's, like the signals it records; `handling()` starts it afresh for each
command (tests run many commands in one process).
"""

from __future__ import annotations

import contextlib
import signal
import sys
import time
from collections.abc import Iterator
from types import FrameType
from typing import Any, NoReturn

HANDLED = (signal.SIGINT, signal.SIGTERM)
# How long renderings may go on after the first signal: the process exits about a second after
# Ctrl-C, with its data files written first.
GRACE_S = 0.8
RETRY_S = 0.05  # how soon a cut that Python dropped is raised again

_STARTING, _RECORDING, _WRITING, _RENDERING = "starting", "recording", "writing", "rendering"

_received: list[int] = []  # signal numbers, in the order they arrived
_first_at: float | None = None  # time.monotonic() of the first
_mode = _STARTING
_installed = False


class Deadline(KeyboardInterrupt):
    """A rendering ran past GRACE_S after the first signal (raised by SIGALRM)."""


def _note(signum: int, at: float | None = None) -> None:
    global _first_at
    if not _received:
        _first_at = time.monotonic() if at is None else at
    _received.append(signum)


def _handler(signum: int, _frame: FrameType | None) -> None:
    _note(signum)
    if _mode == _STARTING or (_mode == _WRITING and len(_received) > 1):
        raise KeyboardInterrupt
    if _mode == _RENDERING:
        if len(_received) > 1:
            _cut()
        _arm_deadline()


def _alarm(_signum: int, _frame: FrameType | None) -> None:
    # a timer that fired as the rendering ended is late, not a cut: Python runs the handler at
    # its next instruction, which may be a finalizer after the rendering's unraisable hook was
    # put back, where a Deadline would be printed as a traceback
    if _mode == _RENDERING:
        _cut()


def _cut() -> NoReturn:
    """Raises Deadline, and arms the timer to raise it again soon: an exception raised from a
    signal handler can land in a finalizer or a weakref callback, where Python prints and drops
    it, and the rendering must stop all the same."""
    if _installed:
        signal.setitimer(signal.ITIMER_REAL, RETRY_S)
    raise Deadline


def _unraisable(info: Any) -> None:
    """While rendering: a cut that landed where Python cannot raise it is not worth a message
    (it is raised again RETRY_S later); anything else is reported as usual."""
    if not isinstance(info.exc_value, KeyboardInterrupt):
        sys.__unraisablehook__(info)


def _arm_deadline() -> None:
    """Schedules Deadline for GRACE_S after the first signal; raises it now if that is past."""
    assert _first_at is not None
    left = _first_at + GRACE_S - time.monotonic()
    if left <= 0:
        _cut()
    if _installed:
        signal.setitimer(signal.ITIMER_REAL, left)


def install() -> None:
    """Takes over SIGINT and SIGTERM for the rest of the process (the `xferscope` program: a
    signal that comes as it exits is recorded, not fatal). Main thread only."""
    global _installed
    for signum in HANDLED:
        signal.signal(signum, _handler)
    signal.signal(signal.SIGALRM, _alarm)
    _installed = True


@contextlib.contextmanager
def handling() -> Iterator[None]:
    """Takes over SIGINT and SIGTERM for one command (main thread only), with no signal received
    yet; puts the previous handlers back afterwards."""
    global _installed
    reset()
    previous = {signum: signal.getsignal(signum) for signum in (*HANDLED, signal.SIGALRM)}
    was_installed = _installed
    install()
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        _installed = was_installed


def reset() -> None:
    """Forgets every signal received and goes back to the starting phase."""
    global _mode, _first_at
    _received.clear()
    _first_at = None
    _mode = _STARTING


def record_only() -> None:
    """From now on a signal is recorded, not raised: call it when measuring starts."""
    global _mode
    _mode = _RECORDING


def requested() -> bool:
    """Whether a signal asked the command to stop."""
    return bool(_received)


def request(signum: int = signal.SIGINT, at: float | None = None) -> None:
    """Records a stop request as the handler does (the simulated engine's `interrupt_after`);
    `at`: when the signal came (time.monotonic()), where it came earlier to another handler
    (`trace`'s, which forwards it to the program): the renderings' grace counts from then."""
    _note(signum, at)


def check() -> None:
    """Raises KeyboardInterrupt if a stop was requested. Engines call it before each measuring
    call; cleanup (closing buffers) never does."""
    if _received:
        raise KeyboardInterrupt


def exit_status() -> int:
    """128 + the first signal's number (130 for Ctrl-C, 143 for SIGTERM), as a shell reports."""
    return 128 + (_received[0] if _received else signal.SIGINT)


@contextlib.contextmanager
def rendering() -> Iterator[None]:
    """The rendering phase: see the module's docstring. Raises Deadline (a KeyboardInterrupt)
    at once when a signal came more than GRACE_S ago."""
    global _mode
    previous, hook = _mode, sys.unraisablehook
    sys.unraisablehook = _unraisable
    try:
        if _received:
            _arm_deadline()
        _mode = _RENDERING
        yield
    finally:
        _mode = previous
        if _installed:
            signal.setitimer(signal.ITIMER_REAL, 0)
        sys.unraisablehook = hook


@contextlib.contextmanager
def writing() -> Iterator[None]:
    """The writing phase: see the module's docstring. A signal that arrives while writing,
    after an earlier one (while measuring or writing), raises KeyboardInterrupt; the signals
    that came before writing began never cut it, however many."""
    global _mode
    previous = _mode
    _mode = _WRITING
    try:
        yield
    finally:
        _mode = previous
