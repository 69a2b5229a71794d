"""A data-parallel training loop for `xferscope trace`: one process per GPU under torchrun
(DistributedDataParallel, NCCL), or alone on one GPU. Each step the host makes its input
(--input-ms of work, as a loader's; the rank --slow-rank takes --slow-ms more, a straggler whose
input is slow), copies it up pinned with non_blocking=True, then runs an MLP forward and
backward (under DDP the gradients' all-reduce waits for every rank) and the optimizer's step.
Rank 0 prints the steady state's step time as JSON.

    torchrun --nproc_per_node 4 ddp_loop.py --slow-rank 2
    python3 ddp_loop.py --input-ms 20
"""

import argparse
import itertools
import json
import os
import time

import torch
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=100)
parser.add_argument("--warmup", type=int, default=5)
parser.add_argument("--width", type=int, default=4096)
parser.add_argument("--batch", type=int, default=1024)
parser.add_argument("--input-ms", type=float, default=2.0)
parser.add_argument("--slow-rank", type=int, default=-1)
parser.add_argument("--slow-ms", type=float, default=20.0)
args = parser.parse_args()

rank = int(os.environ.get("RANK", "0"))
world = int(os.environ.get("WORLD_SIZE", "1"))
device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
torch.cuda.set_device(device)
if world > 1:
    dist.init_process_group("nccl", device_id=device)

torch.manual_seed(rank)
layers: list[torch.nn.Module] = []
for _ in range(4):
    layers += [torch.nn.Linear(args.width, args.width), torch.nn.ReLU()]
model: torch.nn.Module = torch.nn.Sequential(*layers).to(device)
if world > 1:
    model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[device.index])
optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
# a loader's batches: distinct data each step (the same tensor each step is a constant, which
# the trace tells apart from an input), four pinned in turn
batches = itertools.cycle([torch.randn(args.batch, args.width).pin_memory() for _ in range(4)])
input_s = (args.input_ms + (args.slow_ms if rank == args.slow_rank else 0.0)) * 1e-3


def next_input() -> torch.Tensor:
    """The host's input for a step: work that takes input_s, as a loader's would."""
    time.sleep(input_s)
    return next(batches)


start = time.perf_counter()
for step in range(args.warmup + args.steps):
    if step == args.warmup:
        torch.cuda.synchronize()
        start = time.perf_counter()
    x = next_input().to(device, non_blocking=True)  # INPUT_LINE
    loss = model(x).square().mean()
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
torch.cuda.synchronize()
seconds = time.perf_counter() - start
if world > 1:
    dist.barrier()
    dist.destroy_process_group()
if rank == 0:
    print(json.dumps({"steps": args.steps, "step_s": seconds / args.steps, "ranks": world}))
