"""trace_bench.py's idle part (issue 48): programs fed from the host, each with its fix, run
untraced (their own step times) and traced with every kernel recorded, so that what the trace
reports of the GPU's idle and what it predicts a fix saves are set against what the programs
measured:
- tests/trace_programs/loader_loop.py: a ResNet-18 loop starved by its DataLoader, against the
  same loop on a batch kept on the GPU (--resident): the idle share of a step, and the input
  finding's saving per step against the step time the resident batch saved;
- tests/trace_programs/item_loop.py: `.item()` every step, against the loss read once
  (--fixed): the waits' finding's saving against the measured saving, and `compare` on the two
  traces (the span from the first GPU work to the last, judged beside the wall time).
Figures: trace_idle_share_error, trace_prediction_error_max, trace_compare_detects_fixes."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from trace_runs import plain
from xferscope.run.compare import FASTER
from xferscope.trace.compare import compare_traces
from xferscope.trace.document import from_dict

PROGRAMS = Path(__file__).resolve().parent.parent / "tests" / "trace_programs"
LOADER, ITEM = PROGRAMS / "loader_loop.py", PROGRAMS / "item_loop.py"
LOADER_STEPS, ITEM_STEPS = 60, 300


def _untraced(argv: list[str], runs: int, key: str) -> list[float]:
    return [plain([sys.executable, *argv])[1][key] for _ in range(runs)]


def _traced(argv: list[str], runs: int) -> dict:
    """`xferscope trace --runs N --kernels all` of the program; its summary document."""
    out = Path(tempfile.mkdtemp(prefix="xfs-idle-"))
    subprocess.run(
        [sys.executable, "-m", "xferscope", "trace", "--runs", str(runs), "--kernels", "all",
         "--reference", "none", "--no-history", "-o", str(out), "--", sys.executable, *argv],
        check=True, capture_output=True,
    )  # fmt: skip
    return json.loads(next(out.glob("trace-*/trace-summary.json")).read_text())


def _finding(doc: dict, code: str) -> dict | None:
    return next((f for f in doc["summary"]["fixes"] if f["code"] == code), None)


def idle_part(program: str, engine: object, runs: int, comparisons: list, figures: dict) -> None:
    errors: list[float] = []
    detected: list[bool] = []
    # the loader-starved loop against its batch kept on the GPU
    base = [str(LOADER), "--steps", str(LOADER_STEPS)]
    fed = _untraced(base, runs, "step_s")
    resident = _untraced([*base, "--resident"], runs, "step_s")
    doc = _traced(base, 1)
    expected_idle = 1 - statistics.median(resident) / statistics.median(fed)
    steps = doc["summary"].get("steps") or {}
    reported = steps.get("idle_share")
    figures["loader_step_s"] = {"fed": fed, "resident": resident}
    figures["loader_idle_share"] = {"reported": reported, "expected": expected_idle,
                                    "steps": steps}  # fmt: skip
    if reported is not None:
        figures["trace_idle_share_error"] = abs(reported - expected_idle)
    starved = _finding(doc, "input_starved")
    if starved and steps.get("count"):
        predicted = starved["saving_s"] / steps["count"]
        measured = statistics.median(fed) - statistics.median(resident)
        figures["loader_input_saving_per_step_s"] = {"predicted": predicted, "measured": measured}
        errors.append(abs(predicted - measured) / measured)
    # .item() every step against the loss read once
    base = [str(ITEM), "--steps", str(ITEM_STEPS)]
    before = _untraced(base, runs, "seconds")
    after = _untraced([*base, "--fixed"], runs, "seconds")
    doc_a, doc_b = _traced(base, 3), _traced([*base, "--fixed"], 3)
    waits = _finding(doc_a, "synchronizations")
    measured = statistics.median(before) - statistics.median(after)
    figures["item_seconds"] = {"before": before, "after": after}
    if waits and waits["saving_s"] is not None and measured > 0:
        figures["item_waits_saving_s"] = {"predicted": waits["saving_s"], "measured": measured}
        errors.append(abs(waits["saving_s"] - measured) / measured)
    comparison = compare_traces(from_dict(doc_a), from_dict(doc_b), force=True)
    verdicts = {c.figure: c.verdict for c in comparison.changes if c.section == "program"}
    figures["item_compare"] = verdicts
    detected.append(verdicts.get("GPU active span") == FASTER)
    if errors:
        figures["trace_prediction_error_max"] = max(errors)
    figures["trace_compare_detects_fixes"] = sum(detected) / len(detected)
