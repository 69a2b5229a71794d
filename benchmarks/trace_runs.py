"""How benchmarks/trace_bench.py runs its programs and reads what they report: untraced, traced
(`xferscope trace`'s runner, with the injection's knobs) or under Nsight Systems; the PyTorch
training loop's arguments, tracing variants and processes, and its copies per kind."""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from xferscope.core.host import cpus_of, process_cpus
from xferscope.trace.reading import read_trace
from xferscope.trace.runner import KERNELS_DEFAULT, run_traced

# ---- programs run untraced, traced or under Nsight Systems ---------------------------------------


def own(stdout: str) -> dict:
    return json.loads(next(line for line in stdout.splitlines() if line.startswith("{")))


def plain(argv: list[str]) -> tuple[float, dict]:
    start = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, check=True)
    return time.perf_counter() - start, own(proc.stdout)


def traced(argv: list[str], kernels: str = KERNELS_DEFAULT) -> tuple[float, Path]:
    scratch = Path(tempfile.mkdtemp(prefix="xfs-bench-"))
    ran = run_traced(argv, scratch, kernels=kernels)
    assert ran.returncode == 0, ran
    return ran.wall_s, scratch


def traced_own(
    argv: list[str], knobs: str = "", kernels: str = KERNELS_DEFAULT
) -> tuple[float, Path, dict]:
    """traced(), with the program's own JSON line (its output is caught on our stdout's file
    descriptor, which the child inherits), injection knobs (XFERSCOPE_TRACE_KNOBS) and kernels
    recorded as `trace --kernels` says."""
    sys.stdout.flush()
    kept = os.dup(1)
    os.environ["XFERSCOPE_TRACE_KNOBS"] = knobs
    try:
        with tempfile.TemporaryFile() as caught:
            os.dup2(caught.fileno(), 1)
            try:
                wall, scratch = traced(argv, kernels)
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


# ---- the PyTorch training loop (torch_train_loop.py) ---------------------------------------------

LOOP = Path(__file__).resolve().parent / "torch_train_loop.py"
# A process's loop time varies by 15% from process to process (its start costs 5-15 s here)
# and by 10% from one 400-step loop to the next, so each traced process times 30 pairs of
# 50-step blocks, traced and paused (torch_train_loop.py --alternate), and gives the ratio of
# their medians; the untraced processes time 60 blocks, for the comparison across processes.
LOOP_ARGS = ["--steps", "50", "--warmup", "40", "--repeats", "30", "--alternate"]
UNTRACED_ARGS = ["--steps", "50", "--warmup", "40", "--repeats", "60"]
# steps untimed after CUPTI is attached again, before a block's timing: measured on an H100, the
# traced blocks' ratio to detached ones was 0.945 (3 processes) settling 2 steps, 0.982 settling
# 20; a traced program pays attaching once, at its start
ATTACH_SETTLE = 20
PROFILED_ARGS = ["--steps", "100", "--warmup", "5"]  # torch.profiler's file grows with the steps
# what each part of the tracing costs: the injection's knobs (inject.cpp) and `--kernels`
VARIANTS = {
    "kernels_all": ("", "all"),
    "kernels_none": ("", "none"),
    "cupti_floor": ("nosubscribe", "all"),  # CUPTI's records only: no callbacks, nothing of ours
    "memcpy_records_only": ("nosubscribe", "none"),  # CUPTI's copy and memset records alone
    "no_python_stacks": ("nopython", KERNELS_DEFAULT),
    "no_native_frames": ("noframes", KERNELS_DEFAULT),
    "no_hash": ("nohash", KERNELS_DEFAULT),
    "no_driver_callbacks": ("nodriver", KERNELS_DEFAULT),
}
# torch.profiler's names for the kinds of copy (Kineto's gpu_memcpy events)
PROFILER_KINDS = {
    "Memcpy HtoD (Pageable -> Device)": ("h2d", "pageable"),
    "Memcpy HtoD (Pinned -> Device)": ("h2d", "pinned"),
    "Memcpy DtoH (Device -> Pageable)": ("d2h", "pageable"),
    "Memcpy DtoH (Device -> Pinned)": ("d2h", "pinned"),
    "Memcpy DtoD (Device -> Device)": ("d2d", "device"),
}


def steps_of(args: list[str]) -> int:
    return int(args[args.index("--steps") + 1])


# `--cpus LIST`: every loop process run under `taskset -c LIST`, the same cores each time
PINNED: list[str] = []


def local_cpus(meta: dict) -> str:
    """4 of the GPU's own cores that this process may use, past the first two: a cpulist."""
    allowed = cpus_of(process_cpus())
    local = sorted(cpus_of(meta["gpus"][0].get("cpu_affinity")) & allowed) or sorted(allowed)
    chosen = local[2:6] if len(local) >= 6 else local[-4:]
    return ",".join(map(str, chosen))


def loop_untraced(args: list[str]) -> dict:
    proc = subprocess.run(
        [*PINNED, sys.executable, str(LOOP), *args], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return own(proc.stdout)


def loop_traced(
    args: list[str], knobs: str = "", kernels: str = KERNELS_DEFAULT
) -> tuple[dict, Path]:
    _, scratch, mine = traced_own([*PINNED, sys.executable, str(LOOP), *args], knobs, kernels)
    return mine, scratch


def _kind_row(rows: dict[str, dict], kind: str, size: int, seconds: float) -> None:
    row = rows.setdefault(kind, {"count": 0, "bytes": 0, "gpu_s": 0.0, "each_s": []})
    row["count"] += 1
    row["bytes"] += size
    row["gpu_s"] += seconds
    row["each_s"].append(seconds)


def _medians(rows: dict[str, dict]) -> dict[str, dict]:
    """Per kind: count, bytes, total GPU time and the median copy's GPU time."""
    return {
        k: {"count": r["count"], "bytes": r["bytes"], "gpu_s": r["gpu_s"],
            "median_s": statistics.median(r["each_s"])}
        for k, r in rows.items()
    }  # fmt: skip


def per_kind_trace(scratch: Path) -> dict[str, dict]:
    rows: dict[str, dict] = {}
    for c in read_trace(scratch.glob("trace-*.jsonl")).copies:
        _kind_row(rows, f"{c.direction}_{c.host_memory}", c.bytes, c.seconds)
    return _medians(rows)


def per_kind_profiler(path: Path) -> dict[str, dict]:
    events = json.loads(path.read_text()).get("traceEvents", [])
    rows: dict[str, dict] = {}
    for e in events:
        if e.get("cat") != "gpu_memcpy" or e.get("ph") != "X":
            continue
        direction, memory = PROFILER_KINDS.get(e.get("name", ""), ("other", e.get("name", "")))
        size = int((e.get("args") or {}).get("bytes", 0))
        _kind_row(rows, f"{direction}_{memory}", size, float(e.get("dur", 0)) * 1e-6)
    return _medians(rows)
