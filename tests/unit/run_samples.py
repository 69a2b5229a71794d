"""Hand-built `xferscope run` results for tests that need one before (or without) measuring."""

from __future__ import annotations

from xferscope.core.engine.simulated import SimulatedEngine
from xferscope.core.findings import ERROR, OK, WARNING, Finding
from xferscope.run.records import (
    Concurrent,
    GpuSection,
    PinningCost,
    RunResult,
    Stream,
)
from xferscope.sweep.measure import run_sweep
from xferscope.sweep.options import SweepOptions

MIB = 1 << 20


def _curves(device: int, seed: int):
    options = SweepOptions(
        directions=("h2d", "d2h", "d2d"),
        memories=("pageable", "pinned"),
        mechanisms=("memcpy", "async"),
        timings=("api", "device"),
        devices=(device,),
        sizes=(1, 4096, MIB, 64 * MIB),
        target_s=0.01,
        budget_s=None,
    )
    return run_sweep(SimulatedEngine(seed=seed, devices=device + 1), options)


def _stream(label: str, device: int, direction: str, seconds: float, peer: int | None = None):
    return Stream(
        label,
        device,
        direction,
        peer,
        256 * MIB,
        tuple(seconds * (1 + 0.001 * i) for i in range(5)),
        seconds * 0.95,
    )


def sample_run(
    gpus: int = 2, failed_gpu: int | None = None, interrupted: bool = False, simulated: bool = True
) -> RunResult:
    """A run on `gpus` simulated GPUs, with every kind of section and finding filled in."""
    sweep = _curves(0, 1)
    sections = []
    for index in range(gpus):
        if index == failed_gpu:
            sections.append(
                GpuSection(index, "failed", "CUDA error: cudaErrorLaunchFailure", (), (), None)
            )
            continue
        sections.append(
            GpuSection(
                index=index,
                status="complete",
                error=None,
                curves=_curves(index, 10 + index).curves,
                concurrent=(
                    Concurrent(
                        "bidirectional",
                        "bidirectional",
                        "async",
                        None,
                        streams=(
                            _stream("h2d", index, "h2d", 256 * MIB / 51.5e9),
                            _stream("d2h", index, "d2h", 256 * MIB / 50.9e9),
                        ),
                    ),
                ),
                pinning=PinningCost(
                    index, 1 << 30, 0.339, 0.067, 0.0413, 0.0129, 0.104, 0.0194, 0.0198
                ),
            )
        )
    multi = []
    if gpus > 1:
        multi.append(
            Concurrent(
                "p2p",
                "0-1/async/peer/one_way",
                "async",
                True,
                streams=(_stream("gpu0->gpu1", 0, "p2p", 256 * MIB / 395e9, 1),),
            )
        )
        multi.append(
            Concurrent(
                "all_gpus_host",
                "all_gpus/h2d",
                "async",
                None,
                streams=tuple(
                    _stream(f"h2d gpu{i}", i, "h2d", 256 * MIB / 33e9) for i in range(gpus)
                ),
            )
        )
    findings = (
        Finding(
            "verdict",
            OK,
            0,
            "gpu0/h2d/pinned/async/device/bandwidth",
            55.4e9,
            63.0e9,
            "H2D pinned reaches 55.4 GB/s, 88% of the PCIe Gen5 x16 limit: as good as "
            "this link gets",
        ),
        Finding(
            "pageable_slow",
            WARNING,
            0,
            "gpu0/h2d/pageable/memcpy/api/bandwidth",
            10.5e9,
            55.4e9,
            "pageable H2D reaches 10.5 GB/s, 5.3x slower than pinned",
            "the driver stages pageable memory through its own pinned buffers",
            "allocate with cudaMallocHost or register with cudaHostRegister",
        ),
        Finding(
            "verification_failed",
            ERROR,
            1,
            "gpu1/d2h/pinned/async/device/bandwidth",
            None,
            None,
            "3 bytes arrived wrong at 1 MiB",
            "a faulty GPU or link",
            "rerun; if it persists, take the GPU out of service",
        ),
    )
    return RunResult(
        tool_version="0.1.0",
        created="2026-11-21T06:00:00+00:00",
        simulated=simulated,
        mode="quick",
        machine=sweep.machine
        | {"gpus": [dict(sweep.machine["gpus"][0], index=i) for i in range(gpus)]},
        options={"quick": True, "devices": list(range(gpus))},
        gpus=tuple(sections),
        multi=tuple(multi),
        findings=findings,
        interrupted=interrupted,
        wall_s=12.5,
    )
