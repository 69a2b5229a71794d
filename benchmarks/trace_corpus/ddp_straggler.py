"""DDP training of an MLP on 2 GPUs (one process a GPU, NCCL), no data loader: a few pinned
batches made once, taken in turn. Rank 1 keeps the job's metrics log and builds a record for it
every step before its forward, in pure Python (a histogram, mean and spread of its recent
values, --slow-ms of it): it reaches the gradients' all-reduce late, and rank 0's GPU waits in
NCCL's kernels. After the model is built the script imports heavy modules it then uses a
little, as real scripts do. The fix: the record built every 50 steps, off most steps' path.

    torchrun --standalone --nproc_per_node 2 ddp_straggler.py [--fixed]
"""

# cause: straggler
# fix: rank 1 builds its log record every 50 steps instead of every step
# step: STEP
# resident: no
# gpus: 2
# needs:

import os
import random
import time

import corpus
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

args = corpus.options(300, slow_ms=(float, 8.0), batch=(int, 768))
rank = int(os.environ.get("RANK", "0"))
device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
torch.cuda.set_device(device)
dist.init_process_group("nccl", device_id=device)

torch.manual_seed(0)
layers: list[torch.nn.Module] = []
for _ in range(4):
    layers += [torch.nn.Linear(4096, 4096), torch.nn.ReLU()]
model = DistributedDataParallel(torch.nn.Sequential(*layers).to(device), device_ids=[device.index])
optimizer = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)

# Heavy imports after the model, as real scripts make them; each used a little below.
import numpy  # noqa: E402

try:
    import torchvision
except ImportError:
    torchvision = None
try:
    from torch.utils.tensorboard import SummaryWriter
except ImportError:
    SummaryWriter = None
versions = {
    "numpy": numpy.__version__,
    "torchvision": getattr(torchvision, "__version__", None),
    "tensorboard": SummaryWriter is not None,
}

torch.manual_seed(1 + rank)
batches = [
    (torch.randn(args.batch, 4096).pin_memory(), torch.randn(args.batch, 4096).pin_memory())
    for _ in range(4)
]
rng = random.Random(rank)
recent = [rng.random() for _ in range(1 << 16)]  # the rank's recent per-sample values
log: list[dict] = []


def record(step: int, ms: float) -> dict:
    """A step's log record, in pure Python: a 64-bin histogram, mean and spread of the values
    it reaches in `ms`, read in chunks of 512 (the clock read once a chunk). Bound by time,
    not by a count of values calibrated once at the start, whose time a step moved from run
    to run with the host (below)."""
    counts, total, square, n = [0] * 64, 0.0, 0.0, 0
    until = time.perf_counter() + ms * 1e-3
    while n == 0 or time.perf_counter() < until:
        at = n % len(recent)
        for v in recent[at : at + 512]:
            counts[min(int(v * 64), 63)] += 1
            total += v
            square += v * v
        n += len(recent[at : at + 512])
    mean = total / n
    return {"step": step, "mean": mean, "std": max(square / n - mean * mean, 0.0) ** 0.5,
            "hist": counts, **versions}  # fmt: skip


# Rank 1's record takes --slow-ms whatever the host's speed; the other ranks make none. Every
# run, traced or not, then loses the same time a step, so that what the fix saves is the
# program's own: a count of values timed at the start took one traced job's rank 1 4.8 ms a
# step, and another's untraced loop 3.0 to 5.4 s, the measured saving moving with it. The
# record is cut in chunks so that the clock is read every 512 values, not on each one.
values = args.slow_ms if rank == 1 else 0


def step(i: int) -> None:
    x, y = (t.to(device, non_blocking=True) for t in batches[i % len(batches)])  # STEP
    if values and (not args.fixed or i % 50 == 0):
        log.append(record(i, values))  # rank 1's log record: --slow-ms of host work
    loss = F.mse_loss(model(x), y)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()


for i in range(5):  # warm-up: NCCL's channels, cuBLAS's handles, DDP's buckets
    step(i)
dist.barrier()
torch.cuda.synchronize()
loop = corpus.Loop(args)
loop.start()
for i in range(args.steps):
    step(i)
torch.cuda.synchronize()
loop.stop()
if rank == 0:
    loop.report()
dist.destroy_process_group()
