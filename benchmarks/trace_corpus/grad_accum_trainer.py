"""An HF Trainer-style training loop: a DataLoader (4 workers, shuffled, the DataLoader's default
pin_memory=False) over an in-memory TensorDataset of float32 images 3x128x128 and their labels,
64 a micro-batch (12.6 MB); each micro-batch moved with `[t.to(device) for t in batch]` as the
trainer's input preparation does, a convnet (channels_last, bfloat16 autocast) run on it, the
loss scaled for gradient accumulation over 4 micro-batches, and at each optimizer step the
gradients clipped (`clip_grad_norm_`), AdamW stepped and the LR scheduled linearly to zero.

Cause: the batches come from the workers in pageable (shared) memory and `.to(device)` copies
them from there: the driver stages each copy through its own buffer while the host waits, after
the step before is done. --fixed: `pin_memory=True` and `.to(device, non_blocking=True)`, nothing
else changed. --resident: the micro-batches kept on the GPU. --steps counts micro-batches."""

# cause: pageable_copies
# fix: pin_memory=True in the DataLoader and .to(device, non_blocking=True)
# step: STEP
# resident: yes
# gpus: 1
# needs:

import math

import torch
import torch.nn.functional as F
from corpus import Loop, options
from models import resnet
from torch.utils.data import DataLoader, TensorDataset

args = options(200, resident=True)

MICRO, ACCUM, SIDE, CLASSES, WARMUP = 64, 4, 128, 1000, 4
device = torch.device("cuda")
torch.manual_seed(0)


# one epoch holds every micro-batch the run takes: no epoch starts inside the loop
need = (args.steps + WARMUP) * MICRO
base = torch.rand(1024, 3, SIDE, SIDE)
images = base.repeat(math.ceil(need / len(base)), 1, 1, 1)[:need]
labels = torch.randint(0, CLASSES, (need,))
del base
loader = DataLoader(
    TensorDataset(images, labels),
    batch_size=MICRO,
    shuffle=True,
    num_workers=4,
    pin_memory=args.fixed,
    drop_last=True,
    generator=torch.Generator().manual_seed(0),
)

model = resnet(CLASSES).to(device, memory_format=torch.channels_last)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
updates = math.ceil((args.steps + WARMUP) / ACCUM)
schedule = torch.optim.lr_scheduler.LambdaLR(opt, lambda u: max(0.0, 1.0 - u / updates))
if args.resident:
    kept = [
        (
            images[j * MICRO : (j + 1) * MICRO].to(device),
            labels[j * MICRO : (j + 1) * MICRO].to(device),
        )
        for j in range(8)
    ]
else:
    batches = iter(loader)


def micro_step(i: int) -> None:
    if args.resident:
        batch = kept[i % len(kept)]
    else:
        batch = [t.to(device, non_blocking=args.fixed) for t in next(batches)]  # STEP
    x, y = batch
    x = x.contiguous(memory_format=torch.channels_last)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = F.cross_entropy(model(x), y) / ACCUM
    loss.backward()
    if (i + 1) % ACCUM == 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        schedule.step()
        opt.zero_grad(set_to_none=True)


for i in range(WARMUP):
    micro_step(i)
torch.cuda.synchronize()
loop = Loop(args, sync=torch.cuda.synchronize)
loop.start()
for i in range(WARMUP, WARMUP + args.steps):
    micro_step(i)
    loop.step()
torch.cuda.synchronize()
loop.stop()
loop.report()
