"""A small U-Net-style segmentation model (an encoder of four stages, a decoder with skip
connections, channels_last, bf16 autocast, AdamW) trained on 16 pinned 3 x 256 x 256 images and
their masks a batch, uploaded with non_blocking=True. After every step the program calls
`torch.cuda.empty_cache()`, "to keep memory down", as is often advised against out-of-memory
errors: the allocator gives its cached blocks back with cudaFree, which waits for the whole GPU,
and the next step asks the driver for them again (cudaMalloc). The GPU sits idle while the host
frees and allocates. The fix: no such call in the loop; the allocator keeps its blocks and
reuses them. The same steps either way."""

# cause: synchronizations
# fix: no torch.cuda.empty_cache() in the loop: the caching allocator reuses its blocks
# step: STEP
# resident: no
# gpus: 1
# needs:

import itertools

import torch
import torch.nn.functional as F
from corpus import Loop, options
from torch import nn

args = options(200)
BATCH, SIDE, POOL = 16, 256, 4
WIDTHS = (32, 64, 128, 256)
device = torch.device("cuda")
torch.manual_seed(0)


def block(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(True),
        nn.Conv2d(cout, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(True),
    )  # fmt: skip


class UNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        chans = (3, *WIDTHS)
        self.down = nn.ModuleList(block(a, b) for a, b in itertools.pairwise(chans))
        self.up = nn.ModuleList(
            nn.ConvTranspose2d(b, a, 2, stride=2) for a, b in itertools.pairwise(WIDTHS)
        )
        self.merge = nn.ModuleList(block(2 * a, a) for a in WIDTHS[:-1])
        self.out = nn.Conv2d(WIDTHS[0], 1, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skips = []
        for i, stage in enumerate(self.down):
            x = stage(x if i == 0 else F.max_pool2d(x, 2))
            skips.append(x)
        for up, merge, skip in zip(
            reversed(self.up), reversed(self.merge), reversed(skips[:-1]), strict=True
        ):
            x = merge(torch.cat([up(x), skip], 1))
        return self.out(x)


model = UNet().to(device, memory_format=torch.channels_last)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
images = [torch.rand(BATCH, 3, SIDE, SIDE).pin_memory() for _ in range(POOL)]
masks = [(torch.rand(BATCH, 1, SIDE, SIDE) > 0.5).float().pin_memory() for _ in range(POOL)]


def train_step(i: int) -> None:
    x = images[i % POOL].to(device, non_blocking=True)  # STEP
    y = masks[i % POOL].to(device, non_blocking=True)  # STEP
    with torch.autocast("cuda", dtype=torch.bfloat16):
        logits = model(x.contiguous(memory_format=torch.channels_last))
    loss = F.binary_cross_entropy_with_logits(logits.float(), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    if not args.fixed:
        del x, y, logits, loss
        torch.cuda.empty_cache()  # STEP


torch.backends.cudnn.benchmark = True
for i in range(POOL):  # warm-up: cuDNN's choice of kernels
    train_step(i)
Loop(args, sync=torch.cuda.synchronize).timed(train_step).report()
