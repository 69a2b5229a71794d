"""`xferscope run` benchmark (issue 3), measured in one run on the same machine: wall times of
the default and --quick runs, the run's headline H2D/D2H/D2D figures against PyTorch, and with
two GPUs its peer-to-peer copy against PyTorch's copy between them. Writes
benchmarks/results/run-<gpu>-<date>.json as ../shared/BENCHMARKS.md says.

    python3 benchmarks/run_bench.py --commit $(git rev-parse HEAD) [--out benchmarks/results]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from foundation import TRIALS, GiB, comparison, torch_copy_seconds, write_record

HERE = Path(__file__).resolve().parent


def timed_run(args: list[str], keep: Path | None) -> tuple[float, dict]:
    """Wall time of `xferscope run ARGS` (process start included) and its run.json."""
    with tempfile.TemporaryDirectory() as tmp:
        out = keep or Path(tmp)
        begin = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "xferscope", "run", "--no-history", "-o", str(out), *args],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        wall = time.perf_counter() - begin
        newest = max(out.glob("run-*"), key=lambda p: p.stat().st_mtime)
        return wall, json.loads((newest / "run.json").read_text())


def headline(doc: dict, direction: str, memory: str) -> tuple[float, int]:
    """The run's bandwidth at its largest size for one curve of GPU 0, and that size."""
    for curve in doc["gpus"][0]["curves"]:
        c = curve["config"]
        if (c["direction"], c["memory"], c["mechanism"], c["timing"]) == (
            direction,
            memory,
            "async",
            "device",
        ):
            point = max(curve["points"], key=lambda p: p["bytes"])
            return point["summary"]["bandwidth_gbps"], point["bytes"]
    raise LookupError(f"no {direction} {memory} curve")


def torch_p2p_seconds(size: int, copies: int = 40) -> float:
    """Median per-copy time of PyTorch copying GPU 0 -> GPU 1, host-timed around both GPUs'
    synchronisation (CUDA events cannot span two devices)."""
    src = torch.randint(0, 256, (size,), dtype=torch.uint8, device="cuda:0")
    dst = torch.empty(size, dtype=torch.uint8, device="cuda:1")
    for _ in range(3):
        dst.copy_(src)
    torch.cuda.synchronize(0)
    torch.cuda.synchronize(1)
    samples = []
    for _ in range(TRIALS):
        begin = time.perf_counter()
        for _ in range(copies):
            dst.copy_(src)
        torch.cuda.synchronize(0)
        torch.cuda.synchronize(1)
        samples.append((time.perf_counter() - begin) / copies)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commit", default=os.environ.get("XFERSCOPE_COMMIT", "unknown"))
    parser.add_argument("--out", default=str(HERE / "results"))
    parser.add_argument("--keep", type=Path, default=None, help="keep the runs' files here")
    args = parser.parse_args()

    quick_wall, _ = timed_run(["--quick"], args.keep)
    default_wall, doc = timed_run([], args.keep)
    gpus = len(doc["gpus"])
    suffix = "" if gpus == 1 else f"_{gpus}gpus"
    figures = {
        f"run_default_wall_s{suffix}": round(default_wall, 2),
        f"run_quick_wall_s{suffix}": round(quick_wall, 2),
    }
    comparisons = []
    for direction, memory, name in (
        ("h2d", "pinned", "h2d_pinned"),
        ("d2h", "pinned", "d2h_pinned"),
        ("d2d", "device", "d2d"),
    ):
        ours, size = headline(doc, direction, memory)
        peer = size / torch_copy_seconds(direction, size) / 1e9
        comparisons.append(
            comparison(
                f"run_{name}_{size // GiB}GiB_vs_torch",
                ours,
                peer,
                "torch copy_ (events)",
                "GB/s",
                True,
                0.98,
            )
        )
    if gpus >= 2:
        p2p = next(c for c in doc["multi"] if c["label"] == "0-1/async/peer/one_way")
        stream = p2p["streams"][0]
        peer = stream["bytes"] / torch_p2p_seconds(stream["bytes"]) / 1e9
        comparisons.append(
            comparison(
                "p2p_write_ce_vs_torch",
                stream["bandwidth_gbps"],
                peer,
                "torch copy_ cuda:0 -> cuda:1",
                "GB/s",
                True,
                0.98,
            )
        )
        for c in doc["multi"]:
            if c["status"] == "complete" and c["label"].startswith(("0-1/", "all_gpus/")):
                key = "p2p_" if c["kind"] == "p2p" else ""
                figures[key + c["label"].replace("/", "_") + "_gbps"] = round(
                    c["total_bandwidth_gbps"], 2
                )
    findings = [f"{f['severity']}: {f['message']}" for f in doc["findings"]]
    write_record(
        "run",
        args.commit,
        doc["machine"],
        gpus,
        comparisons,
        figures,
        Path(args.out),
        findings=findings,
    )


if __name__ == "__main__":
    main()
