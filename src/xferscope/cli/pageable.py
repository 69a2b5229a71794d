"""`xferscope pageable`: registered on the CLI group by cli.py."""

from __future__ import annotations

from typing import Any

import click

from ..core import limits
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
)
from ..report.pageable_tables import print_pageable
from ..sweep.options import parse_sizes
from . import common  # looked up at run time, so tests can replace open_engine
from .app import cli, described, stdout
from .common import (
    Bar,
    DocumentKind,
    HistorySaver,
    _history_file,
    begin_measuring,
    check_history,
    deliver,
    finish,
    history_options,
    nothing_measured,
    output_options,
    prepare_renderers,
    progress_bar,
    register,
    resolve_devices,
)
from .outputs import Destination, Maker, Named, Output, text
from .params import Bounded


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
@click.option(
    "--sizes",
    default=",".join(size_tag(s) for s in DEFAULT_SIZES),
    show_default=True,
    help="Buffer sizes, comma-separated.",
)
@click.option(
    "--sends",
    default=",".join(str(k) for k in DEFAULT_SENDS),
    show_default=True,
    help="Numbers of sends of the same buffer to tabulate, comma-separated.",
)
@click.option("-g", "--device", default="0", show_default=True, help="GPU index.")
@click.option(
    "--repeats",
    default=DEFAULT_REPEATS,
    show_default=True,
    type=Bounded(limits.TRIALS),
    help="Measurements of each cost; the median is used.",
)
@output_options("pageable", "PREFIX-<size>.png for each size")
@history_options
@click.option(
    "--simulate", is_flag=True, help="Use the simulated engine (no GPU; nothing is measured)."
)
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
    history = None if kw["no_history"] else _history_file(kw["history_path"])
    engine = common.open_engine(simulate)
    (index,) = resolve_devices(engine, device, one=True)
    check_memory(engine, index, size_list)
    if history is not None:
        check_history(history)
    prepare_renderers()
    named = pageable_named(kw, size_list)
    with Destination.prepare(kw["out"], "pageable", named, kw["force"]) as dest:
        begin_measuring()
        with progress_bar() as bar:
            result = measure(
                engine, size_list, send_list, index, repeats, progress=Bar(bar, steps(size_list))
            )
        if not result.sizes:
            nothing_measured(dest)
        saver = HistorySaver(history, lambda: history_entry(result), "result")
        delivery = deliver(
            pageable_outputs(result, dest), dest, lambda: print_pageable(result, stdout), saver
        )
    finish(
        delivery,
        result.interrupted,
        verification_failed=any(r.staged_verified is False for r in result.sizes),
        failed=saver.failed,
    )


def history_entry(result: PageableResult) -> Any:
    from ..pageable.measure import to_dict

    return common.history_entry("pageable", to_dict(result), result)


def pageable_named(
    kw: dict[str, Any] | None = None, sizes: tuple[int, ...] = ()
) -> dict[str, Named]:
    """The files: where the options put them (kw None: the default names)."""
    kw = kw or {}
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
        return lambda path, _written: pageable_plots.plot_size(result, size, path)

    outputs += [
        dest.output("plot", plot(size), pageable_plots.plot_suffix(size), render=True)
        for size in result.sizes
    ]
    return outputs


register(
    SCHEMA_NAME,
    DocumentKind(
        "pageable",
        from_dict,
        lambda r: print_pageable(r, stdout),
        lambda: pageable_named(),
        pageable_outputs,
    ),
)
