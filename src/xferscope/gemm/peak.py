"""How close to the chip's peak a GEMM gets: the spec's dense peak of each precision for the GPUs
we know (NVIDIA's datasheets), and elsewhere an estimate from the SM count, the SM clock and the
FLOPs an SM does per clock at that compute capability, labelled as an estimate."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# Dense (no sparsity) TFLOP/s from NVIDIA's datasheets; FP64 is the tensor-core rate DGEMM
# reaches. Matched against the GPU's name, most specific first.
_SPEC: tuple[tuple[tuple[str, ...], str, dict[str, float]], ...] = (
    (
        ("H100 PCIE",),
        "NVIDIA H100 PCIe datasheet",
        {"fp64": 51.2, "fp32": 51.2, "tf32": 378.0, "fp16": 756.0, "bf16": 756.0, "fp8": 1513.0},
    ),
    (
        ("H100 NVL", "H200 NVL"),
        "NVIDIA H100 NVL / H200 NVL datasheet",
        {"fp64": 60.0, "fp32": 60.0, "tf32": 417.5, "fp16": 835.5, "bf16": 835.5, "fp8": 1670.5},
    ),
    (
        ("H100", "H200", "GH200", "H800"),
        "NVIDIA H100 SXM / H200 SXM datasheet",
        {"fp64": 66.9, "fp32": 66.9, "tf32": 494.7, "fp16": 989.4, "bf16": 989.4, "fp8": 1978.9},
    ),
    (
        ("A100", "A800"),
        "NVIDIA A100 datasheet",
        {"fp64": 19.5, "fp32": 19.5, "tf32": 156.0, "fp16": 312.0, "bf16": 312.0},
    ),
)

# FLOPs one SM does per clock, dense, by compute capability (major * 10 + minor), derived from
# the same datasheets (e.g. H100 SXM: 132 SMs x 1.98 GHz x 256 = 66.9 TFLOP/s in FP32).
_PER_SM_CLOCK: dict[int, dict[str, float]] = {
    80: {"fp64": 128, "fp32": 128, "tf32": 1024, "fp16": 2048, "bf16": 2048},
    86: {"fp64": 4, "fp32": 256, "tf32": 512, "fp16": 1024, "bf16": 1024},
    89: {"fp64": 4, "fp32": 256, "tf32": 512, "fp16": 1024, "bf16": 1024, "fp8": 2048},
    90: {"fp64": 256, "fp32": 256, "tf32": 2048, "fp16": 4096, "bf16": 4096, "fp8": 8192},
}


@dataclass(frozen=True, slots=True)
class Peak:
    flops: float  # FLOP/s
    source: str  # where the figure comes from, in words
    estimate: bool  # True: from SMs x clock x rate, not a datasheet

    def to_dict(self) -> dict[str, Any]:
        return {"tflops": self.flops / 1e12, "source": self.source, "estimate": self.estimate}


def _capability(gpu: dict[str, Any]) -> int | None:
    text = str(gpu.get("compute_capability") or "")
    major, _, minor = text.partition(".")
    return int(major) * 10 + int(minor) if major.isdigit() and minor.isdigit() else None


def peak(gpu: dict[str, Any], precision: str) -> Peak | None:
    """The GPU's (a machine record's GPU) peak for `precision`, or None when neither the table
    nor the estimate knows it."""
    name = str(gpu.get("name") or "").upper()
    for keys, source, table in _SPEC:
        if any(key in name for key in keys):
            if precision not in table:
                return None
            return Peak(table[precision] * 1e12, source, False)
    capability = _capability(gpu)
    rate = _PER_SM_CLOCK.get(capability or -1, {}).get(precision)
    sms, clock_khz = int(gpu.get("sm_count") or 0), int(gpu.get("clock_khz") or 0)
    if rate is None or not sms or not clock_khz:
        return None
    return Peak(
        sms * clock_khz * 1e3 * rate,
        f"estimate: {sms} SMs x {clock_khz / 1e6:.2f} GHz x {rate:.0f} FLOP per clock "
        f"(compute {gpu.get('compute_capability')})",
        True,
    )


def peaks(gpu: dict[str, Any], precisions: tuple[str, ...] | list[str]) -> dict[str, Peak]:
    return {p: q for p in precisions if (q := peak(gpu, p)) is not None}
