"""A small PyTorch training loop, the program `xferscope trace` is measured on (issue 30): an MLP
trained with forward, backward and SGD (tens of kernels a step); per step a pageable 1 MiB batch
uploaded, a pinned 1 MiB target uploaded with non_blocking=True and a small tensor made from a
Python list; a scalar read back every 10 steps. It prints one JSON line: the loop's own time
(after warm-up steps, synchronized) and the copies it made, per kind.

    python3 benchmarks/torch_train_loop.py [--steps 400] [--warmup 20] [--repeats 1]
        [--alternate] [--profile FILE]

--repeats times the loop that many times in the one process (after one warm-up) and reports
each, so the process's start, whose cost varies run to run, is paid once per several timings.

--alternate [pause|detach|idle], under `xferscope trace`, pauses the tracing (the injection's
xferscope_trace_pause: every record off) or detaches CUPTI from the process (cuptiFinalize) for
half of the repeats, in the order untraced, traced, traced, untraced, ...: the same process timed
untraced and traced, alternated, so the ratio is free of the 10-20% by which processes differ
from one another; idle times CUPTI attached with every record off against CUPTI detached. Each
switch is followed by --settle untimed steps (2). Its JSON adds paused_s (the
untraced timings) and paused_loop_s (their median); loop_s stays the traced median.

--profile runs the whole program (model made, warm-up, loop) under torch.profiler (CPU and CUDA
activities) and writes its Chrome trace to FILE, whose gpu_memcpy events the benchmark compares
with the trace of the same program.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from contextlib import nullcontext
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent / "trace_corpus"))
from corpus import tracing_pause  # the injection's switch, found as the corpus programs find it

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


SETTLE = 2  # steps run untimed after the tracing is paused or resumed, before a block's timing
# the injection's modes, set in turn, for the untraced blocks and for the traced ones; idle:
# CUPTI attached with nothing recorded against CUPTI detached (what attaching alone costs)
ALTERNATE = {"pause": ((1,), (0,)), "detach": ((2,), (0,)), "idle": ((2,), (0, 1))}


def train(
    steps: int, warmup: int, repeats: int = 1, alternate: str | None = None, settle: int = SETTLE
) -> tuple[list[float], list[float], dict[str, int]]:
    """The loop's own times (after `warmup` steps, `repeats` times), with `alternate` (pause or
    detach) those timed with the tracing paused or CUPTI detached apart, and the copies it
    made, per kind."""
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
    pause = tracing_pause("--alternate") if alternate else None
    # (pausing the tracing pauses its looks at this main thread too: engine/src/trace/looks.cpp)
    times: list[float] = []
    paused: list[float] = []
    for r in range(repeats * 2 if alternate else repeats):
        untraced = pause is not None and r % 4 in (0, 3)  # paused, traced, traced, paused
        if pause is not None:
            torch.cuda.synchronize()  # nothing in flight when CUPTI is detached
            modes = ALTERNATE[alternate or "pause"][0 if untraced else 1]
            if any(pause(mode) != 0 for mode in modes):
                raise SystemExit("--alternate: the tracing could not be paused (not tracing)")
            for i in range(settle):  # what switching costs stays out of the timing
                step(i)
            torch.cuda.synchronize()
        start = time.perf_counter()
        for i in range(steps):
            step(i)
        torch.cuda.synchronize()
        (paused if untraced else times).append(time.perf_counter() - start)
    if pause is not None:
        pause(0)
    return times, paused, copies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--alternate", nargs="?", const="pause", choices=tuple(ALTERNATE))
    parser.add_argument("--settle", type=int, default=SETTLE)
    parser.add_argument("--profile", default=None)
    args = parser.parse_args()
    if args.settle < 0:
        parser.error(f"--settle: {args.settle} is not a number of steps (0 or more)")
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
        times, paused, copies = train(
            args.steps, args.warmup, args.repeats, args.alternate, args.settle
        )
    if args.profile:
        prof.export_chrome_trace(args.profile)
    print(
        json.dumps(
            {
                "loop_s": statistics.median(times),
                "loops_s": times,
                **(
                    {"paused_s": paused, "paused_loop_s": statistics.median(paused)}
                    if paused
                    else {}
                ),
                "steps": args.steps,
                "warmup": args.warmup,
                **copies,
            }
        )
    )


if __name__ == "__main__":
    main()
