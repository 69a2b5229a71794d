"""`xferscope fleet`: every GPU of every node at once under MPI, the fleet's statistics, its
outliers with their likely cause, and pass/fail thresholds for a scheduler's health check."""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import click

from ..core import interrupt, limits
from ..core.cases import table
from ..core.errors import XferscopeError
from ..core.machine import launch_rank
from ..core.version import __version__
from ..documents.envelope import now
from ..fleet import pairs as fleet_pairs
from ..fleet import thresholds as fleet_thresholds
from ..fleet.records import (
    COMPLETE,
    NO_GPU,
    SCHEMA_NAME,
    TIMED_OUT,
    FleetResult,
    RankReport,
    dumps_csv,
    dumps_json,
    from_dict,
    prometheus_text,
    to_dict,
)
from ..fleet.run import (
    PAIRS_TAG,
    FleetOptions,
    assemble,
    host_name,
    measure_rank,
    open_comm,
    timed_out,
)
from ..report.fleet_tables import print_fleet
from . import common
from .app import cli, described, stderr, stdout
from .common import (
    HistorySaver,
    begin_measuring,
    check_history,
    deliver,
    history_to_add_to,
    parse_seed,
)
from .measured import DocumentKind, entry, register
from .options import (
    flag,
    history_options,
    names_option,
    option,
    out_option,
    seed_option,
    simulate_option,
)
from .outputs import Destination, Named, Output, text

# Simulated fleets for tests: which ranks are slow (a link trained to x8), fail, hang, have no
# GPU, or report another version; read only with --simulate.
TEST_VARIABLE = "XFERSCOPE_FLEET_TEST"

# What --cases takes: every transfer case a GPU checks on its own (p2p needs a second GPU).
FLEET_CASES = tuple(c.key for c in table() if c.direction != "p2p")


@cli.command(
    "fleet",
    **described(
        "Every GPU of every node at once under MPI; the outliers.",
        "mpirun -np 8 xferscope fleet",
        "mpirun -np 16 --map-by ppr:8:node xferscope fleet --thresholds health.toml",
    ),
)
@names_option(
    "--cases",
    accepted=FLEET_CASES,
    blank=(),
    help="Transfer cases to check, comma-separated keys from `xferscope cases` "
    "(h2d_pinned_async_device, ...) [default: the `run --quick` set].",
)
@option(
    "--ranks-per",
    type=click.Choice(["gpu", "node"]),
    default="gpu",
    help="gpu: one rank per GPU, each on its node-local GPU, pinned to its NUMA node; node: one "
    "rank per node, checking every GPU in turn.",
)
@option(
    "--pairs",
    type=click.Choice(["auto", "all", "ring", "none"]),
    default="auto",
    help="GPU to GPU through NCCL between the ranks: every pair, each rank with the next (a "
    "ring), or none; auto: every pair up to 16 ranks, then a ring.",
)
@option(
    "--thresholds",
    "thresholds_path",
    help=f"A TOML file of pass/fail limits ({', '.join(fleet_thresholds.KEYS)}); each "
    "defaults to what the GPU's own link allows.",
)
@option(
    "--timeout",
    default=300.0,
    bounds=limits.TIMEOUT,
    help="Seconds rank 0 waits for every report; a rank that has not reported is marked "
    "timed out and the rest of the fleet still reports.",
)
@option(
    "--prometheus",
    "prometheus_prefix",
    help="Prefix of the Prometheus textfiles, one per node: PREFIX-<host>.prom (replaced each "
    "run) [default: in the result directory].",
)
@out_option("fleet")
@option("--json", "json_path", help="Write the fleet document here.")
@option("--csv", "csv_path", help="Write one row per GPU and metric here.")
@option("--html", "html_path", help="Write the fleet's HTML page here.")
@flag("--force", help="Replace files that --json or --csv name.")
@history_options
@seed_option
@simulate_option("Every rank uses the simulated engine (no GPU).")
def fleet_command(**kw: Any) -> None:
    """Every GPU of the fleet at once, under MPI (mpirun or srun, one rank per GPU): each rank
    checks its GPU (the `run --quick` set or named cases) and rank 0 gathers one document with
    the fleet's median and spread per metric, every GPU's robust z-score, the outliers named
    by node, GPU, bus id and UUID with their likely cause, and each GPU against pass/fail
    thresholds. Exits 1 when any GPU fails, for a scheduler's health check."""
    # Every rank checks the options before MPI is opened (a bad option never waits on MPI,
    # nor on a missing MPI library); the launcher's rank 0 says why, in one line (app.main).
    options = _options(kw)
    # Rank 0 also checks its outputs before MPI opens, so a bad destination is its own line
    # even where MPI is missing; every rank learns the verdict, and no rank measures in vain.
    setup, dest = _prepare(kw, options) if launch_rank() == 0 else ({}, None)
    try:
        comm = open_comm()
    except XferscopeError:
        if dest is not None:
            dest.discard()
        if "error" in setup:  # the option at fault, before the MPI that is missing
            _refuse(setup)
        raise
    if comm.rank != 0 and dest is not None:  # a launcher that announced no rank
        dest.discard()
        setup, dest = {}, None
    setup = comm.bcast(setup)
    if "error" in setup:
        # rank 0 says why before any rank ends: mpirun stops the whole job at the first rank
        # that exits non-zero, which could cut rank 0's line short
        if comm.rank == 0:
            _say(setup)
        comm.barrier()
        comm.finalize()
        sys.exit(setup["code"])
    options = setup["options"]
    # Loaded before measuring: after a signal mpirun leaves 1 s for writing the data files.
    common.prepare_renderers(html=True, workers=False)
    begin_measuring()  # Ctrl-C (mpirun forwards it to every rank) keeps what was measured
    start = time.monotonic()
    created = now()
    engine = _engine(kw["simulate"], comm.rank, comm.local_size)
    host = host_name()
    keep = None if setup.get("directory") is None else _keeper(Path(setup["directory"]))
    reports = measure_rank(engine, comm.rank, comm.local_rank, options, host, keep)
    mine = [_test_version(kw["simulate"], comm.rank, r).to_dict() for r in reports]
    _test_hang(kw["simulate"], comm.rank)
    if comm.rank != 0:
        comm.send_report({"rank": comm.rank, "host": host, "reports": mine})
        pair_plan = comm.bcast(None)  # never sent when a rank hung: MPI_Abort ends this one
        if pair_plan.get("pairs"):
            parts = _pair_parts(engine, comm, reports, pair_plan)
            comm.send_report({"rank": comm.rank, "parts": parts}, tag=PAIRS_TAG)
        comm.finalize()
        return
    assert dest is not None
    gather_start = time.monotonic()
    arrived = comm.collect({"rank": 0, "host": host, "reports": mine}, start + options.timeout_s)
    gather_s = time.monotonic() - gather_start
    all_reports: list[RankReport] = []
    for rank in range(comm.size):
        got = arrived.get(rank)
        if got is None:
            all_reports.append(timed_out(rank, None))
        else:
            all_reports += [RankReport.from_dict(r) for r in got["reports"]]
    pair_results, note, stuck = _pairs(engine, comm, options, all_reports, reports)
    result = assemble(
        all_reports, options, kw["simulate"], created, gather_s, time.monotonic() - start
    )
    result = replace(
        result, pairs=tuple(pair_results), pairs_note=note, interrupted=interrupt.requested()
    )
    for r in result.ranks:  # what keeps a rank out of the fleet: one line each, on rank 0
        if r.status in (NO_GPU, TIMED_OUT) or (r.error and "xferscope" in r.error):
            stderr.print(f"rank {r.rank} ({r.host}): {r.status}: {r.error}")
    history = setup.get("history")
    saver = HistorySaver(
        None if history is None else Path(history), lambda: entry(FLEET, result), "fleet"
    )
    with dest:
        delivery = deliver(fleet_outputs(result, dest), dest, lambda: print_fleet(result, stdout),
                           saver, draw_after_signal=False)  # fmt: skip
    hung = [r for r in result.ranks if r.status == TIMED_OUT]
    code = 0 if result.passed and delivery.ok and not saver.failed else 1
    if result.interrupted:
        stderr.print("interrupted: the files hold what was measured, marked incomplete")
        code = interrupt.exit_status()
    if hung or stuck:
        stderr.print(
            f"{len(hung) or 'a'} rank(s) sent nothing in {options.timeout_s:g} s: ending every "
            "rank (MPI_Abort) so the job does not wait forever"
        )
        sys.stdout.flush()
        sys.stderr.flush()
        comm.abort(code or 1)
    comm.finalize()
    sys.exit(code)


def _prepare(kw: dict[str, Any], options: FleetOptions) -> tuple[dict[str, Any], Any]:
    """Rank 0's checks of the history and the outputs: what every rank is told (the options,
    where the files go, or the error), and the destination."""
    try:
        history = history_to_add_to(kw)
        if history is not None:
            check_history(history)
        dest = Destination.prepare(kw["out"], "fleet", fleet_named(kw), kw["force"])
    except XferscopeError as exc:
        return {"error": str(exc), "code": exc.exit_code}, None
    except click.ClickException as exc:
        return {"error": exc.format_message(), "code": 2}, None
    directory = None if dest.directory is None else str(dest.directory)
    return {"options": options, "history": history and str(history), "directory": directory}, dest


def _say(setup: dict[str, Any]) -> None:
    """The setup's error, its one line (rank 0's)."""
    click.echo(f"Error: {setup['error']}", err=True)


def _refuse(setup: dict[str, Any]) -> None:
    """Ends this rank with the setup's error and its line (rank 0, before MPI opened)."""
    _say(setup)
    sys.exit(setup["code"])


GPU_REPORTS = "gpus"  # each GPU's own run report: <fleet directory>/gpus/<host>-gpu<N>/


def _keeper(directory: Path) -> Any:
    """Writes a GPU's own `run` report (run.json, CSVs, report.html) beside the fleet's files,
    from the rank that measured it (on a shared file system, all in one place; else each node
    keeps its own GPUs'); returns its path relative to the fleet's directory, "" on failure.
    After a signal it writes the data files only, and returns run.json's path."""
    from .outputs import Delivery
    from .run import run_named, run_outputs

    def keep(report: RankReport, result: Any) -> str:
        name = f"{report.host}-gpu{report.device}"
        try:
            dest = Destination.prepare(str(directory / GPU_REPORTS), name, run_named(), stamp=False)
            delivery = Delivery(
                [o for o in run_outputs(result, dest) if not o.path.name.endswith(".png")],
                draw_after_signal=False,
            )
            delivery.write_data()
            delivery.render()
        except (XferscopeError, OSError):
            return ""
        if not delivery.ok:
            return ""
        drawn = any(p.name == "report.html" for p in delivery.written)
        return f"{GPU_REPORTS}/{name}/{'report.html' if drawn else 'run.json'}"

    return keep


def _pair_parts(
    engine: Any, comm: Any, reports: list[RankReport], pair_plan: dict[str, Any]
) -> dict[str, Any]:
    """This rank's part of the pair phase, or the error that stopped it."""
    try:
        return {
            "parts": fleet_pairs.measure(
                engine,
                comm.rank,
                comm.size,
                reports[0].device,
                pair_plan["id"],
                [(int(a), int(b)) for a, b in pair_plan["pairs"]],
            )
        }
    except XferscopeError as exc:
        return {"error": str(exc)}


def _pairs(
    engine: Any, comm: Any, options: FleetOptions, everyone: list[RankReport],
    mine: list[RankReport],
) -> tuple[list[Any], str, bool]:  # fmt: skip
    """Rank 0: GPU to GPU between the ranks through NCCL, when every rank reported a GPU:
    (results, why not where they were not measured, whether a rank got stuck in it)."""
    pairs = fleet_pairs.plan(comm.size, options.pairs)
    if any(r.status == TIMED_OUT for r in everyone):
        return [], "not measured: a rank sent no report", False  # no bcast: it would hang
    reason = ""
    if interrupt.requested():
        reason, pairs = "not measured: interrupted", []
    elif not pairs:
        reason = "not measured: " + ("one rank" if comm.size < 2 else "--pairs none")
    elif options.ranks_per != "gpu":
        reason, pairs = "not measured: pairs need one rank per GPU", []
    elif any(r.status != COMPLETE for r in everyone):
        reason, pairs = "not measured: a GPU failed its checks", []
    unique_id = b""
    if pairs:
        try:
            unique_id = engine.nccl_unique_id()
        except XferscopeError as exc:
            reason, pairs = f"not measured: {exc}", []
    comm.bcast({"pairs": pairs, "id": unique_id})
    if not pairs:
        return [], reason, False
    deadline = time.monotonic() + options.timeout_s
    own = _pair_parts(engine, comm, mine, {"pairs": pairs, "id": unique_id})
    arrived = comm.collect({"rank": 0, "parts": own}, deadline, tag=PAIRS_TAG)
    errors = [f"rank {r}: {a['parts']['error']}" for r, a in arrived.items()
              if "error" in a["parts"]]  # fmt: skip
    parts = [p for a in arrived.values() for p in a["parts"].get("parts", [])]
    hosts = {r.rank: r.host for r in everyone}
    missing = [r for r in range(comm.size) if r not in arrived]
    note = "; ".join(errors + [f"rank {r} sent no pair results" for r in missing])
    return fleet_pairs.merge(parts, hosts), note, bool(missing)


def _options(kw: dict[str, Any]) -> FleetOptions:
    given = fleet_thresholds.load(kw["thresholds_path"])
    return FleetOptions(
        cases=kw["cases"] or (),
        timeout_s=kw["timeout"],
        thresholds=tuple(sorted(given.items())),
        seed=parse_seed(kw["seed"]),
        ranks_per=kw["ranks_per"],
        pairs=kw["pairs"],
    )


def _test_plan() -> dict[str, Any]:
    try:
        plan = json.loads(os.environ.get(TEST_VARIABLE, "") or "{}")
    except ValueError:
        return {}
    return plan if isinstance(plan, dict) else {}


def _engine(simulate: bool, rank: int, gpus: int) -> Any:
    """The native engine, or a simulated node of `gpus` GPUs (one per node-local rank)."""
    if not simulate:
        return common.open_engine(False)
    plan = _test_plan()
    return common.open_engine(
        True,
        seed=1 + rank,
        devices=0 if rank in plan.get("no_gpu", []) else gpus,
        link_width=8 if rank in plan.get("slow", []) else 16,
        failing_devices=tuple(range(gpus)) if rank in plan.get("fail", []) else (),
    )


def _test_version(simulate: bool, rank: int, report: RankReport) -> RankReport:
    from dataclasses import replace

    versions = _test_plan().get("version", {}) if simulate else {}
    return replace(report, version=versions.get(str(rank), report.version))


def _test_hang(simulate: bool, rank: int) -> None:
    if simulate and rank in _test_plan().get("hang", []):
        time.sleep(3600)


def fleet_named(kw: dict[str, Any] | None = None) -> dict[str, Named]:
    kw = kw or {}
    return {
        "json": Named("--json", kw.get("json_path"), "fleet.json"),
        "csv": Named("--csv", kw.get("csv_path"), "fleet.csv"),
        "html": Named("--html", kw.get("html_path"), "fleet.html"),
        "prometheus": Named(
            "--prometheus", kw.get("prometheus_prefix"), "prometheus", (".prom",), replace=True
        ),
    }


def fleet_outputs(result: FleetResult, dest: Destination) -> list[Output]:
    hosts = sorted({r.host for r in result.ranks if r.host != "?"})

    def prom(host: str) -> Output:
        return dest.output(
            "prometheus", text(lambda: prometheus_text(result, host)), f"-{host}.prom"
        )

    def page(path: Any, _written: Any) -> None:
        from ..report.fleet_html import write_fleet_html

        write_fleet_html(result, path)

    return [
        dest.output("json", text(lambda: dumps_json(result))),
        dest.output("csv", text(lambda: dumps_csv(result))),
        *(prom(h) for h in hosts),
        dest.output("html", page, render=True, urgent=True),
    ]


FLEET: DocumentKind[FleetResult] = DocumentKind(
    "fleet",
    from_dict,
    lambda r: print_fleet(r, stdout),
    fleet_named,
    fleet_outputs,
    document=to_dict,
    html=True,
    draw_after_signal=False,  # mpirun kills every rank 1 s after it passes Ctrl-C on
)
register(SCHEMA_NAME, FLEET)

__all__ = ["__version__", "fleet_command"]
