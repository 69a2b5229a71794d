"""`xferscope run` benchmark (issues 3 and 15), measured in one run on the same machine: wall
times of the default and --quick runs, the run's headline H2D/D2H/D2D figures against PyTorch,
and with several GPUs every ordered pair's peer-to-peer copy (copy engines, peer access) against
PyTorch's copy between the same two GPUs, with the all-GPUs-to-host figures. Writes
benchmarks/results/run-<gpu>-<date>.json (run-<gpu>x<n>-... with n GPUs) as
../shared/BENCHMARKS.md says.

    python3 benchmarks/run_bench.py --commit $(git rev-parse HEAD) [--out benchmarks/results]

On 8 GPUs the default run alone takes about 9 minutes (541 s on the simulated H200 model), so
where one command may run at most 10 minutes, make it first with `xferscope run -o DIR` and
give its run.json here with --default-run: this command then times the quick run and takes the
default run's figures, and its wall time, from that document.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from foundation import TRIALS, GiB, bench_parser, comparison, torch_copy_seconds, write_record

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


QUICK_GOAL_8_GPUS_S = 60.0  # issue 15: `run --quick` on 8 GPUs


def torch_p2p_seconds(size: int, a: int = 0, b: int = 1, copies: int = 40) -> float:
    """Median per-copy time of PyTorch copying GPU a -> GPU b, host-timed around both GPUs'
    synchronisation (CUDA events cannot span two devices)."""
    src = torch.randint(0, 256, (size,), dtype=torch.uint8, device=f"cuda:{a}")
    dst = torch.empty(size, dtype=torch.uint8, device=f"cuda:{b}")
    for _ in range(3):
        dst.copy_(src)
    torch.cuda.synchronize(a)
    torch.cuda.synchronize(b)
    samples = []
    for _ in range(TRIALS):
        begin = time.perf_counter()
        for _ in range(copies):
            dst.copy_(src)
        torch.cuda.synchronize(a)
        torch.cuda.synchronize(b)
        samples.append((time.perf_counter() - begin) / copies)
    del src, dst
    torch.cuda.empty_cache()
    return statistics.median(samples)


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--keep", type=Path, default=None, help="keep the runs' files here")
    parser.add_argument(
        "--default-run",
        type=Path,
        default=None,
        help="run.json of a default run made before (its wall time is the run's own)",
    )
    args = parser.parse_args()

    quick_wall, _ = timed_run(["--quick"], args.keep)
    if args.default_run is not None:
        doc = json.loads(args.default_run.read_text())
        assert not doc.get("interrupted"), f"{args.default_run} is an interrupted run"
        default_wall = float(doc["wall_s"])
    else:
        default_wall, doc = timed_run([], args.keep)
    gpus = len(doc["gpus"])
    suffix = "" if gpus == 1 else f"_{gpus}gpus"
    figures = {
        f"run_default_wall_s{suffix}": round(default_wall, 2),
        f"run_quick_wall_s{suffix}": round(quick_wall, 2),
    }
    if args.default_run is not None:
        figures["run_default_wall_note"] = (
            "the default run was made by an earlier command; its wall time is the run's own "
            "clock (process start not included)"
        )
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
        # every ordered pair the run measured by copy engines with peer access, against
        # PyTorch's copy between the same GPUs (0 -> 1 keeps its name from two-GPU records)
        ratios = {}
        for c in doc["multi"]:
            label = c["label"]
            if c["kind"] != "p2p" or not label.endswith("/async/peer/one_way"):
                continue
            if c["status"] != "complete":
                figures[f"p2p_{label.split('/')[0]}_status"] = c["status"]
                continue
            a, b = (int(x) for x in label.split("/")[0].split("-"))
            stream = c["streams"][0]
            peer = stream["bytes"] / torch_p2p_seconds(stream["bytes"], a, b) / 1e9
            name = "p2p_write_ce_vs_torch" if (a, b) == (0, 1) else f"p2p_{a}to{b}_ce_vs_torch"
            comparisons.append(
                comparison(
                    name,
                    stream["bandwidth_gbps"],
                    peer,
                    f"torch copy_ cuda:{a} -> cuda:{b}",
                    "GB/s",
                    True,
                    0.98,
                )
            )
            ratios[f"{a}-{b}"] = round(stream["bandwidth_gbps"] / peer, 4)
        figures["p2p_pairs_vs_torch"] = ratios
        if ratios:
            figures["p2p_worst_pair_vs_torch"] = min(ratios.values())
        for c in doc["multi"]:
            if c["status"] == "complete" and (
                gpus > 2 or c["label"].startswith(("0-1/", "all_gpus/"))
            ):
                key = "p2p_" if c["kind"] == "p2p" else ""
                figures[key + c["label"].replace("/", "_") + "_gbps"] = round(
                    c["total_bandwidth_gbps"], 2
                )
        if gpus >= 8:
            figures["run_quick_within_60s"] = quick_wall <= QUICK_GOAL_8_GPUS_S
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
