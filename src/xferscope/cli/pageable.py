"""`xferscope pageable`: registered on the CLI group by cli.py."""

from __future__ import annotations

from typing import Any

import click
from rich.console import Console
from rich.table import Table

from ..core.errors import OptionError
from ..core.units import format_bytes, format_rate, format_seconds
from ..pageable.measure import (
    DEFAULT_REPEATS,
    DEFAULT_SENDS,
    DEFAULT_SIZES,
    SCHEMA_NAME,
    STRATEGIES,
    PageableResult,
    SizeResult,
    cheaper_from,
    check_memory,
    crossovers,
    dumps_csv,
    dumps_json,
    fastest,
    from_dict,
    measure,
    size_tag,
    steps,
)
from ..sweep.options import parse_sizes
from . import common  # looked up at run time, so tests can replace open_engine
from .app import cli, stdout
from .common import (
    DocumentKind,
    ProgressObserver,
    begin_measuring,
    deliver,
    finish,
    nothing_measured,
    output_options,
    prepare_renderers,
    progress_bar,
    register,
    resolve_devices,
)
from .outputs import Destination, Maker, Named, Output, text


def parse_sends(option: str, text: str) -> tuple[int, ...]:
    """Comma-separated whole numbers of sends, each at least 1; sorted, without duplicates."""
    items = [item.strip() for item in text.split(",") if item.strip()]
    if not items:
        raise OptionError(option, "give one or more numbers of sends, such as 1,10,100")
    for item in items:
        if not item.isdigit() or int(item) < 1:
            raise OptionError(option, f"'{item}' is not a whole number of sends of at least 1")
    return tuple(sorted({int(item) for item in items}))


@cli.command("pageable")
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
    type=int,
    help="Measurements of each cost; the median is used.",
)
@output_options("pageable", "PREFIX-<size>.png for each size")
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
    if repeats < 1:
        raise OptionError("--repeats", f"{repeats} is not a count of at least 1")
    engine = common.open_engine(simulate)
    (index,) = resolve_devices(engine, device, one=True)
    check_memory(engine, index, size_list)
    prepare_renderers()
    named = pageable_named(kw, size_list)
    with Destination.prepare(kw["out"], "pageable", named, kw["force"]) as dest:
        begin_measuring()
        with progress_bar() as bar:
            observer = ProgressObserver(bar, steps(size_list))
            result = measure(engine, size_list, send_list, index, repeats, progress=observer.step)
        if not result.sizes:
            nothing_measured(dest)
        delivery = deliver(
            pageable_outputs(result, dest), dest, lambda: print_pageable(result, stdout)
        )
    finish(
        delivery,
        result.interrupted,
        verification_failed=any(r.staged_verified is False for r in result.sizes),
        failed=False,
    )


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


def _sends(count: int | None) -> str:
    return "never" if count is None else f"{count} send" + ("" if count == 1 else "s")


def print_pageable(result: PageableResult, console: Console) -> None:
    if result.simulated:
        console.print("[bold red]SIMULATED: a modelled GPU, not this machine's[/bold red]")
    gpu = next((g.get("name") for g in result.machine.get("gpus", [])), "?")
    console.print(
        f"Sending a pageable buffer to GPU {result.device} ({gpu}) k times: total time of each "
        "way, every setup cost measured and counted (medians of "
        f"{result.options.get('repeats')})"
    )
    if result.staged_plan:
        p = result.staged_plan
        console.print(
            f"staged copier: {p['threads']} threads, {format_bytes(p['chunk_bytes'])} chunks, "
            f"{p['buffers_per_thread']} pinned buffers per thread; made and closed in "
            f"{format_seconds(result.staged_setup_median_s)}, counted here for each buffer (an "
            "application that keeps its copier, as copy_to_device does, pays it once)"
        )
    for size in result.sizes:
        strategies = result.strategies(size)
        pageable = strategies[0]
        costs = Table(title=f"{format_bytes(size.bytes)}: costs", title_justify="left")
        for name in ("way", "once", "per send", "rate", "made of", "beats pageable from"):
            costs.add_column(name, justify="left" if name in ("way", "made of") else "right")
        for s in strategies:
            beats = cheaper_from(s, pageable)
            costs.add_row(
                s.name,
                format_seconds(s.setup_s) if s.setup_s else "0",
                format_seconds(s.per_send_s),
                format_rate(size.bytes / s.per_send_s),
                " + ".join(f"{what} {format_seconds(t)}" for what, t in s.parts),
                "" if s is pageable else _sends(beats),
            )
        console.print(costs)
        totals = Table(title=f"{format_bytes(size.bytes)}: total time of k sends",
                       title_justify="left")  # fmt: skip
        totals.add_column("k", justify="right")
        for name in STRATEGIES:
            totals.add_column(name, justify="right")
        totals.add_column("fastest")
        for k in result.sends:
            best = fastest(strategies, k)
            cells = [
                f"[bold]{format_seconds(s.total_s(k))}[/bold]"
                if s is best
                else format_seconds(s.total_s(k))
                for s in strategies
            ]
            totals.add_row(str(k), *cells, best.name)
        console.print(totals)
        found = crossovers(strategies)
        if found:
            console.print("crossovers (where two ways cost the same):")
            for c in found:
                console.print(
                    f"  k* = {c.sends:.3g}: {c.after} is cheaper than {c.before} from "
                    f"{_sends(c.from_send)} on"
                )
    for warning in result.warnings:
        console.print(f"[yellow]warning:[/yellow] {warning}")


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
