"""Transformer inference ported from NumPy code: a text classifier (an encoder of 6 pre-norm
layers, d_model 512, 8 heads, bfloat16 autocast, under torch.inference_mode) over batches of
32 sequences of 512 token ids, kept on the GPU in a pool of 8 (a server's batches, already
there); each step's logits are copied into a history on the GPU, read once at the end. The
forward takes its constants as arguments, and the step builds them with NumPy as the code it
was ported from did: the sinusoidal position-encoding table for 2048 positions (2048 x 512
float32, 4 MiB) and a bidirectional ALiBi attention bias for the batch's length (8 heads x 512
x 512 float32, 8 MiB), then uploads them with `torch.tensor(table, device=device)` and
`torch.as_tensor(bias).to(device)`, the same 12 MiB every step.

Cause: the same constants built and uploaded again every step, from pageable memory, each upload
waiting for its copy and so for all the GPU had queued (the step before, for the first).
--fixed: both tables built and uploaded once, before the loop, and each step reuses them; the
same outputs. No --resident form: the batches are on the GPU already, and the only data that
move are the tables, which --fixed keeps there (a resident form would be --fixed again)."""

# cause: repeated_uploads
# fix: build and upload the position table and the attention bias once, before the loop
# step: STEP
# resident: no
# gpus: 1
# needs:

import numpy as np
import torch
import torch.nn.functional as F
from corpus import Loop, options
from torch import nn

args = options(400)
VOCAB, CLASSES, D, HEADS, LAYERS = 32000, 64, 512, 8, 6
BATCH, TOKENS, MAX_POSITIONS, POOL, HISTORY, WARMUP = 32, 512, 2048, 8, 64, 4
device = torch.device("cuda")
torch.manual_seed(0)


def sinusoid_table(positions: int, width: int) -> np.ndarray:
    """The Transformer's position encoding: sin and cos of each position at 256 frequencies."""
    half = width // 2
    angle = np.arange(positions, dtype=np.float32)[:, None] / np.float32(10000.0) ** (
        np.arange(half, dtype=np.float32) / half
    )
    table = np.empty((positions, width), dtype=np.float32)
    table[:, 0::2] = np.sin(angle)
    table[:, 1::2] = np.cos(angle)
    return table


def alibi_bias(heads: int, length: int) -> np.ndarray:
    """ALiBi, both ways: each head's bias falls with the distance between query and key."""
    slopes = np.exp2(-8.0 * np.arange(1, heads + 1) / heads).astype(np.float32)
    place = np.arange(length, dtype=np.float32)
    return -slopes[:, None, None] * np.abs(place[None, :] - place[:, None])


class Layer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm1, self.qkv, self.out = nn.LayerNorm(D), nn.Linear(D, 3 * D), nn.Linear(D, D)
        self.norm2 = nn.LayerNorm(D)
        self.mlp = nn.Sequential(nn.Linear(D, 4 * D), nn.GELU(), nn.Linear(4 * D, D))

    def forward(self, x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, HEADS, D // HEADS).unbind(2)
        q, k, v = (z.transpose(1, 2) for z in (q, k, v))  # batch, heads, tokens, head's width
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
        x = x + self.out(a.transpose(1, 2).reshape(b, t, D))
        return x + self.mlp(self.norm2(x))


class Classifier(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, D)
        self.layers = nn.ModuleList(Layer() for _ in range(LAYERS))
        self.norm, self.head = nn.LayerNorm(D), nn.Linear(D, CLASSES)

    def forward(
        self, tokens: torch.Tensor, positions: torch.Tensor, bias: torch.Tensor
    ) -> torch.Tensor:
        x = self.embed(tokens) + positions[: tokens.shape[1]]
        bias = bias.to(torch.bfloat16)  # the attention's dtype under autocast
        for layer in self.layers:
            x = layer(x, bias)
        return self.head(self.norm(x).mean(1))


model = Classifier().to(device).eval()
pool = torch.randint(
    0, VOCAB, (POOL, BATCH, TOKENS), generator=torch.Generator().manual_seed(1)
).to(device)
history = torch.zeros(HISTORY, BATCH, CLASSES, device=device)  # the last steps' logits
constants: tuple[torch.Tensor, torch.Tensor] | None = None
if args.fixed:  # built and uploaded once
    constants = (
        torch.tensor(sinusoid_table(MAX_POSITIONS, D), device=device),
        torch.as_tensor(alibi_bias(HEADS, TOKENS)).to(device),
    )


@torch.inference_mode()
def infer(i: int) -> None:
    if constants is None:
        table = sinusoid_table(MAX_POSITIONS, D)
        bias = alibi_bias(HEADS, TOKENS)
        positions = torch.tensor(table, device=device)  # STEP
        attn_bias = torch.as_tensor(bias).to(device)  # STEP
    else:
        positions, attn_bias = constants
    with torch.autocast("cuda", torch.bfloat16):
        logits = model(pool[i % POOL], positions, attn_bias)
    history[i % HISTORY].copy_(logits.float())  # STEP


for i in range(WARMUP):
    infer(i)
torch.cuda.synchronize()
loop = Loop(args, sync=torch.cuda.synchronize)
loop.start()
for i in range(WARMUP, WARMUP + args.steps):
    infer(i)
    loop.step()
torch.cuda.synchronize()
loop.stop()
loop.report(checksum=round(history.double().sum().item(), 4))  # read once, at the end
