"""A JAX image classifier fed as a PyTorch-style dataset hands it over: each step's batch is a
list of 128 samples, each a NumPy image of 32 x 32 x 3 float32 (12 KiB) with its int32 label,
and `jax.device_put(samples)` moves the list to the GPU, one copy an array (256 a step); the
jitted step stacks them on the GPU and trains a small convnet (two 3 x 3 convolutions, a dense
layer, softmax cross-entropy, SGD with momentum written by hand). The loss is kept on the GPU
and read once at the end.

Cause: 256 small copies a step, each paying a copy's fixed cost on the host (and PJRT's hand-off
to its threads) while the GPU waits. --fixed: the list stacked on the host (`np.stack`), one
image array and one label array, two `jax.device_put`s; the same values. --resident: the
stacked batches put on the GPU before the loop."""

# cause: small_copies
# fix: the samples stacked on the host, one device_put for the images and one for the labels
# step: STEP nvtx=jit_sampled_step nvtx=jit_train_step (XLA's ranges: each run of the step)
# resident: yes
# gpus: 1
# needs: jax

import os

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import jax
import jax.numpy as jnp
import numpy as np
from corpus import Loop, options

args = options(300, resident=True)
BATCH, SIDE, CLASSES, POOL, LR, MOMENTUM = 128, 32, 10, 12, 0.02, 0.9
rng = np.random.default_rng(0)


def dataset_batch(k: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Batch `k` as a dataset's __getitem__ returns it: (image, label) a sample."""
    r = np.random.default_rng(50 + k)
    images = r.standard_normal((BATCH, SIDE, SIDE, 3), dtype=np.float32)
    labels = r.integers(0, CLASSES, BATCH, dtype=np.int32)
    return [(images[j].copy(), np.asarray(labels[j])) for j in range(BATCH)]


stream = [dataset_batch(k) for k in range(POOL)]


def he(shape: tuple[int, ...], fan_in: int) -> jax.Array:
    return jnp.asarray(rng.standard_normal(shape, dtype=np.float32) * np.sqrt(2 / fan_in))


params = {
    "c1": he((3, 3, 3, 32), 27),
    "c2": he((3, 3, 32, 64), 288),
    "d": he((16 * 16 * 64, CLASSES), 16 * 16 * 64),
}
velocity = jax.tree_util.tree_map(jnp.zeros_like, params)


def loss_fn(p: dict, images: jax.Array, labels: jax.Array) -> jax.Array:
    conv = lambda x, w, s: jax.lax.conv_general_dilated(  # noqa: E731
        x, w, (s, s), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")
    )
    h = jax.nn.relu(conv(images, p["c1"], 1))
    h = jax.nn.relu(conv(h, p["c2"], 2))
    logits = h.reshape(BATCH, -1) @ p["d"]
    return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), labels[:, None], 1))


def train_step(p: dict, v: dict, images: jax.Array, labels: jax.Array) -> tuple:
    loss, grads = jax.value_and_grad(loss_fn)(p, images, labels)
    v = jax.tree_util.tree_map(lambda m, g: MOMENTUM * m + g, v, grads)
    return jax.tree_util.tree_map(lambda w, m: w - LR * m, p, v), v, loss


step = jax.jit(train_step, donate_argnums=(0, 1))


@jax.jit
def sampled_step(p: dict, v: dict, samples: list) -> tuple:
    """The step as the list arrives: the samples stacked on the GPU, then trained on."""
    images = jnp.stack([image for image, _ in samples])
    labels = jnp.stack([label for _, label in samples])
    return train_step(p, v, images, labels)


def stacked(samples: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    return np.stack([s[0] for s in samples]), np.stack([s[1] for s in samples])


resident = [tuple(jax.device_put(a) for a in stacked(b)) for b in stream] if args.resident else []
losses: list[jax.Array] = []


def train(i: int) -> None:
    global params, velocity
    p, v = params, velocity
    if args.resident:
        params, velocity, loss = step(p, v, *resident[i % POOL])
    elif args.fixed:
        images, labels = stacked(stream[i % POOL])
        params, velocity, loss = step(p, v, jax.device_put(images), jax.device_put(labels))  # STEP
    else:
        params, velocity, loss = sampled_step(p, v, jax.device_put(stream[i % POOL]))  # STEP
    losses.append(loss)


for i in range(3):  # compiles the step
    train(i)
jax.block_until_ready(params)
losses.clear()
loop = Loop(args, sync=lambda: jax.block_until_ready(params)).timed(train)
loop.report(loss=float(jax.device_get(jnp.stack(losses)).mean()))
