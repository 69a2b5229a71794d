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
  forked_idle       a DataLoader's workers forked and left idle (their first batches made,
                    never taken): what the children alone cost the parent (copy-on-write)
  device_loader_late   DeviceLoader timed after 40 steps, not 3 (the fork's cost paid)
  device_loader_forkserver   DeviceLoader over a loader whose workers start from a forkserver

Variants alternate in rounds; each figure is the median of the rounds' ms a step. Ctrl-C or
SIGTERM keeps the rounds measured, the record marked "interrupted". Writes
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

import copyapi_bench as base
from foundation import bench_parser, comparison, write_record
from loader_bench import IMAGE_BATCH, ImagePool, image_step
from xferscope import to_device
from xferscope.core.engine import NativeEngine
from xferscope.core.machine import collect
from xferscope.torch import DeviceLoader

VARIANTS = ("resident", "next", "next_to_device", "to_device", "next_pinned", "device_loader",
            "device_loader_si", "forked_idle", "device_loader_late",
            "device_loader_forkserver")  # fmt: skip
LATE = 40  # untimed steps of device_loader_late


def beside(work: Callable[[], None], stop: threading.Event) -> threading.Thread:
    def run() -> None:
        while not stop.is_set():
            work()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def timed(step: Callable[[Any], None], batches: Any, steps: int, warm: int = 3) -> float:
    """ms a step over `steps` steps after `warm` unmeasured, the GPU finished at both ends."""
    for _ in range(warm):
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
    dataset = ImagePool(IMAGE_BATCH * (steps + LATE + 8) * 4)

    def loader(pinned: bool = False, context: str | None = None) -> DataLoader:
        context = context if workers else None
        return DataLoader(dataset, batch_size=IMAGE_BATCH, num_workers=workers,
                          pin_memory=pinned, multiprocessing_context=context)  # fmt: skip

    def forever() -> Any:
        while True:
            yield resident

    if name.startswith("device_loader"):
        was = sys.getswitchinterval()
        if name == "device_loader_si":
            sys.setswitchinterval(0.0005)
        context = "forkserver" if name == "device_loader_forkserver" else None
        warm = LATE if name == "device_loader_late" else 3
        try:
            return timed(step, iter(DeviceLoader(loader(context=context))), steps, warm)
        finally:
            sys.setswitchinterval(was)
    if name == "forked_idle":
        idle = iter(loader())  # the workers forked; their first batches made, never taken
        try:
            return timed(step, forever(), steps)
        finally:
            del idle
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
    figures: dict[str, Any] = {"ms_per_step_rounds": ms, "workers": args.workers,
                               "steps": args.steps, "rounds": args.rounds}  # fmt: skip

    def run() -> None:
        for r in range(args.rounds):
            order = VARIANTS[r % len(VARIANTS) :] + VARIANTS[: r % len(VARIANTS)]
            for name in order:
                ms[name].append(round(variant(name, step, resident, args.steps, args.workers), 3))
                print(f"round {r + 1} {name:18s} {ms[name][-1]:8.2f} ms a step", flush=True)

    base.measured(run, figures)  # Ctrl-C or the time limit's SIGTERM: "interrupted", kept
    med = {k: statistics.median(v) for k, v in ms.items() if v}
    figures["ms_per_step"] = med
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
