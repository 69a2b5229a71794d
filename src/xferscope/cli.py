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
from .run_records import RunResult
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


def _writable_dir(option: str, directory: Path) -> Path:
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OptionError(
            option, f"cannot create directory '{directory}': {exc.strerror}"
        ) from None
    if not os.access(directory, os.W_OK):
        raise OptionError(option, f"cannot write to '{directory}': permission denied")
    return directory


def _writable_file(option: str, path: Path) -> Path:
    path = path.expanduser()
    if path.is_dir():
        raise OptionError(option, f"'{path}' is a directory; give a file name")
    _writable_dir(option, path.parent)
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


def progress_bar() -> Progress:
    """The progress bar every long command shows on stderr; it disappears when done."""
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), console=stderr, transient=True)  # fmt: skip


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
    "kernel (SM copy kernel), staged (pageable memory through xferscope's pinned staging "
    "pool and host threads).",
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
        with progress_bar() as progress:
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


# ---- run ---------------------------------------------------------------------------------------


class RunProgress(ProgressObserver):
    def step(self, label: str) -> None:
        self._progress.update(self._task, advance=1, description=label)


def _resolve_devices(engine: Engine, text: str | None) -> tuple[int, ...]:
    count = engine.device_count()
    devices = parse_devices("--device", text) if text else tuple(range(count))
    for index in devices:
        check_device(engine, index)
    return devices


def write_run_outputs(result: RunResult, directory: Path) -> list[Path]:
    """JSON, CSV of the points and of the metrics, two PNGs per GPU and the HTML report."""
    from .export import atomic_write
    from .export.csv import run_metrics_csv, run_points_csv
    from .records import SweepResult
    from .report.html import write_html
    from .report.plots import write_plots
    from .run_records import run_to_dict

    paths = [directory / "run.json", directory / "points.csv", directory / "metrics.csv"]
    atomic_write(paths[0], json.dumps(run_to_dict(result), indent=2, allow_nan=False) + "\n")
    atomic_write(paths[1], run_points_csv(result))
    atomic_write(paths[2], run_metrics_csv(result))
    for gpu in result.gpus:
        facts = [g for g in result.machine.get("gpus", []) if g.get("index") == gpu.index]
        view = SweepResult(
            result.tool_version,
            result.created,
            result.simulated,
            {"gpus": facts},
            {},
            gpu.curves,
            result.interrupted,
            result.wall_s,
        )
        paths += write_plots(view, directory / f"gpu{gpu.index}")
    html = directory / "report.html"
    write_html(result, html, [p.name for p in paths])
    return [html, *paths]


def _new_run_directory(out: Path) -> Path:
    """out/run-<time>, or run-<time>-2, -3, ... when a run started in the same second."""
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    out = _writable_dir("--out", out.expanduser())
    for n in range(1, 1000):
        directory = out / (f"run-{stamp}" if n == 1 else f"run-{stamp}-{n}")
        try:
            directory.mkdir()
            return directory
        except FileExistsError:
            continue
        except OSError as exc:
            raise OptionError("--out", f"cannot create '{directory}': {exc.strerror}") from None
    raise OptionError("--out", f"too many runs named run-{stamp} in '{out}'")


def _append_history(result: RunResult, path: Path) -> int:
    from .store import History

    with History(path) as history:
        return history.append(result)


@cli.command()
@click.option("-g", "--device", default=None, help="GPU indices, comma-separated [default: all].")
@click.option("--quick", is_flag=True, help="A first look in about 20 s per GPU.")
@click.option(
    "-o",
    "--out",
    default="xferscope-results",
    show_default=True,
    help="Directory in which each run gets its own directory, run-<time>.",
)
@click.option(
    "--history",
    "history_path",
    default=None,
    help="SQLite run history [default: $XFERSCOPE_HISTORY or "
    "~/.local/share/xferscope/history.sqlite3].",
)
@click.option("--no-history", is_flag=True, help="Do not add this run to the history.")
@click.option(
    "--prometheus",
    "prometheus_path",
    default=None,
    help="Also write the headline figures here, in node_exporter's textfile format.",
)
@click.option(
    "--seed", default=0x5EED, show_default=True, type=int, help="Seed of the data pattern."
)
@click.option(
    "--simulate", is_flag=True, help="Use the simulated engine (no GPU; nothing is measured)."
)
def run(
    device: str | None,
    quick: bool,
    out: str,
    history_path: str | None,
    no_history: bool,
    prometheus_path: str | None,
    seed: int,
    simulate: bool,
) -> None:
    """Investigate every GPU: curves for every host memory kind, both directions, API and
    device time; device-to-device; copy engines against SM copies; H2D while D2H runs; pinning
    costs; with several GPUs the peer-to-peer matrix and all GPUs to the host at once. Then a
    diagnosis, an HTML report, and the run added to the history."""
    from .investigate import RunOptions, run_investigation, steps
    from .report.run_table import print_run
    from .store import HistoryError, default_path

    prometheus = _writable_file("--prometheus", Path(prometheus_path)) if prometheus_path else None
    history = Path(history_path).expanduser() if history_path else default_path()
    engine = open_engine(simulate)
    options = RunOptions(devices=_resolve_devices(engine, device), quick=quick, seed=seed)
    directory = _new_run_directory(Path(out))  # only once every option is good
    with progress_bar() as progress:
        result = run_investigation(engine, options, RunProgress(progress, steps(options)))

    print_run(result, stdout)
    try:
        paths = write_run_outputs(result, directory)
        if prometheus is not None:
            from .export.prometheus import write_prometheus

            write_prometheus(result, prometheus)
            paths.append(prometheus)
    except OSError as exc:
        raise XferscopeError(f"cannot write results: {exc}") from None
    stderr.print(
        f"report: {paths[0]}\nwrote " + ", ".join(p.name for p in paths[1:]) + f" in {directory}"
    )
    if not no_history:
        try:
            run_id = _append_history(result, history)
            stderr.print(f"saved as run {run_id} in {history}")
        except HistoryError as exc:
            click.echo(
                f"Error: the run's files are written, but the history is not: {exc}", err=True
            )  # one line, never wrapped
            sys.exit(1)
    if result.interrupted:
        stderr.print("interrupted: the report is marked incomplete")
        sys.exit(EXIT_INTERRUPTED)
    if any(f.code == "verification_failed" for f in result.findings):
        sys.exit(EXIT_VERIFICATION_FAILED)
    if any(g.status == "failed" for g in result.gpus):
        sys.exit(1)


# ---- history, report, compare ------------------------------------------------------------------


def _history_option(function: Any) -> Any:
    return click.option("--history", "history_path", default=None,
                        help="SQLite run history [default: $XFERSCOPE_HISTORY or "
                        "~/.local/share/xferscope/history.sqlite3].")(function)  # fmt: skip


def _history_file(history_path: str | None) -> Path:
    from .store import default_path

    return Path(history_path).expanduser() if history_path else default_path()


@cli.command("history")
@_history_option
@click.option(
    "-n",
    "--limit",
    default=20,
    show_default=True,
    type=click.IntRange(min=1),
    help="How many runs, newest first.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the list as JSON.")
def history_command(history_path: str | None, limit: int, as_json: bool) -> None:
    """List the runs in the history."""
    from .store import History

    path = _history_file(history_path)
    if not path.exists():
        raise XferscopeError(f"no history at {path} yet: `xferscope run` starts it")
    with History(path, readonly=True) as history:
        runs = history.list(limit)
    if as_json:
        from dataclasses import asdict

        stdout.print_json(json.dumps([asdict(r) for r in runs]))
        return
    table = Table(title=f"Runs in {path}", title_justify="left")
    for name in (
        "run",
        "created",
        "host",
        "GPUs",
        "driver",
        "mode",
        "complete",
        "wall",
        "warnings",
        "errors",
    ):
        table.add_column(name, justify="right" if name in ("run", "wall", "warnings",
                                                            "errors") else "left")  # fmt: skip
    for r in runs:
        table.add_row(str(r.id), r.created, r.hostname or "", r.gpus, r.driver or "",
                      r.mode + (" (simulated)" if r.simulated else ""),
                      "yes" if r.complete else "[yellow]no[/yellow]", f"{r.wall_s:.0f} s",
                      str(r.findings_warning), str(r.findings_error))  # fmt: skip
    stdout.print(table)


@cli.command("report")
@click.argument("run_ref", metavar="RUN")
@_history_option
@click.option(
    "-o",
    "--out",
    default="xferscope-results",
    show_default=True,
    help="Directory in which the report gets its own directory, run-<id>.",
)
def report_command(run_ref: str, history_path: str | None, out: str) -> None:
    """Render a stored run (an id from `xferscope history`, or a run.json) again: HTML, JSON,
    CSV and PNG."""
    from .compare import load_run
    from .report.run_table import print_run

    result = load_run(run_ref, _history_file(history_path))
    name = f"run-{run_ref}" if run_ref.isdigit() else f"run-{Path(run_ref).stem}"
    directory = _writable_file("--out", Path(out) / name / "report.html").parent
    print_run(result, stdout)
    paths = write_run_outputs(result, directory)
    stderr.print(f"report: {paths[0]}")


@cli.command("compare")
@click.argument("run_a", metavar="A")
@click.argument("run_b", metavar="B")
@_history_option
@click.option(
    "--threshold",
    default=0.05,
    show_default=True,
    type=click.FloatRange(0, 10),
    help="Exit non-zero when a metric is SLOWER by more than this fraction.",
)
@click.option("--all", "all_rows", is_flag=True, help="List every metric, SAME ones too.")
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as JSON.")
def compare_command(
    run_a: str,
    run_b: str,
    history_path: str | None,
    threshold: float,
    all_rows: bool,
    as_json: bool,
) -> None:
    """Compare two runs (ids from the history or run.json files) metric by metric: SAME,
    FASTER, SLOWER or UNCLEAR, weighing each difference against the measured noise. Exits 1
    when anything is slower beyond --threshold, so it can gate a nightly check."""
    from .compare import compare, load_run, render, to_dict

    path = _history_file(history_path)
    a, b = load_run(run_a, path), load_run(run_b, path)
    comparison = compare(a, b, threshold)
    if as_json:
        stdout.print_json(json.dumps(to_dict(comparison)))
    else:
        render(comparison, stdout, all_rows=all_rows, labels=(run_a, run_b))
    if comparison.regressions(threshold):
        sys.exit(1)


# Commands that live in their own modules register themselves on `cli` when imported.
from . import cli_overlap, cli_pageable  # noqa: E402, F401

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
