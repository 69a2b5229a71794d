"""Foundation benchmark (issue 2): xferscope against PyTorch and a plain C++ loop, measured in
the same run on the same GPU, written to benchmarks/results/ as ../shared/BENCHMARKS.md says.

    python3 benchmarks/foundation.py --commit $(git rev-parse HEAD) [--out benchmarks/results]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

from xferscope import __version__
from xferscope.core import limits
from xferscope.core.engine import NativeEngine
from xferscope.core.errors import OptionError
from xferscope.core.machine import collect
from xferscope.sweep.measure import run_sweep
from xferscope.sweep.options import SweepOptions

HERE = Path(__file__).resolve().parent
GiB = 1 << 30
TRIALS = 7


def ours(
    engine: NativeEngine,
    direction: str,
    memory: str,
    mechanism: str,
    timing: str,
    size: int,
    target_s: float = 0.25,
):
    """One point measured by the product's own sweep path."""
    options = SweepOptions(
        directions=(direction,),
        memories=(memory,),
        mechanisms=(mechanism,),
        timings=(timing,),
        sizes=(size,),
        target_s=target_s,
        trials=TRIALS,
        budget_s=None,
    )
    (curve,) = run_sweep(engine, options).curves
    (point,) = curve.points
    assert point.verification is not None and point.verification.ok, curve.config.label
    return point


def synced_seconds(call: Callable[[], object], reps: int) -> list[float]:
    """Each of `reps` calls' wall time, the GPU finished before and after each."""
    seconds = []
    for _ in range(reps):
        torch.cuda.synchronize()
        start = time.perf_counter()
        call()
        torch.cuda.synchronize()
        seconds.append(time.perf_counter() - start)
    return seconds


def torch_copy_seconds(direction: str, size: int, copies: int = 8) -> float:
    """Median per-copy time of PyTorch's copy_ timed with CUDA events, over TRIALS trials."""
    gen = torch.Generator().manual_seed(0)
    host = torch.randint(0, 256, (size,), dtype=torch.uint8, generator=gen).pin_memory()
    dev_a = torch.empty(size, dtype=torch.uint8, device="cuda")
    dev_b = torch.empty(size, dtype=torch.uint8, device="cuda")
    dev_a.copy_(host)
    src, dst = {"h2d": (host, dev_b), "d2h": (dev_a, host), "d2d": (dev_a, dev_b)}[direction]
    for _ in range(2):
        dst.copy_(src, non_blocking=True)
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    samples = []
    for _ in range(TRIALS):
        start.record()
        for _ in range(copies):
            dst.copy_(src, non_blocking=True)
        stop.record()
        stop.synchronize()
        samples.append(start.elapsed_time(stop) * 1e-3 / copies)
    del host, dev_a, dev_b
    torch.cuda.empty_cache()
    return statistics.median(samples)


def c_loop_seconds(size: int, calls: int = 20000) -> float:
    binary = HERE / "bin" / "memcpy_loop"
    binary.parent.mkdir(exist_ok=True)
    subprocess.run(["nvcc", "-O2", "-o", str(binary), str(HERE / "memcpy_loop.cu")], check=True)
    out = subprocess.run(
        [str(binary), str(size), str(calls), str(TRIALS), "h2d"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    return float(out[0])  # best trial, as NetPIPE reports


def cli_point(args: list[str]) -> dict:
    """One point measured by `xferscope sweep` in its own process, as the C++ loop runs in its
    own: a process that has used PyTorch (its thread pools, its allocations) makes every small
    call a little slower, for either side."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "point.json"
        subprocess.run(
            [sys.executable, "-m", "xferscope", "sweep", *args, "--json", str(path), "-o", tmp],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        (curve,) = json.loads(path.read_text())["curves"]
        (point,) = curve["points"]
        assert point["verification"]["ok"], curve["label"]
        return point


def default_sweep_wall_s(keep: Path | None) -> tuple[float, dict]:
    """Wall time of `xferscope sweep` with no options, process start included."""
    with tempfile.TemporaryDirectory() as tmp:
        out = keep or Path(tmp)
        path = out / "sweep-default.json"
        begin = time.perf_counter()
        subprocess.run(
            [
                sys.executable,
                "-m",
                "xferscope",
                "sweep",
                "--json",
                str(path),
                "--csv",
                str(out / "sweep-default.csv"),
                "--plot",
                str(out / "sweep-default"),
                "-o",
                str(out),
            ],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        wall = time.perf_counter() - begin
        return wall, json.loads(path.read_text())


def bench_parser(doc: str | None) -> argparse.ArgumentParser:
    """A benchmark's command line: the first line of its docstring as the description, --commit
    (the sha the numbers come from; $XFERSCOPE_COMMIT) and --out (benchmarks/results/)."""
    parser = argparse.ArgumentParser(description=(doc or "").splitlines()[0])
    parser.add_argument("--commit", default=os.environ.get("XFERSCOPE_COMMIT", "unknown"))
    parser.add_argument("--out", default=str(HERE / "results"), type=out_directory)
    return parser


def count_option(option: str, allowed: limits.Range) -> Callable[[str], int]:
    """An argparse type for a count option: the count `allowed` takes (core/limits), else
    argparse's one line in the CLI's words."""

    def parse(text: str) -> int:
        try:
            return int(allowed.parse(option, text))
        except OptionError as exc:
            raise argparse.ArgumentTypeError(str(exc).removeprefix(f"{option}: ")) from None

    return parse


# --rounds: the count the CLI's --rounds takes
rounds_count = count_option("--rounds", limits.ROUNDS)


def out_directory(text: str) -> str:
    """--out: a directory, or a path where one can be made; refused before anything is measured
    (a file or a FIFO there would lose the record after the run)."""
    path = Path(text)
    if not text or (path.exists() and not path.is_dir()):
        raise argparse.ArgumentTypeError(f"{text!r} is not a directory")
    return text


def comparison(
    name: str,
    ours_value: float,
    peer_value: float,
    peer_name: str,
    unit: str,
    higher_is_better: bool,
    goal: float,
) -> dict:
    ratio = ours_value / peer_value if higher_is_better else peer_value / ours_value
    return {
        "name": name,
        # six significant figures: seconds of a small copy are millionths
        "ours": float(f"{ours_value:.6g}"),
        "peer": float(f"{peer_value:.6g}"),
        "peer_name": peer_name,
        "unit": unit,
        "higher_is_better": higher_is_better,
        "ratio": round(ratio, 4),
        "goal": goal,
    }


def gpu_tag(name: str, count: int) -> str:
    match = re.search(r"\b([A-Z]\d{2,3}[A-Z]?)\b", name)
    tag = (match.group(1) if match else name.split()[-1]).lower()
    return tag if count == 1 else f"{tag}x{count}"


def write_record(
    benchmark: str,
    commit: str,
    meta: dict,
    gpus: int,
    comparisons: list[dict],
    figures: dict,
    out: Path,
    **extra: object,
) -> Path:
    """Writes benchmarks/results/<benchmark>-<gpu>-<yyyymmdd>.json as BENCHMARKS.md describes,
    with the machine taken from xferscope's own metadata."""
    gpu = meta["gpus"][0]
    today = dt.date.today()
    result = {
        "benchmark": benchmark,
        "date": today.isoformat(),
        "commit": commit,
        "xferscope_version": __version__,
        "machine": {
            "gpu": gpu["name"],
            "gpus": gpus,
            "driver": meta["driver"],
            "cuda_runtime": meta["cuda_runtime"],
            "pcie": f"gen{gpu.get('pcie_generation')} x{gpu.get('pcie_width')}",
            "host_cpu": meta["host"]["cpu"],
            "cores": meta["host"]["cores"],
            "torch": torch.__version__,
        },
        "comparisons": comparisons,
        "figures": figures,
        **extra,
    }
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{benchmark}-{gpu_tag(gpu['name'], gpus)}-{today.strftime('%Y%m%d')}.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    print(f"wrote {path}")
    if "failed" in figures:  # a failure after some measurements: they are written, then it
        sys.exit(f"failed after writing what was measured: {str(figures['failed'])[-300:]}")
    return path


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument(
        "--keep-sweep",
        type=Path,
        default=None,
        help="directory to keep the default sweep's JSON, CSV and plots in",
    )
    args = parser.parse_args()

    engine = NativeEngine()
    meta = collect(engine, [0])
    comparisons = []
    # Small-call latency first, before this process has used PyTorch.
    latency = cli_point(
        [
            "--sizes",
            "4",
            "-d",
            "h2d",
            "-m",
            "pinned",
            "--mechanism",
            "memcpy",
            "--timing",
            "api",
            "--budget",
            "0",
        ]
    )
    loop = c_loop_seconds(4)
    comparisons.append(
        comparison(
            "latency_4B_pinned_h2d_vs_c_loop",
            latency["summary"]["min_s"] * 1e6,
            loop * 1e6,
            "plain C++ cudaMemcpy loop (best of 7 trials)",
            "us",
            False,
            0.97,
        )
    )
    for direction in ("h2d", "d2h"):
        point = ours(engine, direction, "pinned", "async", "device", GiB)
        peer = torch_copy_seconds(direction, GiB)
        comparisons.append(
            comparison(
                f"{direction}_pinned_1GiB_vs_torch",
                point.bandwidth / 1e9,
                GiB / peer / 1e9,
                "torch copy_ (events)",
                "GB/s",
                True,
                0.99,
            )
        )
    point = ours(engine, "d2d", "device", "async", "device", GiB)
    peer = torch_copy_seconds("d2d", GiB)
    comparisons.append(
        comparison(
            "d2d_1GiB_vs_torch",
            point.bandwidth / 1e9,
            GiB / peer / 1e9,
            "torch copy_ (events), bytes copied",
            "GB/s",
            True,
            0.98,
        )
    )

    wall, sweep_doc = default_sweep_wall_s(args.keep_sweep)
    figures = {"sweep_default_wall_s": round(wall, 2)}
    for curve in sweep_doc["curves"]:
        best = max(p["summary"]["bandwidth_gbps"] for p in curve["points"])
        figures[f"sweep_default_{curve['label'].replace(' ', '_')}_best_gbps"] = round(best, 3)

    write_record(
        "foundation",
        args.commit,
        meta,
        torch.cuda.device_count(),
        comparisons,
        figures,
        Path(args.out),
    )


if __name__ == "__main__":
    main()
