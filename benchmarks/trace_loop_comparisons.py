"""The trace's comparisons on the PyTorch training loop (benchmarks/torch_train_loop.py), made
from a record's figures: by trace_bench.py's parts pytorch and processes as they measure, and
by its --parts summary from an earlier record, which measures nothing."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from foundation import comparison
from xferscope.trace.runner import KERNEL_WINDOW_MS

STEADY = "{}/{}/0".format(*KERNEL_WINDOW_MS[:2])  # `--kernels sampled` past its first phase


# comparisons of earlier records under names no longer made: dropped when a record is summarized
RETIRED = ("trace_pytorch_loop_vs_detached",)


def summarize(path: Path, out: Path) -> None:
    """--parts summary: the comparisons of the record at `path` made again from its figures (as
    the parts make them), into `out`; nothing measured, its machine and date kept."""
    record = json.loads(path.read_text())
    figures = record["figures"]
    made = pytorch_comparisons(figures) + processes_comparisons(figures)
    names = {c["name"] for c in made} | set(RETIRED)
    record["comparisons"] = [c for c in record["comparisons"] if c["name"] not in names] + made
    out.mkdir(parents=True, exist_ok=True)
    (out / path.name).write_text(json.dumps(record, indent=2) + "\n")
    print(f"wrote {out / path.name}")


def pytorch_comparisons(figures: dict) -> list[dict]:
    """The loop's comparisons, from the figures part pytorch keeps (also those of a record)."""
    within = {k: v for k, v in figures.get("pytorch_paused_over_traced", {}).items() if v}
    figures["pytorch_within_process_paused_over"] = {
        k: statistics.median(v) for k, v in within.items()
    }
    said = "(blocks alternated; median over processes of the ratio of medians)"
    made = []
    for name, key, peer in (
        ("trace_pytorch_loop_vs_untraced", "windows_vs_detached",
         f"the same process's loop with CUPTI detached (cuptiFinalize), traced as `--kernels "
         f"sampled` is after its first {KERNEL_WINDOW_MS[2] // 1000} s (--kernels {STEADY}) "
         f"{said}"),
        ("trace_pytorch_loop_vs_untraced_first_phase", "traced_vs_detached",
         f"as trace_pytorch_loop_vs_untraced, `--kernels sampled` over a loop no longer than "
         f"its first {KERNEL_WINDOW_MS[2] // 1000} s of every kernel {said}"),
        ("trace_pytorch_loop_vs_paused", "traced",
         f"the same process's loop with every record off, CUPTI attached {said}"),
        ("trace_pytorch_cupti_attached_floor", "attached_idle_vs_detached",
         f"CUPTI attached with every record off against CUPTI detached {said}: the floor"),
        ("trace_pytorch_loop_vs_untraced_every_kernel", "every_kernel_vs_detached",
         f"as trace_pytorch_loop_vs_untraced, every kernel recorded (--kernels all) {said}"),
        ("trace_pytorch_cupti_records_floor", "cupti_records_vs_detached",
         f"CUPTI recording every copy and kernel, no callbacks and nothing of ours, against "
         f"CUPTI detached {said}: the floor with every kernel recorded"),
    ):  # fmt: skip
        if key in within:
            ratio = statistics.median(within[key])
            made.append(comparison(name, ratio, 1.0, peer, "ratio", True, 0.95))
    if figures.get("pytorch_lines_found"):
        share = statistics.median(figures["pytorch_lines_found"])
        made.append(
            comparison("trace_pytorch_lines_found", share, 1.0, "every copy", "share", True, 0.95)
        )
    return made


def processes_comparisons(figures: dict) -> list[dict]:
    """Part processes' comparison, from its figures (also those of a record)."""
    steps = figures.get("pytorch_process_step_s", {})
    if not (steps.get("untraced") and steps.get("traced")):
        return []
    median = {k: statistics.median(v) for k, v in steps.items() if v}
    figures["pytorch_processes_untraced_over"] = {
        k: round(median["untraced"] / v, 4) for k, v in median.items() if k != "untraced"
    }
    return [
        comparison(
            "trace_pytorch_loop_vs_untraced_processes",
            median["traced"],
            median["untraced"],
            "untraced processes (the loop's step time, median of alternated processes)",
            "s",
            False,
            0.95,
        )
    ]
