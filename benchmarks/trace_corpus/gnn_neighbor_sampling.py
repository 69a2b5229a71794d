"""A GraphSAGE node classifier trained on mini-batches sampled from a graph held in host memory,
as PyG's and DGL's CPU samplers do it, in the training loop's own thread: each step draws 1024
seed nodes of a 200k-node graph (CSR, 15 neighbours a node on average), 10 neighbours of each
seed and 5 of each of those (NumPy, vectorized), gathers the 62,464 sampled nodes' 64 float32
features (16 MiB) and the seeds' labels from NumPy arrays, and moves them with `.to(device)`.
Two mean-aggregating SAGE layers, a linear head, cross-entropy, Adam. The GPU waits while the
host samples and gathers each batch.

The fix: the graph, the features and the labels moved to the GPU once, before the loop, and
the same sampling (the same fan-outs, neighbours picked uniformly) done there with PyTorch's
generator, as GPU samplers do: no batch made by the host. --resident: 8 batches sampled on the
host before the loop and kept on the GPU, used in turn."""

# cause: input_starved
# fix: the graph and its features moved to the GPU once; each batch sampled there, not on the host
# step: STEP
# resident: yes
# gpus: 1
# needs:

import numpy as np
import torch
import torch.nn.functional as F
from corpus import Loop, options
from torch import nn

args = options(150, resident=True)
NODES, DEGREE, DIM, WIDTH, CLASSES, SEEDS, FAN1, FAN2 = 200_000, 15, 64, 256, 40, 1024, 10, 5
HOP1, HOP2 = SEEDS * FAN1, SEEDS * FAN1 * FAN2
device = torch.device("cuda")
torch.manual_seed(0)
rng = np.random.default_rng(0)
degree = rng.integers(1, 2 * DEGREE, NODES)
rowptr = np.concatenate([[0], np.cumsum(degree)])
colidx = rng.integers(0, NODES, rowptr[-1])
features = rng.standard_normal((NODES, DIM), dtype=np.float32)
labels = rng.integers(0, CLASSES, NODES)


def neighbours(nodes: np.ndarray, fan: int, r: np.random.Generator) -> np.ndarray:
    """`fan` neighbours of each node, picked uniformly with replacement."""
    pick = (r.random((len(nodes), fan)) * degree[nodes, None]).astype(np.int64)
    return colidx[rowptr[nodes, None] + pick].reshape(-1)


def sample(i: int) -> tuple[np.ndarray, np.ndarray]:
    """Batch `i` as the host sampler makes it: the seeds', hop 1's and hop 2's features, and
    the seeds' labels."""
    r = np.random.default_rng(1000 + i)
    seeds = r.integers(0, NODES, SEEDS)
    hop1 = neighbours(seeds, FAN1, r)
    hop2 = neighbours(hop1, FAN2, r)
    return np.concatenate([features[seeds], features[hop1], features[hop2]]), labels[seeds]


class Sage(nn.Module):
    """Two mean-aggregating GraphSAGE layers over the sampled blocks, then a linear head."""

    def __init__(self) -> None:
        super().__init__()
        self.self1, self.neigh1 = nn.Linear(DIM, WIDTH), nn.Linear(DIM, WIDTH)
        self.self2, self.neigh2 = nn.Linear(WIDTH, WIDTH), nn.Linear(WIDTH, WIDTH)
        self.head = nn.Linear(WIDTH, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        seeds, hop1, hop2 = x[:SEEDS], x[SEEDS : SEEDS + HOP1], x[SEEDS + HOP1 :]
        h1 = F.relu(self.self1(hop1) + self.neigh1(hop2.view(HOP1, FAN2, DIM).mean(1)))
        h0 = F.relu(self.self1(seeds) + self.neigh1(hop1.view(SEEDS, FAN1, DIM).mean(1)))
        h = F.relu(self.self2(h0) + self.neigh2(h1.view(SEEDS, FAN1, WIDTH).mean(1)))
        return self.head(h)


model = Sage().to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)


def train_step(x: torch.Tensor, y: torch.Tensor) -> None:
    loss = F.cross_entropy(model(x), y)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()


on_gpu = None
if args.fixed:  # the graph on the GPU, moved once
    on_gpu = [torch.from_numpy(a).to(device) for a in (rowptr, degree, colidx, features, labels)]
    generator = torch.Generator(device).manual_seed(0)


def sample_on_gpu() -> tuple[torch.Tensor, torch.Tensor]:
    """The same sampling on the GPU: the fixed form's batch."""
    assert on_gpu is not None
    g_rowptr, g_degree, g_colidx, g_features, g_labels = on_gpu

    def picked(nodes: torch.Tensor, fan: int) -> torch.Tensor:
        draw = torch.rand(len(nodes), fan, device=device, generator=generator)
        pick = (draw * g_degree[nodes, None]).long()
        return g_colidx[g_rowptr[nodes, None] + pick].reshape(-1)

    seeds = torch.randint(0, NODES, (SEEDS,), device=device, generator=generator)
    hop1 = picked(seeds, FAN1)
    hop2 = picked(hop1, FAN2)
    return torch.cat([g_features[seeds], g_features[hop1], g_features[hop2]]), g_labels[seeds]


resident = []
if args.resident:
    resident = [tuple(torch.from_numpy(a).to(device) for a in sample(i)) for i in range(8)]


def batch(i: int) -> tuple[torch.Tensor, torch.Tensor]:
    if args.resident:
        return resident[i % len(resident)]
    if args.fixed:
        return sample_on_gpu()  # STEP
    x, y = sample(i)
    return torch.from_numpy(x).to(device), torch.from_numpy(y).to(device)  # STEP


for i in range(3):  # warm-up
    train_step(*batch(i))
torch.cuda.synchronize()
loop = Loop(args, sync=torch.cuda.synchronize)
loop.start()
for i in range(3, 3 + args.steps):
    train_step(*batch(i))
    loop.step()
torch.cuda.synchronize()
loop.stop()
loop.report()
