"""The command line: parse, validate into typed options, run, and print errors in one place."""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from .. import __version__
from ..core import interrupt, plan
from ..core.engine import (
    DIRECTIONS,
    HOST_MEMORY,
    MECHANISMS,
    TIMINGS,
    Engine,
    check_device,
    close_native,
    open_engine,
)
from ..core.errors import OptionError, XferscopeError
from ..core.units import format_bytes, format_rate
from ..run.records import GpuSection, RunResult, run_from_dict
from ..sweep.options import (
    SweepOptions,
    parse_devices,
    parse_list,
    parse_size_option,
    parse_sizes,
)
from ..sweep.records import SCHEMA_NAME as SWEEP_SCHEMA
from ..sweep.records import CurveConfig, Point, SweepResult, from_dict
from .outputs import Delivery, Destination, Maker, Named, Output, text

EXIT_INTERRUPTED = 130
EXIT_VERIFICATION_FAILED = 3

# Piped output keeps the tables whole instead of squeezing them to 80 columns.
stdout = Console(highlight=False, width=None if sys.stdout.isatty() else 160)
stderr = Console(stderr=True, highlight=False)


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="xferscope")
def cli() -> None:
    """Measure how fast data moves between host memory and NVIDIA GPUs, and why."""


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


def seed_option(function: Any) -> Any:
    return click.option(
        "--seed",
        default=str(0x5EED),
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


def resolve_devices(
    engine: Engine, text: str | None, default: tuple[int, ...] | None = None, one: bool = False
) -> tuple[int, ...]:
    """The GPUs `-g/--device` names, checked against the machine: one rule for every command.
    None (the option not given) means `default`, or every GPU; `one` asks for exactly one."""
    if text is None:
        devices = default if default is not None else tuple(range(engine.device_count()))
    else:
        devices = parse_devices("--device", text)
    if one and len(devices) != 1:
        raise OptionError("--device", f"'{text}': give one GPU index; this runs on one GPU")
    for index in devices:
        check_device(engine, index)
    return devices


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

    def step(self, label: str) -> None:
        self._progress.update(self._task, advance=1, description=label)


# ---- measuring and delivering, the same for every command --------------------------------------


def prepare_renderers(html: bool = False) -> None:
    """Imports matplotlib (and plotly for the HTML report) before measuring: they take a second
    to load, which would otherwise delay the results, and a Ctrl-C landing inside an import
    leaves a module half-made."""
    from ..report import plots  # noqa: F401  (imported for its side effect: matplotlib loaded)

    if html:
        from ..report import html as page

        page.prepare()


def begin_measuring() -> None:
    """From here on Ctrl-C stops the measurement and keeps what was measured."""
    interrupt.record_only()


def nothing_measured(dest: Destination) -> NoReturn:
    """A signal came before the first measurement: no files, no directory."""
    dest.discard()
    stderr.print("interrupted before anything was measured; nothing written")
    sys.exit(interrupt.exit_status())


def deliver(
    outputs: list[Output],
    dest: Destination,
    show: Callable[[], None],
    history: Callable[[], None] | None = None,
) -> Delivery:
    """Writes the data files, runs `history` (adding the run to it), prints the report with
    `show`, draws the renderings and says where everything went (outputs.py)."""
    delivery = Delivery(outputs)
    delivery.write_data()
    if history is not None:
        history()
    show()
    delivery.render()
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


@dataclass(frozen=True, slots=True)
class DocumentKind:
    """A kind of result document and how to show and write it again: `xferscope report` draws
    any of them from its JSON. Each command module registers its own."""

    name: str  # the directory prefix: sweep, run, overlap-cpu, ...
    load: Callable[[dict[str, Any]], Any]
    show: Callable[[Any], None]
    named: Callable[[], dict[str, Named]]  # the files, all at their default names
    outputs: Callable[[Any, Destination], list[Output]]


KINDS: dict[str, DocumentKind] = {}  # by schema name


def register(schema: str, kind: DocumentKind) -> None:
    KINDS[schema] = kind


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
@seed_option
@output_options("sweep", "PREFIX-bandwidth.png and PREFIX-latency.png")
@click.option(
    "--simulate", is_flag=True, help="Use the simulated engine (no GPU; nothing is measured)."
)
def sweep(**kw: Any) -> None:
    """Bandwidth and latency against transfer size, one curve per configuration (NetPIPE's
    method: log-scale sizes, repeats sized to a target time, several trials per size)."""
    from ..sweep.measure import prepare_sweep, run_sweep

    options = build_sweep_options(kw)
    engine = open_engine(kw["simulate"])
    configs = prepare_sweep(engine, options)
    prepare_renderers()
    with Destination.prepare(kw["out"], "sweep", sweep_named(kw), kw["force"]) as dest:
        begin_measuring()
        with progress_bar() as progress:
            observer = ProgressObserver(progress, len(configs) * len(options.sizes))
            result = run_sweep(engine, options, observer)
        if result.interrupted and not sweep_measured(result):
            nothing_measured(dest)
        delivery = deliver(sweep_outputs(result, dest), dest, lambda: _print_sweep(result))
    finish(
        delivery,
        result.interrupted,
        verification_failed=any(
            p.verification is not None and not p.verification.ok
            for c in result.curves
            for p in c.points
        ),
        failed=any(c.status == "failed" for c in result.curves),
    )


def sweep_named(kw: dict[str, Any] | None = None) -> dict[str, Named]:
    """The sweep's files: where the options put them (kw None: the default names)."""
    from ..report.plots import PLOTS

    kw = kw or {}
    return {
        "json": Named("--json", kw.get("json_path"), "sweep.json"),
        "csv": Named("--csv", kw.get("csv_path"), "sweep.csv"),
        "plot": Named("--plot", kw.get("plot_prefix"), "sweep", tuple(f"-{w}.png" for w in PLOTS)),
    }


def sweep_measured(result: SweepResult) -> bool:
    return any(c.points for c in result.curves)


def sweep_outputs(result: SweepResult, dest: Destination) -> list[Output]:
    """JSON, CSV, and the bandwidth and latency plots."""
    from ..documents import csv as csv_export
    from ..documents import json as json_export
    from ..report import plots

    def plot(what: str) -> Maker:
        return lambda path, _written: plots.write_plot(result, what, path)

    return [
        dest.output("json", text(lambda: json_export.dumps(result))),
        dest.output("csv", text(lambda: csv_export.dumps(result))),
        *(
            dest.output("plot", plot(what), f"-{what}.png", render=True)
            for what in plots.plot_names(result)
        ),
    ]


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
        seed=parse_seed(kw["seed"]),
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
    from ..core.machine import collect

    engine: Engine = open_engine(simulate)
    facts = collect(engine, list(resolve_devices(engine, device)))
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


def run_named(prometheus: str | None = None) -> dict[str, Named]:
    """The run's files: all in its directory, and a Prometheus textfile where asked."""
    named = {
        "json": Named("--out", None, "run.json"),
        "points": Named("--out", None, "points.csv"),
        "metrics": Named("--out", None, "metrics.csv"),
        "gpu": Named("--out", None, "gpu"),  # gpu0-bandwidth.png, ...
        "html": Named("--out", None, "report.html"),
    }
    if prometheus is not None:
        named["prometheus"] = Named("--prometheus", prometheus, replace=True)
    return named


def run_outputs(result: RunResult, dest: Destination) -> list[Output]:
    """run.json, points.csv, metrics.csv, the Prometheus textfile (where asked), two PNGs per GPU
    and the HTML report, which links to the others."""
    from ..documents.csv import run_metrics_csv, run_points_csv
    from ..documents.prometheus import file_mode, render_prometheus
    from ..report import plots
    from ..report.html import render_html
    from ..run.records import run_to_dict

    outputs = [
        dest.output(
            "json", text(lambda: json.dumps(run_to_dict(result), indent=2, allow_nan=False) + "\n")
        ),
        dest.output("points", text(lambda: run_points_csv(result))),
        dest.output("metrics", text(lambda: run_metrics_csv(result))),
    ]
    if "prometheus" in dest.places:
        path = dest.places["prometheus"].path
        outputs.append(
            dest.output("prometheus", text(lambda: render_prometheus(result)), mode=file_mode(path))
        )
    for gpu in result.gpus:
        view = gpu_view(result, gpu)

        def plot(what: str, view: SweepResult = view) -> Maker:
            return lambda path, _written: plots.write_plot(view, what, path)

        outputs += [
            dest.output("gpu", plot(what), f"{gpu.index}-{what}.png", render=True)
            for what in plots.plot_names(view)
        ]

    def page(path: Path, written: Sequence[Path]) -> None:
        names = [p.name for p in written if p.parent == path.parent]
        path.write_text(render_html(result, names), encoding="utf-8")

    outputs.append(dest.output("html", page, render=True, urgent=True))
    return outputs


def gpu_view(result: RunResult, gpu: GpuSection) -> SweepResult:
    """One GPU's curves as a sweep result, for the sweep's plots."""
    facts = [g for g in result.machine.get("gpus", []) if g.get("index") == gpu.index]
    return SweepResult(
        tool_version=result.tool_version,
        created=result.created,
        simulated=result.simulated,
        machine={"gpus": facts},
        options={},
        curves=gpu.curves,
        interrupted=result.interrupted,
        wall_s=result.wall_s,
    )


def append_history(result: RunResult, path: Path) -> int:
    """Adds the run to the history. A lock held by another writer is waited for (up to
    HISTORY_WAIT_S, saying so), but never past a Ctrl-C."""
    from ..run.history import History, HistoryLocked

    deadline = time.monotonic() + HISTORY_WAIT_S
    told = False
    while True:
        try:
            with History(path, timeout=HISTORY_POLL_S) as history:
                return history.append(result)
        except HistoryLocked:
            if interrupt.requested() or time.monotonic() >= deadline:
                raise
            if not told:
                stderr.print(
                    f"the history {path} is locked by another process; waiting up to "
                    f"{HISTORY_WAIT_S:g} s (Ctrl-C stops waiting; the run's files are written)",
                    soft_wrap=True,
                )
                told = True


HISTORY_WAIT_S = 60.0  # how long a run waits for another writer's lock on the history
HISTORY_POLL_S = 0.25  # how often it looks whether Ctrl-C was pressed meanwhile


def check_history(path: Path) -> None:
    """Before measuring: the history can be written. One that exists is opened and its write
    lock taken and let go (a lock held by another process is fine: it is waited for after
    measuring); for a new one, its directory is probed. Nothing is created but the directory."""
    from ..documents.files import probe
    from ..run.history import History, HistoryError, HistoryLocked

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


QUICK_S = 14  # `run --quick` on one H200 (benchmarks/results/run-h200-20261121.json: 13.6 s)
DEFAULT_S = 65  # `run` on one H200 (the same file: 65.5 s)


@cli.command()
@click.option("-g", "--device", default=None, help="GPU indices, comma-separated [default: all].")
@click.option(
    "--quick",
    is_flag=True,
    help=f"A first look in about {QUICK_S} s per GPU "
    f"(the full run takes about {DEFAULT_S} s per GPU).",
)
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
    help="Also write the headline figures here, in node_exporter's textfile format (replaced "
    "atomically each run).",
)
@seed_option
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
    seed: str,
    simulate: bool,
) -> None:
    """Investigate every GPU: curves for every host memory kind, both directions, API and
    device time; device-to-device; copy engines against SM copies; H2D while D2H runs; pinning
    costs; with several GPUs the peer-to-peer matrix and all GPUs to the host at once. Then a
    diagnosis, an HTML report, and the run added to the history."""
    from ..run.investigate import RunOptions, run_investigation, steps

    seed_value = parse_seed(seed)
    history = None if no_history else _history_file(history_path)
    engine = open_engine(simulate)
    options = RunOptions(devices=resolve_devices(engine, device), quick=quick, seed=seed_value)
    if history is not None:
        check_history(history)
    prepare_renderers(html=True)
    with Destination.prepare(out, "run", run_named(prometheus_path)) as dest:
        begin_measuring()
        with progress_bar() as progress:
            result = run_investigation(engine, options, ProgressObserver(progress, steps(options)))
        if not result.measured:
            nothing_measured(dest)
        _deliver_run(result, dest, history)


def _deliver_run(result: RunResult, dest: Destination, history: Path | None) -> None:
    from ..report.run_table import print_run
    from ..run.history import HistoryError

    history_failed = False

    def add_to_history() -> None:
        nonlocal history_failed
        if history is None:
            return
        try:
            run_id = append_history(result, history)
            stderr.print(f"saved as run {run_id} in {history}", soft_wrap=True)
        except HistoryError as exc:
            history_failed = True
            click.echo(
                f"Error: the run's files are written, but the history is not: {exc}", err=True
            )

    delivery = deliver(
        run_outputs(result, dest), dest, lambda: print_run(result, stdout), add_to_history
    )
    page = dest.places["html"].path
    if page in delivery.written:
        stderr.print(f"report: {page}", soft_wrap=True)
    finish(
        delivery,
        result.interrupted,
        verification_failed=any(f.code == "verification_failed" for f in result.findings),
        failed=history_failed or any(g.status == "failed" for g in result.gpus),
    )


register(
    "xferscope-run",
    DocumentKind(
        "run",
        lambda d: run_from_dict(d),
        lambda r: _print_run(r),
        lambda: run_named(),
        run_outputs,
    ),
)


def _print_run(result: RunResult) -> None:
    from ..report.run_table import print_run

    print_run(result, stdout)


register(
    SWEEP_SCHEMA,
    DocumentKind(
        "sweep",
        from_dict,
        lambda r: _print_sweep(r),
        lambda: sweep_named(),
        sweep_outputs,
    ),
)


def _print_sweep(result: SweepResult) -> None:
    from ..report.table import print_report

    print_report(result, stdout)


# ---- history, report, compare ------------------------------------------------------------------


def _history_option(function: Any) -> Any:
    return click.option("--history", "history_path", default=None,
                        help="SQLite run history [default: $XFERSCOPE_HISTORY or "
                        "~/.local/share/xferscope/history.sqlite3].")(function)  # fmt: skip


def _history_file(history_path: str | None) -> Path:
    from ..run.history import default_path

    if history_path is not None and not history_path.strip():
        raise OptionError("--history", "give a file name, not an empty string")
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
    from ..report.table import format_duration
    from ..run.history import History

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
        wall = format_duration(r.wall_s) + (" modelled" if r.simulated else "")
        table.add_row(str(r.id), r.created, r.hostname or "", r.gpus, r.driver or "",
                      r.mode + (" (simulated)" if r.simulated else ""),
                      "yes" if r.complete else "[yellow]no[/yellow]", wall,
                      str(r.findings_warning), str(r.findings_error))  # fmt: skip
    stdout.print(table)


def load_result(ref: str, history: Path) -> tuple[DocumentKind, Any, str]:
    """What `xferscope report` draws: a run id from the history, or any result's JSON file. Its
    kind, the result, and a name for its directory."""
    from ..documents.reader import read_document
    from ..run.compare import RunLoadError
    from ..run.history import History
    from ..sweep.records import SchemaError

    text_ref = ref.strip()
    if text_ref.isdigit():
        with History(history, readonly=True) as h:
            return KINDS["xferscope-run"], h.get(int(text_ref)), f"run-{text_ref}"
    path = Path(ref).expanduser()
    document = read_document(path)
    schema = document.get("schema")
    kind = KINDS.get(schema) if isinstance(schema, str) else None
    if kind is None:
        known = ", ".join(sorted(KINDS))
        raise RunLoadError(f"{path} is not an xferscope result (schema {schema!r}; known: {known})")
    try:
        result = kind.load(document)
    except SchemaError as exc:
        raise RunLoadError(f"{path}: {exc}") from None
    # A file at its default name (run.json in run-<time>/) is named after its directory.
    stem = path.stem
    name = path.parent.name if stem == kind.name and path.parent.name else f"{kind.name}-{stem}"
    return kind, result, name


@cli.command("report")
@click.argument("ref", metavar="RESULT")
@_history_option
@click.option(
    "-o",
    "--out",
    default="xferscope-results",
    show_default=True,
    help="Directory in which the result's files go to a new directory of their own.",
)
def report_command(ref: str, history_path: str | None, out: str) -> None:
    """Show and write a result again: a run from the history (its id, from `xferscope history`)
    or the JSON file of any result (run, sweep, overlap, pageable). Prints its tables and writes
    its files (JSON, CSV, PNG and, for a run, the HTML report) to a new directory under --out,
    never over an earlier one."""
    kind, result, name = load_result(ref, _history_file(history_path))
    prepare_renderers(html=kind.name == "run")
    with Destination.prepare(out, name, kind.named(), stamp=False) as dest:
        delivery = deliver(kind.outputs(result, dest), dest, lambda: kind.show(result))
    finish(delivery, interrupted=None, verification_failed=False, failed=False)


def parse_threshold(value: float) -> float:
    if not math.isfinite(value) or not 0 <= value <= 10:
        raise OptionError("--threshold", f"{value} is not a fraction from 0 to 10 (0.05 is 5%)")
    return value


@cli.command("compare")
@click.argument("run_a", metavar="A")
@click.argument("run_b", metavar="B")
@_history_option
@click.option(
    "--threshold",
    default=0.05,
    show_default=True,
    type=float,
    help="Exit non-zero when a metric is SLOWER by more than this fraction (0 to 10).",
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
    from ..run.compare import compare, load_run, render, to_dict

    threshold = parse_threshold(threshold)
    path = _history_file(history_path)
    a, b = load_run(run_a, path), load_run(run_b, path)
    comparison = compare(a, b, threshold)
    if as_json:
        stdout.print_json(json.dumps(to_dict(comparison)))
    else:
        render(comparison, stdout, all_rows=all_rows, labels=(run_a, run_b))
    if comparison.regressions(threshold):
        sys.exit(1)


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


def _main(argv: list[str] | None) -> int:
    try:
        cli.main(args=argv, prog_name="xferscope", standalone_mode=False)
    except click.exceptions.Exit as exc:
        return int(exc.exit_code)
    except click.exceptions.Abort:
        stderr.print("interrupted")
        return interrupt.exit_status()
    except click.ClickException as exc:
        click.echo(f"Error: {exc.format_message()}", err=True)  # one line: never wrapped
        return 2
    except XferscopeError as exc:
        click.echo(f"Error: {exc}", err=True)
        return exc.exit_code
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
