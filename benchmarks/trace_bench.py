"""Trace benchmark (issues 12 and 30), on one GPU in one run. With tests/trace_programs/copies.cu:
  trace_wall_vs_untraced   the program's wall time untraced / traced, on a transfer-heavy run
                           (30,000 small copies plus large ones), runs alternated (goal >= 0.95);
                           beside it, alternated with them, the least a CUPTI tracer of every
                           copy's GPU time costs (the injection with only CUPTI's memcpy activity:
                           no callbacks, nothing of ours) and, where installed, Nsight Systems
                           (`nsys profile -t cuda`), each as wall time and as the program's own
                           time from its first copy to its last (phase_s, which leaves out each
                           tool's start and finish)
  trace_total_vs_events    the trace's per-kind GPU totals against the program's own CUDA-event
                           timing of the same copies (goal >= 0.98)
  and for each finding the saving the trace predicted against the saving measured by running
  the program with that fix applied (its copy phase, median of alternated runs).
With benchmarks/torch_train_loop.py, a PyTorch training loop (part `pytorch`):
  trace_pytorch_loop_vs_untraced  the loop's own time untraced / traced (goal >= 0.95): in
                           each traced process, 50-step blocks with CUPTI detached
                           (cuptiFinalize; 20 steps settle after attaching again) and traced,
                           alternated (the ratio of their medians; the median over processes),
                           and beside it the step time across processes alternated (untraced,
                           traced, torch.profiler)
  trace_pytorch_loop_vs_paused  the same against blocks with every record off, CUPTI attached;
                           the same ratio under each variant (kernels all or none, CUPTI's
                           records alone, parts of ours off: what each costs) and the tracing's
                           own time per step on the program's threads
  trace_pytorch_cupti_attached_floor  CUPTI attached with every record off against detached:
                           the floor under any tracer through CUPTI
  trace_pytorch_loop_vs_untraced_every_kernel  as trace_pytorch_loop_vs_untraced with every
                           kernel recorded (--kernels all), what the default's first 30 s cost
  trace_pytorch_cupti_records_floor  CUPTI recording every copy and kernel, none of our
                           callbacks, against detached: the floor with every kernel recorded
  trace_pytorch_loop_vs_untraced_processes  (part `processes`) the same, whole processes
                           alternated, nothing paused (coarser: processes differ by 10%)
  trace_pytorch_lines_found  the share of copies whose place is a line of the loop's script
                           (goal >= 0.95)
  trace_pytorch_<kind>_count / _bytes / _gpu_time  (part `kinds`) per kind of copy, the trace
                           against torch.profiler on the same program (counts and bytes equal,
                           the median copy's GPU time within 2%: medians of alternated runs;
                           the totals of GPU time kept beside them)
Parts idle (loader and item, also run apart) and fed: trace_idle.py's; corpus and sigint (run
only when named): trace_overhead.py's, what tracing costs the corpus programs.
Writes benchmarks/results/trace-<gpu>-<date>.json as ../shared/BENCHMARKS.md says.

    python3 benchmarks/trace_bench.py --commit $(git rev-parse HEAD) [--runs 5] [--out DIR]
        [--parts heavy,accuracy,fixes,pytorch,kinds,processes,idle,fed] [--variants ...]
        [--cpus LIST] [--into FILE]
    python3 benchmarks/trace_bench.py --commit X --parts summary --into FILE [--out DIR]

--into FILE joins this run's parts to FILE's (an earlier run), so parts measured in separate
calls make one record; figures.part_commits names the commit each part was measured at, and a
comparison measured again replaces the earlier one. --parts summary measures nothing: it makes
FILE's loop comparisons again from its figures (as parts pytorch and processes make them).
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from foundation import comparison, write_record
from spread import round_savings
from torch_train_loop import SETTLE
from trace_idle import fed_part, idle_part, item_part, loader_part
from trace_loop_comparisons import STEADY, processes_comparisons, pytorch_comparisons, summarize
from trace_overhead import corpus_part, sigint_part
from trace_runs import (
    ATTACH_SETTLE,
    LOOP,
    LOOP_ARGS,
    PINNED,
    PROFILED_ARGS,
    UNTRACED_ARGS,
    VARIANTS,
    local_cpus,
    loop_traced,
    loop_untraced,
    nsys,
    own,
    per_kind_profiler,
    per_kind_trace,
    plain,
    steps_of,
    traced,
    traced_own,
)
from xferscope.core.engine import NativeEngine
from xferscope.core.machine import collect
from xferscope.trace.analyze import analyze
from xferscope.trace.reading import read_trace
from xferscope.trace.reference import calibrate
from xferscope.trace.runner import KERNELS_DEFAULT

HERE = Path(__file__).resolve().parent
PROGRAM = HERE.parent / "tests" / "trace_programs" / "copies.cu"
HEAVY = ["--small", "30000", "--no-events"]
FIXES = {
    "pageable": "pageable_copies",
    "repeat": "repeated_uploads",
    "small": "small_copies",
    "unused": "pinned_unused",
}


PARTS = ("heavy", "accuracy", "fixes", "pytorch", "kinds", "processes", "idle", "fed")
ALSO = ("loader", "item", "corpus", "sigint")  # run only when named: trace_overhead.py's too


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--commit", required=True)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--out", default=str(HERE / "results"))
    parser.add_argument("--parts", default=",".join(PARTS))
    parser.add_argument(
        "--variants",
        default="kernels_all,kernels_none,cupti_floor,memcpy_records_only",
        help=f"the PyTorch loop's tracing variants to time, of {', '.join(VARIANTS)}",
    )
    parser.add_argument(
        "--into",
        default=None,
        help="a record of an earlier run whose comparisons and figures "
        "this run's join: parts measured in separate calls, one file",
    )
    parser.add_argument(
        "--cpus",
        default=None,
        help="run the PyTorch loop's processes on these cores (taskset -c), so that processes "
        "differ less from one another; auto: 4 of the GPU's own cores (its NUMA node's), "
        "past the first two, which take the interrupts",
    )
    args = parser.parse_args()
    if args.into and not Path(args.into).is_file():  # a FIFO or a directory is not a record
        parser.error(f"--into: {args.into} is not a record file")
    for name in [k for k in VARIANTS if k not in args.variants.split(",")]:
        del VARIANTS[name]
    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    if parts == ["summary"]:
        if not args.into:
            parser.error("--parts summary: name the record with --into FILE")
        try:
            summarize(Path(args.into), Path(args.out))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            parser.error(f"--into: cannot summarize {args.into}: {exc!r}"[:300])
        return
    unknown = [p for p in parts if p not in PARTS + ALSO]
    if unknown:
        named = ", ".join(PARTS + ALSO)
        parser.error(f"--parts: {', '.join(unknown)} not among {named} (or summary)")
    engine = NativeEngine()
    meta = collect(engine, [0])
    figures_cpus = local_cpus(meta) if args.cpus == "auto" else args.cpus
    if figures_cpus:
        PINNED[:] = ["taskset", "-c", figures_cpus]
    comparisons: list[dict] = []
    figures: dict = {}
    if args.into:
        try:
            earlier = json.loads(Path(args.into).read_text())
        except (OSError, ValueError) as exc:
            parser.error(f"--into: cannot read {args.into}: {exc}")
        figures = earlier["figures"]
        figures.setdefault(
            "part_commits", dict.fromkeys(figures.get("parts", []), earlier["commit"])
        )
    earlier_comparisons = earlier["comparisons"] if args.into else []
    program = ""
    if {"heavy", "accuracy", "fixes"} & set(parts):
        build = Path(tempfile.mkdtemp()) / "copies"
        subprocess.run(
            [shutil.which("nvcc") or "nvcc", "-O2", "-o", str(build), str(PROGRAM), "-lcuda"],
            check=True,
        )
        program = str(build)

    def stop(_signum: int, _frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)  # a time limit's SIGTERM keeps what was measured
    try:
        for part in parts:
            PART_FUNCTIONS[part](program, engine, args.runs, comparisons, figures)
    except (KeyboardInterrupt, AssertionError) as exc:  # a traced run stopped by the signal
        figures["interrupted"] = repr(exc)[:300]
    except Exception as exc:  # what was measured before a failure is written all the same
        figures["failed"] = repr(exc)[-2000:]
    looped = [p for p in parts if p in ("pytorch", "processes")]  # the parts --cpus pins
    if figures_cpus and looped:
        figures[f"cpus_{'_'.join(looped)}"] = figures_cpus
    figures["parts"] = sorted({*figures.get("parts", []), *parts})
    figures["part_commits"] = figures.get("part_commits", {}) | dict.fromkeys(parts, args.commit)
    made = {c["name"] for c in comparisons}  # measured again: the new figure replaces the old
    comparisons[:0] = [c for c in earlier_comparisons if c["name"] not in made]
    write_record("trace", args.commit, meta, 1, comparisons, figures, Path(args.out))


def heavy_part(
    program: str, engine: NativeEngine, runs: int, comparisons: list[dict], figures: dict
) -> None:
    """Overhead on a transfer-heavy run, alternated: untraced, traced, CUPTI's floor, nsys."""
    walls: dict[str, list[float]] = {"plain": [], "traced": [], "cupti_floor": []}
    phases: dict[str, list[float]] = {k: [] for k in walls}
    small: dict[str, list[float]] = {k: [] for k in walls}
    has_nsys = nsys([program, "--small", "10", "--no-events"]) is not None  # and its warm-up
    if has_nsys:
        for d in (walls, phases, small):
            d["nsys"] = []
    plain([program, *HEAVY])  # warm-up: the driver's caches

    def note(variant: str, wall: float, mine: dict) -> None:
        walls[variant].append(wall)
        phases[variant].append(mine["phase_s"])
        small[variant].append(mine["sections"]["small"])

    for _ in range(runs):
        note("plain", *plain([program, *HEAVY]))
        wall, scratch, mine = traced_own([program, *HEAVY])
        note("traced", wall, mine)
        figures["heavy_copies_traced"] = len(read_trace(scratch.glob("trace-*.jsonl")).copies)
        shutil.rmtree(scratch)
        wall, scratch, mine = traced_own([program, *HEAVY], "nosubscribe", "none")
        note("cupti_floor", wall, mine)
        shutil.rmtree(scratch)
        if has_nsys:
            ran = nsys([program, *HEAVY])
            if ran is not None:
                note("nsys", *ran)
    median = {k: statistics.median(v) for k, v in walls.items() if v}
    untraced, with_trace = median["plain"], median["traced"]
    comparisons.append(
        comparison(
            "trace_wall_vs_untraced",
            with_trace,
            untraced,
            "the same program untraced (wall time, median of alternated runs)",
            "s",
            False,
            0.95,
        )
    )
    figures["heavy_wall_s"] = {k: [round(v, 4) for v in vs] for k, vs in walls.items()}
    figures["heavy_phase_s"] = {k: [round(v, 4) for v in vs] for k, vs in phases.items()}
    figures["heavy_small_copies_s"] = {k: [round(v, 4) for v in vs] for k, vs in small.items()}
    for variant in median:
        if variant == "plain":
            continue
        figures[f"{variant}_wall_vs_untraced"] = round(untraced / median[variant], 4)
        figures[f"{variant}_phase_vs_untraced"] = round(
            statistics.median(phases["plain"]) / statistics.median(phases[variant]), 4
        )
        # per small copy, what each adds (the program's own timing of its 30,000 copies)
        figures[f"{variant}_us_per_small_copy"] = round(
            (statistics.median(small[variant]) - statistics.median(small["plain"]))
            / int(HEAVY[1])
            * 1e6,
            3,
        )


def accuracy_part(
    program: str, engine: NativeEngine, runs: int, comparisons: list[dict], figures: dict
) -> None:
    """The trace's per-kind GPU totals against the program's own CUDA events."""
    scratch = Path(tempfile.mkdtemp(prefix="xfs-bench-"))
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from pathlib import Path; "
            "from xferscope.trace.runner import KERNELS_DEFAULT, run_traced; "
            "r = run_traced(sys.argv[2:], Path(sys.argv[1])); sys.exit(r.returncode)",
            str(scratch),
            program,
            "--accuracy",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    mine = own(proc.stdout)
    trace = read_trace(scratch.glob("trace-*.jsonl"))
    worst = 1.0
    for direction in ("h2d", "d2h"):
        total = sum(c.seconds for c in trace.copies if c.direction == direction)
        ratio = total / mine[direction]["seconds"]
        figures[f"accuracy_{direction}_trace_over_events"] = round(ratio, 5)
        worst = min(worst, ratio, 1 / ratio)
        figures[f"accuracy_{direction}_bytes_exact"] = (
            sum(c.bytes for c in trace.copies if c.direction == direction)
            == mine[direction]["bytes"]
        )
    comparisons.append(
        comparison(
            "trace_total_vs_events",
            worst,
            1.0,
            "the program's own CUDA events",
            "ratio",
            True,
            0.98,
        )
    )


def fixes_part(
    program: str, engine: NativeEngine, runs: int, comparisons: list[dict], figures: dict
) -> None:
    """Predicted savings against measured ones (the prediction of each of several traced runs;
    their median, as the measured side is)."""
    reference = calibrate(engine, 0)
    predictions: dict[str, list[float]] = {}
    for _ in range(runs):
        wall, scratch = traced([program, "--no-events"])
        trace = read_trace(scratch.glob("trace-*.jsonl"))
        for f in analyze(trace, wall, reference).findings:
            predictions.setdefault(f.code, []).append(f.saving_s or 0.0)
    predicted = {k: statistics.median(v) for k, v in predictions.items()}
    figures["predicted_fixes_s"] = {k: [round(x, 6) for x in v] for k, v in predictions.items()}
    # each variant's own section of the program (host time), runs alternated
    sections: dict[str, dict[str, list[float]]] = {v: {} for v in ("none", *FIXES)}
    for _ in range(runs):
        for variant in sections:
            argv = [program, "--no-events"] + ([] if variant == "none" else ["--fix", variant])
            for name, seconds in plain(argv)[1]["sections"].items():
                sections[variant].setdefault(name, []).append(seconds)
    savings = {}
    for fix, code in FIXES.items():
        measured = statistics.median(round_savings(sections["none"][fix], sections[fix][fix]))
        savings[code] = {
            "predicted_s": round(predicted.get(code, 0.0), 6),
            "measured_s": round(measured, 6),
            "ratio": round(predicted.get(code, 0.0) / measured, 3) if measured > 0 else None,
        }
    figures["fix_savings"] = savings
    figures["sections_s"] = {
        v: {k: [round(x, 6) for x in xs] for k, xs in d.items()} for v, d in sections.items()
    }


# ---- a PyTorch training loop ---------------------------------------------------------------------


def pytorch_part(
    program: str, engine: NativeEngine, runs: int, comparisons: list[dict], figures: dict
) -> None:
    """The training loop untraced, traced (by default: kernels sampled), under each variant and
    under torch.profiler, processes alternated, and in each traced process its blocks traced
    and paused, alternated; the lines found."""
    # traced_vs_detached: the untraced blocks with CUPTI detached altogether (cuptiFinalize),
    # not only paused: what CUPTI's mere presence costs is then in the ratio too;
    # attached_idle_vs_detached: CUPTI attached with every record off against detached, the
    # floor under any tracing through CUPTI
    within: dict[str, list[float]] = {
        "traced": [],
        "traced_vs_detached": [],
        "attached_idle_vs_detached": [],
        "every_kernel_vs_detached": [],  # `--kernels all`, what the timeline could use instead
        # CUPTI's copy and kernel records alone (no callbacks, nothing of ours) against detached:
        # the floor under any CUPTI tracer that records every kernel
        "cupti_records_vs_detached": [],
        # the default's windows without its first phase of every kernel: a long loop's steady
        # state (this loop lasts about as long as the first phase, so the default is all that)
        "windows_vs_detached": [],
        **{k: [] for k in VARIANTS},
    }
    across: dict[str, list[float]] = {"untraced": [], "traced": [], "torch_profiler": []}
    costs: dict[str, list[dict]] = {k: [] for k in within}
    lines_found: list[float] = []
    # kept in the record as they grow, so a run stopped early keeps its measurements
    figures["pytorch_paused_over_traced"] = within
    figures["pytorch_loop_s"] = across
    figures["pytorch_tracing_cost"] = costs
    figures["pytorch_lines_found"] = lines_found
    figures["pytorch_loop_args"] = {"traced": LOOP_ARGS, "untraced": UNTRACED_ARGS}
    block_steps = steps_of(LOOP_ARGS)

    def alternated(
        name: str, knobs: str = "", kernels: str = KERNELS_DEFAULT, how: str = "pause"
    ) -> tuple[dict, Path]:
        settle = [] if how == "pause" else ["--settle", str(ATTACH_SETTLE)]
        mine, scratch = loop_traced([*LOOP_ARGS, how, *settle], knobs, kernels)
        within[name].append(round(mine["paused_loop_s"] / mine["loop_s"], 4))
        cost = next(
            (p.get("cost", {}) for p in read_trace(scratch.glob("trace-*.jsonl")).processes), {}
        )
        settled = SETTLE if how == "pause" else ATTACH_SETTLE
        traced_steps = (block_steps + settled) * len(mine["loops_s"]) + int(LOOP_ARGS[3])
        # the tracing's own time on the program's threads, per traced step: [calls, µs]
        costs[name].append(
            {k: [n, round(ns * 1e-3 / traced_steps, 2)] for k, (n, ns) in cost.items()}
        )
        print(name, within[name][-1], costs[name][-1], flush=True)
        return mine, scratch

    loop_untraced(UNTRACED_ARGS)  # warm-up: the driver's and PyTorch's caches
    try:
        for _ in range(runs):
            across["untraced"].append(loop_untraced(UNTRACED_ARGS)["loop_s"] / block_steps)
            mine, scratch = alternated("traced")
            across["traced"].append(mine["loop_s"] / block_steps)
            trace = read_trace(scratch.glob("trace-*.jsonl"))
            script = str(LOOP)
            at_script = [
                c
                for c in trace.copies
                if (trace.where(c.frames, c.python) or "").startswith(script + ":")
            ]
            lines_found.append(len(at_script) / max(len(trace.copies), 1))
            shutil.rmtree(scratch)
            shutil.rmtree(alternated("traced_vs_detached", how="detach")[1])
            shutil.rmtree(alternated("attached_idle_vs_detached", how="idle")[1])
            shutil.rmtree(alternated("every_kernel_vs_detached", kernels="all", how="detach")[1])
            floor = alternated("cupti_records_vs_detached", "nosubscribe", "all", how="detach")
            shutil.rmtree(floor[1])
            shutil.rmtree(alternated("windows_vs_detached", kernels=STEADY, how="detach")[1])
            for name, (knobs, kernels) in VARIANTS.items():
                shutil.rmtree(alternated(name, knobs, kernels)[1])
            with tempfile.TemporaryDirectory() as tmp:
                profile = Path(tmp) / "profile.json"
                profiled = loop_untraced([*PROFILED_ARGS, "--profile", str(profile)])
                across["torch_profiler"].append(profiled["loop_s"] / steps_of(PROFILED_ARGS))
    finally:  # what was measured, also when a time limit stopped the run
        figures["pytorch_attach_settle_steps"] = ATTACH_SETTLE
        if across["untraced"] and across["traced"]:
            step = {k: statistics.median(v) for k, v in across.items() if v}
            figures["pytorch_step_s"] = {k: round(v, 7) for k, v in step.items()}
            figures["pytorch_across_processes_untraced_over"] = {
                k: round(step["untraced"] / v, 4) for k, v in step.items() if k != "untraced"
            }
        comparisons.extend(pytorch_comparisons(figures))


def processes_part(
    program: str, engine: NativeEngine, runs: int, comparisons: list[dict], figures: dict
) -> None:
    """The training loop's step time across whole processes, nothing paused: untraced, traced
    (as `xferscope trace` runs it) and with the injection loaded but idle, 2 x runs processes
    each, alternated. Processes differ by 10% from one another, so this is the coarser check of
    what the in-process alternation (part pytorch) measures finely."""
    steps: dict[str, list[float]] = {"untraced": [], "traced": [], "injected_idle": []}
    figures["pytorch_process_step_s"] = steps
    block = steps_of(UNTRACED_ARGS)
    loop_untraced(UNTRACED_ARGS)  # warm-up
    try:
        for _ in range(2 * runs):
            steps["untraced"].append(round(loop_untraced(UNTRACED_ARGS)["loop_s"] / block, 8))
            for name, knobs in (("traced", ""), ("injected_idle", "idle")):
                mine, scratch = loop_traced(UNTRACED_ARGS, knobs)
                steps[name].append(round(mine["loop_s"] / block, 8))
                shutil.rmtree(scratch)
            print({k: v[-1] for k, v in steps.items()}, flush=True)
    finally:  # what was measured, also when a time limit stopped the run
        comparisons.extend(processes_comparisons(figures))


def kinds_part(
    program: str, engine: NativeEngine, runs: int, comparisons: list[dict], figures: dict
) -> None:
    """Per kind of copy, the trace of the training loop against torch.profiler's of the same
    program (runs alternated): counts and bytes equal, and the median copy's GPU time within
    2%. The totals of GPU time are kept too: a pageable copy's time varies from run to run
    (the driver stages it through its own buffer at the CPU's pace), so totals of different
    runs differ by more than either tool's error."""
    kinds: dict[str, list[dict]] = {"trace": [], "profiler": []}
    figures["pytorch_kinds"] = kinds
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as tmp:
            profile = Path(tmp) / "profile.json"
            loop_untraced([*PROFILED_ARGS, "--profile", str(profile)])
            kinds["profiler"].append(per_kind_profiler(profile))
        _, scratch = loop_traced(PROFILED_ARGS)  # the same program, traced
        kinds["trace"].append(per_kind_trace(scratch))
        shutil.rmtree(scratch)
        for run in (kinds["profiler"][-1], kinds["trace"][-1]):
            for row in run.values():
                row["gpu_s"] = round(row["gpu_s"], 9)
                row["median_s"] = round(row["median_s"], 9)
    # per kind, the medians over runs, the smaller over the larger: 1.0 is equal
    for kind in sorted({k for run in (*kinds["profiler"], *kinds["trace"]) for k in run}):
        zero = {"count": 0, "bytes": 0, "gpu_s": 0.0, "median_s": 0.0}
        for what, label, goal, said in (
            ("count", "count", 1.0, "copies"),
            ("bytes", "bytes", 1.0, "bytes"),
            ("median_s", "gpu_time", 0.98, "the median copy's GPU time"),
        ):
            a = statistics.median(run.get(kind, zero)[what] for run in kinds["trace"])
            b = statistics.median(run.get(kind, zero)[what] for run in kinds["profiler"])
            match = min(a, b) / max(a, b) if max(a, b) > 0 else 1.0
            comparisons.append(
                comparison(
                    f"trace_pytorch_{kind}_{label}_match",
                    match,
                    1.0,
                    f"torch.profiler (Kineto), {said}: trace {a:.6g}, profiler {b:.6g}",
                    "ratio",
                    True,
                    goal,
                )
            )


PART_FUNCTIONS = {
    "heavy": heavy_part,
    "accuracy": accuracy_part,
    "fixes": fixes_part,
    "pytorch": pytorch_part,
    "kinds": kinds_part,
    "processes": processes_part,
    "idle": idle_part,
    "fed": fed_part,
    "loader": loader_part,
    "item": item_part,
    "corpus": corpus_part,
    "sigint": sigint_part,
}


if __name__ == "__main__":
    main()
