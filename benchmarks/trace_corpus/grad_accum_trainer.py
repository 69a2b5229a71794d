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
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

args = options(200, resident=True)

MICRO, ACCUM, SIDE, CLASSES, WARMUP = 64, 4, 128, 1000, 4
device = torch.device("cuda")
torch.manual_seed(0)


class Block(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(cin, cout, 3, stride, 1, bias=False),
            nn.BatchNorm2d(cout),
            nn.ReLU(inplace=True),
            nn.Conv2d(cout, cout, 3, 1, 1, bias=False),
            nn.BatchNorm2d(cout),
        )
        self.skip = nn.Identity()
        if stride != 1 or cin != cout:
            self.skip = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.body(x) + self.skip(x))


def convnet(widths: tuple[int, ...] = (64, 128, 256, 512), depth: int = 2) -> nn.Module:
    layers: list[nn.Module] = [
        nn.Conv2d(3, widths[0], 7, 2, 3, bias=False),
        nn.BatchNorm2d(widths[0]),
        nn.ReLU(inplace=True),
        nn.MaxPool2d(3, 2, 1),
    ]
    cin = widths[0]
    for i, width in enumerate(widths):
        for j in range(depth):
            layers.append(Block(cin, width, 2 if i > 0 and j == 0 else 1))
            cin = width
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, CLASSES)]
    return nn.Sequential(*layers)


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

model = convnet().to(device, memory_format=torch.channels_last)
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
loop = Loop(args)
loop.start()
for i in range(WARMUP, WARMUP + args.steps):
    micro_step(i)
torch.cuda.synchronize()
loop.stop()
loop.report()
