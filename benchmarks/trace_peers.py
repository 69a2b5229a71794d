"""`xferscope trace` beside the tools people reach for with the same question (issue 48): for
each program, tests/trace_programs/loader_loop.py (a ResNet-18 loop starved by its DataLoader)
and item_loop.py (`.item()` every step):
- xferscope trace, kernels as it records them by default: each GPU's idle share and its causes
  at lines, the loop's steps, the findings priced;
- Nsight Systems where it is installed: `nsys profile -t cuda,nvtx`, then `nsys analyze` with the
  rules cuda_memcpy_async, cuda_memcpy_sync, cuda_memset_sync, cuda_api_sync, gpu_gaps and
  gpu_time_util (what each said);
- HolisticTraceAnalysis (HTA, from PyPI; pandas with it) over a torch.profiler trace of the same
  program (benchmarks/profile_program.py): its temporal breakdown (the GPU's idle share), idle
  time per stream split into host wait, kernel wait and other, and its kernel launch delays.
Writes benchmarks/results/trace-peers-<gpu>-<date>.json.

    python3 benchmarks/trace_peers.py --commit X [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from foundation import write_record
from xferscope.core.engine import NativeEngine
from xferscope.core.machine import collect

HERE = Path(__file__).resolve().parent
PROGRAMS = HERE.parent / "tests" / "trace_programs"
CASES = {
    "loader": [str(PROGRAMS / "loader_loop.py"), "--steps", "40"],
    "item": [str(PROGRAMS / "item_loop.py"), "--steps", "300"],
}
NSYS_RULES = ("cuda_memcpy_async", "cuda_memcpy_sync", "cuda_memset_sync", "cuda_api_sync",
              "gpu_gaps", "gpu_time_util")  # fmt: skip


def ours(argv: list[str]) -> dict[str, Any]:
    """What `xferscope trace` said: the GPUs' idle and its causes, the steps, the fixes."""
    out = Path(tempfile.mkdtemp(prefix="xfs-peers-"))
    subprocess.run(
        [sys.executable, "-m", "xferscope", "trace", "--reference", "measure", "--no-history",
         "-o", str(out), "--", sys.executable, *argv],
        check=True, capture_output=True,
    )  # fmt: skip
    s = json.loads(next(out.glob("trace-*/trace-summary.json")).read_text())["summary"]
    shutil.rmtree(out, ignore_errors=True)
    return {
        "gpus": [
            {k: g[k] for k in ("span_s", "judged_s", "busy_s", "idle_s", "idle_share", "idle")}
            for g in s["gpus"]
        ],
        "steps": s.get("steps"),
        "fixes": [
            {k: f.get(k) for k in ("code", "title", "saving_s", "each_fix", "places")}
            for f in s["fixes"]
        ],
        "kernels_recorded": s.get("kernels_recorded"),
    }


def nsys(argv: list[str]) -> dict[str, Any] | None:
    """Nsight Systems' expert rules over a report of the program; None where nsys is absent."""
    tool = shutil.which("nsys")
    if tool is None:
        return None
    scratch = Path(tempfile.mkdtemp(prefix="xfs-nsys-"))
    report = scratch / "report"
    subprocess.run(
        [tool, "profile", "--trace=cuda,nvtx", "--sample=none", "--cpuctxsw=none",
         "--force-overwrite=true", "-o", str(report), sys.executable, *argv],
        check=True, capture_output=True,
    )  # fmt: skip
    said = {}
    for rule in NSYS_RULES:
        proc = subprocess.run(
            [tool, "analyze", "-r", rule, str(report) + ".nsys-rep"], capture_output=True, text=True
        )
        said[rule] = (proc.stdout + proc.stderr)[-3000:]
    shutil.rmtree(scratch, ignore_errors=True)
    return said


def hta(argv: list[str]) -> dict[str, Any]:
    """HTA over a torch.profiler trace of the program."""
    from hta.trace_analysis import TraceAnalysis

    scratch = Path(tempfile.mkdtemp(prefix="xfs-hta-"))
    trace = scratch / "trace.json"
    subprocess.run(
        [sys.executable, str(HERE / "profile_program.py"), str(trace), *argv],
        check=True, capture_output=True,
    )  # fmt: skip
    analyzer = TraceAnalysis(trace_files={0: str(trace)}, trace_dir=str(scratch))
    temporal = analyzer.get_temporal_breakdown(visualize=False)
    idle, _ = analyzer.get_idle_time_breakdown(visualize=False)
    launches = analyzer.get_cuda_kernel_launch_stats(visualize=False)
    delays = next(iter(launches.values()))["launch_delay"] if launches else None
    shutil.rmtree(scratch, ignore_errors=True)
    return {
        "temporal_breakdown": json.loads(temporal.to_json(orient="records")),
        "idle_time_breakdown": json.loads(idle.to_json(orient="records")),
        "launch_delay_us": None if delays is None else {
            "count": int(delays.count()), "median": float(delays.median()),
            "p95": float(delays.quantile(0.95)), "over_100us": int((delays > 100).sum()),
        },
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--commit", required=True)
    parser.add_argument("--out", default=str(HERE / "results"))
    args = parser.parse_args()
    figures: dict[str, Any] = {}
    for name, argv in CASES.items():
        case: dict[str, Any] = {"xferscope": ours(argv), "nsys": nsys(argv)}
        try:
            case["hta"] = hta(argv)
        except Exception as e:  # HTA failing is a result too
            case["hta"] = {"error": f"{type(e).__name__}: {e}"}
        figures[name] = case
        print(name, json.dumps(case)[:2000], flush=True)
    meta = collect(NativeEngine(), [0])
    write_record("trace-peers", args.commit, meta, 1, [], figures, Path(args.out))


if __name__ == "__main__":
    main()
