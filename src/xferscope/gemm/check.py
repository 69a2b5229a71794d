"""`xferscope run`'s short GEMM check: one large GEMM per precision (8192^3, verified, as a share
of the GPU's peak) and the FP32 offload break-even against the CPU on one and on all its cores,
through `xferscope gemm`'s own measuring with short trials. Within 10 s per GPU."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..core.engine import Engine
from .cpu import usable_cores
from .measure import LADDER_TUNE, measure
from .records import DEFAULT_TUNE, PRECISIONS, GemmOptions
from .shapes import Shape

CHECK_SIZE = 8192
CHECK_LADDER = (16, 32, 64, 128, 256, 512, 1024, 2048, 4096)
CHECK_TARGET_S = 0.02
CHECK_WARMUP_S = 0.05
# cuBLASLt's algorithms timed for each 8192^3 GEMM, as `gemm` times them: with 3 instead of 8
# an H100 ran bf16 at 686 TFLOP/s against 734 and fp8 at 1200 against 1281. Each point records
# it, and the rank of the algorithm kept.
CHECK_TUNE = DEFAULT_TUNE


@dataclass(frozen=True, slots=True)
class GemmCheck:
    """The short GEMM check of a run: per precision its throughput at CHECK_SIZE (or why it
    did not run), and FP32's offload break-even sizes."""

    status: str  # complete, failed
    # per precision: {precision, size, status, tflops, trials_tflops, share_of_peak, peak_source,
    # tune, algorithm_rank, tuning_reused, verified, error}
    points: tuple[dict[str, Any], ...] = ()
    # {precision, threads, tune, gpu_sizes, all_threads, one_thread}: the smallest size at which
    # the GPU with its transfers beats the CPU on all its threads and on one (None: not within
    # the ladder); gpu_sizes: the ladder sizes the GPU was measured at
    break_even: dict[str, Any] | None = None
    wall_s: float = 0.0


def gemm_check(engine: Engine, device: int) -> GemmCheck:
    """The check on one GPU. Raises KeyboardInterrupt when a stop came during it."""
    cores = len(usable_cores())
    options = GemmOptions(
        precisions=PRECISIONS,
        shapes=(Shape(CHECK_SIZE, CHECK_SIZE, CHECK_SIZE),),
        target_s=CHECK_TARGET_S,
        trials=3,
        samples=64,
        device=device,
        transfers=(),
        pad=0,
        cpu_threads=(cores,),
        cpu_shapes=(),
        offload=("fp32",),
        ladder=CHECK_LADDER,
        # a first look within run's time: a short warm-up, no settling, no heating (the
        # figures are what the GPU gives before its power limit bites: `xferscope gemm` waits
        # for that)
        warmup_s=CHECK_WARMUP_S,
        settle_s=0.0,
        heat_s=0.0,
        tune=CHECK_TUNE,
        ladder_full=False,
        reuse_tuning=True,
    )
    result = measure(engine, options)
    if result.interrupted:
        raise KeyboardInterrupt
    points = []
    for p in result.points:
        of_peak, _ = result.shares(p)
        top = result.peak(p.precision)
        points.append(
            {
                "precision": p.precision,
                "size": p.m,
                "status": p.status,
                "tflops": None if p.flops is None else p.flops / 1e12,
                "trials_tflops": [p.shape.flops / t / 1e12 for t in p.seconds],
                "share_of_peak": of_peak,
                "peak_source": None if top is None else top.source,
                "verified": p.verified,
                "error": p.error,
                "tune": CHECK_TUNE,
                "algorithm_rank": (p.algorithm or {}).get("rank"),
                # the rank an earlier run's tuning chose, taken untimed (tuning.py)
                "tuning_reused": bool((p.algorithm or {}).get("reused", False)),
            }
        )
    break_even = None
    if any(c.role == "ladder" for c in result.cpu):
        # the ladder's GEMMs are cuBLASLt's first choice, not tuned (measure.LADDER_TUNE)
        # the GPU's sizes: the ladder stops after the round in which it beat every thread count
        gpu_sizes = sorted({p.m for p in result.ladder if p.precision == "fp32"})
        break_even = {
            "precision": "fp32",
            "threads": cores,
            "tune": LADDER_TUNE,
            "gpu_sizes": gpu_sizes,
        }
        for key, threads in (("all_threads", cores), ("one_thread", 1)):
            pairs, first = result.offload("fp32", threads)
            break_even[key] = None if first is None else pairs[first][0].m
    ok = all(p.status in ("complete", "skipped") and p.verified is not False for p in result.points)
    return GemmCheck("complete" if ok else "failed", tuple(points), break_even, result.wall_s)
