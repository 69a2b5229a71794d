"""A video action-recognition trainer: a small 3D convnet (a Conv3d stem strided in space, three
Conv3d-BatchNorm-ReLU blocks each max-pooled in time and space, global average pooling and a
linear head over 400 classes; cross-entropy, SGD with Nesterov momentum, bfloat16 autocast)
trained on batches of 8 clips of 16 RGB frames at 112 x 112, decoded ahead of time into uint8
NumPy arrays (4.8 MB a batch) and held with their int64 labels in an in-memory pool of 12
batches (the decoder left out). Each step takes the next batch, moves it with
`torch.from_numpy(clip).to("cuda")` and its labels the same way, and converts the frames to
float and normalizes them on the GPU.

Cause: NumPy's arrays are pageable memory, so `.to("cuda")` copies each batch through the
driver's own staging buffer and waits for the copy, and so for the step before it on the GPU,
before the host goes on: the GPU idles while the clip is copied and the step's work is launched.
--fixed: two pinned staging tensors made once (pin_memory=True) and used in turn: each batch
copied into one on the host (an event waited for first: its copy of two steps before, long done),
then moved with `.to("cuda", non_blocking=True)`; the same values. --resident: the pool's
batches and labels moved to the GPU before the loop."""

# cause: pageable_copies
# fix: each batch copied on the host into pinned staging tensors made once, .to(non_blocking=True)
# step: STEP
# resident: yes
# gpus: 1
# needs:

import numpy as np
import torch
import torch.nn.functional as F
from corpus import Loop, options
from torch import nn

args = options(400, resident=True)
BATCH, FRAMES, SIDE, CLASSES, POOL, WARMUP = 8, 16, 112, 400, 12, 4
device = torch.device("cuda")
torch.manual_seed(0)
torch.backends.cudnn.benchmark = True
rng = np.random.default_rng(0)
clips = [rng.integers(0, 256, (BATCH, 3, FRAMES, SIDE, SIDE), dtype=np.uint8) for _ in range(POOL)]
labels = [rng.integers(0, CLASSES, BATCH, dtype=np.int64) for _ in range(POOL)]


def block(cin: int, cout: int) -> list[nn.Module]:
    return [
        nn.Conv3d(cin, cout, 3, padding=1, bias=False),
        nn.BatchNorm3d(cout),
        nn.ReLU(inplace=True),
        nn.MaxPool3d(2),
    ]


model = nn.Sequential(
    nn.Conv3d(3, 32, 3, stride=(1, 2, 2), padding=1, bias=False),  # 16 x 56 x 56
    nn.BatchNorm3d(32),
    nn.ReLU(inplace=True),
    *block(32, 64),  # 8 x 28 x 28
    *block(64, 128),  # 4 x 14 x 14
    *block(128, 256),  # 2 x 7 x 7
    nn.AdaptiveAvgPool3d(1),
    nn.Flatten(),
    nn.Linear(256, CLASSES),
).to(device)
optimizer = torch.optim.SGD(
    model.parameters(), lr=0.01, momentum=0.9, nesterov=True, weight_decay=1e-4
)
# Kinetics' mean and spread, as the torchvision video models take them
mean = torch.tensor([0.43216, 0.394666, 0.37645], device=device).view(1, 3, 1, 1, 1) * 255
std = torch.tensor([0.22803, 0.22145, 0.216989], device=device).view(1, 3, 1, 1, 1) * 255

kept: list[tuple[torch.Tensor, torch.Tensor]] = []
if args.resident:
    kept = [
        (torch.from_numpy(c).to(device), torch.from_numpy(y).to(device))
        for c, y in zip(clips, labels, strict=True)
    ]
# --fixed: two pinned staging tensors for the clips and two for the labels, made once
staging = [
    (
        torch.empty(BATCH, 3, FRAMES, SIDE, SIDE, dtype=torch.uint8, pin_memory=True),
        torch.empty(BATCH, dtype=torch.int64, pin_memory=True),
    )
    for _ in range(2 if args.fixed else 0)
]
copied = [torch.cuda.Event() for _ in range(2)]  # each staging tensor's last copy


def upload(i: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Batch i on the GPU: the clips (uint8) and their labels."""
    if args.resident:
        return kept[i % POOL]
    clip, label = clips[i % POOL], labels[i % POOL]
    if not args.fixed:
        x = torch.from_numpy(clip).to(device)  # STEP
        y = torch.from_numpy(label).to(device)  # STEP
        return x, y
    host_x, host_y = staging[i % 2]
    copied[i % 2].synchronize()  # STEP: its copy of two steps before, long done
    host_x.copy_(torch.from_numpy(clip))
    host_y.copy_(torch.from_numpy(label))
    x = host_x.to(device, non_blocking=True)  # STEP
    y = host_y.to(device, non_blocking=True)  # STEP
    copied[i % 2].record()
    return x, y


def train_step(clip: torch.Tensor, label: torch.Tensor) -> torch.Tensor:
    x = (clip.float() - mean) / std
    with torch.autocast("cuda", torch.bfloat16):
        loss = F.cross_entropy(model(x), label)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    return loss.detach()


for i in range(WARMUP):  # warm-up: cuDNN's choice of kernels
    train_step(*upload(i))
total = torch.zeros((), device=device)  # the loop's losses, summed on the GPU, read once
torch.cuda.synchronize()
loop = Loop(args, sync=torch.cuda.synchronize)
loop.start()
for i in range(WARMUP, WARMUP + args.steps):
    total += train_step(*upload(i))
    loop.step()
torch.cuda.synchronize()
loop.stop()
loop.report(mean_loss=round(total.item() / args.steps, 6))
