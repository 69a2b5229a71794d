"""A convnet trained on images augmented on the host with NumPy in the training loop itself, no
DataLoader: each step draws 128 uint8 images of 3 x 112 x 112 from an in-memory set, pads and
crops them at a random offset, flips half of them, jitters each image's brightness and contrast,
normalizes them to float32, pins the batch (`torch.from_numpy(...).pin_memory()`) and moves it
with `.to(device, non_blocking=True)`. The GPU waits while the main thread makes every batch.
The fix: a pool of 4 threads makes the batches 4 steps ahead (NumPy lets go of the GIL in its
array work), and the loop takes each finished batch in turn; the same batches, the same copies.
--resident: 8 batches made before the loop and kept on the GPU, used in turn."""

# cause: input_starved
# fix: a pool of 4 threads makes the batches 4 steps ahead; the loop takes each in turn
# step: STEP
# resident: yes
# gpus: 1
# needs:

from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np
import torch
import torch.nn.functional as F
from corpus import Loop, options
from models import resnet

args = options(150, resident=True)
IMAGES, BATCH, SIDE, PAD, AHEAD = 1024, 128, 112, 8, 4
MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32).reshape(1, 3, 1, 1) * 255
STD = np.array([0.229, 0.224, 0.225], dtype=np.float32).reshape(1, 3, 1, 1) * 255
device = torch.device("cuda")
torch.manual_seed(0)
torch.backends.cudnn.benchmark = True
images = np.random.default_rng(0).integers(0, 256, (IMAGES, 3, SIDE, SIDE), dtype=np.uint8)
labels = np.random.default_rng(1).integers(0, 100, IMAGES)
padded = np.pad(images, ((0, 0), (0, 0), (PAD, PAD), (PAD, PAD)), mode="reflect")


def make_batch(i: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Batch `i`, augmented on the host and pinned: the same batch whoever makes it."""
    rng = np.random.default_rng(1000 + i)
    pick = rng.integers(0, IMAGES, BATCH)
    top, left = rng.integers(0, 2 * PAD + 1, 2)
    x = padded[pick, :, top : top + SIDE, left : left + SIDE].astype(np.float32)
    flip = rng.random(BATCH) < 0.5
    x[flip] = x[flip, :, :, ::-1]
    gain = rng.uniform(0.8, 1.2, (BATCH, 1, 1, 1)).astype(np.float32)
    shift = rng.uniform(-20, 20, (BATCH, 1, 1, 1)).astype(np.float32)
    mean = x.mean(axis=(1, 2, 3), keepdims=True)
    np.clip((x - mean) * gain + mean + shift, 0, 255, out=x)
    x -= MEAN
    x /= STD
    return torch.from_numpy(x).pin_memory(), torch.from_numpy(labels[pick]).pin_memory()


model = resnet(100, widths=(32, 64, 128, 256)).to(device, memory_format=torch.channels_last)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True)


def train_step(x: torch.Tensor, y: torch.Tensor) -> None:
    with torch.autocast("cuda", torch.bfloat16):
        loss = F.cross_entropy(model(x.contiguous(memory_format=torch.channels_last)), y)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()


resident = []
if args.resident:
    resident = [tuple(t.to(device) for t in make_batch(i)) for i in range(8)]
pool = ThreadPoolExecutor(AHEAD) if args.fixed else None
ahead: deque[Future[tuple[torch.Tensor, torch.Tensor]]] = deque()
if pool is not None:
    ahead.extend(pool.submit(make_batch, i) for i in range(AHEAD))
for i in range(3):  # warm-up: cuDNN's choice of kernels
    x, y = (t.to(device) for t in make_batch(i))
    train_step(x, y)
torch.cuda.synchronize()
loop = Loop(args, sync=torch.cuda.synchronize)
loop.start()
for i in range(args.steps):
    if args.resident:
        x, y = resident[i % len(resident)]
    else:
        if pool is not None:
            host_x, host_y = ahead.popleft().result()
            ahead.append(pool.submit(make_batch, i + AHEAD))
        else:
            host_x, host_y = make_batch(i)
        x = host_x.to(device, non_blocking=True)  # STEP
        y = host_y.to(device, non_blocking=True)
    train_step(x, y)
    loop.step()
torch.cuda.synchronize()
loop.stop()
if pool is not None:
    pool.shutdown(cancel_futures=True)
loop.report()
