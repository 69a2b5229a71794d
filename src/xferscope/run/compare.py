"""Compare two runs metric by metric, weighing each difference against the measured noise.

A run is referred to by its id in the history or by the path of its JSON file (load_run). The
verdict rule is in compare()'s docstring. Like pyperf, a comparison of runs from different
machines is not refused but flagged: every difference in host, GPUs, driver, CUDA runtime or
simulation comes back as a warning, because it explains a change better than the code does.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..core.errors import XferscopeError
from ..core.units import format_flops, format_rate, format_seconds
from ..documents.reader import DocumentError, SchemaError, read_document
from ..gemm.records import SCHEMA_NAME as GEMM_SCHEMA_NAME
from ..gemm.records import GemmResult
from ..gemm.records import from_dict as gemm_from_dict
from ..sweep.records import SCHEMA_NAME as SWEEP_SCHEMA_NAME
from .history import History
from .metrics import Metric, result_metrics
from .records import RunResult, run_from_dict

COMPARE_SCHEMA_NAME = "xferscope-compare"
COMPARE_SCHEMA_VERSION = 2  # 2: "forced", why unlike runs were compared anyway (or null)

SAME, FASTER, SLOWER, UNCLEAR = "same", "faster", "slower", "unclear"
VERDICTS = (SLOWER, FASTER, UNCLEAR, SAME)

NOISE_FLOOR = 0.01  # no timing is trusted to better than 1%
NOISE_FACTOR = 2.0  # a change must exceed twice the larger run's relative noise
MIN_SAMPLES = 3  # fewer trials than this cannot show that two ranges are apart


class RunLoadError(DocumentError):
    """A run named on the command line cannot be loaded; the message names it."""


class Incomparable(XferscopeError):
    """The two runs cannot be compared honestly (a model against a GPU, or two GPU models);
    --force compares them anyway and says so."""

    exit_code = 2


# ---- loading -----------------------------------------------------------------------------------


Comparable = RunResult | GemmResult  # the results compare reads: runs, and GEMM studies


def load_run(ref: str, history_path: Path) -> Comparable:
    """The result `ref` names, a run or a GEMM study: a whole number is an id in the history at
    `history_path` (opened read-only: looking a result up never creates a history); anything
    else is the path of a result's JSON file. To name a file whose name is a number, write it
    as ./3."""
    text = ref.strip()
    if text.isdigit():
        with History(history_path, readonly=True) as history:
            kind, document = history.document(int(text))
            if kind == "gemm":
                try:
                    return gemm_from_dict(document)
                except SchemaError as exc:
                    raise RunLoadError(f"entry {text} in {history_path}: {exc}") from exc
            return history.get(int(text))
    return _load_run_file(Path(ref).expanduser())


def _load_run_file(path: Path) -> Comparable:
    document = read_document(path)
    if document.get("schema") == SWEEP_SCHEMA_NAME:
        raise RunLoadError(
            f"{path} is the result of `xferscope sweep`, not of `xferscope run`; compare reads runs"
            " and gemm results"
        )
    try:
        if document.get("schema") == GEMM_SCHEMA_NAME:
            return gemm_from_dict(document)
        return run_from_dict(document)
    except SchemaError as exc:
        raise RunLoadError(f"{path} is not a valid xferscope run document: {exc}") from exc


# ---- comparing ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MetricChange:
    """One metric in both runs and the verdict on its change."""

    name: str
    a: float
    b: float
    unit: str  # "B/s", "s" or "FLOP/s"
    higher_is_better: bool
    change: float | None  # (b - a) / a; None where a is not a positive number
    improvement: float | None  # the change oriented so that positive is better
    noise: float  # the noise band the change was weighed against (a fraction)
    verdict: str  # same, faster, slower, unclear


@dataclass(frozen=True, slots=True)
class Comparison:
    rows: tuple[MetricChange, ...]  # the metrics both runs have, in run A's order
    warnings: tuple[str, ...]  # differences between the machines and the runs
    threshold: float  # the default of regressions()
    only_a: tuple[str, ...] = ()  # metrics run B lacks
    only_b: tuple[str, ...] = ()  # metrics run A lacks
    forced: str | None = None  # why the runs were not comparable, when --force compared them

    def counts(self) -> dict[str, int]:
        """How many metrics got each verdict (every verdict present, zeros included)."""
        return {v: sum(1 for r in self.rows if r.verdict == v) for v in VERDICTS}

    def regressions(self, threshold: float | None = None) -> list[MetricChange]:
        """Metrics whose verdict is SLOWER by more than `threshold`, a fraction (default: the
        comparison's): bandwidth down by more than 5%, latency up by more than 5%."""
        limit = self.threshold if threshold is None else threshold
        return [
            r
            for r in self.rows
            if r.verdict == SLOWER and r.improvement is not None and -r.improvement > limit
        ]


def compare_metric(a: Metric, b: Metric) -> MetricChange:
    """The verdict on one metric; the rule is compare()'s."""
    change = improvement = None
    noise = max(NOISE_FACTOR * max(a.rel_noise, b.rel_noise), NOISE_FLOOR)
    if a.value > 0 and math.isfinite(a.value) and math.isfinite(b.value):
        change = (b.value - a.value) / a.value
        improvement = change if a.higher_is_better else -change
    if improvement is None:
        verdict = UNCLEAR
    elif abs(improvement) <= noise:
        verdict = SAME
    elif (
        min(len(a.samples), len(b.samples)) >= MIN_SAMPLES
        and a.samples
        and b.samples
        and (max(a.samples) < min(b.samples) or max(b.samples) < min(a.samples))
    ):
        verdict = FASTER if improvement > 0 else SLOWER
    else:
        verdict = UNCLEAR
    return MetricChange(
        a.name, a.value, b.value, a.unit, a.higher_is_better, change, improvement, noise, verdict
    )


def incomparable(a: Comparable, b: Comparable) -> str | None:
    """Why two runs cannot be compared honestly, or None: a simulated run's figures are a
    model's, and two GPU models differ by design, not by regression."""
    if isinstance(a, GemmResult) != isinstance(b, GemmResult):
        kinds = ["gemm" if isinstance(r, GemmResult) else "run" for r in (a, b)]
        return f"A is an `xferscope {kinds[0]}` result and B an `xferscope {kinds[1]}` result"
    if a.simulated != b.simulated:
        which, other = ("A", "B") if a.simulated else ("B", "A")
        return f"run {which} is simulated and run {other} was measured on a GPU"
    models = [
        sorted({str(g.get("name")) for g in _gpus_by_index(r.machine).values()}) for r in (a, b)
    ]
    if models[0] != models[1]:
        return (
            f"the runs measured different GPU models: {', '.join(models[0]) or 'none'} (A) and "
            f"{', '.join(models[1]) or 'none'} (B)"
        )
    return None


def compare(
    a: Comparable, b: Comparable, threshold: float = 0.05, force: bool = False
) -> Comparison:
    """Compares run `b` against run `a` over the metrics both have (metrics.run_metrics).
    Runs that cannot be compared honestly (`incomparable`) raise Incomparable unless `force`;
    then the comparison carries the reason in `forced`, shown with every verdict.

    The rule, per metric (value = the median of the trials; samples = the trials):
      change       d = (b - a) / a
      improvement  i = d for higher-is-better metrics (bandwidth), -d for lower-is-better ones
                   (latency, pinning costs): positive is better
      noise band   n = max(2 * max(rel_noise_a, rel_noise_b), 1%), rel_noise being the robust
                   spread 1.4826 * MAD / median of each run's samples (stats.relative_noise)
      SAME     if |i| <= n: the change is within what the noise produces;
      FASTER   (i > 0) or SLOWER (i < 0) if, besides, the sample ranges min..max of the two runs
               do not overlap and each run has at least 3 samples: every trial of one run beat
               every trial of the other;
      UNCLEAR  otherwise: the medians moved but the trials overlap, too few trials were taken to
               tell (a pinning cost is one measurement), or run A's value is not positive.
    `threshold` (a fraction) is only the default of Comparison.regressions(): a change can be
    real (SLOWER) yet smaller than what is worth failing a build for.
    """
    reason = incomparable(a, b)
    if isinstance(a, GemmResult) != isinstance(b, GemmResult):
        # Different kinds share no figure: --force cannot help, so it is not offered.
        raise Incomparable(f"{reason}: compare reads two results of one kind")
    if reason is not None and not force:
        raise Incomparable(
            f"{reason}: their figures cannot be compared; --force compares them anyway"
        )
    metrics_a, metrics_b = result_metrics(a), result_metrics(b)
    rows = tuple(
        compare_metric(m, metrics_b[name]) for name, m in metrics_a.items() if name in metrics_b
    )
    return Comparison(
        rows=rows,
        warnings=tuple(machine_warnings(a, b)),
        threshold=threshold,
        only_a=tuple(n for n in metrics_a if n not in metrics_b),
        only_b=tuple(n for n in metrics_b if n not in metrics_a),
        forced=reason,
    )


def _get(record: Mapping[str, Any] | None, *keys: str) -> Any:
    value: Any = record
    for key in keys:
        value = value.get(key) if isinstance(value, Mapping) else None
    return value


def _gpus_by_index(machine: Mapping[str, Any]) -> dict[int, Mapping[str, Any]]:
    gpus = machine.get("gpus") or []
    out: dict[int, Mapping[str, Any]] = {}
    for position, gpu in enumerate(gpus):
        if isinstance(gpu, Mapping):
            index = gpu.get("index")
            out[index if isinstance(index, int) else position] = gpu
    return out


def machine_warnings(a: Comparable, b: Comparable) -> list[str]:
    """What differs between the machines (and the ways) the two runs were measured on."""
    warnings: list[str] = []
    ma = a.machine if isinstance(a.machine, Mapping) else {}
    mb = b.machine if isinstance(b.machine, Mapping) else {}
    for keys, what in (
        (("host", "hostname"), "hosts"),
        (("driver",), "NVIDIA drivers"),
        (("cuda_runtime",), "CUDA runtimes"),
    ):
        va, vb = _get(ma, *keys), _get(mb, *keys)
        if va != vb:
            warnings.append(f"different {what}: {va or 'unknown'} (A) and {vb or 'unknown'} (B)")
    gpus_a, gpus_b = _gpus_by_index(ma), _gpus_by_index(mb)
    if len(gpus_a) != len(gpus_b):
        warnings.append(f"run A has {len(gpus_a)} GPUs and run B has {len(gpus_b)}")
    for index in sorted(gpus_a.keys() & gpus_b.keys()):
        ga, gb = gpus_a[index], gpus_b[index]
        if ga.get("name") == gb.get("name") and ga.get("uuid") != gb.get("uuid"):
            warnings.append(
                f"GPU {index} is another device of the same model: {ga.get('uuid')} (A) and "
                f"{gb.get('uuid')} (B)"
            )
    if a.mode != b.mode:
        warnings.append(f"different modes: {a.mode} (A) and {b.mode} (B); sizes and trials differ")
    if a.tool_version != b.tool_version:
        warnings.append(
            f"different xferscope versions: {a.tool_version} (A) and {b.tool_version} (B)"
        )
    for name, run in (("A", a), ("B", b)):
        if not run.complete:
            warnings.append(f"run {name} is incomplete: the metrics it lacks are not compared")
    return warnings


# ---- output ------------------------------------------------------------------------------------

_STYLES = {SLOWER: "bold red", FASTER: "green", UNCLEAR: "yellow", SAME: "dim"}


def _value(value: float, unit: str) -> str:
    if not math.isfinite(value):
        return str(value)
    if unit == "FLOP/s":
        return format_flops(value)
    return format_rate(value) if unit == "B/s" else format_seconds(value)


def _percent(fraction: float | None) -> str:
    return "n/a" if fraction is None else f"{fraction:+.1%}"


def summary_line(comparison: Comparison) -> str:
    counts = comparison.counts()
    text = ", ".join(f"{counts[v]} {v}" for v in VERDICTS)
    regressions = len(comparison.regressions())
    text += f"; {regressions} regression{'s' if regressions != 1 else ''} beyond "
    text += f"{comparison.threshold:.0%}"
    if comparison.forced:
        text += f" (forced: {comparison.forced})"
    return text


def render(
    comparison: Comparison,
    console: Console,
    *,
    all_rows: bool = False,
    labels: tuple[str, str] = ("A", "B"),
) -> None:
    """Prints the warnings, a table of the metrics that changed (every metric with
    `all_rows`) and a summary line counting each verdict."""
    if comparison.forced:
        console.print(
            Text(
                f"FORCED: {comparison.forced}; these verdicts compare unlike runs", style="bold red"
            )
        )
    for warning in comparison.warnings:
        console.print(Text(f"warning: {warning}", style="yellow"))
    rows = [r for r in comparison.rows if all_rows or r.verdict != SAME]
    if rows:
        table = Table(title=f"{labels[1]} against {labels[0]}", title_justify="left")
        table.add_column("metric")
        table.add_column(labels[0], justify="right")
        table.add_column(labels[1], justify="right")
        table.add_column("change", justify="right")
        table.add_column("noise", justify="right")
        table.add_column("verdict")
        for r in rows:
            style = _STYLES.get(r.verdict, "")
            table.add_row(
                Text(r.name),
                _value(r.a, r.unit),
                _value(r.b, r.unit),
                Text(_percent(r.change), style=style),
                f"±{r.noise:.1%}",
                Text(r.verdict.upper() + (" (forced)" if comparison.forced else ""), style=style),
            )
        console.print(table)
    elif comparison.rows:
        console.print("no metric changed beyond its noise")
    else:
        console.print("the runs have no metric in common")
    for name, only in ((labels[0], comparison.only_a), (labels[1], comparison.only_b)):
        if only:
            console.print(Text(f"{len(only)} metrics only in {name} (not compared)", style="dim"))
    console.print(summary_line(comparison))


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def to_dict(comparison: Comparison) -> dict[str, Any]:
    """The comparison as JSON-ready data (with a schema name and version, like the runs)."""
    return {
        "schema": COMPARE_SCHEMA_NAME,
        "schema_version": COMPARE_SCHEMA_VERSION,
        "threshold": comparison.threshold,
        "forced": comparison.forced,
        "counts": comparison.counts(),
        "regressions": [r.name for r in comparison.regressions()],
        "warnings": list(comparison.warnings),
        "only_a": list(comparison.only_a),
        "only_b": list(comparison.only_b),
        "metrics": [
            {
                "name": r.name,
                "a": _finite(r.a),
                "b": _finite(r.b),
                "unit": r.unit,
                "higher_is_better": r.higher_is_better,
                "change": r.change,
                "improvement": r.improvement,
                "noise_band": r.noise,
                "verdict": r.verdict,
            }
            for r in comparison.rows
        ],
    }
