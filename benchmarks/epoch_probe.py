"""Epoch probe (issue 50): how long an epoch's first batch keeps the step waiting, epoch after
epoch, with the ResNet-18 workload of loader_bench.py (256 x 3 x 160 x 160 fp32 a batch, a
collate of about 20 ms) over a DataLoader with persistent workers, in order and shuffled.

  device_loader   xferscope.torch.DeviceLoader over the pageable loader
  pin_memory      DataLoader(pin_memory=True), each batch .to("cuda", non_blocking=True)

An epoch's first wait is the time from asking for its iterator to holding its first batch on
the GPU (synchronized); the epochs after the first are the restarts. Orders and variants
alternate epoch by epoch. Checked each epoch: the sequential variants' first batches are the
same, and DeviceLoader's shuffled first batch is the one DataLoader draws from torch's generator
where that epoch began (replayed after the run). Writes
benchmarks/results/epoch-probe-<gpu>-<date>.json.

    python3 benchmarks/epoch_probe.py --commit $(git rev-parse HEAD) [--epochs 8] [--batches 8]
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import torch
from torch.utils.data import BatchSampler, DataLoader, RandomSampler

import copyapi_bench as base
from foundation import bench_parser, count_option
from loader_bench import made_workload
from xferscope.core import limits
from xferscope.core.engine import NativeEngine
from xferscope.core.machine import collect
from xferscope.torch import DeviceLoader

ORDERS = ("sequential", "shuffled")
VARIANTS = ("device_loader", "pin_memory")


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--epochs", type=count_option("--epochs", limits.Range("count", 2, 100)),
                        default=8)  # fmt: skip
    parser.add_argument("--batches", type=count_option("--batches", limits.Range("count", 2, 200)),
                        default=8)  # fmt: skip
    parser.add_argument("--workers", type=count_option("--workers", limits.Range("count", 1, 64)),
                        default=4)  # fmt: skip
    args = parser.parse_args()
    work = made_workload("resnet18", args.batches)
    loaders: dict[tuple[str, str], Any] = {}
    for order in ORDERS:
        shuffled = order == "shuffled"
        for variant in VARIANTS:
            # the pin_memory loader draws from a generator of its own, so that torch's is drawn
            # by DeviceLoader alone (its epochs begun ahead only where torch's generator is as
            # its draw left it)
            own = shuffled and variant == "pin_memory"
            generator = torch.Generator().manual_seed(50) if own else None
            loader = DataLoader(work.dataset, batch_size=work.batch_size, shuffle=shuffled,
                                num_workers=args.workers, pin_memory=variant == "pin_memory",
                                persistent_workers=True, generator=generator)  # fmt: skip
            loaders[order, variant] = (
                DeviceLoader(loader, device="cuda") if variant == "device_loader" else loader
            )
    waits: dict[str, list[float]] = {f"{o} {v}": [] for o in ORDERS for v in VARIANTS}
    steps: dict[str, list[float]] = {k: [] for k in waits}
    figures: dict[str, Any] = {"workers": args.workers, "batches_per_epoch": args.batches,
                               "persistent_workers": True}  # fmt: skip
    base.measured(lambda: epochs(args, work, loaders, waits, steps), figures)
    measured = {k: v for k, v in waits.items() if v}
    figures |= {
        "first_wait_ms": {k: [round(w * 1e3, 2) for w in v] for k, v in measured.items()},
        "restart_wait_median_ms": {
            k: round(statistics.median(v[1:]) * 1e3, 2) for k, v in measured.items() if v[1:]
        },
        "step_median_ms": {k: round(statistics.median(v) * 1e3, 2) for k, v in steps.items() if v},
        "note": "epoch 0 starts the workers; the restart figure is the median of epochs 1 on",
    }
    base.recorded(args, collect(NativeEngine(), [0]), [], figures, "epoch-probe")


def epochs(
    args: Any,
    work: Any,
    loaders: dict[tuple[str, str], Any],
    waits: dict[str, list[float]],
    steps: dict[str, list[float]],
) -> None:
    """The epochs, the variants in turn in each; each epoch's first wait and mean step into
    `waits` and `steps` as measured; base.Mismatch where an order is not DataLoader's."""
    device = torch.device("cuda")
    states: list[torch.Tensor] = []  # torch's generator where each shuffled epoch began
    shuffled_firsts: list[torch.Tensor] = []
    for e in range(args.epochs):
        labels: dict[tuple[str, str], torch.Tensor] = {}
        for key in waits:
            order, variant = key.split()
            loader = loaders[order, variant]
            torch.cuda.synchronize()
            if key == "shuffled device_loader":
                states.append(torch.get_rng_state())
            asked = time.perf_counter()
            batches = iter(loader)
            count = 0
            for batch in batches:
                if variant == "pin_memory":
                    batch = [t.to(device, non_blocking=True) for t in batch]
                if count == 0:
                    torch.cuda.synchronize()
                    got = time.perf_counter()
                    waits[key].append(got - asked)
                    labels[order, variant] = batch[1].cpu()
                    if key == "shuffled device_loader":
                        shuffled_firsts.append(labels[order, variant])
                work.step(batch)
                count += 1
            torch.cuda.synchronize()
            steps[key].append((time.perf_counter() - got) / max(1, count - 1))
            if count != args.batches:
                raise base.Mismatch(f"{key}: {count} batches in an epoch of {args.batches}")
            if key == "sequential pin_memory" and not torch.equal(
                labels["sequential", "device_loader"], labels["sequential", "pin_memory"]
            ):
                raise base.Mismatch(f"epoch {e}: the sequential loaders' first batches differ")
        print(f"epoch {e}: " + ", ".join(f"{k} {waits[k][-1] * 1e3:.1f} ms" for k in waits),
              flush=True)  # fmt: skip
    for e, (state, got) in enumerate(zip(states, shuffled_firsts, strict=True)):
        torch.set_rng_state(state)  # DataLoader's draw from where DeviceLoader's epoch began
        if e == 0:  # its first iterator draws the workers' base seed first
            torch.empty((), dtype=torch.int64).random_()
        indices = next(iter(BatchSampler(RandomSampler(work.dataset), work.batch_size, False)))
        if not torch.equal(got, torch.stack([work.dataset[i][1] for i in indices])):
            raise base.Mismatch(f"epoch {e}: DeviceLoader's shuffled order is not DataLoader's")


if __name__ == "__main__":
    main()
