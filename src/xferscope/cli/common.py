"""What every command shares: the output and seed options, GPU lists, the progress bar,
measuring and delivering the results, and the kinds of documents `report` draws again."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import click
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from ..core import engine as core_engine
from ..core import interrupt
from ..core.engine import Engine, check_device
from ..core.errors import OptionError, XferscopeError
from ..core.units import parse_device, parse_devices
from ..report import drawing
from .app import EXIT_VERIFICATION_FAILED, stderr
from .outputs import Delivery, Destination, Named, Output


def open_engine(simulate: bool, **simulated: Any) -> Engine:
    """The engine a command measures with (tests put a simulated one of their own here)."""
    return core_engine.open_engine(simulate, **simulated)


# ---- shared options and checks --------------------------------------------------------------

SEED_MAX = (1 << 64) - 1


def parse_seed(value: str | int) -> int:
    """The data pattern's seed: a whole number from 0 to 2^64 - 1 (the engine's seed is an
    unsigned 64-bit integer), decimal or 0x-hexadecimal."""
    text = str(value).strip()
    try:
        seed = int(text, 0)
    except ValueError:
        seed = -1
    if not 0 <= seed <= SEED_MAX:
        raise OptionError("--seed", f"'{text}' is not a whole number from 0 to {SEED_MAX}")
    return seed


def resolve_devices(
    engine: Engine, text: str | None, default: tuple[int, ...] | None = None, one: bool = False
) -> tuple[int, ...]:
    """The GPUs `-g/--device` names, checked against the machine: one rule for every command.
    None (the option not given) means `default`, or every GPU; `one` asks for exactly one."""
    if text is None:
        devices = default if default is not None else tuple(range(engine.device_count()))
        if one and len(devices) != 1:
            raise OptionError("--device", "give one GPU index; this runs on one GPU")
    elif one:
        devices = (parse_device("--device", text),)
    else:
        devices = parse_devices("--device", text)
    for index in devices:
        check_device(engine, index)
    return devices


# ---- progress ----------------------------------------------------------------------------------


def progress_bar() -> Progress:
    """The progress bar every long command shows on stderr; it disappears when done."""
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=stderr,
        transient=True,
    )


class Bar:
    """The progress bar as a core.progress.Progress: `step` advances it, both show the label."""

    def __init__(self, progress: Progress, total: int) -> None:
        self._progress = progress
        self._task = progress.add_task("starting", total=total)

    def begin(self, label: str) -> None:
        self._progress.update(self._task, description=label)

    def step(self, label: str) -> None:
        self._progress.update(self._task, advance=1, description=label)


# ---- measuring and delivering, the same for every command --------------------------------------


def prepare_renderers(html: bool = False, workers: bool = True) -> None:
    """Gets the drawing ready before measuring: matplotlib (and plotly for the HTML report) take
    a second to load, which would otherwise delay the results. Where there are drawing workers
    (drawing.py; `workers` False: none, for a command whose measurement is another program's
    run, or an MPI rank) they load them while the GPU is measured; else they are imported here,
    now, as a Ctrl-C landing inside an import leaves a module half-made. A missing one is one
    line."""
    needed = ("matplotlib", "plotly") if html else ("matplotlib",)
    missing = [name for name in needed if importlib.util.find_spec(name) is None]
    if missing:  # installed without its dependencies (pip --no-deps)
        raise _not_installed(missing[0])
    drawing.start(html, workers)
    if drawing.current() is not None:
        return
    try:
        from ..report import plots  # noqa: F401  (imported for its side effect: matplotlib loaded)

        if html:
            from ..report import page

            page.prepare()
    except ImportError as exc:
        raise _not_installed((exc.name or "a plotting library").split(".")[0]) from None


def sweep_plots(result: Any) -> list[tuple[str, drawing.Drawing]]:
    """The sweep's plots of a result (a SweepResult: `xferscope sweep`'s, and a run's per GPU):
    (name, the drawing a worker makes) each."""
    from ..report.style import plot_names

    return [
        (what, drawing.Drawing("xferscope.report.plots:write_plot", (result, what)))
        for what in plot_names(result)
    ]


def _not_installed(name: str) -> XferscopeError:
    return XferscopeError(
        f"{name} is not installed, and xferscope draws its plots with it: pip install {name}"
    )


def begin_measuring() -> None:
    """From here on Ctrl-C stops the measurement and keeps what was measured."""
    interrupt.record_only()


def nothing_measured(dest: Destination, why: str | None = None) -> NoReturn:
    """Nothing was measured: no files, no directory. After a signal, exits as interrupted;
    without one (a plan no check refused, of which nothing could run), exits 1 saying `why`."""
    dest.discard()
    if interrupt.requested():
        stderr.print("interrupted before anything was measured; nothing written")
        sys.exit(interrupt.exit_status())
    why = why or "nothing in this plan could be measured"
    click.echo(f"Error: {why}; nothing written", err=True)
    sys.exit(1)


def deliver(
    outputs: list[Output],
    dest: Destination,
    show: Callable[[], None],
    history: Callable[[], None] | None = None,
    draw_after_signal: bool = True,
) -> Delivery:
    """Writes the data files, runs `history` (adding the run to it), prints the report with
    `show`, draws the renderings (after a signal only if `draw_after_signal`) and says where
    everything went (outputs.py)."""
    delivery = Delivery(outputs, draw_after_signal=draw_after_signal)
    delivery.write_data()
    if history is not None:
        history()
    show()
    try:
        delivery.render()
    finally:
        drawing.stop()
    document = next((p for p in delivery.written if p.suffix == ".json"), None)
    again = f"xferscope report {document}" if document else None
    delivery.summary(stderr, dest.directory, again)
    return delivery


def finish(
    delivery: Delivery, interrupted: bool | None, verification_failed: bool, failed: bool
) -> None:
    """Exits as every command does: 130 (143 for SIGTERM) after a signal, 3 when verification
    failed, 1 when a part could not run or a file could not be written, else 0. `interrupted`
    says whether the measurement was cut short (None: the command measured nothing)."""
    if interrupt.requested():
        if interrupted is None:
            stderr.print("interrupted: the files named above are written")
        elif interrupted:
            stderr.print("interrupted: the files hold what was measured, marked incomplete")
        else:
            stderr.print("interrupted after measuring: the measurement is complete")
        sys.exit(interrupt.exit_status())
    if verification_failed:
        sys.exit(EXIT_VERIFICATION_FAILED)
    if failed or not delivery.ok:
        sys.exit(1)


def result_files(
    name: str, kw: dict[str, Any] | None = None, plot_suffixes: tuple[str, ...] = (".png",)
) -> dict[str, Named]:
    """The files of a command that writes one result: NAME.json, NAME.csv and its plots, each
    where its option puts it (kw None: the default names)."""
    kw = kw or {}
    return {
        "json": Named("--json", kw.get("json_path"), f"{name}.json"),
        "csv": Named("--csv", kw.get("csv_path"), f"{name}.csv"),
        "plot": Named("--plot", kw.get("plot_prefix"), name, plot_suffixes),
    }


def history_file(history_path: str | None) -> Path:
    """The history file --history names ($XFERSCOPE_HISTORY or the default where it is not
    given): the one rule for every command that reads or adds to the history."""
    from ..run.history import default_path

    if history_path is not None and not history_path.strip():
        raise OptionError("--history", "give a file name, not an empty string")
    return Path(history_path).expanduser() if history_path else default_path()


def history_to_add_to(kw: dict[str, Any]) -> Path | None:
    """The history a command adds its result to: None with --no-history (or where the command
    has no such option)."""
    return None if kw.get("no_history", True) else history_file(kw.get("history_path"))


# ---- the history, for every command that adds its results -------------------------------------

HISTORY_WAIT_S = 60.0  # how long a command waits for another writer's lock on the history
HISTORY_POLL_S = 0.25  # how often it looks whether Ctrl-C was pressed meanwhile


def check_history(path: Path) -> None:
    """Before measuring: the history can be written. One that exists is opened and its write
    lock taken and let go (a lock held by another process is fine: it is waited for after
    measuring); for a new one, its directory is probed. Nothing is created but the directory."""
    from ..documents.files import probe, special
    from ..run.history import History, HistoryError, HistoryLocked

    kind = special(path)
    if kind is not None:
        raise OptionError(
            "--history",
            f"{path} is {kind}, not a regular file; give another file with --history, or "
            "--no-history",
        )
    if not path.exists():
        probe("--history", path.parent, path)
        return
    try:
        with History(path, timeout=0.05) as history:
            history.check_writable()
    except HistoryLocked:
        pass
    except HistoryError as exc:
        raise OptionError(
            "--history", f"{exc}; give another file with --history, or --no-history"
        ) from None


def append_history(entry: Any, path: Path, what: str = "run") -> int:
    """Adds a result (a history Entry) to the history. A lock held by another writer is waited
    for (up to HISTORY_WAIT_S, saying so), but never past a Ctrl-C."""
    import time

    from ..run.history import History, HistoryLocked

    deadline = time.monotonic() + HISTORY_WAIT_S
    told = False
    while True:
        try:
            with History(path, timeout=HISTORY_POLL_S) as history:
                return history.append(entry)
        except HistoryLocked:
            if interrupt.requested() or time.monotonic() >= deadline:
                raise
            if not told:
                stderr.print(
                    f"the history {path} is locked by another process; waiting up to "
                    f"{HISTORY_WAIT_S:g} s (Ctrl-C stops waiting; the {what}'s files are "
                    "written)",
                    soft_wrap=True,
                )
                told = True


class HistorySaver:
    """deliver()'s history step: adds the result once its data files are written, says where,
    and remembers a failure (the files stay; the command exits 1)."""

    def __init__(self, path: Path | None, entry: Callable[[], Any], what: str = "run") -> None:
        self.path = path
        self.entry = entry
        self.what = what
        self.failed = False

    def __call__(self) -> None:
        from ..run.history import HistoryError

        if self.path is None:
            return
        try:
            row = append_history(self.entry(), self.path, self.what)
            stderr.print(f"saved as run {row} in {self.path}", soft_wrap=True)
        except HistoryError as exc:
            self.failed = True
            click.echo(
                f"Error: the {self.what}'s files are written, but the history is not: {exc}",
                err=True,
            )
