"""A PyTorch loop for `xferscope trace`'s tests that reads its loss with `.item()` every step
(a wait for the GPU at the line marked ITEM_LINE) and then does HOST_MS of work on the host (a
step's bookkeeping), or, with --fixed, sums the loss on the GPU and reads it once after the
loop, so that the host's work overlaps the GPU's. Prints the steps' wall time as JSON."""

import argparse
import json
import time

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=300)
parser.add_argument("--host-ms", type=float, default=0.5)
parser.add_argument("--fixed", action="store_true")
args = parser.parse_args()

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(4096, 4096), torch.nn.Linear(4096, 4096)).cuda()
x = torch.rand(512, 4096, device="cuda")
total, on_gpu = 0.0, torch.zeros((), device="cuda")


def bookkeeping() -> None:
    """HOST_MS of the host's own work, as a step's logging and scheduling take."""
    until = time.perf_counter() + args.host_ms / 1e3
    while time.perf_counter() < until:
        pass


for _ in range(5):  # warm-up: kernels chosen and loaded
    model(x).sum().backward()
torch.cuda.synchronize()
start = time.perf_counter()
for _ in range(args.steps):
    loss = model(x).square().mean()
    loss.backward()
    if args.fixed:
        on_gpu += loss.detach()
    else:
        total += loss.item()  # ITEM_LINE: waits for the GPU every step
    bookkeeping()
if args.fixed:
    total = on_gpu.item()
torch.cuda.synchronize()
seconds = time.perf_counter() - start
print(json.dumps({"steps": args.steps, "seconds": seconds, "loss": total}))
