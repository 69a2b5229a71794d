"""Latency seen from the GPU (issue 34): xferscope's pointer chase against the plain CUDA one in
benchmarks/pointer_chase.cu, over the same memory, buffer size, stride, chain (seed 42) and
reads, interleaved in rounds: device memory, pinned host memory and, with two GPUs that reach
each other, GPU 1's memory read by GPU 0. The goal: within 5% either way. Also the chase as
`xferscope run` makes it (reads chosen for 20 ms trials).

    python3 benchmarks/chase_bench.py --commit $(git rev-parse HEAD) [--rounds 3]

Needs nvcc. Writes benchmarks/results/chase-<gpu>-<date>.json as ../shared/BENCHMARKS.md says.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from foundation import bench_parser, comparison, rounds_count, write_record
from xferscope.core import machine
from xferscope.core.engine import open_engine
from xferscope.sweep.chase import CHASE_BYTES, CHASE_STRIDE

HERE = Path(__file__).resolve().parent
TRIALS = 5
# reads of a trial, the same for both: about 15-25 ms on an H100
READS = {"device": 100_000, "pinned": 20_000, "peer": 20_000}
GOAL = 0.05  # issue 34: within 5%


def build(out: Path, capability: str) -> Path:
    program = out / "pointer_chase"
    arch = "sm_" + capability.replace(".", "")
    subprocess.run(
        ["nvcc", "-O2", f"-arch={arch}", "-o", str(program), str(HERE / "pointer_chase.cu")],
        check=True,
    )
    return program


def reference(program: Path, memory: str, reads: int, peer: int) -> float:
    """The plain program's median ns per read."""
    args = [str(program), memory, str(CHASE_BYTES), str(CHASE_STRIDE), str(reads), str(TRIALS)]
    done = subprocess.run([*args, str(peer)], check=True, capture_output=True, text=True)
    return float(json.loads(done.stdout.strip().splitlines()[-1])["median_ns"])


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--rounds", type=rounds_count, default=3)
    args = parser.parse_args()
    engine = open_engine()
    info = engine.device_info(0)
    memories = ["device", "pinned"]
    if engine.device_count() > 1 and engine.can_access_peer(0, 1):
        memories.append("peer")
    seen: dict[str, dict[str, list[float]]] = {m: {"ours": [], "reference": []} for m in memories}
    run_like: dict[str, list[dict]] = {m: [] for m in memories}
    with tempfile.TemporaryDirectory() as tmp:
        program = build(Path(tmp), info["compute_capability"])
        for _ in range(args.rounds):
            for memory in memories:
                kind, peer = ("device", 1) if memory == "peer" else (memory, -1)
                reads = READS[memory]
                r = engine.chase(0, kind, CHASE_BYTES, CHASE_STRIDE, reads, TRIALS, peer)
                assert r.verified, f"{memory}: the chain did not end where it should"
                seen[memory]["ours"].append(statistics.median(r.ns_per_read))
                seen[memory]["reference"].append(reference(program, memory, reads, max(peer, 1)))
                auto = engine.chase(0, kind, CHASE_BYTES, CHASE_STRIDE, 0, TRIALS, peer)
                run_like[memory].append(
                    {
                        "reads": auto.reads,
                        "median_ns": round(statistics.median(auto.ns_per_read), 2),
                    }
                )
    comparisons = []
    figures: dict = {
        "bytes": CHASE_BYTES,
        "stride": CHASE_STRIDE,
        "trials": TRIALS,
        "rounds": args.rounds,
        "reads": {m: READS[m] for m in memories},
        "ns_per_read": {},
        "as_run_chases": run_like,
        "within_goal": {},
    }
    for memory in memories:
        ours = statistics.median(seen[memory]["ours"])
        theirs = statistics.median(seen[memory]["reference"])
        figures["ns_per_read"][memory] = {
            k: [round(v, 2) for v in values] for k, values in seen[memory].items()
        }
        figures["within_goal"][memory] = abs(ours / theirs - 1) <= GOAL
        comparisons.append(
            comparison(
                f"chase_{memory}_256MiB_by_4KiB_vs_pointer_chase_cu",
                ours,
                theirs,
                "benchmarks/pointer_chase.cu (same chain and reads)",
                "ns",
                False,
                1 - GOAL,
            )
        )
    meta = machine.collect(engine, [0])
    write_record(
        "chase", args.commit, meta, engine.device_count(), comparisons, figures, Path(args.out)
    )


if __name__ == "__main__":
    main()
