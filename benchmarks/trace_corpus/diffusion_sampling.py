"""DDIM-style sampling with a UNet-like denoiser (conv blocks down and up with skip connections,
--width to 4 x --width channels, a timestep embedding from a sinusoidal table and an MLP; bf16
autocast) on latents of 8 x 4 x 64 x 64, 50 denoising steps an image, each image from fresh
noise made on the GPU. A Scheduler holds alphas_cumprod and the timesteps as CUDA tensors; its
step reads the step's two coefficients from the GPU (`.tolist()`) every denoising step, hands
the step's noise level to the sampler's progress callback (a progress line from the last steps'
timings: about --host-ms), then updates the latents; the sampler checks
`torch.isnan(latents).any()` every step. Each read waits for the GPU, which then sits idle
while the host reports progress and queues the next step. The fix: the coefficients
precomputed once as Python floats on the host, and the NaN check made once, after sampling."""

# cause: synchronizations
# fix: the scheduler's coefficients precomputed as Python floats; the NaN check once at the end
# step: STEP
# resident: no
# gpus: 1
# needs:

import math
import statistics
import time

import corpus
import torch
import torch.nn.functional as F
from torch import nn

args = corpus.options(200, width=(int, 512), host_ms=(float, 1.0))
LATENTS, PER_IMAGE, WIDTH = (8, 4, 64, 64), 50, args.width
device = torch.device("cuda")
torch.manual_seed(0)
torch.backends.cudnn.benchmark = True


class Block(nn.Module):
    def __init__(self, cin: int, cout: int, emb: int = 4 * WIDTH) -> None:
        super().__init__()
        self.norm1, self.conv1 = nn.GroupNorm(32, cin), nn.Conv2d(cin, cout, 3, padding=1)
        self.time = nn.Linear(emb, cout)
        self.norm2, self.conv2 = nn.GroupNorm(32, cout), nn.Conv2d(cout, cout, 3, padding=1)
        self.skip = nn.Conv2d(cin, cout, 1) if cin != cout else nn.Identity()

    def forward(self, x: torch.Tensor, emb: torch.Tensor) -> torch.Tensor:
        h = self.conv1(F.silu(self.norm1(x))) + self.time(emb)[:, :, None, None]
        return self.skip(x) + self.conv2(F.silu(self.norm2(h)))


class Denoiser(nn.Module):
    def __init__(self, c: int = WIDTH) -> None:
        super().__init__()
        freqs = torch.exp(-math.log(10_000) * torch.arange(64) / 64)
        angles = torch.arange(1000)[:, None] * freqs[None]
        self.register_buffer("table", torch.cat([angles.sin(), angles.cos()], 1))
        self.mlp = nn.Sequential(nn.Linear(128, 4 * c), nn.SiLU(), nn.Linear(4 * c, 4 * c))
        self.inp = nn.Conv2d(4, c, 3, padding=1)
        self.down1, self.pool1 = Block(c, c), nn.Conv2d(c, c, 3, 2, 1)
        self.down2, self.pool2 = Block(c, 2 * c), nn.Conv2d(2 * c, 2 * c, 3, 2, 1)
        self.mid = Block(2 * c, 2 * c)
        self.up2, self.up1 = Block(4 * c, 2 * c), Block(3 * c, c)
        self.out = nn.Sequential(nn.GroupNorm(32, c), nn.SiLU(), nn.Conv2d(c, 4, 3, padding=1))

    def forward(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        emb = self.mlp(self.table[t])
        h1 = self.down1(self.inp(x), emb)  # 64 x 64
        h2 = self.down2(self.pool1(h1), emb)  # 32 x 32
        h = self.mid(self.pool2(h2), emb)  # 16 x 16
        h = self.up2(torch.cat([F.interpolate(h, scale_factor=2.0), h2], 1), emb)
        h = self.up1(torch.cat([F.interpolate(h, scale_factor=2.0), h1], 1), emb)
        return self.out(h)


class Scheduler:
    """DDIM (eta 0) over PER_IMAGE of 1000 training timesteps, a scaled-linear beta schedule."""

    def __init__(self) -> None:
        betas = torch.linspace(0.00085**0.5, 0.012**0.5, 1000, dtype=torch.float64) ** 2
        alphas = torch.cumprod(1 - betas, 0).float()
        self.alphas_cumprod = torch.cat([alphas, torch.ones(1)]).to(device)  # [-1]: the last's
        ts = torch.arange(PER_IMAGE - 1, -1, -1) * (1000 // PER_IMAGE)
        self.timesteps = ts.to(device)
        # each step's timestep and the next one's (-1 after the last: alpha 1)
        self.pairs = torch.stack([ts, torch.cat([ts[1:], torch.tensor([-1])])], 1).to(device)
        self.host: list[list[float]] = []
        if args.fixed:  # the coefficients read once, as Python floats
            every = self.alphas_cumprod.tolist()
            self.host = [[every[t], every[p]] for t, p in self.pairs.tolist()]

    def step(self, eps: torch.Tensor, i: int, latents: torch.Tensor, callback) -> torch.Tensor:
        if self.host:
            a_t, a_prev = self.host[i]
        else:
            a_t, a_prev = self.alphas_cumprod[self.pairs[i]].tolist()  # STEP: waits for the GPU
        callback(i, ((1 - a_t) / a_t) ** 0.5)  # the step's noise level
        x0 = (latents - (1 - a_t) ** 0.5 * eps) / a_t**0.5
        return a_prev**0.5 * x0 + (1 - a_prev) ** 0.5 * eps


class Progress:
    """The sampler's progress callback: each step's line (its noise level, steps a second, the
    time left) from the mean and spread of the last steps' durations, in Python; its window
    sized so that this takes about `ms` on this host."""

    def __init__(self, ms: float) -> None:
        self.window, self.last, self.line = [0.01] * 2000, time.perf_counter(), ""
        times = []
        for _ in range(5):
            t = time.perf_counter()
            for i in range(5):
                self(i, 1.0)
            times.append((time.perf_counter() - t) / 5)
        self.window = [0.01] * max(int(len(self.window) * ms * 1e-3 / statistics.median(times)), 1)

    def __call__(self, i: int, sigma: float) -> None:
        now = time.perf_counter()
        self.window[i % len(self.window)], self.last = now - self.last, now
        total = square = 0.0
        for v in self.window:
            total, square = total + v, square + v * v
        mean = total / len(self.window)
        spread = max(square / len(self.window) - mean * mean, 0.0) ** 0.5
        left = (PER_IMAGE - i - 1) * mean
        self.line = (f"step {i + 1}/{PER_IMAGE} sigma {sigma:.3f} {1 / mean:.1f} it/s "
                     f"(+-{spread * 1e3:.2f} ms), {left:.1f} s left")  # fmt: skip


model = Denoiser().to(device, memory_format=torch.channels_last)
scheduler = Scheduler()
progress = Progress(args.host_ms)


@torch.inference_mode()
def sample(steps: int) -> list[torch.Tensor]:
    """`steps` denoising steps in all, PER_IMAGE an image, each image from fresh noise."""
    images = []
    for first in range(0, steps, PER_IMAGE):
        latents = torch.randn(LATENTS, device=device)
        for i in range(min(PER_IMAGE, steps - first)):
            t = scheduler.timesteps[i].expand(LATENTS[0])
            with torch.autocast("cuda", torch.bfloat16):
                eps = model(latents.contiguous(memory_format=torch.channels_last), t)
            latents = scheduler.step(eps.float(), i, latents, progress)
            if not args.fixed and torch.isnan(latents).any():  # STEP: waits for the GPU
                raise FloatingPointError(f"NaN in the latents at step {i}")
        images.append(latents)
    if args.fixed and torch.isnan(torch.stack(images)).any():  # once, after sampling
        raise FloatingPointError("NaN in the latents")
    return images


sample(4)  # warm-up: cuDNN's choice of kernels
torch.cuda.synchronize()
loop = corpus.Loop(args)
loop.start()
sample(args.steps)
torch.cuda.synchronize()
loop.stop()
loop.report()
