"""DDP training of an MLP on 2 GPUs (one process a GPU, NCCL), no data loader: a few pinned
batches made once, taken in turn. Rank 1 keeps the job's metrics log and builds a record for it
every step before its forward, in pure Python (a histogram, mean and spread of its recent
values, about --slow-ms): it reaches the gradients' all-reduce late, and rank 0's GPU waits in
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

import itertools
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


def record(step: int, n: int) -> dict:
    """A step's log record, in pure Python: a 64-bin histogram, mean and spread of n values."""
    counts = [0] * 64
    total = square = 0.0
    for v in itertools.islice(itertools.cycle(recent), n):
        counts[min(int(v * 64), 63)] += 1
        total += v
        square += v * v
    mean = total / n
    return {"step": step, "mean": mean, "std": max(square / n - mean * mean, 0.0) ** 0.5,
            "hist": counts, **versions}  # fmt: skip


def calibrated(ms: float) -> int:
    """How many values make a record take `ms` on this host, timed by the fastest of 9 tries."""
    n, times = 20_000, []
    for _ in range(9):  # a median of 5 gave one traced job's rank 1 4.8 ms a step (its looks)
        t = time.perf_counter()
        record(-1, n)
        times.append(time.perf_counter() - t)
    return max(int(n * ms * 1e-3 / min(times)), 1)


values = calibrated(args.slow_ms) if rank == 1 else 0


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
