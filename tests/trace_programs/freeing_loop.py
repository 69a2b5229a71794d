"""A PyTorch loop that gives the caching allocator's blocks back every step with
`torch.cuda.empty_cache()` (cudaFree, which waits for the whole GPU, and the driver's cuMemFree
inside it): each step uploads 64 pinned 4 KiB tensors one by one and a 16 MiB batch, and
multiplies. --fixed leaves the cache alone. The writer thread turns the driver's callbacks off
while the program is often inside those frees. Prints the loop's time as JSON."""

import time

import torch
from loop_options import options, report

args = options(200)

torch.manual_seed(0)
pieces = [torch.rand(1024).pin_memory() for _ in range(64)]
batch = torch.rand(2048, 2048).pin_memory()
weight = torch.rand(2048, 2048, device="cuda")


def step() -> None:
    small = torch.cat([p.to("cuda", non_blocking=True) for p in pieces])
    x = batch.to("cuda", non_blocking=True)  # STEP
    for _ in range(4):
        x = torch.tanh(x @ weight)
    (x.sum() + small.sum()).neg_()
    del x, small
    if not args.fixed:
        torch.cuda.empty_cache()


for _ in range(3):
    step()
torch.cuda.synchronize()
start = time.perf_counter()
for _ in range(args.steps):
    step()
torch.cuda.synchronize()
report(args.steps, time.perf_counter() - start)
