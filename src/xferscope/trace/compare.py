"""Two traces of one program, before (A) and after (B) a fix, compared on their steady states
(phases.py): the step time where both ran the same steps, the steady state's span (a faster loop
shows there even behind 10 s of importing torch, which the wall time also counts), the start-up
and the wall time apart, and per kind of copy, per finding and per line of the program what
changed in calls, bytes, time in copies and host time blocked in copy calls. For each finding of
A: whether its cause is gone in B (no such finding, or its cost under GONE of A's), cut, or not
changed; only where it is gone, what the steady state saved against what its fix was predicted
to save ("paid N%"), never a saving of the start-up.

Each trace keeps the figures of every run it made (`xferscope trace --runs N`). Times are
weighed as `xferscope compare` weighs a run's metrics (run/compare.py's rule: SAME within the
noise band, FASTER or SLOWER when every run of one beat every run of the other, else UNCLEAR),
the runs being the samples; one run shows no spread, so only a change beyond the 1% floor and
seen in 3 runs or more each gets FASTER or SLOWER. Calls and bytes that every run of each
trace agrees on are exact: SAME when equal, else FEWER or MORE."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..core.errors import XferscopeError
from ..core.units import format_bytes, format_seconds
from ..documents.reader import DocumentError, SchemaError, read_document
from ..documents.records import KEY, Derived, to_plain
from ..run.compare import SAME, compare_metric
from ..run.history import History
from ..run.metrics import Metric
from .document import SCHEMA_NAME, TraceResult, from_dict
from .records import shown

FEWER, MORE = "fewer", "more"
COMPARE_SCHEMA_NAME = "xferscope-trace-compare"
# 2: a fix's "status", "saved_s" of the steady state, "paid"; 3: "predicted_together_s", and
# "paid" of the findings gone together, none where the steady state got no shorter
COMPARE_SCHEMA_VERSION = 3
GONE = 0.1  # a finding whose cost in B is under this share of A's is gone
# what became of a finding of A in B
FIX_GONE, FIX_CUT, FIX_SAME = "gone", "cut", "not changed"


class TraceCompareError(XferscopeError):
    """Two traces cannot be compared (not traces, or of different programs without --force)."""

    exit_code = 2


@dataclass(frozen=True, slots=True)
class Change:
    """One figure in both traces and the verdict on its change."""

    section: str  # program, copies, finding, line
    subject: str  # the kind, finding, line or "the program"
    figure: str  # steady state span, start-up, wall time, calls, bytes, time, host blocked
    unit: str  # s, B, count
    a: float
    b: float
    change: float | None  # (b - a) / a
    noise: float | None = field(metadata={KEY: "noise_band"})  # a fraction; None: exact
    verdict: str  # same, faster, slower, unclear; fewer, more
    runs: tuple[int, int]


@dataclass(frozen=True, slots=True)
class FixPaid:
    """A finding of A: what became of it in B, and where it is gone, what the steady state
    saved against what its fix was predicted to save."""

    code: str
    title: str
    predicted_s: float | None
    cost_a_s: float
    cost_b_s: float  # 0 where B has no such finding
    spread_s: float  # the runs' spread of the difference (the larger half range of each)
    status: str = FIX_SAME  # FIX_GONE, FIX_CUT, FIX_SAME
    # where gone: the steady state's time saved (its steps at B's pace, else its span), and
    # the findings of A gone with it (their fixes paid together)
    saved_s: float | None = None
    together: tuple[str, ...] = ()
    # what the findings gone together were predicted to save, summed (their fixes paid
    # together: one saving of the steady state is theirs, not each one's)
    predicted_together_s: float | None = None
    DERIVED: ClassVar[tuple[Derived, ...]] = (Derived("paid", lambda p: p.paid, "saved_s"),)

    @property
    def paid(self) -> float | None:
        """What B saved over what was predicted for the findings gone with this one, where
        its cause is gone, was priced, and the steady state got shorter (a longer one is no
        payment: its runs, or other changes, say more than the fix)."""
        predicted = self.predicted_together_s or self.predicted_s
        if self.status != FIX_GONE or self.saved_s is None or not predicted:
            return None
        return self.saved_s / predicted if self.saved_s > 0 else None


@dataclass(frozen=True, slots=True)
class TraceComparison:
    a_command: str
    b_command: str
    changes: tuple[Change, ...]
    paid: tuple[FixPaid, ...] = field(metadata={KEY: "fixes"})
    warnings: tuple[str, ...] = ()


# ---- loading -----------------------------------------------------------------------------------


def is_trace(document: dict[str, Any]) -> bool:
    return document.get("schema") == SCHEMA_NAME


def load_trace(ref: str, history_path: Path) -> TraceResult | None:
    """The trace `ref` names (a history id or a trace-summary.json), None when it names
    another kind of result."""
    text = ref.strip()
    if text.isdigit():
        with History(history_path, readonly=True) as history:
            kind, document = history.document(int(text))
        if kind != "trace":
            return None
    else:
        document = read_document(Path(ref).expanduser())
        if not is_trace(document):
            return None
    try:
        return from_dict(document)
    except SchemaError as exc:
        raise DocumentError(f"{ref} is not a valid xferscope trace document: {exc}") from exc


# ---- comparing ---------------------------------------------------------------------------------


def _runs(result: TraceResult) -> list[dict[str, Any]]:
    """A trace's runs' figures; a version 1 document (no runs kept) gives its one run's from
    its summary."""
    if result.runs:
        return list(result.runs)
    s = result.summary
    kinds = {
        f"{g['direction']} {g['memory']}": {
            "calls": g["calls"],
            "bytes": g["bytes"],
            "gpu_s": g["gpu_s"],
            "blocked_s": g["blocked_s"],
        }
        for g in s.get("groups", [])
    }
    findings = {
        f["code"]: {k: f.get(k) for k in ("title", "calls", "bytes", "cost_s", "saving_s")}
        for f in s.get("fixes", [])
    }
    return [{"wall_s": result.wall_s, "kinds": kinds, "findings": findings, "lines": {}}]


STEADY_SPAN = "steady state span"  # the program's figure of the span its steps (else GPUs) took
FIGURES = (
    ("calls", "calls", "count"),
    ("bytes", "bytes", "B"),
    ("gpu_s", "time in copies", "s"),
    ("blocked_s", "host blocked", "s"),
)


def _change(
    section: str, subject: str, figure: str, unit: str, a: list[float], b: list[float]
) -> Change:
    va, vb = statistics.median(a), statistics.median(b)
    change = (vb - va) / va if va > 0 else None
    if a == b:
        verdict, noise = SAME, None if unit != "s" else 0.0
    elif unit != "s" and len(set(a)) == 1 and len(set(b)) == 1:  # exact in every run
        verdict = SAME if va == vb else (FEWER if vb < va else MORE)
        noise = None
    else:
        name = f"{section}/{subject}/{figure}"
        m = compare_metric(
            Metric(name, va, unit, False, tuple(a)), Metric(name, vb, unit, False, tuple(b))
        )
        verdict, noise = m.verdict, m.noise
    return Change(section, subject, figure, unit, va, vb, change, noise, verdict, (len(a), len(b)))


def _table_changes(
    section: str,
    runs_a: list[dict[str, Any]],
    runs_b: list[dict[str, Any]],
    key: str,
    figures: Iterable[tuple[str, str, str]],
    label: Callable[[str, dict[str, Any]], str],
) -> list[Change]:
    """Every entry of `key` (kinds, findings, lines) in either trace, figure by figure; an entry
    missing from a run counts as zero there."""
    names = dict.fromkeys(
        [*(n for r in runs_a for n in r[key]), *(n for r in runs_b for n in r[key])]
    )
    out = []
    for name in names:
        entry = next(r[key][name] for r in (*runs_a, *runs_b) if name in r[key])
        for entry_key, figure, unit in figures:
            a = [float(r[key].get(name, {}).get(entry_key) or 0.0) for r in runs_a]
            b = [float(r[key].get(name, {}).get(entry_key) or 0.0) for r in runs_b]
            out.append(_change(section, label(name, entry), figure, unit, a, b))
    return out


def same_loop(runs_a: list[dict[str, Any]], runs_b: list[dict[str, Any]]) -> bool:
    """Whether every run of both traces repeated one loop of as many steps (marked by a line
    each: a fix may move the batch's copy to another line): their mean steps compare."""
    counts = {r.get("steps") for r in (*runs_a, *runs_b)}
    return (
        len(counts) == 1 and None not in counts and all(r.get("step_s") for r in (*runs_a, *runs_b))
    )


def _half_range(values: list[float]) -> float:
    return (max(values) - min(values)) / 2 if values else 0.0


def compare_traces(a: TraceResult, b: TraceResult, force: bool = False) -> TraceComparison:
    """Trace B against trace A (A before the fix, B after)."""
    command_a = " ".join(a.options.get("command", []))
    command_b = " ".join(b.options.get("command", []))
    warnings = []
    if command_a != command_b:
        message = f"the traces ran different commands: `{command_a}` (A) and `{command_b}` (B)"
        if not force:
            raise TraceCompareError(f"{message}; --force compares them anyway")
        warnings.append(message)
    for name, result in (("A", a), ("B", b)):
        if result.interrupted or result.returncode != 0:
            warnings.append(f"trace {name}'s program did not end well (exit {result.returncode})")
    runs_a, runs_b = _runs(a), _runs(b)
    if min(len(runs_a), len(runs_b)) < 3:
        warnings.append(
            f"{len(runs_a)} and {len(runs_b)} runs: times get FASTER or SLOWER only from 3 runs "
            "each (xferscope trace --runs 3), else UNCLEAR beyond the 1% floor"
        )
    # the steady state first, where both documents have it (version 3 and later), the start-up
    # and the wall time apart
    program = [("span_s", STEADY_SPAN), ("startup_s", "start-up"), ("wall_s", "wall time")]
    if same_loop(runs_a, runs_b):  # the per-step figure, where both ran the same steps
        program.insert(0, ("step_s", "step time"))
    changes = [
        _change(
            "program",
            "the program",
            figure,
            "s",
            [r[key] for r in runs_a],
            [r[key] for r in runs_b],
        )
        for key, figure in program
        if all(r.get(key) for r in (*runs_a, *runs_b)) or key == "wall_s"
    ]
    changes += _table_changes("copies", runs_a, runs_b, "kinds", FIGURES, lambda n, _: n)
    changes += _table_changes(
        "finding",
        runs_a,
        runs_b,
        "findings",
        (("calls", "calls", "count"), ("bytes", "bytes", "B"), ("cost_s", "cost", "s")),
        lambda _, e: str(e.get("title", "")),
    )
    changes += _table_changes(
        "line",
        runs_a,
        runs_b,
        "lines",
        FIGURES,
        lambda _, e: shown(str(e["where"])) + (f": {e['code'][:60]}" if e.get("code") else ""),
    )
    paid = _fixes(runs_a, runs_b)
    return TraceComparison(command_a, command_b, tuple(changes), tuple(paid), tuple(warnings))


def _fixes(runs_a: list[dict[str, Any]], runs_b: list[dict[str, Any]]) -> list[FixPaid]:
    """What became of each finding of A in B; where gone, what the steady state saved."""
    out = []
    for code, found in runs_a[0]["findings"].items():
        cost_a = [float(r["findings"].get(code, {}).get("cost_s") or 0.0) for r in runs_a]
        cost_b = [float(r["findings"].get(code, {}).get("cost_s") or 0.0) for r in runs_b]
        predicted = [r["findings"][code]["saving_s"] for r in runs_a if code in r["findings"]]
        priced = [p for p in predicted if p is not None]
        a, b = statistics.median(cost_a), statistics.median(cost_b)
        spread = _half_range(cost_a) + _half_range(cost_b)
        status = FIX_GONE if b <= GONE * a else FIX_CUT if b < a - spread else FIX_SAME
        median = statistics.median(priced) if priced else None
        out.append(FixPaid(code, str(found.get("title", code)), median, a, b, spread, status))
    gone = tuple(p.code for p in out if p.status == FIX_GONE)
    saved = steady_saved(runs_a, runs_b)
    together_s = sum(p.predicted_s or 0.0 for p in out if p.status == FIX_GONE) or None
    return [
        p if p.status != FIX_GONE
        else replace(p, saved_s=saved, together=tuple(c for c in gone if c != p.code),
                     predicted_together_s=together_s if len(gone) > 1 else None)
        for p in out
    ]  # fmt: skip


def steady_saved(runs_a: list[dict[str, Any]], runs_b: list[dict[str, Any]]) -> float | None:
    """What B saved of A's steady state: A's steps at B's pace where both ran the same loop,
    else the difference of their steady spans (medians); never the start-up."""
    if same_loop(runs_a, runs_b):
        step_a = statistics.median(r["step_s"] for r in runs_a)
        step_b = statistics.median(r["step_s"] for r in runs_b)
        return float((step_a - step_b) * runs_a[0]["steps"])
    spans_a = [float(r["span_s"]) for r in runs_a if r.get("span_s")]
    spans_b = [float(r["span_s"]) for r in runs_b if r.get("span_s")]
    if not spans_a or not spans_b:
        return None
    return statistics.median(spans_a) - statistics.median(spans_b)


# ---- output ------------------------------------------------------------------------------------

_STYLES = {"slower": "bold red", MORE: "bold red", "faster": "green", FEWER: "green",
           "unclear": "yellow", SAME: "dim"}  # fmt: skip


def _value(value: float, unit: str) -> str:
    if unit == "s":
        return format_seconds(value)
    if unit == "B":
        return format_bytes(int(value))
    return f"{value:,.0f}"


def render(
    comparison: TraceComparison, console: Console, *, all_rows: bool = False,
    labels: tuple[str, str] = ("A", "B"),
) -> None:  # fmt: skip
    """The warnings; what each fix of A paid in B; then per section the figures that changed
    (every figure with `all_rows`)."""
    for warning in comparison.warnings:
        console.print(f"[yellow]warning:[/yellow] {escape(warning)}")
    for label, ref in zip(("A", "B"), labels, strict=True):
        console.print(f"{label}: {escape(ref)}")
    if comparison.paid:
        console.print("[bold]what the fixes of A paid in B[/bold]")
    titles = {q.code: q.title for q in comparison.paid}
    for p in comparison.paid:
        console.print(f"  {escape(fix_text(p, titles))}")
    for section, title in (
        ("program", "the program"),
        ("copies", "copies by kind"),
        ("finding", "findings"),
        ("line", "lines of the program"),
    ):
        rows = [
            c
            for c in comparison.changes
            if c.section == section and (all_rows or c.verdict != SAME)
        ]
        if not rows:
            continue
        table = Table(title=title, title_justify="left")
        for name in ("", "figure"):
            table.add_column(name)
        for name in ("A", "B", "change", "noise"):
            table.add_column(name, justify="right")
        table.add_column("verdict")
        for c in rows:
            style = _STYLES.get(c.verdict, "")
            table.add_row(
                escape(c.subject),
                c.figure,
                _value(c.a, c.unit),
                _value(c.b, c.unit),
                "n/a" if c.change is None else f"[{style}]{c.change:+.1%}[/{style}]",
                "exact" if c.noise is None else f"±{c.noise:.1%}",
                f"[{style}]{c.verdict.upper()}[/{style}]",
            )
        console.print(table)
    changed = sum(1 for c in comparison.changes if c.verdict != SAME)
    console.print(f"{changed} of {len(comparison.changes)} figures changed beyond their noise")


def fix_text(p: FixPaid, titles: dict[str, str] | None = None) -> str:
    """What became of a finding of A in B, in words: gone, with what the steady state saved
    against the prediction; cut; or not changed in B. `titles`: the findings' titles by code,
    to name those gone with it."""
    cost = f"cost {format_seconds(p.cost_a_s)} -> {format_seconds(p.cost_b_s)}"
    predicted = (
        "not priced" if p.predicted_s is None else f"predicted {format_seconds(p.predicted_s)}"
    )
    if p.status == FIX_SAME:
        return f"{p.title}: not changed in B ({cost}); {predicted}"
    if p.status == FIX_CUT:
        return f"{p.title}: cut in B, not gone ({cost}); {predicted}"
    if p.saved_s is None:
        return f"{p.title}: gone in B ({cost}); {predicted}; no steady state to compare"
    paid = f", paid {p.paid:.0%}" if p.paid is not None else ""
    if p.together and p.predicted_together_s:
        predicted = f"predicted together {format_seconds(p.predicted_together_s)}"
    named = [(titles or {}).get(code, code) for code in p.together]
    with_others = f", together with {'; '.join(named)}" if named else ""
    saved = (
        f"the steady state saved {format_seconds(p.saved_s)}"
        if p.saved_s > 0
        else f"the steady state took {format_seconds(-p.saved_s)} longer, not shorter"
    )
    return f"{p.title}: gone in B ({cost}); {saved}{with_others}; {predicted}{paid}"


def to_dict(comparison: TraceComparison) -> dict[str, Any]:
    """The comparison as JSON-ready data, with a schema name and version."""
    return {
        "schema": COMPARE_SCHEMA_NAME,
        "schema_version": COMPARE_SCHEMA_VERSION,
        **to_plain(comparison),
    }
