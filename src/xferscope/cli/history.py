"""`xferscope history`, `report` and `compare`: the runs kept, any result drawn again, and two
runs compared metric by metric."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from ..core import limits
from ..core.errors import XferscopeError
from ..documents.files import special
from ..report.fit import Column, fitted
from .app import cli, described, stdout
from .common import deliver, finish, history_file, prepare_renderers
from .measured import DocumentKind, document_kinds
from .options import flag, history_option, json_flag, option, out_option
from .outputs import Destination

# ---- history, report, compare ------------------------------------------------------------------


@cli.command(
    "history",
    **described(
        "List the results in the history, newest first.",
        "xferscope history",
        "xferscope history -n 5 --json",
    ),
)
@history_option
@option("-n", "--limit", default=20, bounds=limits.ROWS, help="How many runs, newest first.")
@json_flag("the list")
def history_command(history_path: str | None, limit: int, as_json: bool) -> None:
    """List the runs in the history."""
    from ..report.sweep_tables import format_duration
    from ..run.history import History

    path = history_file(history_path)
    if not path.exists() and special(path) is None:
        raise XferscopeError(f"no history at {path} yet: `xferscope run` starts it")
    with History(path, readonly=True) as history:
        runs = history.list(limit)
    if as_json:
        from dataclasses import asdict

        stdout.print_json(json.dumps([asdict(r) for r in runs]))
        return
    columns = (  # at 80 columns: run, kind, created, mode, complete, warnings, errors
        Column("run", "right", keep=9),
        Column("kind", keep=8),
        Column("created", keep=7),
        Column("host", keep=3, whole=False, least=8),
        Column("GPUs", keep=4, whole=False, least=10),
        Column("driver", keep=2),
        Column("mode", keep=5, whole=False, least=8),
        Column("complete", keep=6),
        Column("wall", "right", keep=5),
        Column("warnings", "right", keep=7),
        Column("errors", "right", keep=7),
    )
    rows = [
        (
            str(r.id),
            r.kind,
            r.created[:16].replace("T", " "),  # to the minute, as the history lists them
            r.hostname or "",
            r.gpus,
            r.driver or "",
            r.mode + (" (simulated)" if r.simulated else ""),
            "yes" if r.complete else "[yellow]no[/yellow]",
            format_duration(r.wall_s) + (" modelled" if r.simulated else ""),
            str(r.findings_warning),
            str(r.findings_error),
        )
        for r in runs
    ]
    table = fitted(f"Runs in {path}", columns, rows, stdout.width)
    stdout.print(table)


def load_result(ref: str, history: Path) -> tuple[DocumentKind[Any], Any, str]:
    """What `xferscope report` draws: a run id from the history, or any result's JSON file. Its
    kind, the result, and a name for its directory."""
    from ..documents.reader import SchemaError, read_document
    from ..run.compare import RunLoadError
    from ..run.history import History

    known = document_kinds()
    text_ref = ref.strip()
    if text_ref.isdigit():
        with History(history, readonly=True) as h:
            entry_kind, document = h.document(int(text_ref))
        schema = document.get("schema")
        kind = known.get(schema) if isinstance(schema, str) else None
        if kind is None:
            raise RunLoadError(f"run {text_ref} in {history} holds no result xferscope reads")
        try:
            return kind, kind.load(document), f"{entry_kind}-{text_ref}"
        except SchemaError as exc:
            raise RunLoadError(f"run {text_ref} in {history}: {exc}") from None
    path = Path(ref).expanduser()
    document = read_document(path)
    schema = document.get("schema")
    kind = known.get(schema) if isinstance(schema, str) else None
    if kind is None:
        names = ", ".join(sorted(known))
        raise RunLoadError(f"{path} is not an xferscope result (schema {schema!r}; known: {names})")
    try:
        result = kind.load(document)
    except SchemaError as exc:
        raise RunLoadError(f"{path}: {exc}") from None
    # A file at its default name (run.json in run-<time>/) is named after its directory.
    stem = path.stem
    name = path.parent.name if stem == kind.name and path.parent.name else f"{kind.name}-{stem}"
    return kind, result, name


@cli.command(
    "report",
    **described(
        "Show and write a result again, from the history or its JSON.",
        "xferscope report 42",
        "xferscope report xferscope-results/sweep-20261124-101500/sweep.json",
    ),
)
@click.argument("ref", metavar="RESULT")
@history_option
@out_option(help="Directory in which the result's files go to a new directory of their own.")
def report_command(ref: str, history_path: str | None, out: str) -> None:
    """Show and write a result again: an entry of the history (its id, from `xferscope history`)
    or the JSON file of any result (run, sweep, overlap, pageable, gl, gemm, batch, pitch, trace,
    fleet). Prints its tables and writes its files (JSON, CSV, PNG and, where the command has one,
    the HTML report) to a new directory under --out, never over an earlier one."""
    kind, result, name = load_result(ref, history_file(history_path))
    prepare_renderers(html="html" in kind.named(None))
    with Destination.prepare(out, name, kind.named(None), stamp=False) as dest:
        delivery = deliver(kind.outputs(result, dest), dest, lambda: kind.show(result))
    finish(delivery, interrupted=None, verification_failed=False, failed=False)


@cli.command(
    "compare",
    **described(
        "Compare two results metric by metric, weighed by their noise.",
        "xferscope compare 41 42",
        "xferscope compare before/run.json after/run.json --threshold 0.03",
    ),
)
@click.argument("run_a", metavar="A")
@click.argument("run_b", metavar="B")
@history_option
@option(
    "--threshold",
    default=0.05,
    bounds=limits.THRESHOLD,
    help="Exit non-zero when a metric is SLOWER by more than this fraction (0 to 10).",
)
@flag("--all", "all_rows", help="List every metric, SAME ones too.")
@flag(
    "--force",
    help="Compare a simulated run with a measured one, or runs on different GPU models; every "
    "verdict then says so.",
)
@json_flag("the comparison")
def compare_command(
    run_a: str,
    run_b: str,
    history_path: str | None,
    threshold: float,
    all_rows: bool,
    force: bool,
    as_json: bool,
) -> None:
    """Compare two runs, two GEMM studies or two traces of one program (ids from the history, or
    their run.json, gemm.json or trace-summary.json files) metric by metric: SAME, FASTER,
    SLOWER or UNCLEAR, weighing each difference against the measured noise. Exits 1 when
    anything is slower beyond --threshold, so it can gate a nightly check. Two traces, before
    and after a fix, are compared per finding and per line of the program (calls, bytes, time
    in copies, host blocked time) and for the wall time, with what each fix was predicted to
    save."""
    from ..run.compare import compare, load_run, render, to_dict

    path = history_file(history_path)
    if _compare_traces(run_a, run_b, path, threshold, all_rows, force, as_json):
        return
    a, b = load_run(run_a, path), load_run(run_b, path)
    comparison = compare(a, b, threshold, force)
    if as_json:
        stdout.print_json(json.dumps(to_dict(comparison)))
    else:
        render(comparison, stdout, all_rows=all_rows, labels=(run_a, run_b))
    if comparison.regressions(threshold):
        sys.exit(1)


def _compare_traces(
    ref_a: str,
    ref_b: str,
    path: Path,
    threshold: float,
    all_rows: bool,
    force: bool,
    as_json: bool,
) -> bool:
    """Compares two traces when both refs name one (False when neither does); a trace against
    another kind of result is refused."""
    from ..run.compare import SLOWER
    from ..trace import compare as tc

    a, b = tc.load_trace(ref_a, path), tc.load_trace(ref_b, path)
    if a is None and b is None:
        return False
    if a is None or b is None:
        which = ref_b if a is not None else ref_a
        raise tc.TraceCompareError(
            f"{which} is not a trace: a trace is compared with another trace of the same program"
        )
    comparison = tc.compare_traces(a, b, force)
    if as_json:
        stdout.print_json(json.dumps(tc.to_dict(comparison)))
    else:
        tc.render(comparison, stdout, all_rows=all_rows, labels=(ref_a, ref_b))
    slower = [
        c
        for c in comparison.changes
        if c.verdict in (SLOWER, tc.MORE) and c.change is not None and c.change > threshold
    ]
    if slower:
        sys.exit(1)
    return True
