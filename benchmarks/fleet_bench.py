"""Fleet benchmark (issue 14), on one host of several GPUs:

  fleet_quick_wall_s      `mpirun -np <GPUs> xferscope fleet` with the default checks (the
                          `run --quick` set), wall time of the whole job (goal <= 30 s for 2)
  fleet_gather_64_s       64 simulated ranks (mpirun --oversubscribe): the time rank 0 spends
                          gathering their reports, and the size of one report
  fleet_pair_vs_torch     the fleet's NCCL pair bandwidth (64 MiB messages, every ordered pair,
                          their mean) against torch.distributed's NCCL send/recv of the same
                          messages timed alike (fleet_torch_peer.py, same host) (goal >= 0.98);
                          each pair's own ratio in the figures, the worst as a comparison

Writes benchmarks/results/fleet-<gpu>x<n>-<date>.json.

    python3 benchmarks/fleet_bench.py --commit $(git rev-parse HEAD) [--out benchmarks/results]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from foundation import bench_parser, comparison, write_record
from xferscope.core.engine import NativeEngine
from xferscope.core.machine import collect

HERE = Path(__file__).resolve().parent
ENV = dict(
    os.environ,
    OMPI_ALLOW_RUN_AS_ROOT="1",
    OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
    NCCL_NVLS_ENABLE="0",
    TORCH_SYMM_MEM_DISABLE_MULTICAST="1",
    NVSHMEM_DISABLE_NVLS="1",
)


def fleet(ranks: int, *args: str) -> tuple[dict, float]:
    """One `xferscope fleet` job of `ranks` ranks: its document and wall time."""
    scratch = Path(tempfile.mkdtemp(prefix="xfs-fleet-"))
    command = ["mpirun", "-np", str(ranks), *(["--oversubscribe"] if ranks > 8 else []),
               sys.executable, "-m", "xferscope", "fleet", "--no-history", "-o",
               str(scratch / "out"), "--json", str(scratch / "f.json"), *args]  # fmt: skip
    start = time.perf_counter()
    done = subprocess.run(command, env=ENV, capture_output=True, text=True, timeout=600)
    wall = time.perf_counter() - start
    print(done.stdout[-4000:], done.stderr[-2000:])
    return json.loads((scratch / "f.json").read_text()), wall


def main() -> None:
    parser = bench_parser(__doc__)
    args = parser.parse_args()
    engine = NativeEngine()
    gpus = engine.device_count()
    meta = collect(engine, list(range(gpus)))
    real, wall = fleet(gpus)
    simulated, _ = fleet(64, "--simulate")
    ours = [p["bandwidth_bps"] for p in real["pairs"] if p["bandwidth_bps"]]
    done = subprocess.run(
        ["mpirun", "-np", str(gpus), sys.executable, str(HERE / "fleet_torch_peer.py")],
        env=ENV, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    print(done.stdout, done.stderr[-2000:])
    by_pair = {
        (int(w[1]), int(w[2])): float(w[3])
        for w in (line.split() for line in done.stdout.splitlines() if line.startswith("PAIR"))
    }
    theirs = list(by_pair.values())
    ratios = {
        f"{p['source']}-{p['destination']}": round(
            p["bandwidth_bps"] / by_pair[(p["source"], p["destination"])], 4
        )
        for p in real["pairs"]
        if p["bandwidth_bps"] and (p["source"], p["destination"]) in by_pair
    }
    comparisons = []
    if ratios:
        worst = min(ratios, key=lambda k: ratios[k])
        a, b = (int(x) for x in worst.split("-"))
        mine = next(
            p["bandwidth_bps"] for p in real["pairs"] if (p["source"], p["destination"]) == (a, b)
        )
        comparisons.append(
            comparison(
                "fleet_worst_pair_vs_torch",
                mine / 1e9,
                by_pair[(a, b)] / 1e9,
                f"torch.distributed NCCL send/recv {a} -> {b} (the pair of the lowest ratio)",
                "GB/s",
                True,
                0.98,
            )
        )
    if ours and theirs:
        comparisons.append(
            comparison(
                "fleet_pair_vs_torch",
                sum(ours) / len(ours) / 1e9,
                sum(theirs) / len(theirs) / 1e9,
                "torch.distributed NCCL send/recv, 64 MiB, 20 messages after a barrier, "
                "receiver's CUDA events, mean of both directions",
                "GB/s",
                True,
                0.98,
            )
        )
    figures = {
        "fleet_quick_wall_s": round(wall, 2),
        "fleet_quick_ranks": gpus,
        "fleet_quick_passed": real["passed"],
        "fleet_quick_statuses": [r["status"] for r in real["ranks"]],
        "fleet_quick_h2d_gbps": [
            round(r["metrics"].get("h2d/pinned/async/device/bandwidth", 0) / 1e9, 2)
            for r in real["ranks"]
        ],
        "fleet_quick_d2h_gbps": [
            round(r["metrics"].get("d2h/pinned/async/device/bandwidth", 0) / 1e9, 2)
            for r in real["ranks"]
        ],
        "fleet_gather_64_s": round(simulated["gather_s"], 4),
        "fleet_report_bytes": len(json.dumps(simulated["ranks"][0])),
        "fleet_64_statuses_complete": sum(r["status"] == "complete" for r in simulated["ranks"]),
        "fleet_pairs": real["pairs"],
        "fleet_pairs_vs_torch": ratios,
        "fleet_pairs_note": real["pairs_note"],
    }
    write_record("fleet", args.commit, meta, gpus, comparisons, figures, Path(args.out))


if __name__ == "__main__":
    main()
