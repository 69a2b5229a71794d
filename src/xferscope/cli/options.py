"""How every command declares its options, and the options several commands share, declared
once. `option` is the one way to declare one (its default shown, its range checked as it is
read); the rest are the shared ones: where results go (-o, --json, --csv, --plot, --force), the
history (--history, --no-history), the data pattern's seed, the GPU (-g), --simulate, --json as
a flag, a trial's length and count, and the lists of names (--direction, --memory, --methods,
--mechanism). `measured_options` puts the usual set on a command."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from ..core import limits
from ..core.cases import DEFAULT_SEED, MECHANISMS
from ..core.limits import Range
from .params import Bounded, Names

FC = TypeVar("FC", bound=Callable[..., Any])


def option(
    *names: str,
    help: str,
    default: Any = None,
    bounds: Range | None = None,
    **click_kwargs: Any,
) -> Callable[[FC], FC]:
    """A click option by the house rules: its default shown in --help whenever it has one (a
    flag's never), and a number given `bounds` read as cli/params.Bounded (parsed and checked as
    it is read, the one message for a value out of range). The rest goes to click.option."""
    if bounds is not None:
        click_kwargs["type"] = Bounded(bounds)
    if not click_kwargs.get("is_flag", False):  # a flag is off unless given
        click_kwargs["default"] = default
        if default is not None:
            click_kwargs.setdefault("show_default", True)
    return click.option(*names, help=help, **click_kwargs)


def flag(*names: str, help: str) -> Callable[[FC], FC]:
    """An on/off option: off unless given."""
    return option(*names, is_flag=True, help=help)


def names_option(
    *names: str,
    accepted: tuple[str, ...],
    help: str,
    default: str | None = None,
    blank: tuple[str, ...] | None = None,
) -> Callable[[FC], FC]:
    """A comma-separated list of names from `accepted`: the command receives a tuple
    (cli/params.Names; `blank` is what an empty value means, where one is allowed)."""
    return option(*names, default=default, type=Names(accepted, blank), help=help)


# ---- what several commands measure, each the one way ---------------------------------------


def direction_option(
    accepted: tuple[str, ...], default: str, help: str, short: bool = False
) -> Callable[[FC], FC]:
    """--direction (-d where `short`): the directions to measure, from `accepted`."""
    names = ("-d", "--direction") if short else ("--direction",)
    return names_option(*names, accepted=accepted, default=default, help=help)


def memory_option(
    accepted: tuple[str, ...], default: str, help: str, measures: str = ""
) -> Callable[[FC], FC]:
    """-m/--memory: the host memory kinds to measure, from `accepted`. A host memory kind it
    does not take is refused with `measures` (why this command takes only `accepted`) and the
    command that measures every kind."""
    from ..core.cases import HOST_MEMORY

    why = {
        kind: f"{measures}; `xferscope sweep -m {kind}` measures {kind} memory"
        for kind in HOST_MEMORY
        if kind not in accepted and measures
    }
    return option("-m", "--memory", default=default, type=Names(accepted, refused=why), help=help)


def mechanism_option(default: str, help: str) -> Callable[[FC], FC]:
    """--mechanism: how a copy is made (core.cases.MECHANISMS)."""
    return names_option("--mechanism", accepted=MECHANISMS, default=default, help=help)


def methods_option(accepted: tuple[str, ...]) -> Callable[[FC], FC]:
    """--methods: the methods to compare, every one unless given."""
    return names_option(
        "--methods", accepted=accepted, default=",".join(accepted), help="Methods to compare."
    )


def target_time_option(default: float | None, help: str) -> Callable[[FC], FC]:
    """--target-time: how long one trial lasts, in seconds."""
    return option("--target-time", default=default, bounds=limits.TARGET_TIME, help=help)


def trials_option(default: int | None, help: str) -> Callable[[FC], FC]:
    """--trials: how many times each point is measured."""
    return option("--trials", default=default, bounds=limits.TRIALS, help=help)


# ---- where results go, and the history -----------------------------------------------------


def out_option(name: str = "", help: str = "") -> Callable[[FC], FC]:
    """-o/--out: the directory in which a result's files get a directory of their own,
    NAME-<time> (or what `help` says)."""
    return option(
        "-o",
        "--out",
        default="xferscope-results",
        help=help
        or f"Directory in which the files go to a new directory of their own, {name}-<time>.",
    )


def json_flag(what: str) -> Callable[[FC], FC]:
    """--json for a command that prints: `what` printed as JSON instead of a table."""
    return flag("--json", "as_json", help=f"Print {what} as JSON.")


def output_options(name: str, plots: str) -> Callable[[FC], FC]:
    """The output options of the commands that write one result: -o, --json, --csv, --plot and
    --force (a result's files go to a new directory of their own, NAME-<time>, under --out)."""
    return stacked(
        out_option(name),
        option("--json", "json_path", help="Write the JSON result here instead."),
        option("--csv", "csv_path", help="Write the CSV here instead."),
        option("--plot", "plot_prefix", help=f"Write {plots} instead."),
        flag(
            "--force",
            help="Replace files that --json, --csv or --plot name if they exist "
            "(by default an existing file is never replaced).",
        ),
    )


def history_option(function: FC) -> FC:
    """--history: which history file (the commands that read it, and those that add to it)."""
    return option(
        "--history",
        "history_path",
        help="SQLite run history [default: $XFERSCOPE_HISTORY or "
        "~/.local/share/xferscope/history.sqlite3].",
    )(function)


def history_options(function: FC) -> FC:
    """--history and --no-history, for a command that adds its result to the history."""
    return stacked(
        history_option, flag("--no-history", help="Do not add this result to the history.")
    )(function)


# ---- the rest of a measuring command's options -----------------------------------------------


def seed_option(function: FC) -> FC:
    return option(
        "--seed", default=str(DEFAULT_SEED), help="Seed of the data pattern: 0 to 2^64 - 1."
    )(function)


def simulate_option(
    help: str = "Use the simulated engine (no GPU; nothing is measured).",
) -> Callable[[FC], FC]:
    return flag("--simulate", help=help)


def gpu_option(help: str = "GPU index.") -> Callable[[FC], FC]:
    """-g/--device for a command that measures one GPU (index 0 unless given)."""
    return option("-g", "--device", default="0", help=help)


def gpus_option(function: FC) -> FC:
    """-g/--device for a command that takes every GPU unless given some."""
    return option("-g", "--device", help="GPU indices, comma-separated [default: all].")(function)


def stacked(*decorators: Callable[[FC], FC]) -> Callable[[FC], FC]:
    """The decorators as one, in --help in the order given (as if written one above another)."""

    def decorate(function: FC) -> FC:
        for decorator in reversed(decorators):
            function = decorator(function)
        return function

    return decorate


def measured_options(
    name: str, plots: str, seed: bool = True, gpu: str | None = "GPU index."
) -> Callable[[FC], FC]:
    """The options of a command that measures one result on one GPU: -g (unless `gpu` is None),
    --history/--no-history, --seed (unless `seed` is False), -o/--json/--csv/--plot/--force and
    --simulate."""
    parts: list[Callable[[FC], FC]] = [] if gpu is None else [gpu_option(gpu)]
    parts.append(history_options)
    if seed:
        parts.append(seed_option)
    parts += [output_options(name, plots), simulate_option()]
    return stacked(*parts)
