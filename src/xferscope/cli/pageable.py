"""`xferscope pageable`: registered on the CLI group by cli.py."""

from __future__ import annotations

from typing import Any

from ..core import limits
from ..core.engine import Engine
from ..core.units import parse_sizes
from ..pageable.measure import (
    DEFAULT_REPEATS,
    DEFAULT_SENDS,
    DEFAULT_SIZES,
    SCHEMA_NAME,
    PageableResult,
    SizeResult,
    check_memory,
    dumps_csv,
    dumps_json,
    from_dict,
    measure,
    size_tag,
    steps,
    to_dict,
)
from ..report.drawing import Drawing
from ..report.pageable_tables import print_pageable
from .app import cli, described, stdout
from .common import resolve_devices
from .measured import DocumentKind, Measurement, register, run_measurement
from .options import gpu_option, measured_options, option
from .outputs import Destination, Maker, Named, Output, text


def parse_sends(option: str, text: str) -> tuple[int, ...]:
    """Comma-separated numbers of sends, each in limits.SENDS; sorted, without duplicates."""
    return tuple(map(int, limits.SENDS.parse_all(option, text)))


@cli.command(
    "pageable",
    **described(
        "Which way of sending a pageable buffer k times is cheapest.",
        "xferscope pageable",
        "xferscope pageable --sizes 64MiB --sends 1,10,100",
    ),
)
@option(
    "--sizes",
    default=",".join(size_tag(s) for s in DEFAULT_SIZES),
    help="Buffer sizes, comma-separated.",
)
@option(
    "--sends",
    default=",".join(str(k) for k in DEFAULT_SENDS),
    help="Numbers of sends of the same buffer to tabulate, comma-separated.",
)
@gpu_option()
@option(
    "--repeats",
    default=DEFAULT_REPEATS,
    bounds=limits.TRIALS,
    help="Measurements of each cost; the median is used.",
)
@measured_options("pageable", "PREFIX-<size>.png for each size", seed=False, gpu=None)
def pageable_command(
    sizes: str, sends: str, device: str, repeats: int, simulate: bool, **kw: Any
) -> None:
    """Which way to send a pageable buffer of S bytes to the GPU k times: cudaMemcpy as it is,
    a pinned copy (cudaMallocHost + memcpy), registering it in place (cudaHostRegister), or the
    staged copier, with every setup cost measured and counted. Prints the total time of each
    for every k, the fastest, and the exact crossover points; writes JSON, CSV and a plot per
    size."""
    size_list = parse_sizes("--sizes", sizes)
    send_list = parse_sends("--sends", sends)
    kw.update(simulate=simulate, size_list=size_list)  # the plots' names come from the sizes

    def plan(engine: Engine) -> Measurement[PageableResult]:
        (index,) = resolve_devices(engine, device, one=True)
        check_memory(engine, index, size_list)
        return Measurement(
            lambda bar: measure(engine, size_list, send_list, index, repeats, progress=bar),
            steps(size_list),
        )

    run_measurement(PAGEABLE, kw, plan)


def pageable_named(kw: dict[str, Any] | None = None) -> dict[str, Named]:
    """The files: where the options put them, a plot per size (kw None: the default names)."""
    kw = kw or {}
    sizes: tuple[int, ...] = kw.get("size_list", ())
    return {
        "json": Named("--json", kw.get("json_path"), "pageable.json"),
        "csv": Named("--csv", kw.get("csv_path"), "pageable.csv"),
        "plot": Named(
            "--plot", kw.get("plot_prefix"), "pageable", tuple(f"-{size_tag(s)}.png" for s in sizes)
        ),
    }


def pageable_outputs(result: PageableResult, dest: Destination) -> list[Output]:
    """JSON, CSV and a plot per size."""
    from ..report import pageable_plots

    outputs = [
        dest.output("json", text(lambda: dumps_json(result))),
        dest.output("csv", text(lambda: dumps_csv(result))),
    ]

    def plot(size: SizeResult) -> Maker:
        return Drawing("xferscope.report.pageable_plots:plot_size", (result, size))

    outputs += [
        dest.output("plot", plot(size), pageable_plots.plot_suffix(size), render=True)
        for size in result.sizes
    ]
    return outputs


PAGEABLE: DocumentKind[PageableResult] = DocumentKind(
    "pageable",
    from_dict,
    lambda r: print_pageable(r, stdout),
    pageable_named,
    pageable_outputs,
    document=to_dict,
    measured=lambda r: bool(r.sizes),
    unverified=lambda r: any(s.staged_verified is False for s in r.sizes),
)
register(SCHEMA_NAME, PAGEABLE)
