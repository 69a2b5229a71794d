"""A small ResNet-style convnet (channels_last, bf16 autocast) trained for --epochs epochs on an
in-memory dataset of uint8 images, each augmented on the CPU as it is read (random crop with
padding, random flip, to float, normalized), through a DataLoader with 4 workers and pinned
batches; after each epoch, an evaluation on 2 batches kept on the GPU. Each epoch makes a new
DataLoader without persistent workers, so each epoch starts its workers again and the GPU waits
for the first batches of every epoch. The fix: one DataLoader made before the epochs, with
persistent_workers=True. --resident: the epoch's batches made once, kept on the GPU."""

# cause: input_starved
# fix: one DataLoader made before the epochs, with persistent_workers=True
# step: STEP
# resident: yes
# gpus: 1
# needs:

import corpus
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset

args = corpus.options(120, resident=True, epochs=(int, 10))
BATCH, SIDE, PAD = 128, 96, 8
per_epoch = max(args.steps // args.epochs, 1)
device = torch.device("cuda")
torch.manual_seed(0)
torch.backends.cudnn.benchmark = True
MEAN = torch.tensor([0.485, 0.456, 0.406]).view(3, 1, 1) * 255
STD = torch.tensor([0.229, 0.224, 0.225]).view(3, 1, 1) * 255


class Images(Dataset):
    """uint8 images in memory, augmented on the CPU as they are read."""

    def __init__(self, n: int) -> None:
        self.images = torch.randint(0, 256, (n, 3, SIDE, SIDE), dtype=torch.uint8)
        self.labels = torch.randint(0, 10, (n,))

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        image = F.pad(self.images[i], (PAD, PAD, PAD, PAD))
        top, left = torch.randint(0, 2 * PAD + 1, (2,)).tolist()
        image = image[:, top : top + SIDE, left : left + SIDE]
        if torch.rand(()) < 0.5:
            image = image.flip(2)
        return (image.float() - MEAN) / STD, self.labels[i]


def conv_bn(cin: int, cout: int, stride: int = 1) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True)
    )


class Residual(nn.Module):
    def __init__(self, c: int) -> None:
        super().__init__()
        self.body = nn.Sequential(conv_bn(c, c), nn.Conv2d(c, c, 3, 1, 1, bias=False))
        self.norm = nn.BatchNorm2d(c)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(x + self.norm(self.body(x)))


model = nn.Sequential(
    conv_bn(3, 64), Residual(64), Residual(64),
    conv_bn(64, 128, 2), Residual(128), Residual(128),
    conv_bn(128, 256, 2), Residual(256), Residual(256),
    nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(256, 10),
).to(device, memory_format=torch.channels_last)  # fmt: skip
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
dataset = Images(per_epoch * BATCH)
evaluation = [  # 2 batches kept on the GPU, not augmented
    (((dataset.images[k : k + BATCH].float() - MEAN) / STD).to(device),
     dataset.labels[k : k + BATCH].to(device))
    for k in (0, BATCH)
]  # fmt: skip


def loader(persistent: bool) -> DataLoader:
    return DataLoader(dataset, BATCH, shuffle=True, drop_last=True, num_workers=4,
                      pin_memory=True, persistent_workers=persistent)  # fmt: skip


def train_step(x: torch.Tensor, y: torch.Tensor) -> None:
    with torch.autocast("cuda", torch.bfloat16):
        loss = F.cross_entropy(model(x.contiguous(memory_format=torch.channels_last)), y)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()


def evaluate() -> float:
    model.eval()
    correct = torch.zeros((), device=device)
    with torch.no_grad(), torch.autocast("cuda", torch.bfloat16):
        for x, y in evaluation:
            correct += (model(x.contiguous(memory_format=torch.channels_last)).argmax(1) == y).sum()
    model.train()
    return correct.item() / (BATCH * len(evaluation))  # once an epoch, not a step's wait


resident = []
if args.resident:
    resident = [(x.to(device), y.to(device)) for x, y in DataLoader(dataset, BATCH, drop_last=True)]
for _ in range(4):  # warm-up: cuDNN's choice of kernels (the evaluation's convolutions too)
    train_step(*evaluation[0])
fixed_loader = loader(persistent=True) if args.fixed else None  # its workers start at 1st epoch
torch.cuda.synchronize()
loop = corpus.Loop(args, sync=torch.cuda.synchronize)
loop.start()
accuracy = []
for _ in range(args.epochs):
    if args.resident:
        batches = resident
    else:  # unfixed: a new DataLoader, whose workers start now
        batches = fixed_loader if fixed_loader is not None else loader(persistent=False)
    for x, y in batches:
        if not args.resident:
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)  # STEP
        train_step(x, y)
        loop.step()
    accuracy.append(evaluate())
torch.cuda.synchronize()
loop.stop()
loop.report(per_epoch * args.epochs)
