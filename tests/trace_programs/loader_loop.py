"""A ResNet-18 training loop fed by a DataLoader, for `xferscope trace`: bf16 autocast,
channels_last, batches of BATCH x 3 x 160 x 160 fp32 made by WORKERS workers from CPU tensors,
pinned and copied with non_blocking=True (the usual fixes), so that the GPU waits for its input.
--resident keeps one batch on the GPU and steps on it: the step time with no input pipeline.
--device-loader moves the batches with xferscope.torch.DeviceLoader instead (pageable batches,
copied on its thread, 2 ahead). --pool reads each sample from a pool of 1024 images made once
(a cheap dataset: what is left is the loader's own path). Prints the steady state's step time
as JSON."""

import argparse
import json
import time

import torch
import torchvision

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=40)
parser.add_argument("--batch", type=int, default=256)
parser.add_argument("--workers", type=int, default=4)
parser.add_argument("--resident", action="store_true")
parser.add_argument("--device-loader", action="store_true")
parser.add_argument("--pool", action="store_true")
args = parser.parse_args()


class Images(torch.utils.data.Dataset):
    """Random images and labels, made on the CPU as a dataset's transforms would."""

    def __len__(self) -> int:
        return 1 << 20

    def __init__(self) -> None:
        g = torch.Generator().manual_seed(0)
        self.pool = torch.rand(1024, 3, 160, 160, generator=g) if args.pool else None

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        if self.pool is not None:
            return self.pool[i % 1024], i % 1000
        g = torch.Generator().manual_seed(i)
        return torch.rand(3, 160, 160, generator=g), i % 1000


torch.manual_seed(0)
model = torchvision.models.resnet18().cuda().to(memory_format=torch.channels_last)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
loss_fn = torch.nn.CrossEntropyLoss()
loader = torch.utils.data.DataLoader(
    Images(), batch_size=args.batch, num_workers=args.workers, pin_memory=not args.device_loader
)


def step(x: torch.Tensor, y: torch.Tensor) -> None:
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = loss_fn(model(x.to(memory_format=torch.channels_last)), y)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()


if args.device_loader:
    import xferscope.torch

    batches = iter(xferscope.torch.DeviceLoader(loader, device="cuda"))
else:
    batches = iter(loader)
resident = [t.cuda() for t in next(batches)]
for _ in range(3):  # warm-up: kernels chosen, workers started
    step(*resident)
torch.cuda.synchronize()
start = time.perf_counter()
for _ in range(args.steps):
    if args.resident:
        x, y = resident
    else:
        cpu_x, cpu_y = next(batches)  # LOADER_LINE: waits for the workers' next batch
        x, y = cpu_x.cuda(non_blocking=True), cpu_y.cuda(non_blocking=True)  # on it: no copy
    step(x, y)
torch.cuda.synchronize()
seconds = time.perf_counter() - start
print(json.dumps({"steps": args.steps, "step_s": seconds / args.steps}))
