"""A PyTorch loop for `xferscope trace`'s benchmark that makes each batch in one pageable
buffer, reused, and copies it with `.to("cuda")`; --fixed makes it in two pinned buffers, used
in turn (each refilled once its last copy is done), and copies it with non_blocking=True: the
same host work, only the memory and the copy differ; --resident keeps one batch on the GPU.
Each step the host refreshes the batch's first rows only (FRESH), so that the copy, not the
host's random number generator (whose 32 MiB a step took 3.6-5.5 s over 100 steps from one
process to the next), is what the fix changes. Prints the loop's time as JSON."""

import time

import torch
from loop_options import options, report

args = options(100)

torch.manual_seed(0)
model = torch.nn.Sequential(
    torch.nn.Linear(4096, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 4096)
).cuda()
shape = (2048, 4096)  # 32 MiB of fp32 a batch
FRESH = 32  # rows made anew each step
pageable = torch.rand(shape)
pinned = [torch.rand(shape).pin_memory() for _ in range(2)]
copied = [torch.cuda.Event() for _ in range(2)]
resident = torch.rand(shape, device="cuda")
turn = [0]


def batch() -> torch.Tensor:
    if args.resident:
        return resident
    if args.fixed:
        k = turn[0] = 1 - turn[0]
        copied[k].synchronize()  # its copy two batches ago is done: refill it
        pinned[k][:FRESH].uniform_()
        on_gpu = pinned[k].to("cuda", non_blocking=True)
        copied[k].record()
        return on_gpu
    pageable[:FRESH].uniform_()
    return pageable.to("cuda")  # pageable: the host waits for the copy


for _ in range(3):
    model(batch()).sum().backward()
torch.cuda.synchronize()
start = time.perf_counter()
for _ in range(args.steps):
    out = model(batch())
    out.square().mean().backward()
torch.cuda.synchronize()
report(args.steps, time.perf_counter() - start)
