"""Asynchrony benchmark (issue 4), measured in one run on one GPU: the staged pageable copy
against the driver's pageable cudaMemcpy and against pinned memory at 1 GiB; CPU work hidden
behind a pinned readback; the H2D/kernel/D2H pipeline over four streams. Writes
benchmarks/results/async-<gpu>-<date>.json as ../shared/BENCHMARKS.md says.

    python3 benchmarks/async_bench.py --commit $(git rev-parse HEAD) [--out benchmarks/results]
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from foundation import GiB, bench_parser, comparison, write_record
from xferscope.core.engine import NativeEngine
from xferscope.core.machine import collect
from xferscope.sweep.measure import run_sweep
from xferscope.sweep.options import SweepOptions
from xferscope.transfer.staged import StagedPlan

HERE = Path(__file__).resolve().parent
MIB = 1 << 20


def api_bandwidth(
    engine: NativeEngine,
    direction: str,
    memory: str,
    mechanism: str,
    size: int = GiB,
    target_s: float = 0.25,
) -> float:
    """Bytes per second of copies of `size` at API time, through the product's sweep path, the
    staged copy and the driver measured alike."""
    options = SweepOptions(
        directions=(direction,),
        memories=(memory,),
        mechanisms=(mechanism,),
        timings=("api",),
        sizes=(size,),
        target_s=target_s,
        trials=7,
        budget_s=None,
    )
    (curve,) = run_sweep(engine, options).curves
    (point,) = curve.points
    assert point.verification is not None and point.verification.ok, curve.config.label
    return point.bandwidth


def staged_vs_pinned(engine: NativeEngine, direction: str, staged_bps: float | None = None) -> dict:
    """The staged copy of 1 GiB of pageable memory (`staged_bps`, or measured now) against
    cudaMemcpy of pinned memory, API time both: issue 13's staged_1GiB_<direction>_vs_pinned."""
    if staged_bps is None:
        staged_bps = api_bandwidth(engine, direction, "pageable", "staged", GiB)
    return comparison(
        f"staged_1GiB_{direction}_vs_pinned",
        staged_bps / 1e9,
        api_bandwidth(engine, direction, "pinned", "memcpy", GiB) / 1e9,
        "cudaMemcpy of pinned memory, 1 GiB, API time",
        "GB/s",
        True,
        0.95,
    )


def overlap_efficiency(engine: NativeEngine, memory: str, size: int = 256 * MIB) -> float:
    """Share of CPU work of half the copy's time that was hidden behind a D2H readback."""
    t = engine.open_transfer(0, "d2h", memory, "async", size, 0)
    try:
        t.overlap_cpu(size, 0.0)  # warm-up
        alone = statistics.median(t.overlap_cpu(size, 0.0).total_s for _ in range(5))
        work = alone / 2
        total = statistics.median(t.overlap_cpu(size, work).total_s for _ in range(5))
        return (alone + work - total) / work
    finally:
        t.close()


def main() -> None:
    parser = bench_parser(__doc__)
    args = parser.parse_args()

    engine = NativeEngine()
    meta = collect(engine, [0])
    driver = api_bandwidth(engine, "h2d", "pageable", "memcpy")
    pinned_h2d = api_bandwidth(engine, "h2d", "pinned", "memcpy")
    staged_h2d = api_bandwidth(engine, "h2d", "pageable", "staged")
    pinned_d2h = api_bandwidth(engine, "d2h", "pinned", "memcpy")
    staged_d2h = api_bandwidth(engine, "d2h", "pageable", "staged")
    comparisons = [
        comparison(
            "staged_pageable_h2d_1GiB_vs_driver",
            staged_h2d / 1e9,
            driver / 1e9,
            "cudaMemcpy from pageable memory",
            "GB/s",
            True,
            4.0,
        ),
        comparison(
            "staged_pageable_h2d_1GiB_vs_pinned",
            staged_h2d / 1e9,
            pinned_h2d / 1e9,
            "cudaMemcpy from pinned memory",
            "GB/s",
            True,
            0.80,
        ),
        comparison(
            "staged_pageable_d2h_1GiB_vs_pinned",
            staged_d2h / 1e9,
            pinned_d2h / 1e9,
            "cudaMemcpy to pinned memory",
            "GB/s",
            True,
            0.80,
        ),
    ]
    gpu = engine.overlap_gpu(0, GiB, 4, 16, 1)
    stages = (gpu.h2d_s, gpu.kernel_s, gpu.d2h_s)
    speedup, bound = gpu.sequential_s / gpu.pipelined_s, sum(stages) / max(stages)
    assert gpu.verified
    figures = {
        "overlap_cpu_efficiency_pinned": round(overlap_efficiency(engine, "pinned"), 4),
        "overlap_cpu_efficiency_pageable": round(overlap_efficiency(engine, "pageable"), 4),
        "overlap_gpu_speedup_k4": round(speedup, 3),
        "overlap_gpu_bound_k4": round(bound, 3),
        "overlap_gpu_fraction_of_bound_k4": round(speedup / bound, 3),
        "driver_pageable_d2h_1GiB_gbps": round(
            api_bandwidth(engine, "d2h", "pageable", "memcpy") / 1e9, 2
        ),
    }
    copier = engine.staged_copier(0)
    plan = StagedPlan.of(copier.plan).to_dict()
    copier.close()
    write_record(
        "async",
        args.commit,
        meta,
        torch.cuda.device_count(),
        comparisons,
        figures,
        Path(args.out),
        staged_plan=plan,
    )


if __name__ == "__main__":
    main()
