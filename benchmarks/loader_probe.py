"""Loader probe (issue 50): where a DataLoader-fed ResNet-18 step's time goes when the loader
keeps up. The step (loader_bench.py's resnet18: 256 x 3 x 160 x 160, bf16, channels_last) on
a batch resident on the GPU, while beside it, on a thread of the same process:

  resident          nothing
  next              a DataLoader (--workers, pageable) iterated, each batch dropped
  next_to_device    the same, each batch moved by xferscope.to_device (DeviceLoader's work)
  to_device         one pageable batch moved by to_device again and again, 30 ms apart
  next_pinned       a pin_memory=True DataLoader iterated (its pin-memory thread), dropped
  device_loader     the real thing: DeviceLoader over the pageable loader, stepping on its batches
  device_loader_si  the same with sys.setswitchinterval(0.5 ms) (the GIL handed over sooner)

Variants alternate in rounds; each figure is the median of the rounds' ms a step. Writes
benchmarks/results/loader-probe-<gpu>-<date>.json.

    python3 benchmarks/loader_probe.py --commit $(git rev-parse HEAD) [--rounds 3] [--steps 30]
"""

from __future__ import annotations

import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader

from foundation import bench_parser, comparison, write_record
from loader_bench import IMAGE_BATCH, ImagePool, image_step
from xferscope import to_device
from xferscope.core.engine import NativeEngine
from xferscope.core.machine import collect
from xferscope.torch import DeviceLoader

VARIANTS = ("resident", "next", "next_to_device", "to_device", "next_pinned", "device_loader",
            "device_loader_si")  # fmt: skip


def beside(work: Callable[[], None], stop: threading.Event) -> threading.Thread:
    def run() -> None:
        while not stop.is_set():
            work()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def timed(step: Callable[[Any], None], batches: Any, steps: int) -> float:
    """ms a step over `steps` steps after 3 unmeasured, the GPU finished at both ends."""
    for _ in range(3):
        step(next(batches))
    torch.cuda.synchronize()
    began = time.perf_counter()
    for _ in range(steps):
        step(next(batches))
    torch.cuda.synchronize()
    return (time.perf_counter() - began) / steps * 1e3


def variant(
    name: str, step: Callable[[Any], None], resident: Any, steps: int, workers: int
) -> float:
    dataset = ImagePool(IMAGE_BATCH * (steps + 8) * 4)

    def loader(pinned: bool = False) -> DataLoader:
        return DataLoader(dataset, batch_size=IMAGE_BATCH, num_workers=workers, pin_memory=pinned)

    def forever() -> Any:
        while True:
            yield resident

    if name in ("device_loader", "device_loader_si"):
        was = sys.getswitchinterval()
        if name == "device_loader_si":
            sys.setswitchinterval(0.0005)
        try:
            return timed(step, iter(DeviceLoader(loader(), device="cuda")), steps)
        finally:
            sys.setswitchinterval(was)
    stop = threading.Event()
    thread = None
    if name in ("next", "next_to_device", "next_pinned"):
        source = iter(loader(pinned=name == "next_pinned"))

        def take() -> None:
            batch = next(source)
            if name == "next_to_device":
                to_device(batch, 0)

        thread = beside(take, stop)
    elif name == "to_device":
        host = (dataset.images[:IMAGE_BATCH].clone(), dataset.labels[:IMAGE_BATCH].clone())

        def move() -> None:
            to_device(host, 0)
            time.sleep(0.03)

        thread = beside(move, stop)
    try:
        return timed(step, forever(), steps)
    finally:
        stop.set()
        if thread is not None:
            thread.join(30)


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--workers", type=int, default=4)
    args = parser.parse_args()
    for option, value, low, high in (("--rounds", args.rounds, 1, 10),
                                     ("--steps", args.steps, 5, 500),
                                     ("--workers", args.workers, 0, 64)):  # fmt: skip
        if not low <= value <= high:
            parser.error(f"{option}: {value} is not an integer from {low} to {high}")
    meta = collect(NativeEngine(), [0])
    step = image_step(False)
    pool = ImagePool(IMAGE_BATCH)
    resident = (pool.images[:IMAGE_BATCH].cuda(), pool.labels[:IMAGE_BATCH].cuda())
    ms: dict[str, list[float]] = {v: [] for v in VARIANTS}
    try:
        for r in range(args.rounds):
            order = VARIANTS[r % len(VARIANTS) :] + VARIANTS[: r % len(VARIANTS)]
            for name in order:
                ms[name].append(round(variant(name, step, resident, args.steps, args.workers), 3))
                print(f"round {r + 1} {name:18s} {ms[name][-1]:8.2f} ms a step", flush=True)
    except KeyboardInterrupt:
        print("interrupted: what was measured is kept", flush=True)
    med = {k: statistics.median(v) for k, v in ms.items() if v}
    figures = {"ms_per_step_rounds": ms, "ms_per_step": med, "workers": args.workers,
               "steps": args.steps, "rounds": args.rounds}  # fmt: skip
    comparisons = []
    if "device_loader" in med and "resident" in med:
        comparisons.append(
            comparison(
                "loader_probe_device_loader_vs_resident",
                med["device_loader"],
                med["resident"],
                "the same step on a resident batch (ms a step)",
                "ms",
                False,
                0.9,
            )
        )
    write_record("loader-probe", args.commit, meta, 1, comparisons, figures, Path(args.out))


if __name__ == "__main__":
    main()
