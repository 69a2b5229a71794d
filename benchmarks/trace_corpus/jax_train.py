"""A JAX training loop: a jitted step (forward, `jax.grad`, plain SGD written by hand) of an MLP
of four layers (4096 wide, the last to 1024 classes) in bfloat16 with float32 weights, over
batches put on the GPU once before the loop; each step the host keeps its books (running means
and window percentiles, a formatted log line).

Cause: the bookkeeping logs each step's loss with `float(loss)`, which waits for the GPU every
step; the GPU then sits idle while the host keeps its books and dispatches the next step.
--fixed: the losses kept as device arrays in a list and read once at the end with
`jax.device_get`; the same bookkeeping, without the value. No resident form: the batches are on
the GPU already."""

# cause: synchronizations
# fix: keep each step's loss on the GPU in a list and read them all once after the loop
# step: STEP nvtx=jit_sgd_step (XLA's range around each run of the jitted step)
# resident: no
# gpus: 1
# needs: jax

import io
import os

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import time

import jax
import jax.numpy as jnp
import numpy as np
from corpus import Loop, options

args = options(300)

WIDTH, DEPTH, CLASSES, BATCH = 4096, 4, 1024, 4096
LR = 1e-3
WINDOW = 100  # the log's window of recent steps

rng = np.random.default_rng(0)
params = [
    (
        jnp.asarray(rng.standard_normal((WIDTH, n), dtype=np.float32) / np.sqrt(WIDTH)),
        jnp.asarray(rng.standard_normal(n, dtype=np.float32) * 0.01),
    )
    for n in [WIDTH] * (DEPTH - 1) + [CLASSES]
]
batches = [
    (
        jax.device_put(rng.standard_normal((BATCH, WIDTH), dtype=np.float32)),
        jax.device_put(rng.integers(0, CLASSES, BATCH, dtype=np.int32)),
    )
    for _ in range(4)
]


def loss_fn(params, x, y):
    h = x.astype(jnp.bfloat16)
    for i, (w, b) in enumerate(params):
        h = h @ w.astype(jnp.bfloat16) + b.astype(jnp.bfloat16)
        if i < len(params) - 1:
            h = jax.nn.gelu(h)
    logp = jax.nn.log_softmax(h.astype(jnp.float32))
    return -jnp.take_along_axis(logp, y[:, None], axis=1).mean()


def sgd_step(params, x, y):
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    params = jax.tree_util.tree_map(lambda p, g: p - LR * g, params, grads)
    return params, loss


train_step = jax.jit(sgd_step, donate_argnums=0)  # the old weights' memory is reused

running: dict[str, float] = {}
history: list[dict[str, float]] = []
log = io.StringIO()  # the trainer's log file


def keep_books(step: int, loss: float | None, seconds: float) -> None:
    """The trainer's books: each number's running mean and its window's percentiles, logged."""
    record = {"lr": LR, "seconds": seconds, "samples_per_s": BATCH / seconds}
    if loss is not None:
        record["loss"] = loss
    history.append(record)
    window = history[-WINDOW:]
    line = [f"step {step:5d}"]
    for key, value in record.items():
        running[key] = 0.9 * running.get(key, value) + 0.1 * value
        values = np.array([r[key] for r in window if key in r])
        p50, p90, p99 = np.percentile(values, [50, 90, 99])
        line.append(
            f"{key} {running[key]:.4g} (mean {values.mean():.4g}, p50 {p50:.4g}, "
            f"p90 {p90:.4g}, p99 {p99:.4g})"
        )
    log.write(" | ".join(line) + "\n")


def run(first: int, steps: int, losses: list) -> None:
    global params
    before = time.perf_counter()
    for i in range(first, first + steps):
        x, y = batches[i % len(batches)]
        params, loss = train_step(params, x, y)  # STEP
        now = time.perf_counter()
        if args.fixed:
            losses.append(loss)
            keep_books(i, None, now - before)
        else:
            keep_books(i, float(loss), now - before)  # STEP
        before = now


run(0, 5, [])  # compiles the step
jax.block_until_ready(params)
loop = Loop(args)
loop.start()
losses: list = []
run(0, args.steps, losses)
if args.fixed:
    values = jax.device_get(losses)  # every step's loss, read once
    for r, v in zip(history[-args.steps :], values, strict=True):
        r["loss"] = float(v)
jax.block_until_ready(params)
loop.stop()
loop.report()
