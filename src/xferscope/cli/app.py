"""The `xferscope` command group, its consoles, and `main`: parse, run, and print every error
in one place, on one line."""

from __future__ import annotations

import importlib
import os
import sys

import click
from rich.console import Console

from ..core import interrupt
from ..core.engine import close_native
from ..core.errors import NoDeviceError, XferscopeError
from ..core.machine import launch_rank
from ..core.version import __version__
from ..report import drawing

EXIT_INTERRUPTED = 130
EXIT_VERIFICATION_FAILED = 3

PIPED_COLUMNS = 160  # piped output keeps the tables whole instead of squeezing them to 80
LEAST_COLUMNS = 40  # narrower than this (COLUMNS=0 drew nothing at all), tables are drawn at it


def output_width(columns: str, terminal: bool) -> int | None:
    """The width stdout is drawn at: $COLUMNS where it is a number (at least LEAST_COLUMNS),
    else the terminal's (None: rich asks it), else PIPED_COLUMNS."""
    if columns.strip().isdigit():
        return max(int(columns), LEAST_COLUMNS)
    return None if terminal else PIPED_COLUMNS


stdout = Console(
    highlight=False, width=output_width(os.environ.get("COLUMNS", ""), sys.stdout.isatty())
)
stderr = Console(stderr=True, highlight=False)


# Each command's module by the command's name. A command's module is imported when the command is
# asked for: `xferscope run` loads neither the tracer nor the batch planner (with every module,
# half a second of an H100 host's start); the list in --help loads them all.
COMMANDS = {
    "batch": "batch", "cases": "cases", "checkpoint": "checkpoint", "compare": "history",
    "exporter": "exporter",
    "fleet": "fleet", "gemm": "gemm",
    "gl": "gl", "history": "history", "info": "info", "overlap": "overlap",
    "pageable": "pageable", "pitch": "pitch", "report": "history", "run": "run",
    "sweep": "sweep", "trace": "trace",
}  # fmt: skip


def load_commands() -> None:
    """Imports every command's module (each registers itself on `cli`)."""
    for module in dict.fromkeys(COMMANDS.values()):
        importlib.import_module(f"{__package__}.{module}")


class _Commands(click.Group):
    """The command group, whose commands are imported when asked for."""

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in COMMANDS:
            importlib.import_module(f"{__package__}.{COMMANDS[cmd_name]}")
        return super().get_command(ctx, cmd_name)

    def list_commands(self, ctx: click.Context) -> list[str]:
        load_commands()
        return super().list_commands(ctx)


def subcommand(group: click.Command, name: str) -> click.Command | None:
    """The command `name` of `group` (None: none such, or `group` has no commands)."""
    if not isinstance(group, click.Group):
        return None
    return group.get_command(click.Context(group), name)


@click.group(
    cls=_Commands,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.version_option(__version__, prog_name="xferscope")
def cli() -> None:
    """Measure how fast data moves between host memory and NVIDIA GPUs, and why."""


def described(short: str, *examples: str) -> dict[str, str]:
    """A command's line in `xferscope --help` (a whole sentence, never cut) and the examples
    its own --help ends with: the keywords of its decorator."""
    lines = "\n".join(f"  {example}" for example in examples)
    return {"short_help": short, "epilog": f"\b\nExamples:\n{lines}"}


# ---- entry point -------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    """Runs the CLI; every error is one line on stderr and a non-zero exit. Signals are handled
    as interrupt.py says; native buffers and threads are released before returning."""
    with interrupt.handling():
        try:
            return _main(argv)
        except KeyboardInterrupt:
            stderr.print("interrupted")
            return interrupt.exit_status()
        finally:
            close_native()
            drawing.stop()  # workers paused (core/background.py) or not, told to end


def _main(argv: list[str] | None) -> int:
    try:
        cli.main(args=argv, prog_name="xferscope", standalone_mode=False)
    except click.exceptions.Exit as exc:
        return int(exc.exit_code)
    except click.exceptions.Abort:
        stderr.print("interrupted")
        return interrupt.exit_status()
    except click.ClickException as exc:
        _error(argv, exc.format_message())
        return 2
    except XferscopeError as exc:
        message = str(exc)
        if isinstance(exc, NoDeviceError) and "index" not in message:
            simulated = _simulated_form(argv)
            if simulated:
                message += f"; `{simulated}` shows what it does on a simulated GPU"
        _error(argv, message)
        return exc.exit_code
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0


def _error(argv: list[str] | None, message: str) -> None:
    """The one place an error is printed: one line, never wrapped. Under a launcher (mpirun,
    srun) only rank 0 of `xferscope fleet` speaks: every rank refuses the same options."""
    if launch_rank() != 0 and _command_path(argv)[:1] == ["fleet"]:
        return
    click.echo(f"Error: {message}", err=True)


def _command_path(argv: list[str] | None) -> list[str]:
    """The names of the command (and subcommand) that ran: ["overlap", "cpu"]."""
    return _resolve(argv)[1]


def _resolve(argv: list[str] | None) -> tuple[click.Command, list[str]]:
    args = sys.argv[1:] if argv is None else argv
    command: click.Command = cli
    names: list[str] = []
    for arg in args:
        if not isinstance(command, click.Group):
            break
        if arg.startswith("-"):
            continue
        sub = subcommand(command, arg)
        if sub is None:
            break
        command, names = sub, [*names, arg]
    return command, names


def _simulated_form(argv: list[str] | None) -> str | None:
    """`xferscope <command> [ARGUMENTS] --simulate` when the command that ran has --simulate,
    else None: its arguments (a checkpoint's PATH) kept, for they are required."""
    command, names = _resolve(argv)
    if not any(p.name == "simulate" for p in command.params):
        return None
    args = sys.argv[1:] if argv is None else argv
    after = args.index(names[-1]) + 1 if names else len(args)
    kept = args[after:] if any(isinstance(p, click.Argument) for p in command.params) else []
    return " ".join(["xferscope", *names, *kept, "--simulate"])
