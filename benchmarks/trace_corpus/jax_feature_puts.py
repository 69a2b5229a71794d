"""A JAX click-through-rate model trained on a stream of feature batches: each step's batch,
as its reader hands it over, is a dict of 26 categorical id columns (1024 int32 ids each,
4 KiB), 13 dense columns and the labels (1024 float32 each), NumPy arrays;
`jax.device_put(batch)` moves the dict to the GPU, one copy a column, and a jitted step (26
embedding tables of 50k x 32 looked up with `jnp.take`, an MLP over them and the dense columns,
a logistic loss, plain SGD) trains on it.

Cause: 40 small copies a step, each paying a copy's fixed cost on the host while the GPU, done
with the step before, waits. --fixed: the reader's columns stacked on the host into one int32
array of ids and one float32 array of dense values and labels, two `jax.device_put`s, and the
step cuts the columns on the GPU; the same values. --resident: the batches put on the GPU
before the loop."""

# cause: small_copies
# fix: the columns stacked into one id array and one dense array on the host: 2 copies, not 40
# step: STEP nvtx=jit_train_step (XLA's range around each run of the jitted step)
# resident: yes
# gpus: 1
# needs: jax

import os

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import jax
import jax.numpy as jnp
import numpy as np
from corpus import Loop, options

args = options(400, resident=True)
SPARSE, DENSE, BATCH, ROWS, DIM, POOL = 26, 13, 1024, 50_000, 32, 16
LR = 0.05
rng = np.random.default_rng(0)


def reader_batch(k: int) -> dict[str, np.ndarray]:
    """Batch `k` as the reader hands it over: one NumPy array a column."""
    r = np.random.default_rng(100 + k)
    batch = {f"c{j}": r.integers(0, ROWS, BATCH, dtype=np.int32) for j in range(SPARSE)}
    batch |= {f"d{j}": r.standard_normal(BATCH, dtype=np.float32) for j in range(DENSE)}
    batch["label"] = (r.random(BATCH) < 0.25).astype(np.float32)
    return batch


stream = [reader_batch(k) for k in range(POOL)]
params = {
    "tables": jnp.asarray(rng.standard_normal((SPARSE, ROWS, DIM), dtype=np.float32) * 0.01),
    "w1": jnp.asarray(rng.standard_normal((SPARSE * DIM + DENSE, 512), dtype=np.float32) * 0.02),
    "w2": jnp.asarray(rng.standard_normal((512, 256), dtype=np.float32) * 0.04),
    "w3": jnp.asarray(rng.standard_normal((256, 1), dtype=np.float32) * 0.06),
}


def logits(p: dict, ids: jax.Array, dense: jax.Array) -> jax.Array:
    looked = jax.vmap(lambda table, col: jnp.take(table, col, axis=0), in_axes=(0, 1))(
        p["tables"], ids
    )  # (SPARSE, BATCH, DIM)
    h = jnp.concatenate([looked.transpose(1, 0, 2).reshape(BATCH, -1), dense], axis=1)
    h = jax.nn.relu(h @ p["w1"])
    h = jax.nn.relu(h @ p["w2"])
    return (h @ p["w3"])[:, 0]


def loss_fn(p: dict, ids: jax.Array, dense: jax.Array, label: jax.Array) -> jax.Array:
    z = logits(p, ids, dense)
    return jnp.mean(jnp.logaddexp(0.0, z) - label * z)


def train_step(p: dict, ids: jax.Array, dense: jax.Array, label: jax.Array) -> tuple:
    loss, grads = jax.value_and_grad(loss_fn)(p, ids, dense, label)
    return jax.tree_util.tree_map(lambda w, g: w - LR * g, p, grads), loss


step = jax.jit(train_step, donate_argnums=0)


@jax.jit
def columns(batch: dict) -> tuple[jax.Array, jax.Array, jax.Array]:
    """The column dict as the step takes it: the ids and the dense values side by side."""
    ids = jnp.stack([batch[f"c{j}"] for j in range(SPARSE)], axis=1)
    dense = jnp.stack([batch[f"d{j}"] for j in range(DENSE)], axis=1)
    return ids, dense, batch["label"]


@jax.jit
def cut(ids: jax.Array, packed: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """The fixed form's two arrays cut on the GPU: the dense values and the labels."""
    return ids, packed[:, :DENSE], packed[:, DENSE]


def stacked(batch: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The fixed form's host side: the columns stacked into one id and one dense array."""
    ids = np.stack([batch[f"c{j}"] for j in range(SPARSE)], axis=1)
    packed = np.stack([*(batch[f"d{j}"] for j in range(DENSE)), batch["label"]], axis=1)
    return ids, packed


resident = [columns(jax.device_put(b)) for b in stream] if args.resident else []
losses: list[jax.Array] = []


def train(i: int) -> None:
    global params
    if args.resident:
        ids, dense, label = resident[i % POOL]
    elif args.fixed:
        ids_host, packed_host = stacked(stream[i % POOL])
        ids, dense, label = cut(jax.device_put(ids_host), jax.device_put(packed_host))  # STEP
    else:
        ids, dense, label = columns(jax.device_put(stream[i % POOL]))  # STEP
    params, loss = step(params, ids, dense, label)  # STEP
    losses.append(loss)


for i in range(3):  # compiles the steps
    train(i)
jax.block_until_ready(params)
losses.clear()
loop = Loop(args, sync=lambda: jax.block_until_ready(params)).timed(train)
loop.report(loss=float(jax.device_get(losses[-1])))
