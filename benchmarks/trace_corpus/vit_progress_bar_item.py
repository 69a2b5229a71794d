"""Fine-tuning a small Vision Transformer with a progress bar: ViT-Tiny's shape written out (a
patch embedding of 8 x 8 patches by a strided conv, a class token and learned positions, 12
pre-norm encoder blocks of width 192 with 3 heads through scaled_dot_product_attention and MLPs
of 768, a head of 100 classes; random weights standing in for the pretrained ones), bf16
autocast, AdamW, a cosine learning-rate schedule after a linear warm-up stepped every step, the
gradients clipped with clip_grad_norm_. The images (64 x 3 x 96 x 96 a batch, a pool of 32
batches made on the GPU from a fixed seed) are on the GPU before the loop: the input costs
nothing. The loop shows its progress as people write it with tqdm (a tqdm-like bar written out
here, so that the program needs nothing beyond PyTorch, drawing into os.devnull in place of the
terminal): every step `set_postfix` shows the step's loss with `loss.item()`, the gradient norm
clip_grad_norm_ returned with `.item()` and the learning rate. Each read waits for the GPU, and
looks like the step's cost; it is not. The host launching the step's several thousand small
kernels bounds the loop (on 2 x H200, 33 ms a step with the GPU idle 80% of it, most of that
between launches), so by each `.item()` the GPU has little left to run, and after it the GPU
would wait for the next launches anyway. Measured: --fixed (the loss and the gradient norm
summed on the GPU, read with one `.tolist()` every 50 steps, the bar showing their means, the
same line drawn every step) saved nothing, 9.39-11.06 s as it is and 9.76-11.15 s fixed for 299
steps in four alternated rounds. Its right answer is "nothing to fix": a trace that told the
user to drop the `.item()` calls would send them after nothing."""

# cause: none
# fix: nothing to fix: --fixed reads the loss and grad norm once every 50 steps, saving nothing
# step: STEP
# resident: no
# gpus: 1
# needs:

import math
import os
import time
from typing import TextIO

import torch
import torch.nn.functional as F
from corpus import Loop, options
from torch import nn

args = options(300)
SIDE, PATCH, WIDTH, DEPTH, HEADS, CLASSES = 96, 8, 192, 12, 3, 100
BATCH, POOL, WARMUP, SHOW_EVERY = 64, 32, 5, 50
LR, WEIGHT_DECAY, CLIP, SMOOTHING = 3e-4, 0.05, 1.0, 0.1
TOKENS = (SIDE // PATCH) ** 2 + 1  # the patches and the class token
HEAD_DIM = WIDTH // HEADS
device = torch.device("cuda")
torch.manual_seed(0)


class Block(nn.Module):
    """A pre-norm encoder block: attention, then the MLP, each around a residual."""

    def __init__(self) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(WIDTH, eps=1e-6), nn.LayerNorm(WIDTH, eps=1e-6)
        self.qkv = nn.Linear(WIDTH, 3 * WIDTH)
        self.proj = nn.Linear(WIDTH, WIDTH)
        self.fc1, self.fc2 = nn.Linear(WIDTH, 4 * WIDTH), nn.Linear(4 * WIDTH, WIDTH)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, _ = x.shape
        qkv = self.qkv(self.norm1(x)).view(b, n, 3, HEADS, HEAD_DIM).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)  # each (b, HEADS, n, HEAD_DIM)
        attended = F.scaled_dot_product_attention(q, k, v)
        x = x + self.proj(attended.transpose(1, 2).reshape(b, n, WIDTH))
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))


class VisionTransformer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.patch_embed = nn.Conv2d(3, WIDTH, PATCH, stride=PATCH)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, WIDTH))
        self.pos_embed = nn.Parameter(torch.randn(1, TOKENS, WIDTH) * 0.02)
        self.blocks = nn.ModuleList(Block() for _ in range(DEPTH))
        self.norm = nn.LayerNorm(WIDTH, eps=1e-6)
        self.head = nn.Linear(WIDTH, CLASSES)
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.trunc_normal_(m.weight, std=0.02)
                nn.init.zeros_(m.bias)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = self.patch_embed(images).flatten(2).transpose(1, 2)  # (b, patches, WIDTH)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], 1) + self.pos_embed
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x)[:, 0])  # the class token's logits


class Progress:
    """What tqdm does for this loop, written out: `set_postfix(...)` shows the step's figures
    and redraws the line at once (as tqdm's does by default), `update()` counts a step and
    redraws it at most every `mininterval` seconds; the line goes to `file` after a carriage
    return, as to a terminal."""

    def __init__(self, total: int, desc: str, file: TextIO, mininterval: float = 0.1) -> None:
        self.total, self.desc, self.file, self.mininterval = total, desc, file, mininterval
        self.n, self.postfix = 0, ""
        self.started = self.drawn = time.perf_counter()

    def update(self, n: int = 1) -> None:
        self.n += n
        if time.perf_counter() - self.drawn >= self.mininterval:
            self.refresh()

    def set_postfix(self, refresh: bool = True, **figures: object) -> None:
        self.postfix = ", ".join(
            f"{k}={self.format_num(v) if isinstance(v, float) else v}" for k, v in figures.items()
        )
        if refresh:
            self.refresh()

    @staticmethod
    def format_num(v: float) -> str:
        """tqdm's: three significant digits, or the number as it is where that is shorter."""
        short = f"{v:.3g}".replace("e+0", "e+").replace("e-0", "e-")
        return short if len(short) < len(str(v)) else str(v)

    @staticmethod
    def clock(seconds: float) -> str:
        minutes, s = divmod(int(seconds), 60)
        hours, m = divmod(minutes, 60)
        return f"{hours}:{m:02d}:{s:02d}" if hours else f"{m:02d}:{s:02d}"

    def refresh(self) -> None:
        now = time.perf_counter()
        elapsed = now - self.started
        rate = self.n / elapsed if elapsed > 0 else 0.0
        left = (self.total - self.n) / rate if rate > 0 else 0.0
        done = min(self.n / self.total, 1.0)
        eighths = int(done * 30 * 8)
        bar = ("█" * (eighths // 8) + " ▏▎▍▌▋▊▉"[eighths % 8])[:30].ljust(30)
        times = f"{self.clock(elapsed)}<{self.clock(left)}, {rate:.2f}it/s"
        line = f"{self.desc}: {done:4.0%}|{bar}| {self.n}/{self.total} [{times}, {self.postfix}]"
        self.file.write("\r" + line)
        self.file.flush()
        self.drawn = now

    def close(self) -> None:
        self.refresh()
        self.file.write("\n")


model = VisionTransformer().to(device)
model.train()
no_decay = {"cls_token", "pos_embed"}  # as timm's: no weight decay on norms, biases, embeddings
groups = [
    {"params": [p for n, p in model.named_parameters() if p.ndim > 1 and n not in no_decay],
     "weight_decay": WEIGHT_DECAY},
    {"params": [p for n, p in model.named_parameters() if p.ndim <= 1 or n in no_decay],
     "weight_decay": 0.0},
]  # fmt: skip
optimizer = torch.optim.AdamW(groups, lr=LR, betas=(0.9, 0.999))
TOTAL = WARMUP + args.steps
RAMP = max(TOTAL // 10, 1)  # the learning rate's linear warm-up, then a cosine down to 0


def cosine(step: int) -> float:
    return min(1.0, (step + 1) / RAMP) * 0.5 * (1.0 + math.cos(math.pi * min(step, TOTAL) / TOTAL))


schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, cosine)

# the pool: each class's own pattern under noise, made on the GPU from a fixed seed
generator = torch.Generator(device=device).manual_seed(0)
labels = torch.randint(0, CLASSES, (POOL, BATCH), device=device, generator=generator)
patterns = torch.randn(CLASSES, 3, SIDE, SIDE, device=device, generator=generator)
images = torch.randn(POOL, BATCH, 3, SIDE, SIDE, device=device, generator=generator)
images.add_(patterns[labels], alpha=0.5)
del patterns


def train_step(i: int) -> tuple[torch.Tensor, torch.Tensor]:
    x, y = images[i % POOL], labels[i % POOL]
    with torch.autocast("cuda", dtype=torch.bfloat16):
        logits = model(x)
    loss = F.cross_entropy(logits.float(), y, label_smoothing=SMOOTHING)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    grad_norm = nn.utils.clip_grad_norm_(model.parameters(), CLIP)
    optimizer.step()
    schedule.step()
    return loss, grad_norm


running = torch.zeros(2, device=device)  # fixed: the loss and the grad norm, summed on the GPU
summed = 0
shown = {"loss": math.nan, "grad_norm": math.nan}


def show(bar: Progress, loss: torch.Tensor, grad_norm: torch.Tensor) -> None:
    """The step's figures on the bar."""
    global summed
    if not args.fixed:
        shown["loss"] = loss.item()  # STEP: waits for the GPU
        shown["grad_norm"] = grad_norm.item()  # STEP: and again (done by then)
    else:
        running.add_(torch.stack((loss.detach(), grad_norm.detach())))  # STEP
        summed += 1
        if summed == SHOW_EVERY:  # one read every SHOW_EVERY steps: their means
            shown["loss"], shown["grad_norm"] = (running / summed).tolist()
            running.zero_()
            summed = 0
    bar.set_postfix(loss=shown["loss"], grad_norm=shown["grad_norm"],
                    lr=schedule.get_last_lr()[0])  # fmt: skip
    bar.update()


with open(os.devnull, "w", encoding="utf-8") as terminal:  # the terminal, as tqdm's stderr
    bar = Progress(TOTAL, "fine-tune", terminal)
    for i in range(WARMUP):  # warm-up: the kernels chosen, the allocator's blocks made
        show(bar, *train_step(i))
    torch.cuda.synchronize()
    loop = Loop(args, sync=torch.cuda.synchronize)
    loop.start()
    for i in range(WARMUP, TOTAL):
        show(bar, *train_step(i))
        loop.step()
    torch.cuda.synchronize()
    loop.stop()
    bar.close()
loop.report()
