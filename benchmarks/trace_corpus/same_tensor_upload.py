"""A transformer training loop: an nn.TransformerEncoder of four layers (d_model 768, 12 heads,
bfloat16 autocast) learns to reconstruct batches of 16 sequences of 1024 random token embeddings
(pinned, from a pool of four whose first token the host refreshes each step, uploaded with
non_blocking=True). Its forward adds a learned-looking position table for up to 65536 positions
(192 MiB of float32, pinned) that the model keeps as a plain attribute, not a buffer, so that
`model.to(device)` leaves it on the host and the forward uploads it anew every step.

Cause: the same 192 MiB uploaded again every step, on the step's stream, before its kernels.
--fixed: the table registered as a buffer, so it goes to the GPU once with the model, before the
loop, and the forward's `.to(device)` finds it there; everything else the same."""

# cause: repeated_uploads
# fix: register the position table as a buffer: uploaded once with the model, the copy reused
# step: STEP
# resident: no
# gpus: 1
# needs:

import torch
import torch.nn.functional as F
from corpus import Loop, options
from torch import nn

args = options(150)

D, HEADS, LAYERS = 768, 12, 4
BATCH, TOKENS = 16, 1024
POSITIONS = 65536  # the table's rows: 192 MiB of float32
POOL = 4
device = torch.device("cuda")
torch.manual_seed(0)


class Encoder(nn.Module):
    def __init__(self, table_as_buffer: bool) -> None:
        super().__init__()
        layer = nn.TransformerEncoderLayer(
            D, HEADS, 4 * D, dropout=0.0, batch_first=True, norm_first=True
        )
        self.encoder = nn.TransformerEncoder(layer, LAYERS, enable_nested_tensor=False)
        self.head = nn.Linear(D, D)
        table = torch.randn(POSITIONS, D) * 0.02  # as trained
        if table_as_buffer:
            self.register_buffer("positions", table)
        else:
            self.positions = table.pin_memory()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        positions = self.positions.to(x.device, non_blocking=True)  # STEP
        x = x + positions[: x.shape[1]]
        return self.head(self.encoder(x))


model = Encoder(table_as_buffer=args.fixed).to(device)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
pool = [torch.randn(BATCH, TOKENS, D).pin_memory() for _ in range(POOL)]


def train_step(i: int) -> None:
    batch = pool[i % POOL]
    batch[0, 0].normal_()  # the newest token
    x = batch.to(device, non_blocking=True)  # STEP
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out = model(x)
    loss = F.mse_loss(out.float(), x)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


for i in range(4):
    train_step(i)
torch.cuda.synchronize()
loop = Loop(args, sync=torch.cuda.synchronize)
loop.start()
for i in range(args.steps):
    train_step(i)
    loop.step()
torch.cuda.synchronize()
loop.stop()
loop.report()
