"""A small PyTorch training loop, the program `xferscope trace` is measured on (issue 30): an MLP
trained with forward, backward and SGD (tens of kernels a step); per step a pageable 1 MiB batch
uploaded, a pinned 1 MiB target uploaded with non_blocking=True and a small tensor made from a
Python list; a scalar read back every 10 steps. It prints one JSON line: the loop's own time
(after warm-up steps, synchronized) and the copies it made, per kind.

    python3 benchmarks/torch_train_loop.py [--steps 400] [--warmup 20] [--repeats 1]
        [--profile FILE]

--repeats times the loop that many times in the one process (after one warm-up) and reports
each, so the process's start, whose cost varies run to run, is paid once per several timings.

--profile runs the whole program (model made, warm-up, loop) under torch.profiler (CPU and CUDA
activities) and writes its Chrome trace to FILE, whose gpu_memcpy events the benchmark compares
with the trace of the same program.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from contextlib import nullcontext

import torch

BATCH = 256
WIDTH = 1024  # 256 x 1024 float32: 1 MiB


def model(device: torch.device) -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Linear(WIDTH, 2048),
        torch.nn.ReLU(),
        torch.nn.Linear(2048, 2048),
        torch.nn.ReLU(),
        torch.nn.Linear(2048, WIDTH),
    ).to(device)


def train(steps: int, warmup: int, repeats: int = 1) -> tuple[list[float], dict[str, int]]:
    """The loop's own times (after `warmup` steps, `repeats` times) and the copies it made, per
    kind."""
    torch.manual_seed(0)
    device = torch.device("cuda")
    net = model(device)
    optimizer = torch.optim.SGD(net.parameters(), lr=1e-3)
    batch = torch.rand(BATCH, WIDTH)  # pageable
    target = torch.rand(BATCH, WIDTH).pin_memory()
    copies = {"h2d_pageable": 0, "h2d_pinned": 0, "d2h_pageable": 0}

    def step(i: int) -> None:
        x = batch.to(device)  # a pageable upload
        y = target.to(device, non_blocking=True)  # a pinned upload, asynchronous
        scale = torch.tensor([0.5, 1.5, float(i % 7)], device=device)  # from a Python list
        loss = torch.nn.functional.mse_loss(net(x) * scale[0], y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        copies["h2d_pageable"] += 2
        copies["h2d_pinned"] += 1
        if i % 10 == 0:
            loss.item()  # a scalar read back
            copies["d2h_pageable"] += 1

    for i in range(warmup):
        step(i)
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for i in range(steps):
            step(i)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return times, copies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--profile", default=None)
    args = parser.parse_args()
    profiler = (
        torch.profiler.profile(
            activities=[
                torch.profiler.ProfilerActivity.CPU,
                torch.profiler.ProfilerActivity.CUDA,
            ]
        )
        if args.profile
        else nullcontext()
    )
    with profiler as prof:
        times, copies = train(args.steps, args.warmup, args.repeats)
    if args.profile:
        prof.export_chrome_trace(args.profile)
    print(
        json.dumps(
            {
                "loop_s": statistics.median(times),
                "loops_s": times,
                "steps": args.steps,
                "warmup": args.warmup,
                **copies,
            }
        )
    )


if __name__ == "__main__":
    main()
