"""`xferscope checkpoint`: registered on the CLI group by cli.py."""

from __future__ import annotations

from typing import Any

import click

from ..checkpoint.measure import DEFAULT_REPEATS, measure, opened, steps
from ..checkpoint.records import SCHEMA_NAME, CheckpointResult, dumps_csv, dumps_json, from_dict
from ..checkpoint.records import to_dict as checkpoint_dict
from ..core import limits
from ..core.engine import Engine
from ..report.checkpoint_tables import print_checkpoint
from .app import cli, described, stdout
from .common import resolve_devices, result_files
from .measured import DocumentKind, Measurement, register, run_measurement
from .options import flag, measured_options, option
from .outputs import Destination, Named, Output


@cli.command(
    "checkpoint",
    **described(
        "A checkpoint's files to a GPU, stage by stage, and its bound.",
        "xferscope checkpoint model.safetensors",
        "xferscope checkpoint ./llama-8b/ --repeats 5 -g 1",
        "xferscope checkpoint ./llama-8b/model.safetensors.index.json --no-cold",
    ),
)
@click.argument("paths", metavar="PATH...", nargs=-1, required=True)
@option(
    "--repeats",
    default=DEFAULT_REPEATS,
    bounds=limits.TRIALS,
    help="Measurements of each stage and load; the medians are used.",
)
@flag(
    "--no-cold",
    help="Keep the files' pages in the page cache: measure from warm only (no disk figures).",
)
@measured_options("checkpoint", "PREFIX.png", seed=False, gpu="GPU index to load onto.")
def checkpoint_command(
    paths: tuple[str, ...], repeats: int, no_cold: bool, device: str, simulate: bool, **kw: Any
) -> None:
    """A safetensors checkpoint (a file, several, a directory, or a sharded set's index), or a
    .pt file torch.save wrote, loaded onto a GPU the way xferscope.load reads it, cold (each
    file's pages dropped from the page cache with posix_fadvise(DONTNEED), checked with
    mincore) and warm, beside each stage of its path measured alone: the disk, the page cache,
    the headers, host memory, the link. Prints each rate, each load's time and the stage that
    bounds it; writes JSON, CSV and a plot. Dropping the page cache affects only these files;
    --no-cold keeps them."""
    kw.update(simulate=simulate)

    def plan(engine: Engine) -> Measurement[CheckpointResult]:
        (index,) = resolve_devices(engine, device, one=True)
        opened(paths)  # a checkpoint it will not load: one line before anything is measured
        return Measurement(
            lambda bar: measure(engine, paths, index, repeats, not no_cold, progress=bar),
            steps(repeats, not no_cold),
        )

    run_measurement(CHECKPOINT, kw, plan)


def checkpoint_named(kw: dict[str, Any] | None = None) -> dict[str, Named]:
    return result_files("checkpoint", kw)


def checkpoint_outputs(result: CheckpointResult, dest: Destination) -> list[Output]:
    """JSON, CSV and the plot of the stages and loads."""
    return dest.result(
        result, dumps_json, dumps_csv, "xferscope.report.checkpoint_plots:plot_checkpoint"
    )


CHECKPOINT: DocumentKind[CheckpointResult] = DocumentKind(
    "checkpoint",
    from_dict,
    lambda r: print_checkpoint(r, stdout),
    checkpoint_named,
    checkpoint_outputs,
    document=checkpoint_dict,
    measured=lambda r: any(r.samples.load_warm_s) or any(r.samples.load_cold_s),
    unverified=lambda r: r.verified is False,
)
register(SCHEMA_NAME, CHECKPOINT)
