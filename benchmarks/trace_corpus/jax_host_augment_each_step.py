"""A JAX land-cover classifier for satellite imagery, EuroSAT-style: 4096 tiles of 64 x 64 RGB
(uint8, 48 MiB) of 10 classes held in memory, and a small VGG-style convnet (six 3 x 3
convolutions, 64 to 256 channels, ReLU, global average pooling, a dense layer) trained with a
jitted step written in plain JAX (softmax cross-entropy, SGD with momentum and weight decay by
hand). Each step the training loop makes its own batch with NumPy: 128 tiles drawn at random,
each cropped to 56 x 56 at a random offset, flipped left-right and up-down and turned a quarter
at random (overhead imagery has no up), its brightness, contrast and colour balance jittered
(sun angle, haze), sensor noise added to half of them, normalized to float32 (4.8 MB). The
NumPy arrays go straight to the jitted step, which copies them to the GPU on JAX's own
threads; every step's bytes are new.

Cause: making a batch takes the loop's own thread several milliseconds (about 17 ms on a
2-core Xeon VM, most of it drawing the noise and the pixel passes), longer than the GPU's step:
JAX's dispatch does not wait for the GPU, so the main thread's NumPy already overlaps the step
before, but the GPU, done with it, waits for the next batch every step. --fixed: a loader of 3
threads makes the batches 3 steps ahead (a bounded queue: never more than 3 made and not yet
taken) and puts each on the GPU with `jax.device_put` on its own thread; the loop takes each
in turn. NumPy lets go of the GIL in its array work, so the 3 make batches side by side: one
thread would make them no faster than the loop did. The same batches, the same step, the same
losses. --resident: the run's every batch (4.8 MB each, 2.4 GB at the default 500 steps) made
and put on the GPU before the loop, the step given its own in turn; a run too long for
RESIDENT_MOST is refused with one line."""

# cause: input_starved
# fix: a loader of 3 threads makes the batches 3 steps ahead and puts them on the GPU
# step: STEP nvtx=jit_train_step (XLA's range around each run of the jitted step)
# resident: yes
# gpus: 1
# needs: jax

import os

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor

import jax
import jax.numpy as jnp
import numpy as np
from corpus import Loop, options

args = options(500, resident=True)
TILES, TILE, CROP, BATCH, CLASSES = 4096, 64, 56, 128, 10
WIDTHS = ((3, 64, 1), (64, 64, 1), (64, 128, 2), (128, 128, 1), (128, 256, 2), (256, 256, 1))
LR, MOMENTUM, DECAY = 0.01, 0.9, 5e-4
AHEAD, WARMUP, SEED = 3, 3, 7
BATCH_BYTES = BATCH * CROP * CROP * 3 * 4 + BATCH * 4
RESIDENT_MOST = 4 << 30  # bytes of batches --resident keeps on the GPU at most
# the normalization's channel means and deviations, measured once over the tiles (0-255)
MEAN = np.array([127.48, 127.49, 127.47], dtype=np.float32)
INV_STD = 1 / np.array([73.89, 73.91, 73.88], dtype=np.float32)

if args.resident and args.steps * BATCH_BYTES > RESIDENT_MOST:
    raise SystemExit(
        f"--resident: {args.steps} steps' batches ({args.steps * BATCH_BYTES / 2**30:.2f} GiB) "
        f"are more than the {RESIDENT_MOST >> 30} GiB kept on the GPU: "
        f"{RESIDENT_MOST // BATCH_BYTES} steps at most"
    )

rng = np.random.default_rng(0)
tile_images = rng.integers(0, 256, (TILES, TILE, TILE, 3), dtype=np.uint8)
tile_labels = rng.integers(0, CLASSES, TILES, dtype=np.int32)


def make_batch(k: int) -> tuple[np.ndarray, np.ndarray]:
    """Batch `k`, drawn and augmented with NumPy: the same batch whichever thread makes it."""
    r = np.random.default_rng([SEED, k])
    pick = r.integers(0, TILES, BATCH)
    top, left = r.integers(0, TILE - CROP + 1, (2, BATCH))
    crops = zip(pick, top, left, strict=True)
    x = np.stack([tile_images[p, t : t + CROP, u : u + CROP] for p, t, u in crops])
    flip = r.random(BATCH) < 0.5
    x[flip] = x[flip, :, ::-1]  # left-right
    flip = r.random(BATCH) < 0.5
    x[flip] = x[flip, ::-1]  # up-down
    turn = r.random(BATCH) < 0.5
    x[turn] = x[turn].transpose(0, 2, 1, 3)  # a quarter turn, with the flips
    img = x.reshape(BATCH, CROP * CROP, 3).astype(np.float32)
    # brightness and contrast about each tile's mean, the colour balance per channel
    mean = img.reshape(BATCH, -1).mean(axis=1).reshape(BATCH, 1, 1)
    gain = r.uniform(0.8, 1.2, (BATCH, 1, 1)).astype(np.float32)
    tint = r.uniform(0.9, 1.1, (BATCH, 1, 3)).astype(np.float32)
    bias = r.uniform(-20, 20, (BATCH, 1, 1)).astype(np.float32)
    img -= mean
    img *= gain * tint
    img += mean + bias
    # the sensor's noise on half the tiles, its level drawn per tile
    noisy = np.flatnonzero(r.random(BATCH) < 0.5)
    sigma = r.uniform(2, 8, (noisy.size, 1, 1)).astype(np.float32)
    img[noisy] += r.standard_normal((noisy.size, CROP * CROP, 3), dtype=np.float32) * sigma
    np.clip(img, 0, 255, out=img)
    img -= MEAN
    img *= INV_STD
    return img.reshape(BATCH, CROP, CROP, 3), tile_labels[pick]


def he(shape: tuple[int, ...], fan_in: int) -> jax.Array:
    return jnp.asarray(rng.standard_normal(shape, dtype=np.float32) * np.sqrt(2 / fan_in))


params = {
    "convs": [(he((3, 3, cin, cout), 9 * cin), jnp.zeros(cout)) for cin, cout, _ in WIDTHS],
    "dense": (he((WIDTHS[-1][1], CLASSES), WIDTHS[-1][1]), jnp.zeros(CLASSES)),
}
velocity = jax.tree_util.tree_map(jnp.zeros_like, params)


def loss_fn(p: dict, images: jax.Array, labels: jax.Array) -> jax.Array:
    h = images
    for (w, b), (_, _, stride) in zip(p["convs"], WIDTHS, strict=True):
        h = jax.lax.conv_general_dilated(
            h, w, (stride, stride), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")
        )
        h = jax.nn.relu(h + b)
    w, b = p["dense"]
    logits = h.mean(axis=(1, 2)) @ w + b
    return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), labels[:, None], 1))


def train_step(p: dict, v: dict, images: jax.Array, labels: jax.Array) -> tuple:
    loss, grads = jax.value_and_grad(loss_fn)(p, images, labels)
    v = jax.tree_util.tree_map(lambda m, g, w: MOMENTUM * m + g + DECAY * w, v, grads, p)
    return jax.tree_util.tree_map(lambda w, m: w - LR * m, p, v), v, loss


step = jax.jit(train_step, donate_argnums=(0, 1))


def loaded(k: int) -> tuple[jax.Array, jax.Array]:
    """On a loader thread (--fixed): batch `k` made and put on the GPU."""
    images, labels = make_batch(k)
    return jax.device_put(images), jax.device_put(labels)  # STEP


def put(k: int) -> tuple[jax.Array, jax.Array]:
    """Before the loop (--resident): batch `k` made and put on the GPU."""
    return jax.device_put(make_batch(k))


pool = ThreadPoolExecutor(AHEAD, thread_name_prefix="loader") if args.fixed else None
ahead: deque[Future[tuple[jax.Array, jax.Array]]] = deque()
resident: list[tuple[jax.Array, jax.Array]] = []
if args.resident:  # the run's every batch, made 3 at a time and kept on the GPU
    with ThreadPoolExecutor(AHEAD) as makers:
        resident = list(makers.map(put, range(WARMUP, WARMUP + args.steps)))
if pool is not None:  # the loader starts on the run's first batches
    ahead.extend(pool.submit(loaded, WARMUP + i) for i in range(min(AHEAD, args.steps)))
for k in range(WARMUP):  # compiles the step, on the batches as each form passes them
    x, y = make_batch(k)
    if args.fixed or args.resident:
        x, y = jax.device_put((x, y))
    params, velocity, _ = step(params, velocity, x, y)
jax.block_until_ready(params)
losses: list[jax.Array] = []


def train(i: int) -> None:
    global params, velocity
    if args.resident:
        images, labels = resident[i]
    elif pool is not None:
        images, labels = ahead.popleft().result()  # made and put on the GPU by the loader
        if i + AHEAD < args.steps:
            ahead.append(pool.submit(loaded, WARMUP + i + AHEAD))
    else:
        images, labels = make_batch(WARMUP + i)  # NumPy: the step's call copies them
    params, velocity, loss = step(params, velocity, images, labels)  # STEP
    losses.append(loss)


loop = Loop(args, sync=lambda: jax.block_until_ready(params)).timed(train)
if pool is not None:
    pool.shutdown()
mean_loss = float(np.mean(np.asarray(jax.device_get(losses), dtype=np.float64)))
loop.report(checksum=round(mean_loss, 4))
