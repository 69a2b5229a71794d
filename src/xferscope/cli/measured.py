"""The shape every measuring command shares, written once: a command family declares its kind of
document (what it writes, shows and stores) and how it plans a measurement; `run_measurement`
does the rest, in this order:

   1. where the history is, from --history/--no-history;
   2. the engine (--simulate or the native one);
   3. the plan: the command's own options checked against the engine (GPUs, memory, what can
      run), all before anything is made;
   4. the history checked writable;
   5. the drawing libraries loaded (a Ctrl-C inside an import would leave one half-made);
   6. the destination: every file's place decided and probed;
   7. from here on Ctrl-C keeps what was measured;
   8. the progress bar;
   9. measuring;
  10. nothing measured: no files, no directory (exit 130 after a signal, else 1 saying so);
  11. the data files, then the history, then the tables, then the drawings (outputs.Delivery);
  12. the exit status: 130/143 after a signal, 3 when verification failed, 1 when a part failed
      or a file could not be written, else 0.

A new command family is its own modules plus the line that registers its kind (`register`) and
the one that names it in cli/__init__.py."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import click

from ..core.engine import Engine
from ..core.progress import Progress
from . import common
from .outputs import Delivery, Destination, Named, Output

R = TypeVar("R")


def _always(_result: Any) -> bool:
    return True


def _never(_result: Any) -> bool:
    return False


@dataclass(frozen=True, slots=True)
class DocumentKind(Generic[R]):
    """A kind of result document: how to read it back, show it, where its files go and how they
    are made, and what its result says about itself. `xferscope report` draws any of them from
    its JSON; `run_measurement` measures one. Each command module registers its own."""

    name: str  # the directory prefix and the history's kind: sweep, run, overlap-cpu, ...
    load: Callable[[dict[str, Any]], R]
    show: Callable[[R], None]
    named: Callable[[dict[str, Any] | None], dict[str, Named]]  # kw None: the default names
    outputs: Callable[[R, Destination], list[Output]]
    document: Callable[[R], dict[str, Any]] | None = None  # its JSON document, for the history
    measured: Callable[[R], bool] = _always  # anything measured at all
    failed: Callable[[R], bool] = _never  # a part could not run (its warnings say why)
    unverified: Callable[[R], bool] = _never  # a copy's destination did not match its source
    failure: Callable[[R], str | None] = lambda _r: None  # a failure worth an Error line
    why_nothing: Callable[[R], str | None] = lambda _r: None  # why nothing was measured
    mode: Callable[[R], str] = lambda _r: ""  # the history's mode column (default: the kind)
    complete: Callable[[R], bool] = lambda r: not getattr(r, "interrupted", False)
    html: bool = False  # it draws an HTML page (plotly loaded before measuring)
    noun: str = "result"  # what the messages call one ("the run's files are written, ...")
    draw_after_signal: bool = True


_KINDS: dict[str, DocumentKind[Any]] = {}  # by schema name


def register(schema: str, kind: DocumentKind[Any]) -> None:
    """Makes a kind of document known to `report`, `history` and the golden-file test."""
    _KINDS[schema] = kind


def document_kinds() -> dict[str, DocumentKind[Any]]:
    """Every command's kind of document, by schema name (every command's module loaded)."""
    from .app import load_commands

    load_commands()
    return dict(_KINDS)


@dataclass(frozen=True, slots=True)
class Measurement(Generic[R]):
    """A planned measurement: the function that measures (it reports `steps` steps of progress)
    and, where the command wants one, what it does once the files are written (False: that
    failed, and the command exits 1)."""

    measure: Callable[[Progress], R]
    steps: int
    after: Callable[[R, Delivery, Destination], bool] = field(default=lambda r, d, dest: True)


def run_measurement(
    kind: DocumentKind[R],
    kw: dict[str, Any],
    plan: Callable[[Engine], Measurement[R]],
    name: str | None = None,
) -> None:
    """Measures as every command does (the module's docstring), then exits. `kw` holds the
    shared options (simulate, out, json/csv/plot paths, force, history); `plan` checks the
    command's own against the engine and returns the measurement; `name` the directory's
    prefix when it is not the kind's."""
    history = common.history_to_add_to(kw)
    engine = common.open_engine(kw["simulate"])
    measurement = plan(engine)
    if history is not None:
        common.check_history(history)
    common.prepare_renderers(html=kind.html)
    directory = name or kind.name
    with Destination.prepare(kw["out"], directory, kind.named(kw), kw.get("force", False)) as dest:
        common.begin_measuring()
        with common.progress_bar() as bar:
            result = measurement.measure(common.Bar(bar, measurement.steps))
        if not kind.measured(result):
            common.nothing_measured(dest, kind.why_nothing(result))
        saver = common.HistorySaver(history, lambda: entry(kind, result), kind.noun)
        delivery = common.deliver(
            kind.outputs(result, dest),
            dest,
            lambda: kind.show(result),
            saver,
            draw_after_signal=kind.draw_after_signal,
        )
        after_ok = measurement.after(result, delivery, dest)
    message = kind.failure(result)
    if message:
        click.echo(f"Error: {message}", err=True)
    common.finish(
        delivery,
        getattr(result, "interrupted", False),
        verification_failed=kind.unverified(result),
        failed=saver.failed or not after_ok or bool(message) or kind.failed(result),
    )


def entry(kind: DocumentKind[R], result: R) -> Any:
    """The history's row of a result: its kind, document, mode and whether it is complete."""
    from ..run.history import Entry

    if kind.document is None:
        raise TypeError(f"{kind.name} results have no document for the history")
    mode = kind.mode(result) or kind.name
    return Entry(kind.name, kind.document(result), mode, kind.complete(result), result)
