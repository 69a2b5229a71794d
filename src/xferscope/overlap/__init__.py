"""`xferscope overlap`: how much of a copy hides under other work, in three experiments (cpu,
buffers, gpu: one module each). Python orchestrates; every timed loop runs inside the engine,
and the results are immutable records with versioned JSON forms, like the sweep's."""

from .buffers import (
    BUFFERS_SCHEMA,
    RotationPoint,
    RotationResult,
    RotationSample,
    check_rotation_plan,
    measure_rotation,
    rotation_verdict,
)
from .common import CPU_DIRECTIONS, Failure
from .cpu import (
    CPU_SCHEMA,
    DEFAULT_WORK_FACTORS,
    CpuPoint,
    CpuSample,
    CpuSeries,
    OverlapCpuResult,
    check_cpu_plan,
    cpu_verdict,
    measure_overlap_cpu,
)
from .gpu import (
    DEFAULT_CHUNKS_PER_STREAM,
    DEFAULT_STREAMS,
    GPU_SCHEMA,
    GpuOverlapResult,
    GpuPoint,
    check_gpu_plan,
    gpu_verdict,
    measure_overlap_gpu,
)

AnyResult = OverlapCpuResult | RotationResult | GpuOverlapResult

__all__ = [
    "BUFFERS_SCHEMA",
    "CPU_DIRECTIONS",
    "CPU_SCHEMA",
    "DEFAULT_CHUNKS_PER_STREAM",
    "DEFAULT_STREAMS",
    "DEFAULT_WORK_FACTORS",
    "GPU_SCHEMA",
    "AnyResult",
    "CpuPoint",
    "CpuSample",
    "CpuSeries",
    "Failure",
    "GpuOverlapResult",
    "GpuPoint",
    "OverlapCpuResult",
    "RotationPoint",
    "RotationResult",
    "RotationSample",
    "check_cpu_plan",
    "check_gpu_plan",
    "check_rotation_plan",
    "cpu_verdict",
    "gpu_verdict",
    "measure_overlap_cpu",
    "measure_overlap_gpu",
    "measure_rotation",
    "rotation_verdict",
]
