"""A convnet training loop that is already fine: a ResNet-style network (channels_last, bfloat16
autocast) trains on batches of 512 uint8 images 3x128x128 and their labels, from a pool of pinned
tensors into which the host writes each step's newest pixels and labels, prefetched one step
ahead on a side stream as timm's PrefetchLoader does: copied with non_blocking=True, converted
and normalized there, the compute stream made to wait for that stream and each tensor recorded
on it before use. The loss is summed on the GPU and read every 100 steps.

Cause: none; the GPU is the bottleneck and nothing makes it wait. --fixed: the same program (there
is nothing to fix). --resident: the batches kept on the GPU, the same conversion on the side
stream."""

# cause: none
# fix: nothing to fix: --fixed runs the same program
# step: STEP
# resident: yes
# gpus: 1
# needs:

import torch
import torch.nn.functional as F
from corpus import Loop, options
from models import resnet

args = options(200, resident=True)

BATCH, SIDE, CLASSES, POOL = 512, 128, 1000, 4
device = torch.device("cuda")
torch.manual_seed(0)


model = resnet(CLASSES).to(device, memory_format=torch.channels_last)
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-5)
shape = (BATCH, 3, SIDE, SIDE)
images = [
    torch.randint(0, 256, shape, dtype=torch.uint8)
    .contiguous(memory_format=torch.channels_last)
    .pin_memory()
    for _ in range(POOL)
]
labels = [torch.randint(0, CLASSES, (BATCH,)).pin_memory() for _ in range(POOL)]
on_gpu = []
if args.resident:
    on_gpu = [(x.to(device), y.to(device)) for x, y in zip(images, labels, strict=True)]
mean = torch.tensor([0.485, 0.456, 0.406], device=device).view(1, 3, 1, 1) * 255
std = torch.tensor([0.229, 0.224, 0.225], device=device).view(1, 3, 1, 1) * 255
side = torch.cuda.Stream()


def prefetch(i: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Batch i, on its way to the GPU on the side stream."""
    k = i % POOL
    images[k][0, :, 0].random_(0, 256)  # the loader's newest pixels and labels
    labels[k].random_(0, CLASSES)
    with torch.cuda.stream(side):
        if args.resident:
            x, y = on_gpu[k]
        else:
            x = images[k].to(device, non_blocking=True)  # STEP
            y = labels[k].to(device, non_blocking=True)  # STEP
        x = x.float().sub_(mean).div_(std)
    return x, y


def train(steps: int, logged: list[float], clock: Loop | None = None) -> None:
    total = torch.zeros((), device=device)
    nxt = prefetch(0)
    for i in range(steps):
        torch.cuda.current_stream().wait_stream(side)
        x, y = nxt
        x.record_stream(torch.cuda.current_stream())
        y.record_stream(torch.cuda.current_stream())
        nxt = prefetch(i + 1)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        total += loss.detach()
        if (i + 1) % 100 == 0:
            logged.append(total.item() / 100)  # every 100 steps: the mean loss
            total.zero_()
        if clock is not None:
            clock.step()


train(5, [])
torch.cuda.synchronize()
loop = Loop(args)
loop.start()
train(args.steps, [], loop)
torch.cuda.synchronize()
loop.stop()
loop.report()
