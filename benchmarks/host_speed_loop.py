"""A training loop whose host does a fixed time of pure Python each step beside a small MLP's
step on the GPU: how much Python the host gets done in that time (values a millisecond), and how
long the time-bounded work really took, so that a run traced and one untraced can be set side by
side (benchmarks/host_speed_probe.py). The Python work is ddp_straggler's record (a histogram,
mean and spread of a list's values, the clock read every 512 values). Under torchrun (one
process a GPU, NCCL) the model is DistributedDataParallel's and only the last rank does the
Python work, as in benchmarks/trace_corpus/ddp_straggler.py.

    python3 benchmarks/host_speed_loop.py [--steps 300] [--python-ms 8]
    torchrun --standalone --nproc_per_node 2 benchmarks/host_speed_loop.py

Each rank prints one JSON line: {"host_speed": rank, "steps", "loop_s", "python_ms" (the
median call's time), "python_ms_max", "values_per_ms" (the median call's), "values_per_ms_min"}.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import time

CHUNK = 512  # values between reads of the clock
VALUES = 1 << 16  # the list the work reads, round and round


def work(recent: list[float], seconds: float) -> tuple[float, int]:
    """The record's Python for `seconds`: its wall time and the values it read."""
    counts, total, square, n = [0] * 64, 0.0, 0.0, 0
    began = time.perf_counter()
    until = began + seconds
    while n == 0 or time.perf_counter() < until:
        at = n % len(recent)
        for v in recent[at : at + CHUNK]:
            counts[min(int(v * 64), 63)] += 1
            total += v
            square += v * v
        n += len(recent[at : at + CHUNK])
    return time.perf_counter() - began, n


def refused(steps: int, python_ms: float, batch: int = 1) -> str:
    """What is wrong with the loop's options (its line), "" where nothing is."""
    if steps < 10:
        return f"--steps: {steps} is not a count of 10 or more"
    if not 0 < python_ms <= 1000:  # nan too
        return f"--python-ms: {python_ms} is not a time from 0 to 1000 ms"
    if batch < 1:
        return f"--batch: {batch} is not a count of 1 or more"
    return ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--python-ms", type=float, default=8.0)
    parser.add_argument("--batch", type=int, default=768)
    args = parser.parse_args()
    if said := refused(args.steps, args.python_ms, args.batch):
        parser.error(said)
    import torch

    rank, ranks = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    torch.cuda.set_device(device)
    layers: list[torch.nn.Module] = []
    for _ in range(4):
        layers += [torch.nn.Linear(4096, 4096), torch.nn.ReLU()]
    model: torch.nn.Module = torch.nn.Sequential(*layers).to(device)
    if ranks > 1:
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel

        dist.init_process_group("nccl", device_id=device)
        model = DistributedDataParallel(model, device_ids=[device.index])
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    torch.manual_seed(rank)
    batches = [
        (torch.randn(args.batch, 4096).pin_memory(), torch.randn(args.batch, 4096).pin_memory())
        for _ in range(4)
    ]
    rng = random.Random(rank)
    recent = [rng.random() for _ in range(VALUES)]
    mine = rank == ranks - 1  # the rank that does the Python work
    took: list[tuple[float, int]] = []

    def step(i: int) -> None:
        x, y = (t.to(device, non_blocking=True) for t in batches[i % len(batches)])
        if mine:
            took.append(work(recent, args.python_ms * 1e-3))
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    for i in range(5):  # warm-up
        step(i)
    torch.cuda.synchronize()
    took.clear()
    began = time.perf_counter()
    for i in range(args.steps):
        step(i)
    torch.cuda.synchronize()
    loop_s = time.perf_counter() - began
    said: dict[str, object] = {"host_speed": rank, "steps": args.steps, "loop_s": loop_s}
    if took:
        ms = [s * 1e3 for s, _ in took]
        rate = [n / (s * 1e3) for s, n in took]
        said |= {
            "python_ms": statistics.median(ms),
            "python_ms_max": max(ms),
            "values_per_ms": statistics.median(rate),
            "values_per_ms_min": min(rate),
        }
    print(json.dumps(said), flush=True)
    if ranks > 1:
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
