"""A PyTorch loop for `xferscope trace`'s benchmark that uploads 256 small tensors (4 KiB each,
pinned) one by one every step; --fixed packs them into one pinned tensor made once and uploads
it in one copy; --resident keeps them on the GPU. Prints the loop's time as JSON."""

import time

import torch
from loop_options import options, report

args = options(200)

torch.manual_seed(0)
pieces = [torch.rand(1024).pin_memory() for _ in range(256)]
packed = torch.cat(pieces).pin_memory()
weight = torch.rand(1024, 1024, device="cuda")
resident = torch.cat(pieces).cuda()


def upload() -> torch.Tensor:
    if args.resident:
        return resident
    if args.fixed:
        return packed.to("cuda", non_blocking=True)
    return torch.cat([p.to("cuda", non_blocking=True) for p in pieces])


for _ in range(3):
    (upload().view(256, 1024) @ weight).sum()
torch.cuda.synchronize()
start = time.perf_counter()
for _ in range(args.steps):
    x = upload().view(256, 1024)
    for _ in range(4):
        x = torch.tanh(x @ weight)
torch.cuda.synchronize()
report(args.steps, time.perf_counter() - start)
