"""The command line: parse, validate into typed options, run, and print errors in one place."""

from __future__ import annotations

import datetime as dt
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from . import __version__, plan
from .engine import DIRECTIONS, HOST_MEMORY, MECHANISMS, TIMINGS, Engine, check_device, open_engine
from .errors import OptionError, XferscopeError
from .options import (
    SweepOptions,
    parse_devices,
    parse_list,
    parse_size_option,
    parse_sizes,
)
from .records import CurveConfig, Point, SweepResult
from .units import format_bytes, format_rate

EXIT_INTERRUPTED = 130
EXIT_VERIFICATION_FAILED = 3

# Piped output keeps the tables whole instead of squeezing them to 80 columns.
stdout = Console(highlight=False, width=None if sys.stdout.isatty() else 160)
stderr = Console(stderr=True, highlight=False)


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="xferscope")
def cli() -> None:
    """Measure how fast data moves between host memory and NVIDIA GPUs, and why."""


# ---- outputs -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Outputs:
    json: Path
    csv: Path
    plot_prefix: Path


def _writable_file(option: str, path: Path) -> Path:
    path = path.expanduser()
    if path.is_dir():
        raise OptionError(option, f"'{path}' is a directory; give a file name")
    parent = path.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OptionError(option, f"cannot create directory '{parent}': {exc.strerror}") from None
    if not os.access(parent, os.W_OK):
        raise OptionError(option, f"cannot write to '{parent}': permission denied")
    if path.exists() and not os.access(path, os.W_OK):
        raise OptionError(option, f"cannot write '{path}': permission denied")
    return path


def resolve_outputs(
    out: str, json_path: str | None, csv_path: str | None, plot_prefix: str | None, stamp: str
) -> Outputs:
    """Checks every output can be written before anything is measured."""
    base = Path(out).expanduser() / f"sweep-{stamp}"
    return Outputs(
        json=_writable_file(
            "--json" if json_path else "--out",
            Path(json_path) if json_path else base.with_suffix(".json"),
        ),
        csv=_writable_file(
            "--csv" if csv_path else "--out",
            Path(csv_path) if csv_path else base.with_suffix(".csv"),
        ),
        plot_prefix=_writable_file(
            "--plot" if plot_prefix else "--out", Path(plot_prefix) if plot_prefix else base
        ),
    )


def write_outputs(result: SweepResult, outputs: Outputs) -> list[Path]:
    from .export import write_csv, write_json
    from .report.plots import write_plots

    write_json(result, outputs.json)
    write_csv(result, outputs.csv)
    return [outputs.json, outputs.csv, *write_plots(result, outputs.plot_prefix)]


# ---- progress ----------------------------------------------------------------------------------


class ProgressObserver:
    def __init__(self, progress: Progress, total: int) -> None:
        self._progress = progress
        self._task = progress.add_task("starting", total=total)

    def curve_started(self, config: CurveConfig, points: int) -> None:
        self._progress.update(self._task, description=config.label)

    def point_done(self, config: CurveConfig, point: Point) -> None:
        self._progress.update(
            self._task,
            advance=1,
            description=f"{config.label}  {format_bytes(point.bytes)}: "
            f"{format_rate(point.bandwidth)}",
        )


# ---- sweep -------------------------------------------------------------------------------------


@cli.command()
@click.option(
    "-d",
    "--direction",
    default="h2d,d2h",
    show_default=True,
    help=f"Directions, comma-separated: {', '.join(DIRECTIONS)}.",
)
@click.option(
    "-m",
    "--memory",
    default="pageable,pinned",
    show_default=True,
    help=f"Host memory kinds: {', '.join(HOST_MEMORY)} (d2d always uses device memory).",
)
@click.option(
    "--mechanism",
    default="memcpy",
    show_default=True,
    help="memcpy (synchronous cudaMemcpy), async (cudaMemcpyAsync: copy engines), "
    "kernel (SM copy kernel).",
)
@click.option(
    "--timing",
    default="api",
    show_default=True,
    help="api (host clock around calls that complete, as an application sees them), "
    "device (CUDA events around copies held behind a blocking kernel).",
)
@click.option(
    "-g", "--device", default="0", show_default=True, help="GPU indices, comma-separated."
)
@click.option(
    "--sizes", default=None, help="Explicit sizes, comma-separated (overrides the range)."
)
@click.option("--min-size", default=None, help="Smallest size of the range [default: 1].")
@click.option("--max-size", default=None, help="Largest size of the range [default: 1GiB].")
@click.option("--steps", default=None, type=int, help="Sizes per doubling [default: 1].")
@click.option(
    "--perturbation",
    default=None,
    help="NetPIPE's p: also measure c-p and c+p bytes around each size c [default: 0].",
)
@click.option(
    "--target-time",
    default=None,
    type=float,
    help=f"Seconds one trial lasts [default: {plan.DEFAULT_TARGET_S}; "
    f"{plan.QUICK_TARGET_S} with --quick].",
)
@click.option(
    "--trials",
    default=plan.DEFAULT_TRIALS,
    show_default=True,
    type=int,
    help="Trials per size (more, up to --max-trials, while noisier than --noise-bound).",
)
@click.option(
    "--max-trials", default=None, type=int, help="Most trials per size [default: 2 x --trials]."
)
@click.option(
    "--noise-bound",
    default=plan.DEFAULT_NOISE_BOUND,
    show_default=True,
    type=float,
    help="Relative noise (1.4826 MAD / median) under which a size needs no more trials.",
)
@click.option(
    "--budget",
    default=None,
    type=float,
    help=f"Most seconds one curve may take; trials shorten to fit and sizes that still "
    f"do not fit are cut short and labelled. 0 = no limit "
    f"[default: {plan.DEFAULT_BUDGET_S:g}; {plan.QUICK_BUDGET_S:g} with --quick].",
)
@click.option(
    "--cache",
    type=click.Choice(["cold", "warm"]),
    default="cold",
    show_default=True,
    help="cold: copies of 64 KiB and more rotate through buffers larger than the GPU and CPU "
    "caches; warm: every copy reuses one buffer, as a loop over one array does (labelled "
    "cache-resident).",
)
@click.option(
    "--quick", is_flag=True, help="Short trials and a small budget: a first look in seconds."
)
@click.option("--no-verify", is_flag=True, help="Skip checking the destination after each size.")
@click.option(
    "--seed", default=0x5EED, show_default=True, type=int, help="Seed of the data pattern."
)
@click.option(
    "-o",
    "--out",
    default="xferscope-results",
    show_default=True,
    help="Directory for the JSON, CSV and PNG files (named sweep-<time>.*).",
)
@click.option("--json", "json_path", default=None, help="Write the JSON result here instead.")
@click.option("--csv", "csv_path", default=None, help="Write the CSV here instead.")
@click.option(
    "--plot",
    "plot_prefix",
    default=None,
    help="Write PREFIX-bandwidth.png and PREFIX-latency.png instead.",
)
@click.option(
    "--simulate", is_flag=True, help="Use the simulated engine (no GPU; nothing is measured)."
)
def sweep(**kw: Any) -> None:
    """Bandwidth and latency against transfer size, one curve per configuration (NetPIPE's
    method: log-scale sizes, repeats sized to a target time, several trials per size)."""
    options = build_sweep_options(kw)
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    outputs = resolve_outputs(kw["out"], kw["json_path"], kw["csv_path"], kw["plot_prefix"], stamp)
    engine = open_engine(kw["simulate"])

    from .measure import run_sweep

    configs, _ = options.configs()
    total = len(configs) * len(options.sizes)
    try:
        with Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=stderr,
            transient=True,
        ) as progress:
            result = run_sweep(engine, options, ProgressObserver(progress, total))
    except KeyboardInterrupt:
        stderr.print("interrupted before any curve was measured; nothing written")
        sys.exit(EXIT_INTERRUPTED)

    from .report.table import print_report

    print_report(result, stdout)
    try:
        paths = write_outputs(result, outputs)
    except OSError as exc:
        raise XferscopeError(f"cannot write results: {exc}") from None
    stderr.print("wrote " + ", ".join(str(p) for p in paths))
    if result.interrupted:
        stderr.print("interrupted: the files hold what was measured before Ctrl-C")
        sys.exit(EXIT_INTERRUPTED)
    failed = any(
        p.verification is not None and not p.verification.ok
        for c in result.curves
        for p in c.points
    )
    if failed:
        sys.exit(EXIT_VERIFICATION_FAILED)
    if any(c.status == "failed" for c in result.curves):
        sys.exit(1)


def build_sweep_options(kw: dict[str, Any]) -> SweepOptions:
    range_options = ("min_size", "max_size", "steps", "perturbation")
    if kw["sizes"] is not None:
        if any(kw[name] is not None for name in range_options):
            raise OptionError(
                "--sizes",
                "give either --sizes or a range (--min-size, --max-size, "
                "--steps, --perturbation), not both",
            )
        sizes = parse_sizes("--sizes", kw["sizes"])
    else:
        low = parse_size_option("--min-size", kw["min_size"] or str(plan.DEFAULT_MIN_SIZE))
        high = parse_size_option("--max-size", kw["max_size"] or str(plan.DEFAULT_MAX_SIZE))
        if high < low:
            raise OptionError(
                "--max-size", f"{format_bytes(high)} is smaller than --min-size {format_bytes(low)}"
            )
        steps = 1 if kw["steps"] is None else kw["steps"]
        if steps < 1:
            raise OptionError("--steps", f"{steps} is not a count of at least 1")
        perturbation = 0
        if kw["perturbation"] not in (None, "0"):
            perturbation = parse_size_option("--perturbation", kw["perturbation"])
        sizes = tuple(plan.log_sizes(low, high, steps, perturbation))
    quick = kw["quick"]
    target = (
        kw["target_time"]
        if kw["target_time"] is not None
        else (plan.QUICK_TARGET_S if quick else plan.DEFAULT_TARGET_S)
    )
    budget = (
        kw["budget"]
        if kw["budget"] is not None
        else (plan.QUICK_BUDGET_S if quick else plan.DEFAULT_BUDGET_S)
    )
    if budget < 0 or budget != budget:
        raise OptionError("--budget", f"{budget} is not a number of seconds (0 = no limit)")
    trials = kw["trials"]
    return SweepOptions(
        directions=parse_list("--direction", kw["direction"], DIRECTIONS),
        memories=parse_list("--memory", kw["memory"], HOST_MEMORY),
        mechanisms=parse_list("--mechanism", kw["mechanism"], MECHANISMS),
        timings=parse_list("--timing", kw["timing"], TIMINGS),
        devices=parse_devices("--device", kw["device"]),
        sizes=sizes,
        target_s=target,
        trials=trials,
        max_trials=kw["max_trials"] if kw["max_trials"] is not None else 2 * max(trials, 1),
        noise_bound=kw["noise_bound"],
        budget_s=None if budget == 0 else budget,
        seed=kw["seed"],
        cache=kw["cache"],
        verify=not kw["no_verify"],
        quick=quick,
    )


# ---- info --------------------------------------------------------------------------------------


@cli.command()
@click.option("-g", "--device", default=None, help="GPU indices, comma-separated [default: all].")
@click.option("--json", "as_json", is_flag=True, help="Print the facts as JSON.")
@click.option("--simulate", is_flag=True, help="Describe the simulated GPU instead.")
def info(device: str | None, as_json: bool, simulate: bool) -> None:
    """GPUs, their PCIe links (current against max, with the theoretical peak), driver and
    runtime versions, NUMA node and CPU affinity."""
    from .machine import collect

    engine: Engine = open_engine(simulate)
    count = engine.device_count()
    devices = list(parse_devices("--device", device)) if device else list(range(count))
    for index in devices:
        check_device(engine, index)
    facts = collect(engine, devices)
    if as_json:
        stdout.print_json(json.dumps(facts))
        return
    print_info(facts)


def _link(gen: Any, width: Any) -> str:
    return f"Gen{gen} x{width}" if gen and width else "unknown"


def print_info(facts: dict[str, Any]) -> None:
    if facts["simulated"]:
        stdout.print("[bold red]SIMULATED: a modelled GPU, not this machine's[/bold red]")
    host = facts["host"]
    stdout.print(
        f"host {host['hostname']}: {host['cpu']}, {host['cores']} cores, "
        f"{host['numa_nodes']} NUMA node(s), {host['os']}"
    )
    stdout.print(
        f"driver {facts['driver'] or 'unknown'} (CUDA {facts['cuda_driver_api']}), "
        f"CUDA runtime {facts['cuda_runtime']}, xferscope {facts['tool_version']}"
    )
    table = Table()
    for name in (
        "GPU",
        "name",
        "PCIe now",
        "PCIe max",
        "peak/dir now",
        "peak/dir max",
        "memory",
        "NUMA",
        "CPUs",
        "bus id",
    ):
        table.add_column(name)
    for g in facts["gpus"]:
        now = _link(g.get("pcie_generation"), g.get("pcie_width"))
        best = _link(g.get("pcie_generation_max"), g.get("pcie_width_max"))
        downgraded = now != best and "unknown" not in (now, best)
        table.add_row(
            str(g["index"]),
            g["name"],
            f"[yellow]{now}[/yellow]" if downgraded else now,
            best,
            format_rate(g["pcie_peak_bps"]) if g.get("pcie_peak_bps") else "",
            format_rate(g["pcie_peak_max_bps"]) if g.get("pcie_peak_max_bps") else "",
            format_bytes(g["total_memory_bytes"]),
            "" if g.get("numa_node") is None else str(g["numa_node"]),
            g.get("cpu_affinity") or "",
            g["pci_bus_id"],
        )
    stdout.print(table)
    if any(
        _link(g.get("pcie_generation"), g.get("pcie_width"))
        != _link(g.get("pcie_generation_max"), g.get("pcie_width_max"))
        for g in facts["gpus"]
    ):
        stdout.print(
            "note: an idle GPU may train its link down to save power; run a transfer "
            "and look again before calling it a fault"
        )


# ---- entry point -------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    """Runs the CLI; every error is one line on stderr and a non-zero exit."""
    try:
        cli.main(args=argv, prog_name="xferscope", standalone_mode=False)
    except click.exceptions.Exit as exc:
        return int(exc.exit_code)
    except click.exceptions.Abort:
        stderr.print("interrupted")
        return EXIT_INTERRUPTED
    except click.ClickException as exc:
        click.echo(f"Error: {exc.format_message()}", err=True)  # one line: never wrapped
        return 2
    except XferscopeError as exc:
        click.echo(f"Error: {exc}", err=True)
        return exc.exit_code
    except SystemExit as exc:
        return int(exc.code or 0)
    except KeyboardInterrupt:
        stderr.print("interrupted")
        return EXIT_INTERRUPTED
    return 0


if __name__ == "__main__":
    sys.exit(main())
