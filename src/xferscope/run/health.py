"""Findings on a run's health: GPUs and measurements that failed or were cut short, the GEMM
check (a wrong result, a failure, throughput far below the peak), data that arrived wrong,
sizes that stayed noisy and clocks being slowed. diagnose.py runs them among its rules."""

from __future__ import annotations

from collections.abc import Iterator

from ..core.findings import CORRUPTED_CAUSE, CORRUPTED_FIX, ERROR, WARNING, Finding
from ..core.units import format_bytes
from .readings import curve_figure, gpu_facts, measured_gpus
from .records import Concurrent, RunResult

# NVML clock event reasons that mean the GPU is being slowed down: software power cap, hardware
# slowdown, software and hardware thermal slowdown, hardware power brake.
THROTTLE_REASONS = {
    0x4: "power cap",
    0x8: "hardware slowdown",
    0x20: "sync boost",
    0x40: "software thermal",
    0x80: "hardware thermal",
    0x100: "power brake",
}


def failures(result: RunResult) -> Iterator[Finding]:
    for gpu in result.gpus:
        if gpu.status == "failed":
            yield Finding(
                "gpu_failed",
                ERROR,
                gpu.index,
                f"gpu{gpu.index}",
                None,
                None,
                f"GPU {gpu.index} failed during the run: {gpu.error}",
                "the GPU, its driver or its link failed",
                "look for Xid errors in the kernel log (`dmesg`), then reset or replace it",
            )
    measured: list[tuple[int | None, Concurrent]] = [
        (g.index, c) for g in result.gpus for c in g.concurrent
    ]
    for index, c in [*measured, *((None, c) for c in result.multi)]:
        if c.status == "failed":
            where = "" if index is None else f"GPU {index}: "
            yield Finding(
                "measurement_failed",
                WARNING,
                index,
                c.label,
                None,
                None,
                f"{where}{c.label} could not be measured: {c.error}",
            )
    if result.interrupted:
        missing = [g.index for g in result.gpus if g.status in ("interrupted", "not_run")]
        what = (
            "GPU " + ", ".join(map(str, missing)) + " not fully measured"
            if missing
            else "the measurements across GPUs are not all done"
        )
        yield Finding(
            "incomplete",
            WARNING,
            None,
            "run",
            None,
            None,
            f"the run was interrupted; {what}",
            "",
            "run again to measure everything",
        )


# A GEMM of 8192^3 below this share of the GPU's peak points at the GPU, not the library
# (an H200 reached 63-81% in every precision).
GEMM_LOW_SHARE = 0.4


def gemm_check(result: RunResult) -> Iterator[Finding]:
    """The GEMM check: a wrong result, a GEMM that failed, throughput far below the peak, and
    where offloading FP32 starts to pay."""
    for gpu in result.gpus:
        if gpu.gemm is None:
            continue
        for g in gpu.gemm.points:
            what = f"GPU {gpu.index}: GEMM {g['precision']} {g['size']}"
            figure = f"gpu{gpu.index}/gemm/{g['precision']}"
            if g.get("verified") is False:
                yield Finding(
                    "gemm_wrong_result",
                    ERROR,
                    gpu.index,
                    figure,
                    None,
                    None,
                    f"{what} gave a wrong result: sampled outputs differ from the "
                    "double-precision reference beyond the tolerance",
                    "a failing GPU or memory, or a library fault",
                    "rerun; if it repeats, check `nvidia-smi -q` for ECC and Xid errors",
                )
            elif g["status"] == "failed":
                yield Finding(
                    "gemm_failed", WARNING, gpu.index, figure, None, None, f"{what}: {g['error']}"
                )
            elif (share := g.get("share_of_peak")) is not None and share < GEMM_LOW_SHARE:
                yield Finding(
                    "gemm_far_below_peak",
                    WARNING,
                    gpu.index,
                    figure,
                    share,
                    GEMM_LOW_SHARE,
                    f"{what} ran at {g['tflops']:.1f} TFLOP/s, {share:.0%} of the peak "
                    f"({g.get('peak_source')})",
                    "clocks held low: a power or thermal cap, another process on the GPU, or "
                    "a GPU in a low-power state",
                    "look at `nvidia-smi -q -d PERFORMANCE,CLOCK,POWER` during a run",
                )


def verification_failed(result: RunResult) -> Iterator[Finding]:
    for gpu in result.gpus:
        for curve in gpu.curves:
            bad = [p for p in curve.points if p.verification and not p.verification.ok]
            if bad:
                v = bad[0].verification
                assert v is not None
                yield Finding(
                    "verification_failed",
                    ERROR,
                    gpu.index,
                    curve_figure(gpu.index, curve),
                    float(v.mismatched_bytes),
                    0.0,
                    f"GPU {gpu.index}: {curve.config.label}: data arrived wrong at {len(bad)} of "
                    f"{len(curve.points)} sizes ({format_bytes(v.mismatched_bytes)} wrong at "
                    f"{format_bytes(bad[0].bytes)}, first at offset {v.first_mismatch})",
                    CORRUPTED_CAUSE,
                    CORRUPTED_FIX,
                )


def noisy_or_throttled(result: RunResult) -> Iterator[Finding]:
    for gpu in measured_gpus(result):
        noisy = [(c, p) for c in gpu.curves for p in c.points if p.stopped_by == "max_trials"]
        if len(noisy) >= 3:
            curve, worst = max(noisy, key=lambda cp: cp[1].rel_noise)
            yield Finding(
                "noisy",
                WARNING,
                gpu.index,
                curve_figure(gpu.index, curve),
                worst.rel_noise,
                None,
                f"GPU {gpu.index}: {len(noisy)} sizes stayed noisy after every trial (worst "
                f"{worst.rel_noise:.0%}, {curve.config.label} at {format_bytes(worst.bytes)})",
                "other work on the GPU, the CPU or the PCIe switch while measuring",
                "run on an idle node (`nvidia-smi` shows other processes) and compare again",
            )
        # while the transfers were measured (a run before that was read after its GEMM check,
        # when an H100 still showed the power cap its own GEMMs had hit)
        during = gpu.clock_event_reasons
        reasons = (
            during
            if during is not None
            else gpu_facts(result, gpu.index).get("clock_event_reasons") or 0
        )
        active = [name for bit, name in THROTTLE_REASONS.items() if reasons & bit]
        if active:
            when = " while its transfers were measured" if during is not None else ""
            yield Finding(
                "throttled",
                WARNING,
                gpu.index,
                f"gpu{gpu.index}/clock_event_reasons",
                float(reasons),
                0.0,
                f"GPU {gpu.index} was slowing its clocks{when}: {', '.join(active)}",
                "power or thermal limits, or a hardware slowdown signal",
                "check cooling and power (`nvidia-smi -q -d PERFORMANCE,POWER,TEMPERATURE`)",
            )
