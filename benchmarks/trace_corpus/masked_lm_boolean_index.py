"""Masked-language-model pretraining, BERT-style: token and position embeddings, a 4-layer
nn.TransformerEncoder (d_model 512, 8 heads, bf16 autocast), and a vocabulary head (30,522
words) applied only to the masked positions, AdamW. Batches of 32 sequences of 256 tokens with
15% of the positions masked (38 a sequence) come pinned from a pool and are uploaded with
non_blocking=True, the labels as -100 everywhere but the masked positions. The loss picks the
masked positions with a boolean index, `hidden[labels != -100]`: a result whose size depends
on the data, so PyTorch counts the mask on the GPU and waits for the count (nonzero) before it
can go on, every step, though the program never reads a value itself.
The fix: the collate also hands over the masked positions as indices (32 x 38, a fixed size),
and the loss gathers them (`hidden.gather`): the same rows, no wait."""

# cause: synchronizations
# fix: masked positions passed as fixed-size indices and gathered, not picked by a boolean mask
# step: STEP
# resident: no
# gpus: 1
# needs:

import torch
import torch.nn.functional as F
from corpus import Loop, options
from torch import nn

args = options(200)
VOCAB, D, HEADS, LAYERS = 30522, 512, 8, 4
BATCH, TOKENS, MASKED, POOL, IGNORE = 32, 256, 38, 4, -100
device = torch.device("cuda")
torch.manual_seed(0)


class MaskedLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.tokens = nn.Embedding(VOCAB, D)
        self.positions = nn.Parameter(torch.randn(TOKENS, D) * 0.02)
        layer = nn.TransformerEncoderLayer(D, HEADS, 4 * D, dropout=0.0, batch_first=True,
                                           activation="gelu", norm_first=True)  # fmt: skip
        self.encoder = nn.TransformerEncoder(layer, LAYERS, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(D)
        self.head = nn.Linear(D, VOCAB)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.norm(self.encoder(self.tokens(ids) + self.positions))


def made(g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A batch as an MLM collate makes it: token ids with the masked ones replaced by [MASK]
    (103), labels (-100 but at the masked positions) and the masked positions, all pinned."""
    ids = torch.randint(1000, VOCAB, (BATCH, TOKENS), generator=g)
    positions = torch.rand(BATCH, TOKENS, generator=g).argsort(1)[:, :MASKED].sort(1)[0]
    labels = torch.full((BATCH, TOKENS), IGNORE)
    labels.scatter_(1, positions, ids.gather(1, positions))
    ids.scatter_(1, positions, 103)
    return ids.pin_memory(), labels.pin_memory(), positions.pin_memory()


model = MaskedLM().to(device)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
pool = [made(torch.Generator().manual_seed(i)) for i in range(POOL)]


def train_step(i: int) -> None:
    ids, labels, positions = (t.to(device, non_blocking=True) for t in pool[i % POOL])  # STEP
    with torch.autocast("cuda", dtype=torch.bfloat16):
        hidden = model(ids)
        if args.fixed:  # the masked rows by their indices: a fixed size
            picked = hidden.gather(1, positions.unsqueeze(-1).expand(-1, -1, D)).flatten(0, 1)
            targets = labels.gather(1, positions).flatten()
        else:  # by a boolean mask: its size is known only once the GPU has counted it
            masked = labels != IGNORE
            picked, targets = hidden[masked], labels[masked]  # STEP
        logits = model.head(picked)
    loss = F.cross_entropy(logits.float(), targets)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()


for i in range(POOL):  # warm-up
    train_step(i)
Loop(args, sync=torch.cuda.synchronize).timed(train_step).report()
