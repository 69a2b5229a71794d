"""Greedy generation with a KV cache, streamed as text: a decoder-only transformer (12 layers,
width 2048, 16 heads, bf16, random weights) continues 256 prompts of 64 tokens by --steps
tokens (384), one token a step for the whole batch. As a text streamer does, each step's new
tokens are read back with `.tolist()` and turned into text on the host (a vocabulary of 8192
pieces), and the loop stops once every sequence has made its end token (`finished.all().item()`,
as generate's stopping check reads it). Both wait for the GPU every token, and the GPU sits idle
while the host turns the tokens into text and launches the next step. The fix: the new tokens
kept on the GPU and streamed 16 steps at a time (one `.tolist()` for 16 tokens), the end
checked then; the same tokens, the same text (random weights: no batch ends early)."""

# cause: synchronizations
# fix: tokens kept on the GPU, streamed and checked for the end every 16 steps: 2 reads, not 32
# step: STEP
# resident: no
# gpus: 1
# needs:

import math

import torch
import torch.nn.functional as F
from corpus import Loop, options
from torch import nn

args = options(384)
LAYERS, WIDTH, HEADS, VOCAB, BATCH, PROMPT, EVERY = 12, 2048, 16, 8192, 256, 64, 16
HEAD = WIDTH // HEADS
EOS = VOCAB - 1
device = torch.device("cuda")
torch.manual_seed(0)
WARM_UP = 2
LONGEST = PROMPT + WARM_UP + args.steps


class Layer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(WIDTH), nn.LayerNorm(WIDTH)
        self.qkv = nn.Linear(WIDTH, 3 * WIDTH, bias=False)
        self.out = nn.Linear(WIDTH, WIDTH, bias=False)
        self.mlp = nn.Sequential(
            nn.Linear(WIDTH, 4 * WIDTH), nn.GELU(), nn.Linear(4 * WIDTH, WIDTH)
        )

    def forward(self, x: torch.Tensor, cache: torch.Tensor, at: int) -> torch.Tensor:
        """x: (BATCH, n, WIDTH) at positions at..at+n-1; cache: (2, BATCH, HEADS, LONGEST, HEAD)."""
        n = x.shape[1]
        q, k, v = self.qkv(self.norm1(x)).view(BATCH, n, 3, HEADS, HEAD).unbind(2)
        cache[0, :, :, at : at + n] = k.transpose(1, 2)
        cache[1, :, :, at : at + n] = v.transpose(1, 2)
        keys, values = cache[0, :, :, : at + n], cache[1, :, :, : at + n]
        attended = F.scaled_dot_product_attention(q.transpose(1, 2), keys, values, is_causal=n > 1)
        x = x + self.out(attended.transpose(1, 2).reshape(BATCH, n, WIDTH))
        return x + self.mlp(self.norm2(x))


class Decoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        self.layers = nn.ModuleList(Layer() for _ in range(LAYERS))
        self.norm = nn.LayerNorm(WIDTH)
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.normal_(p, std=1 / math.sqrt(p.shape[-1]))

    def forward(self, tokens: torch.Tensor, caches: torch.Tensor, at: int) -> torch.Tensor:
        x = self.embed(tokens)
        for layer, cache in zip(self.layers, caches, strict=True):
            x = layer(x, cache, at)
        return self.norm(x[:, -1]) @ self.embed.weight.T  # the last position's logits


with device:  # the weights made on the GPU
    model = Decoder().to(torch.bfloat16).eval()
caches = torch.empty(LAYERS, 2, BATCH, HEADS, LONGEST, HEAD, device=device, dtype=torch.bfloat16)
prompts = torch.randint(0, EOS, (BATCH, PROMPT), device=device)
pieces = [f"<{i:x}>" if i % 7 == 0 else chr(0x4E00 + i) for i in range(VOCAB)]  # the vocabulary
texts = [""] * BATCH


def stream(rows: list[list[int]]) -> None:
    """The streamer's host side: each sequence's new tokens turned into text and kept."""
    for b, row in enumerate(rows):
        texts[b] += "".join(pieces[t] for t in row)


with torch.inference_mode():
    logits = model(prompts, caches, 0)
    position = PROMPT
    finished = torch.zeros(BATCH, dtype=torch.bool, device=device)
    kept: list[torch.Tensor] = []

    def generate(i: int) -> None:
        global logits, position, finished
        token = logits.argmax(-1)
        finished = finished | (token == EOS)
        logits = model(token[:, None], caches, position)
        position += 1
        if not args.fixed:
            stream([[t] for t in token.tolist()])  # STEP: waits for the GPU
            if finished.all().item():  # STEP: and again
                raise StopIteration
            return
        kept.append(token)
        if len(kept) == EVERY:  # every 16 steps: one read, then the end checked
            stream(torch.stack(kept, 1).tolist())  # STEP
            kept.clear()
            if finished.all().item():
                raise StopIteration

    for i in range(WARM_UP):  # warm-up: the kernels chosen, the allocator's blocks made
        generate(i)
    torch.cuda.synchronize()
    loop = Loop(args, sync=torch.cuda.synchronize)
    try:
        loop.timed(generate)
    except StopIteration:
        torch.cuda.synchronize()
        loop.stop()
    if kept:
        stream(torch.stack(kept, 1).tolist())
loop.report(characters=sum(len(t) for t in texts))
