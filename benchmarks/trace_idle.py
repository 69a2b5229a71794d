"""trace_bench.py's parts for issue 48: programs fed from the host, each with its fix, run
untraced (their own times, the variants alternated) and traced with kernels recorded as
`trace` does by default (in windows) and, once more, with every kernel recorded, so that what
the trace reports of the GPU's idle and what it predicts a fix saves are set against what the
programs measured, and the two ways of recording kernels against each other. Part `idle`:
- tests/trace_programs/loader_loop.py: a ResNet-18 loop starved by its DataLoader, against the
  same loop on a batch kept on the GPU (--resident);
- tests/trace_programs/item_loop.py: `.item()` every step, against the loss read once (--fixed).
Part `fed`: pageable_loop.py (pageable batches; fixed: pinned, non_blocking), small_tensors.py
(256 small uploads a step; fixed: one packed copy) and cupy_loop.py (CuPy from pageable NumPy;
fixed: pinned buffers on streams), each also run with its data resident.
Per program (figures["idle_programs"]): the share of its steady steps the trace reports the GPU
waiting for its input (idle while the host was blocked in an upload or away until one, and
copy-only time: Steps.input_share) against 1 - resident / fed time, the finding's predicted
saving against the fix's measured one (parts fed and item: medians over 3 traced runs against
the medians of the untraced ones; part loader: the traced run against its own step), and
`compare`'s verdict on the span from the first GPU
work to the last. Over all of them: trace_idle_share_error, trace_prediction_error_max,
trace_compare_detects_fixes."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from spread import round_savings
from trace_runs import plain
from xferscope.run.compare import FASTER
from xferscope.trace.compare import compare_traces
from xferscope.trace.document import from_dict

PROGRAMS = Path(__file__).resolve().parent.parent / "tests" / "trace_programs"
# name: (program, steps, the findings whose fixes --fixed applies, its time's key, reference).
# cupy_loop.py's fix does what two findings advise: pinned buffers filled in place (the host's
# time away before each copy, staging through CuPy's pool: "the GPU waited for its next
# input") and copies on their own stream ("copies that ran while no kernel did").
FED = {
    "pageable": ("pageable_loop.py", 100, ("pageable_copies",), "seconds", "measure"),
    "small": ("small_tensors.py", 200, ("small_copies",), "seconds", "measure"),
    "cupy": ("cupy_loop.py", 100, ("copies_not_overlapped", "input_starved"), "seconds",
             "measure"),
}  # fmt: skip


# how kernels are recorded: the default (windows) for every figure, and every kernel beside it
DEFAULT, EVERY = "sampled", "all"


def _untraced(variants: dict[str, list[str]], runs: int, key: str) -> dict[str, list[float]]:
    """Each variant's own time, `runs` processes each, the variants alternated (a host's speed
    drifts over minutes)."""
    out: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(runs):
        for name, argv in variants.items():
            out[name].append(float(plain([sys.executable, *argv])[1][key]))
    return out


def _traced(argv: list[str], runs: int, reference: str = "none", kernels: str = DEFAULT) -> dict:
    """`xferscope trace --runs N --kernels K` of the program; its summary document, with what
    the program said of its own time in each run under "own" (what the tracing cost it)."""
    out = Path(tempfile.mkdtemp(prefix="xfs-idle-"))
    proc = subprocess.run(
        [sys.executable, "-m", "xferscope", "trace", "--runs", str(runs), "--kernels", kernels,
         "--reference", reference, "--no-history", "-o", str(out), "--", sys.executable, *argv],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    doc = json.loads(next(out.glob("trace-*/trace-summary.json")).read_text())
    lines = [line for line in proc.stdout.splitlines() if line.startswith('{"steps"')]
    return doc | {"own": [json.loads(line) for line in lines]}


def _predicted(doc: dict, codes: tuple[str, ...]) -> float | None:
    """What the findings `codes` predicted their fixes save together; None where one of them
    was not found or not priced."""
    return _summed({f["code"]: f["saving_s"] for f in doc["summary"]["fixes"]}, codes)


def _summed(savings: dict[str, float | None], codes: tuple[str, ...]) -> float | None:
    """The findings `codes`' savings together; None where one of them is missing or unpriced."""
    each = [savings.get(code) for code in codes]
    return None if None in each else sum(s for s in each if s is not None)


def _over_runs(doc: dict, codes: tuple[str, ...]) -> tuple[float | None, float | None]:
    """The medians over the traced runs (`trace --runs`) of what the findings `codes` predicted
    together and of the input's share: set against the medians of as many untraced runs, as a
    program's time varies from one process to the next (the CuPy loop's by a quarter on an
    H100: 0.39-0.49 s untraced, 0.44-0.52 s traced), more than the first run alone can judge."""
    predicted: list[float] = []
    shares: list[float] = []
    for run in doc.get("runs", []):
        found = {k: f.get("saving_s") for k, f in run.get("findings", {}).items()}
        together = _summed(found, codes)
        if together is not None:
            predicted.append(together)
        if run.get("input_share") is not None:
            shares.append(run["input_share"])
    return (statistics.median(predicted) if predicted else None,
            statistics.median(shares) if shares else None)  # fmt: skip


def _entry(
    doc: dict,
    codes: tuple[str, ...],
    measured_s: float | None,
    expected_idle: float | None,
    after: dict | None = None,
    per_step: bool = False,
    over_runs: bool = False,
) -> dict:
    """What the trace of a program said against what the program measured: its first run's
    findings, or (`over_runs`) the medians over its runs."""
    steps = doc["summary"].get("steps") or {}
    predicted = _predicted(doc, codes)
    if per_step and predicted is not None and steps.get("count"):
        predicted /= steps["count"]
    share = steps.get("input_share")
    first = {"predicted_s": predicted, "idle_share": share}
    if over_runs and len(doc.get("runs", [])) > 1:
        predicted, share = _over_runs(doc, codes)
    entry: dict = {
        "findings": codes,
        "found": {f["code"]: f["saving_s"] for f in doc["summary"]["fixes"]},
        "predicted_s": predicted,
        "measured_s": measured_s,
        # the share of the step the GPU waited for its input: idle at the uploads and copying
        # with no kernel (what 1 - resident / fed counts: the idle a step has with its data
        # resident too, its launches and Python, is not in it); all idle and copy-only time
        # (HTA's idle and non-compute time) beside it
        "idle_share": share,
        "first_run": first,
        "idle_and_copy_share": None
        if steps.get("idle_share") is None
        else steps["idle_share"] + (steps.get("copy_share") or 0.0),
        "expected_idle_share": expected_idle,
        "steps": steps,
        "traced_own": doc.get("own", []),
    }
    if predicted is not None and measured_s:
        entry["prediction_error"] = abs(predicted - measured_s) / measured_s
    if entry["idle_share"] is not None and expected_idle is not None:
        entry["idle_share_error"] = abs(entry["idle_share"] - expected_idle)
    if after is not None:
        comparison = compare_traces(from_dict(doc), from_dict(after), force=True)
        entry["compare"] = {
            c.figure: c.verdict for c in comparison.changes if c.section == "program"
        }
    return entry


def _every_kernel(entry: dict, again: dict) -> dict:
    """The entry with what the same program's trace with every kernel recorded said beside
    it (under "every_kernel", from that trace's entry `again`): what recording kernels in
    windows gets wrong."""
    keep = ("predicted_s", "idle_share", "prediction_error", "idle_share_error", "found",
            "traced_own")  # fmt: skip
    return entry | {"every_kernel": {k: again[k] for k in keep if k in again}}


def _headline(figures: dict) -> None:
    """The issue's three figures over every program measured so far (parts join with --into)."""
    entries = figures.get("idle_programs", {}).values()
    idle = [e["idle_share_error"] for e in entries if "idle_share_error" in e]
    every = [e.get("every_kernel", {}) for e in entries]
    if any("idle_share_error" in e for e in every):
        figures["trace_idle_share_error_every_kernel"] = max(
            e["idle_share_error"] for e in every if "idle_share_error" in e
        )
    errors = [e["prediction_error"] for e in entries if "prediction_error" in e]
    # compare's steady-state verdict: per step where both traces ran the same steps, else on
    # the span from the first GPU work to the last
    fixed = [
        e["compare"].get("step time", e["compare"].get("steady state span")) == FASTER
        for e in entries
        if "compare" in e
    ]
    if idle:
        figures["trace_idle_share_error"] = max(idle)
    if errors:
        figures["trace_prediction_error_max"] = max(errors)
    if fixed:
        figures["trace_compare_detects_fixes"] = sum(fixed) / len(fixed)


def idle_part(program: str, engine: object, runs: int, comparisons: list, figures: dict) -> None:
    loader_part(program, engine, runs, comparisons, figures)
    item_part(program, engine, runs, comparisons, figures)


def loader_part(program: str, engine: object, runs: int, comparisons: list, figures: dict) -> None:
    programs = figures.setdefault("idle_programs", {})
    base = [str(PROGRAMS / "loader_loop.py"), "--steps", "60"]
    own = _untraced({"fed": base, "resident": [*base, "--resident"]}, runs, "step_s")
    resident = statistics.median(own["resident"])

    def judged(doc: dict) -> dict:
        """A DataLoader loop's step varies by a quarter from one process to the next (its
        workers), so what the trace said of a run is set against that run's own step time as
        fed (what the program printed under the trace) and the resident step's median."""
        fed = doc["own"][0]["step_s"]
        entry = _entry(doc, ("input_starved",), fed - resident, 1 - resident / fed, per_step=True)
        fed_median = statistics.median(own["fed"])
        return entry | {"expected_idle_share_across_processes": 1 - resident / fed_median}

    entry = judged(_traced(base, 1))
    again = judged(_traced(base, 1, kernels=EVERY))
    programs["loader"] = _every_kernel(entry, again) | own
    _headline(figures)


def item_part(program: str, engine: object, runs: int, comparisons: list, figures: dict) -> None:
    programs = figures.setdefault("idle_programs", {})
    base = [str(PROGRAMS / "item_loop.py"), "--steps", "300"]
    own = _untraced({"before": base, "after": [*base, "--fixed"]}, runs, "seconds")
    measured = statistics.median(round_savings(own["before"], own["after"]))
    doc_a, doc_b = _traced(base, 3), _traced([*base, "--fixed"], 3)
    entry = _entry(doc_a, ("synchronizations",), measured, None, doc_b, over_runs=True)
    again = _entry(_traced(base, 1, kernels=EVERY), entry["findings"], measured, None)
    programs["item"] = _every_kernel(entry, again) | own
    _headline(figures)


def _interleaved(
    variants: dict[str, list[str]],
    traced: dict[str, list[str]],
    runs: int,
    key: str,
    reference: str,
) -> tuple[dict[str, list[float]], dict[str, dict]]:
    """Each untraced variant's own time and one traced run of each `traced` program, `runs`
    rounds alternated (a program fed from pageable memory runs a quarter slower in some
    processes than in others, and a host drifts over minutes, so the traced runs and the
    untraced ones are set side by side, not one group after the other); each traced program's
    documents joined as one of `runs` runs (as `trace --runs` keeps them: the first run's
    findings, every run's figures)."""
    own: dict[str, list[float]] = {name: [] for name in variants}
    docs: dict[str, list[dict]] = {name: [] for name in traced}
    for _ in range(runs):
        for name, argv in variants.items():
            own[name].append(float(plain([sys.executable, *argv])[1][key]))
        for name, argv in traced.items():
            docs[name].append(_traced(argv, 1, reference if name == "before" else "none"))
    joined = {
        name: found[0] | {"runs": [r for d in found for r in d.get("runs", [])],
                          "own": [o for d in found for o in d["own"]]}
        for name, found in docs.items()
    }  # fmt: skip
    return own, joined


def fed_part(program: str, engine: object, runs: int, comparisons: list, figures: dict) -> None:
    programs = figures.setdefault("idle_programs", {})
    for name, (script, steps, codes, key, reference) in FED.items():
        base = [str(PROGRAMS / script), "--steps", str(steps)]
        fixed = [*base, "--fixed"]
        variants = {"before": base, "after": fixed, "resident": [*base, "--resident"]}
        own, docs = _interleaved(variants, {"before": base, "after": fixed}, runs, key, reference)
        saved = statistics.median(round_savings(own["before"], own["after"]))
        expected = 1 - statistics.median(own["resident"]) / statistics.median(own["before"])
        entry = _entry(docs["before"], codes, saved, expected, docs["after"], over_runs=True)
        again = _entry(_traced(base, 1, reference, EVERY), codes, saved, expected)
        programs[name] = _every_kernel(entry, again) | own
        _headline(figures)
