"""The options that measuring commands share, declared once: where results go (-o, --json,
--csv, --plot, --force), the history (--history, --no-history), the data pattern's seed, the
GPU (-g) and --simulate; `measured_options` puts the usual set on a command."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from ..core.cases import DEFAULT_SEED

Decorator = Callable[[Callable[..., None]], Callable[..., None]]


def seed_option(function: Any) -> Any:
    return click.option(
        "--seed",
        default=str(DEFAULT_SEED),
        show_default=True,
        help="Seed of the data pattern: 0 to 2^64 - 1.",
    )(function)


def output_options(name: str, plots: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """The output options of the commands that write one result: -o, --json, --csv, --plot and
    --force (a result's files go to a new directory of its own, NAME-<time>, under --out)."""

    def decorate(function: Callable[..., None]) -> Callable[..., None]:
        for option in reversed(
            [
                click.option(
                    "-o",
                    "--out",
                    default="xferscope-results",
                    show_default=True,
                    help=f"Directory in which the files go to a new directory of their "
                    f"own, {name}-<time>.",
                ),
                click.option(
                    "--json", "json_path", default=None, help="Write the JSON result here instead."
                ),
                click.option("--csv", "csv_path", default=None, help="Write the CSV here instead."),
                click.option("--plot", "plot_prefix", default=None, help=f"Write {plots} instead."),
                click.option(
                    "--force",
                    is_flag=True,
                    help="Replace files that --json, --csv or --plot name if they exist "
                    "(by default an existing file is never replaced).",
                ),
            ]
        ):
            function = option(function)
        return function

    return decorate


def _history_option(function: Any) -> Any:
    return click.option(
        "--history",
        "history_path",
        default=None,
        help="SQLite run history [default: $XFERSCOPE_HISTORY or "
        "~/.local/share/xferscope/history.sqlite3].",
    )(function)


def history_options(function: Any) -> Any:
    """--history and --no-history."""
    function = click.option(
        "--no-history", is_flag=True, help="Do not add this result to the history."
    )(function)
    return _history_option(function)


def simulate_option(function: Any) -> Any:
    return click.option(
        "--simulate", is_flag=True, help="Use the simulated engine (no GPU; nothing is measured)."
    )(function)


def gpu_option(help: str = "GPU index.") -> Decorator:
    """-g/--device for a command that measures one GPU (index 0 unless given)."""
    return click.option("-g", "--device", default="0", show_default=True, help=help)


def measured_options(
    name: str, plots: str, seed: bool = True, gpu: str | None = "GPU index."
) -> Decorator:
    """The options of a command that measures one result on one GPU: -g (unless `gpu` is None),
    --history/--no-history, --seed (unless `seed` is False), -o/--json/--csv/--plot/--force and
    --simulate."""

    def decorate(function: Callable[..., None]) -> Callable[..., None]:
        function = simulate_option(function)
        function = output_options(name, plots)(function)
        if seed:
            function = seed_option(function)
        function = history_options(function)
        if gpu is not None:
            function = gpu_option(gpu)(function)
        return function

    return decorate
