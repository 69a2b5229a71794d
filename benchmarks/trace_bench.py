"""Trace benchmark (issue 12), on one GPU in one run, with tests/trace_programs/copies.cu:
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
Writes benchmarks/results/trace-<gpu>-<date>.json as ../shared/BENCHMARKS.md says.

    python3 benchmarks/trace_bench.py --commit $(git rev-parse HEAD) [--runs 5] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from foundation import comparison, write_record
from xferscope.core.engine import NativeEngine
from xferscope.core.machine import collect
from xferscope.trace.analyze import analyze
from xferscope.trace.records import read_trace
from xferscope.trace.reference import calibrate
from xferscope.trace.runner import run_traced

HERE = Path(__file__).resolve().parent
PROGRAM = HERE.parent / "tests" / "trace_programs" / "copies.cu"
HEAVY = ["--small", "30000", "--no-events"]
FIXES = {
    "pageable": "pageable_copies",
    "repeat": "repeated_uploads",
    "small": "small_copies",
    "unused": "pinned_unused",
}


def own(stdout: str) -> dict:
    return json.loads(next(line for line in stdout.splitlines() if line.startswith("{")))


def plain(argv: list[str]) -> tuple[float, dict]:
    start = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, check=True)
    return time.perf_counter() - start, own(proc.stdout)


def traced(argv: list[str]) -> tuple[float, Path]:
    scratch = Path(tempfile.mkdtemp(prefix="xfs-bench-"))
    ran = run_traced(argv, scratch)
    assert ran.returncode == 0, ran
    return ran.wall_s, scratch


def traced_own(argv: list[str], knobs: str = "") -> tuple[float, Path, dict]:
    """traced(), with the program's own JSON line (its output is caught on our stdout's file
    descriptor, which the child inherits) and injection knobs (XFERSCOPE_TRACE_KNOBS)."""
    sys.stdout.flush()
    kept = os.dup(1)
    os.environ["XFERSCOPE_TRACE_KNOBS"] = knobs
    try:
        with tempfile.TemporaryFile() as caught:
            os.dup2(caught.fileno(), 1)
            try:
                wall, scratch = traced(argv)
            finally:
                os.dup2(kept, 1)
            caught.seek(0)
            text = caught.read().decode(errors="replace")
    finally:
        os.close(kept)
        del os.environ["XFERSCOPE_TRACE_KNOBS"]
    return wall, scratch, own(text)


def nsys(argv: list[str]) -> tuple[float, dict] | None:
    """Nsight Systems tracing CUDA only (no sampling, no context switches), if installed."""
    tool = shutil.which("nsys")
    if tool is None:
        return None
    scratch = Path(tempfile.mkdtemp(prefix="xfs-nsys-"))
    command = [tool, "profile", "--trace=cuda", "--sample=none", "--cpuctxsw=none",
               "--force-overwrite=true", "-o", str(scratch / "report"), *argv]  # fmt: skip
    start = time.perf_counter()
    proc = subprocess.run(command, capture_output=True, text=True)
    wall = time.perf_counter() - start
    shutil.rmtree(scratch, ignore_errors=True)
    if proc.returncode != 0:
        print(f"nsys failed ({proc.returncode}): {proc.stderr[-500:]}", file=sys.stderr)
        return None
    return wall, own(proc.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--commit", required=True)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--out", default=str(HERE / "results"))
    args = parser.parse_args()
    build = Path(tempfile.mkdtemp()) / "copies"
    subprocess.run(
        [shutil.which("nvcc") or "nvcc", "-O2", "-o", str(build), str(PROGRAM), "-lcuda"],
        check=True,
    )
    program = str(build)
    engine = NativeEngine()
    meta = collect(engine, [0])
    comparisons, figures = [], {}

    # 1. overhead on a transfer-heavy run, alternated: untraced, traced, CUPTI's floor, nsys
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

    for _ in range(args.runs):
        note("plain", *plain([program, *HEAVY]))
        wall, scratch, mine = traced_own([program, *HEAVY])
        note("traced", wall, mine)
        figures["heavy_copies_traced"] = len(read_trace(scratch.glob("trace-*.jsonl")).copies)
        shutil.rmtree(scratch)
        wall, scratch, mine = traced_own([program, *HEAVY], "nosubscribe")
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

    # 2. accuracy against the program's own events
    scratch = Path(tempfile.mkdtemp(prefix="xfs-bench-"))
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from pathlib import Path; "
            "from xferscope.trace.runner import run_traced; "
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

    # 3. predicted savings against measured ones
    # (the prediction of each of several traced runs; their median, as the measured side is)
    reference = calibrate(engine, 0)
    predictions: dict[str, list[float]] = {}
    for _ in range(args.runs):
        wall, scratch = traced([program, "--no-events"])
        trace = read_trace(scratch.glob("trace-*.jsonl"))
        for f in analyze(trace, wall, reference).fixes:
            predictions.setdefault(f.code, []).append(f.saving_s)
    predicted = {k: statistics.median(v) for k, v in predictions.items()}
    figures["predicted_fixes_s"] = {k: [round(x, 6) for x in v] for k, v in predictions.items()}
    # each variant's own section of the program (host time), runs alternated
    sections: dict[str, dict[str, list[float]]] = {v: {} for v in ("none", *FIXES)}
    for _ in range(args.runs):
        for variant in sections:
            argv = [program, "--no-events"] + ([] if variant == "none" else ["--fix", variant])
            for name, seconds in plain(argv)[1]["sections"].items():
                sections[variant].setdefault(name, []).append(seconds)
    savings = {}
    for fix, code in FIXES.items():
        measured = statistics.median(sections["none"][fix]) - statistics.median(sections[fix][fix])
        savings[code] = {
            "predicted_s": round(predicted.get(code, 0.0), 6),
            "measured_s": round(measured, 6),
            "ratio": round(predicted.get(code, 0.0) / measured, 3) if measured > 0 else None,
        }
    figures["fix_savings"] = savings
    figures["sections_s"] = {
        v: {k: [round(x, 6) for x in xs] for k, xs in d.items()} for v, d in sections.items()
    }
    write_record("trace", args.commit, meta, 1, comparisons, figures, Path(args.out))


if __name__ == "__main__":
    main()
