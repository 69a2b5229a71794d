"""A DLRM-style recommender's training loop: each step's batch, as its loader hands it over, is a
dict of 26 categorical features (2048 int64 ids each, 16 KiB) and one dense tensor (2048 x 14
float32: the click label and 13 dense features, as a Criteo row holds them), cut as views from
the loader's pinned buffer of pre-made batches, as DLRM's binary Criteo loader cuts them (one
batch a step, none used twice). The model: 26 tables of 100k x 64 (one EmbeddingBag with sparse
gradients, as TorchRec fuses them), an MLP on the dense features, their concatenation through a
top MLP, a binary cross-entropy loss and SGD.

Cause: the step uploads the batch tensor by tensor, `{k: v.to(device, non_blocking=True)}`: 27
small copies in a row, each paying a copy's fixed cost on the host. --fixed: each batch's bytes,
which lie together in the pinned buffer its tensors were cut from, uploaded with one copy, and the
27 features cut as views of the device copy. --resident: the batches kept on the GPU."""

# cause: small_copies
# fix: upload each batch's packed pinned buffer with one copy and cut the features on the GPU
# step: STEP
# resident: yes
# gpus: 1
# needs:

import itertools

import torch
import torch.nn.functional as F
from corpus import Loop, options
from torch import nn

args = options(300, resident=True)

SPARSE = [f"cat_{j}" for j in range(26)]
BATCH, DENSE, ROWS, DIM, WARMUP = 2048, 13, 100_000, 64, 5
TOP = (1024, 1024, 512)  # the top MLP's widths
ID_BYTES = len(SPARSE) * BATCH * 8
BATCH_BYTES = ID_BYTES + BATCH * (DENSE + 1) * 4
POOL = min(args.steps + WARMUP, 1024)  # pre-made batches: none repeats within a run
device = torch.device("cuda")
torch.manual_seed(0)


def mlp(*widths: int) -> nn.Sequential:
    layers: list[nn.Module] = []
    for a, b in itertools.pairwise(widths):
        layers += [nn.Linear(a, b), nn.ReLU()]
    return nn.Sequential(*layers[:-1])


class DLRM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        # the 26 tables of ROWS x DIM as one EmbeddingBag, as TorchRec's fused tables keep them,
        # with sparse gradients: each table's rows start at its offset
        self.tables = nn.EmbeddingBag(len(SPARSE) * ROWS, DIM, mode="sum", sparse=True)
        self.register_buffer("offsets", torch.arange(len(SPARSE)).view(-1, 1) * ROWS)
        self.bottom = mlp(DENSE, 512, 256, DIM)
        self.top = mlp(DIM * (len(SPARSE) + 1), *TOP, 1)

    def forward(self, feats: dict[str, torch.Tensor]) -> torch.Tensor:
        ids = torch.stack([feats[k] for k in SPARSE]) + self.offsets
        pooled = self.tables(ids.view(-1, 1)).view(len(SPARSE), BATCH, DIM).transpose(0, 1)
        dense = self.bottom(feats["dense"][:, 1:])
        return self.top(torch.cat([dense, pooled.reshape(BATCH, -1)], dim=1)).squeeze(1)


def cut(buffer: torch.Tensor) -> dict[str, torch.Tensor]:
    """The batch's tensors as views of its packed buffer (on the host or the GPU)."""
    ids = buffer[:ID_BYTES].view(torch.int64).view(len(SPARSE), BATCH)
    views = dict(zip(SPARSE, ids.unbind(0), strict=True))
    views["dense"] = buffer[ID_BYTES:].view(torch.float32).view(BATCH, DENSE + 1)
    return views


with device:  # the tables made on the GPU
    model = DLRM()
opt = torch.optim.SGD(model.parameters(), lr=0.01)
store = torch.empty(POOL, BATCH_BYTES, dtype=torch.uint8, pin_memory=True)  # the loader's
store[:, :ID_BYTES].view(torch.int64).random_(0, ROWS)
dense = store[:, ID_BYTES:].view(torch.float32).view(POOL, BATCH, DENSE + 1)
dense.uniform_()
dense[:, :, 0].round_()  # the click label
batches = [cut(row) for row in store]
on_gpu = store.to(device) if args.resident else None


def upload(i: int) -> dict[str, torch.Tensor]:
    if on_gpu is not None:
        return cut(on_gpu[i % POOL])
    if args.fixed:
        return cut(store[i % POOL].to(device, non_blocking=True))  # STEP
    return {k: v.to(device, non_blocking=True) for k, v in batches[i % POOL].items()}  # STEP


def train_step(i: int) -> None:
    feats = upload(i)
    loss = F.binary_cross_entropy_with_logits(model(feats), feats["dense"][:, 0])
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


for i in range(WARMUP):
    train_step(i)
torch.cuda.synchronize()
loop = Loop(args, sync=torch.cuda.synchronize)
loop.start()
for i in range(WARMUP, WARMUP + args.steps):
    train_step(i)
    loop.step()
torch.cuda.synchronize()
loop.stop()
loop.report()
