"""DDP training of a small convnet on 2 GPUs (one process a GPU, NCCL, bf16 autocast), each rank
fed by its own DataLoader over a DistributedSampler: an in-memory dataset of uint8 images 3 x 72
x 72, each augmented on the CPU as it is read (a random 64 x 64 crop, a random flip, to float,
normalized), 128 a batch. The loader has the DataLoader's default num_workers=0, so each rank's
main process augments and collates its next batch between its steps, and both GPUs wait for
their inputs; neither rank is late for the other, so NCCL's waits are short. The fix: 4
persistent workers a rank, pinned batches and `.to(device, non_blocking=True)`.

    torchrun --standalone --nproc_per_node 2 ddp_loader_starved.py [--fixed]
"""

# cause: input_starved
# fix: DataLoader(num_workers=4, persistent_workers=True, pin_memory=True) on each rank
# step: STEP
# resident: no
# gpus: 2
# needs:

import os

import corpus
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset, DistributedSampler

args = corpus.options(200)
BATCH, SIDE, CROP, IMAGES, CLASSES = 128, 72, 64, 4096, 100
rank = int(os.environ.get("RANK", "0"))
device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
torch.cuda.set_device(device)
dist.init_process_group("nccl", device_id=device)
MEAN = torch.tensor([0.485, 0.456, 0.406]).view(3, 1, 1)
STD = torch.tensor([0.229, 0.224, 0.225]).view(3, 1, 1)


class Augmented(Dataset):
    """Images kept as uint8, each cropped, flipped and normalized as it is read."""

    def __init__(self) -> None:
        g = torch.Generator().manual_seed(0)
        self.images = torch.randint(0, 256, (IMAGES, 3, SIDE, SIDE), dtype=torch.uint8, generator=g)
        self.labels = torch.randint(0, CLASSES, (IMAGES,), generator=g)

    def __len__(self) -> int:
        return IMAGES

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        top, left = torch.randint(0, SIDE - CROP + 1, (2,)).tolist()
        image = self.images[i, :, top : top + CROP, left : left + CROP]
        if torch.rand(()) < 0.5:
            image = image.flip(2)
        return (image.float() / 255 - MEAN) / STD, self.labels[i]


def block(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout),
                         nn.ReLU(inplace=True))  # fmt: skip


torch.manual_seed(0)
net = nn.Sequential(
    block(3, 64), block(64, 64), nn.MaxPool2d(2), block(64, 128), block(128, 128),
    nn.MaxPool2d(2), block(128, 256), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
    nn.Linear(256, CLASSES),
)  # fmt: skip
model = DistributedDataParallel(net.to(device, memory_format=torch.channels_last),
                                device_ids=[device.index])  # fmt: skip
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
dataset = Augmented()
sampler = DistributedSampler(dataset, seed=0, drop_last=True)
if args.fixed:
    loader = DataLoader(dataset, BATCH, sampler=sampler, drop_last=True, num_workers=4,
                        persistent_workers=True, pin_memory=True)  # fmt: skip
else:
    loader = DataLoader(dataset, BATCH, sampler=sampler, drop_last=True)


def epochs():
    epoch = 0
    while True:
        sampler.set_epoch(epoch)
        yield from loader
        epoch += 1


batches = epochs()


def step(i: int) -> None:
    x, y = next(batches)
    x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)  # STEP
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = F.cross_entropy(model(x.contiguous(memory_format=torch.channels_last)), y)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()


for i in range(5):  # warm-up: NCCL's channels, cuDNN's choices, DDP's buckets, the workers
    step(i)
dist.barrier()
loop = corpus.Loop(args, sync=torch.cuda.synchronize).timed(step)
if rank == 0:
    loop.report()
dist.destroy_process_group()
