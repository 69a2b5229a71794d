"""Layouts benchmark (issue 13's 2D/3D copies, alignment and driver API), in one run on one GPU:

  pitch_2d_<W>_vs_cupy       xferscope pitch's cudaMemcpy2DAsync (device time) against CuPy's
                             cudaMemcpy2DAsync of the same rows (pinned host rows at twice
                             their width, pitched device rows, CUDA events), at 1 B, 64 B,
                             4 KiB and 1 MiB wide (goal 0.95: the same call, the same rate)
  misaligned_<offset>_vs_torch  the alignment sweep's pinned H2D rate at 16 MiB with the host
                             buffer 1 / 4095 bytes past a page, against torch's copy_ of the
                             same misaligned pinned slice (goal 0.95)
  driver_vs_runtime_<dir>    cuMemcpyHtoD/DtoH against cudaMemcpy, pinned 1 GiB, API time
                             (goal 0.98: the driver API is the runtime's floor)

and as figures: the pitch study's full grid in a document beside this one (its cliffs, the
widths where packing or the span copy beat cudaMemcpy2DAsync), the alignment study's costs
(pinned and pageable, both directions, 2 rounds), and each study's wall time.
Writes benchmarks/results/layout-<gpu>-<date>.json, pitch-<gpu>-<date>.json and
align-<gpu>-<date>.json.

    python3 benchmarks/layout_bench.py --commit $(git rev-parse HEAD) [--out benchmarks/results]
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

import cupy
import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from foundation import bench_parser, comparison, gpu_tag, write_record
from xferscope.core.engine import NativeEngine
from xferscope.core.machine import collect
from xferscope.documents import json as sweep_json
from xferscope.pitch.measure import PitchOptions, dumps_json, measure
from xferscope.sweep.alignment import misalignments
from xferscope.sweep.measure import run_sweep
from xferscope.sweep.options import SweepOptions

HERE = Path(__file__).resolve().parent
TOTAL = 4 << 20
WIDTHS = (1, 64, 4096, 1 << 20)
MiB = 1 << 20


def pitch_2d_vs_cupy(engine: NativeEngine, width: int, rounds: int = 5) -> tuple[float, float]:
    """TOTAL bytes as rows of `width`, from pinned rows twice their width apart into pitched
    device rows, by cudaMemcpy2DAsync: xferscope's (device time) and CuPy's (CUDA events around
    the same number of calls), bursts alternated; the best rate of each."""
    rows = TOTAL // width
    pitch = 2 * width
    ours = engine.pitched(0, "h2d", "pinned", width, rows, pitch, True)
    assert ours.verify("2d-async") == (0, 0)
    dpitch = ours.device_pitch
    host = cupy.cuda.alloc_pinned_memory(pitch * rows)
    data = np.frombuffer(host, dtype=np.uint8, count=pitch * rows)
    data[:] = np.random.default_rng(7).integers(0, 256, data.size, dtype=np.uint8)
    device = cupy.cuda.runtime.malloc(dpitch * rows)
    stream = cupy.cuda.Stream(non_blocking=True)
    start, stop = cupy.cuda.Event(), cupy.cuda.Event()
    h2d = cupy.cuda.runtime.memcpyHostToDevice

    def burst(n: int) -> float:
        start.record(stream)
        for _ in range(n):
            cupy.cuda.runtime.memcpy2DAsync(
                device, dpitch, host.ptr, pitch, width, rows, h2d, stream.ptr
            )
        stop.record(stream)
        stop.synchronize()
        return cupy.cuda.get_elapsed_time(start, stop) * 1e-3 / n

    one = burst(1)  # warm-up, and the size of a burst
    n = max(1, min(200, int(0.05 / max(one, 1e-6))))
    ours.time("2d-async", 1)
    mine, theirs = [], []
    for _ in range(rounds):
        mine.append(ours.time("2d-async", n)[1])
        theirs.append(burst(n))
    ours.close()
    cupy.cuda.runtime.free(device)
    return TOTAL / min(mine), TOTAL / min(theirs)


def torch_misaligned_rate(offset: int, size: int = 16 * MiB, reps: int = 7) -> float:
    """torch's copy_ of a pinned slice starting `offset` bytes past a page into device memory,
    API time (a synchronize after each), the median of `reps` bursts."""
    host = torch.randint(0, 255, (size + 8192,), dtype=torch.uint8).pin_memory()
    base = (-host.data_ptr()) % 4096
    src = host[base + offset : base + offset + size]
    dst = torch.empty(size, dtype=torch.uint8, device="cuda")
    dst.copy_(src)
    torch.cuda.synchronize()
    rates = []
    for _ in range(reps):
        t = time.perf_counter()
        for _ in range(20):
            dst.copy_(src)
            torch.cuda.synchronize()
        rates.append(20 * size / (time.perf_counter() - t))
    assert torch.equal(dst.cpu(), src)
    return statistics.median(rates)


def main() -> None:
    parser = bench_parser(__doc__)
    args = parser.parse_args()
    out = Path(args.out)
    engine = NativeEngine()
    meta = collect(engine, [0])
    comparisons, figures = [], {}

    # ---- the 2D/3D study, and CuPy's cudaMemcpy2DAsync beside it
    start = time.perf_counter()
    pitch = measure(engine, PitchOptions(total=TOTAL))
    figures["pitch_wall_s"] = round(time.perf_counter() - start, 1)
    assert not any(c.status in ("failed", "unverified") for c in pitch.cells)
    for width in WIDTHS:
        ours_bps, cupy_bps = pitch_2d_vs_cupy(engine, width)
        comparisons.append(
            comparison(
                f"pitch_2d_{width}B_h2d_vs_cupy",
                ours_bps / 1e9,
                cupy_bps / 1e9,
                "cupy.cuda.runtime.memcpy2DAsync of the same rows, CUDA events; bursts "
                "alternated with xferscope's, the best of 5 each",
                "GB/s",
                True,
                0.95,
            )
        )
    figures["pitch_cliffs"] = [c.to_dict() for c in pitch.cliffs()]
    figures["pitch_findings"] = [f.message for f in pitch.findings]

    # ---- alignment: the study, and torch's copy_ of a misaligned pinned slice
    start = time.perf_counter()
    align = run_sweep(
        engine,
        SweepOptions(
            directions=("h2d", "d2h"),
            memories=("pinned", "pageable"),
            sizes=(4096, 65536, MiB, 16 * MiB),
            target_s=0.05,
            host_offsets=(0, 1, 4, 16, 64, 512, 4095),
            device_offsets=(0, 1),
            rounds=2,
        ),
    )
    figures["align_wall_s"] = round(time.perf_counter() - start, 1)
    curves = {c.config: c for c in align.curves}
    for offset in (1, 4095):
        (curve,) = [
            c for cfg, c in curves.items()
            if (cfg.direction, cfg.memory, cfg.host_offset, cfg.device_offset)
            == ("h2d", "pinned", offset, 0)
        ]  # fmt: skip
        point = curve.point(16 * MiB)
        assert point is not None
        comparisons.append(
            comparison(
                f"misaligned_host{offset}_16MiB_h2d_vs_torch",
                point.bandwidth / 1e9,
                torch_misaligned_rate(offset) / 1e9,
                f"torch copy_ of a pinned slice {offset} B past a page, synchronized (median)",
                "GB/s",
                True,
                0.95,
            )
        )
    figures["misalignment_costs"] = [
        {
            "case": m.case,
            "host_offset": m.config.host_offset,
            "device_offset": m.config.device_offset,
            "costs": {str(size): round(cost, 4) for size, cost in m.costs},
            "beyond_noise": sorted(m.clear),
        }
        for m in misalignments(align.curves)
    ]
    figures["align_findings"] = [f.message for f in align.findings if f.code == "misaligned"]

    # ---- the driver API against the runtime, pinned 1 GiB, API time
    driver = run_sweep(
        engine,
        SweepOptions(
            directions=("h2d", "d2h"),
            memories=("pinned",),
            mechanisms=("memcpy", "driver"),
            sizes=(1 << 30,),
            target_s=0.5,
            trials=5,
            rounds=2,
        ),
    )
    rates = {(c.config.direction, c.config.mechanism): c.points[0].bandwidth for c in driver.curves}
    for direction in ("h2d", "d2h"):
        comparisons.append(
            comparison(
                f"driver_vs_runtime_{direction}_1GiB",
                rates[(direction, "driver")] / 1e9,
                rates[(direction, "memcpy")] / 1e9,
                "cudaMemcpy of the same pinned buffers, API time (xferscope's runtime curve)",
                "GB/s",
                True,
                0.98,
            )
        )

    tag = gpu_tag(meta["gpus"][0]["name"], 1)
    day = time.strftime("%Y%m%d")
    out.mkdir(parents=True, exist_ok=True)
    (out / f"pitch-{tag}-{day}.json").write_text(dumps_json(pitch))
    (out / f"align-{tag}-{day}.json").write_text(sweep_json.dumps(align))
    path = write_record("layout", args.commit, meta, 1, comparisons, figures, out)
    print(json.dumps(comparisons, indent=1))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
