"""Why pinned H2D can trail write-combined and registered memory in one run (issue 9's puzzle).

Measures 1 GiB H2D and D2H copy-engine bandwidth (device time, the run's method) from every
pinned host memory kind in one process, in one order and then the reverse, beside PyTorch's
pinned copy, and prints the host's NUMA placement of the process and the GPU. Run it under
`numactl --cpunodebind=N --membind=N` to see what placement changes.

    python3 benchmarks/pinned_probe.py --commit $(git rev-parse HEAD) [--rounds 2] [--size 1GiB]

Writes benchmarks/results/pinned-probe-<gpu>-<date>.json: every kind, order and direction
against PyTorch's pinned copy measured in the same round (goal 0.99).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
from pathlib import Path

from xferscope.core.engine import NativeEngine
from xferscope.core.machine import collect, pci_locality, process_cpus
from xferscope.core.units import parse_size

sys.path.insert(0, str(Path(__file__).parent))
from foundation import bench_parser, comparison, write_record

KINDS = ("pinned", "wc", "registered", "mapped")
ROTATION = 256 << 20


def bandwidth(engine: NativeEngine, direction: str, memory: str, size: int) -> float:
    """Median bytes per second of 7 trials of 8 copies, as `run` times them."""
    t = engine.open_transfer(0, direction, memory, "async", size, ROTATION)
    try:
        t.time("device", size, 2)  # warm-up
        trials = [t.time("device", size, 8).seconds / 8 for _ in range(7)]
        assert t.verify(size).ok
    finally:
        t.close()
    return size / statistics.median(trials)


def torch_bandwidth(direction: str, size: int) -> float | None:
    try:
        import torch
    except ImportError:
        return None
    host = torch.empty(size, dtype=torch.uint8, pin_memory=True)
    gpu = torch.empty(size, dtype=torch.uint8, device="cuda")
    src, dst = (host, gpu) if direction == "h2d" else (gpu, host)
    dst.copy_(src, non_blocking=True)
    times = []
    for _ in range(7):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(8):
            dst.copy_(src, non_blocking=True)
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) * 1e-3 / 8)
    return size / statistics.median(times)


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--size", default="1GiB")
    args = parser.parse_args()
    size = parse_size(args.size)
    engine = NativeEngine()
    info = engine.device_info(0)
    place = {
        "process_cpus": process_cpus(),
        "numactl": os.environ.get("PROBE_PLACEMENT", ""),
        **pci_locality(info["pci_bus_id"]),
    }
    print(json.dumps({"gpu": info["name"], **place}))
    comparisons, spread = [], {}
    for direction in ("h2d", "d2h"):
        for round_ in range(args.rounds):
            order = KINDS if round_ % 2 == 0 else tuple(reversed(KINDS))
            figures = {
                kind: round(bandwidth(engine, direction, kind, size) / 1e9, 2) for kind in order
            }
            torch_gbps = torch_bandwidth(direction, size)
            print(
                json.dumps(
                    {
                        "direction": direction,
                        "round": round_,
                        "order": list(order),
                        "gbps": figures,
                        "torch": None if torch_gbps is None else round(torch_gbps / 1e9, 2),
                    }
                )
            )
            for kind, gbps in figures.items():
                if torch_gbps is not None:
                    comparisons.append(
                        comparison(
                            f"{direction}_{kind}_{args.size}_round{round_}_vs_torch",
                            gbps,
                            torch_gbps / 1e9,
                            "torch pinned copy_ (events)",
                            "GB/s",
                            True,
                            0.99,
                        )
                    )
            values = list(figures.values())
            spread[f"{direction}_round{round_}_kinds_max_over_min"] = round(
                max(values) / min(values), 4
            )
    write_record(
        "pinned-probe",
        args.commit,
        collect(engine, [0]),
        1,
        comparisons,
        spread,
        Path(args.out),
        placement=place,
    )


if __name__ == "__main__":
    main()
