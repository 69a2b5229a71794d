"""trace_bench.py's parts for issue 68, what tracing costs programs it was not built around:
Part `corpus`: every one-GPU program of benchmarks/trace_corpus/ (or those named in
$TRACE_CORPUS_PROGRAMS, comma-separated), its loop's own seconds untraced, traced as `trace`
does by default and traced with `--look-every 0`, the three alternated, `runs` rounds (3 or
more):
  trace_corpus_overhead_worst   the worst program's untraced / traced speed (goal >= 0.95)
  trace_corpus_overhead_looks   the same ratio's worst with the looks off: what they cost
  trace_looks_python_threads    Python threads a traced PyTorch program has beyond its own
                                untraced (goal 0)
Part `sigint`: tests/trace_programs/loader_loop.py (a DataLoader with 4 workers) traced, Ctrl-C
(SIGINT to xferscope, which forwards it) at a random moment, 20 times:
  trace_sigint_workers_clean    runs that exited 130 within 2 s with a readable trace (or,
                                stopped before CUDA started, none) (goal 20)
"""

from __future__ import annotations

import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from trace_corpus import base_command, missing, own_line, programs, untraced
from trace_idle import PROGRAMS

THREADS = (
    "import threading, torch; torch.zeros(1, device='cuda').sum().item(); "
    "print('{\"threads\": %d}' % threading.active_count())"
)


def _traced(argv: list[str], *more: str) -> dict:
    """The program's own JSON line when `xferscope trace` runs it (priced by nothing)."""
    out = Path(tempfile.mkdtemp(prefix="xfs-overhead-"))
    proc = subprocess.run(
        [sys.executable, "-m", "xferscope", "trace", "--reference", "none", "--no-history",
         *more, "-o", str(out), "--", *argv], capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    if proc.returncode != 0:
        raise RuntimeError(f"trace of {argv} failed: {proc.stderr[-2000:]}")
    return own_line(proc.stdout)


def corpus_part(_program: str, _engine: object, runs: int, comparisons: list, figures: dict):
    named = os.environ.get("TRACE_CORPUS_PROGRAMS", "")
    build = Path(tempfile.mkdtemp(prefix="xfs-overhead-build-"))
    found = figures.setdefault("corpus_overhead", {})
    for p in programs(named):
        if missing(p, 1) or p.gpus > 1:
            continue
        base = base_command(p, build)
        seconds: dict[str, list[float]] = {"untraced": [], "traced": [], "no_looks": []}
        try:
            for _ in range(max(runs, 3)):
                seconds["untraced"].append(untraced(base)["seconds"])
                seconds["traced"].append(_traced(base)["seconds"])
                seconds["no_looks"].append(_traced(base, "--look-every", "0")["seconds"])
        except (RuntimeError, ValueError, subprocess.SubprocessError) as exc:
            found[p.name] = {"error": str(exc)[-2000:]}
            continue
        own = statistics.median(seconds["untraced"])
        found[p.name] = seconds | {
            "ratio": own / statistics.median(seconds["traced"]),
            "ratio_no_looks": own / statistics.median(seconds["no_looks"]),
        }
        print(f"{p.name}: {found[p.name]['ratio']:.3f}", flush=True)
    ratios = [e["ratio"] for e in found.values() if "ratio" in e]
    if ratios:
        figures["trace_corpus_overhead_worst"] = min(ratios)
        figures["trace_corpus_overhead_looks"] = min(
            e["ratio_no_looks"] for e in found.values() if "ratio_no_looks" in e
        )
    mine = json.loads(subprocess.run([sys.executable, "-c", THREADS], capture_output=True,
                                     text=True, check=True).stdout)["threads"]  # fmt: skip
    out = Path(tempfile.mkdtemp(prefix="xfs-threads-"))
    proc = subprocess.run(
        [sys.executable, "-m", "xferscope", "trace", "--reference", "none", "--no-history",
         "-o", str(out), "--", sys.executable, "-c", THREADS],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    traced = json.loads(next(x for x in proc.stdout.splitlines() if x.startswith('{"threads')))
    figures["trace_looks_python_threads"] = traced["threads"] - mine


def sigint_part(_program: str, _engine: object, runs: int, comparisons: list, figures: dict):
    rng = random.Random(0)
    loop = [sys.executable, str(PROGRAMS / "loader_loop.py"), "--steps", "400"]
    clean, each = 0, []
    for attempt in range(20):
        out = Path(tempfile.mkdtemp(prefix="xfs-sigint-"))
        proc = subprocess.Popen(
            [sys.executable, "-m", "xferscope", "trace", "--reference", "none", "--no-history",
             "-o", str(out), "--", *loop], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )  # fmt: skip
        time.sleep(rng.uniform(8.0, 18.0))  # after CUDA's start, in the loop's steps
        proc.send_signal(signal.SIGINT)
        sent = time.monotonic()
        try:
            code = proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait()
        took = time.monotonic() - sent
        summaries = list(out.glob("trace-*/trace-summary.json"))
        readable = bool(summaries) and "schema" in json.loads(summaries[0].read_text())
        before_cuda = "no CUDA activity" in (proc.stderr.read() if proc.stderr else "")
        ok = code == 130 and took < 2.0 and (readable or before_cuda)
        clean += ok
        each.append({"exit": code, "seconds": took, "readable": readable,
                     "before_cuda": before_cuda})  # fmt: skip
        print(f"sigint {attempt}: exit {code} in {took:.2f} s, trace {readable}", flush=True)
    figures["sigint_runs"] = each
    figures["trace_sigint_workers_clean"] = clean
