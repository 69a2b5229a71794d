"""A radio telescope's beamformer in CuPy: 64 dual-polarization antennas, their complex64
voltages already on the GPU (the F-engine's channelized samples, written by the capture into a
ring of four blocks), this node's 64 frequency channels of 8192 time samples a block (512 MiB).
Each block is beamformed into 256 beams tiling the field (a 16 x 16 grid of directions) with a
batched complex matmul (a product a channel) by the steering weights (made once from the antennas'
positions), detected (|x|^2, the two polarizations summed) and integrated over 16 samples:
32 MiB of float32 power a block, (channels, integrations, beams). The power goes to the host
every block for the stages downstream; here only their quick-look monitor is kept, each beam's
running total of every 32nd integration (the pulsar search and the filterbank writer are left
out). A source sits in one beam's direction; the brightest beam is reported as a check.

Cause: each block's power is read back with `.get()`, a new pageable NumPy array every block,
which the driver fills through its own staging buffer a chunk at a time at pageable speed while
the host waits (for the block's beamforming, then for the whole copy) and the GPU, done with
the block, waits for the host to queue the next. --fixed: two pinned host buffers made once
(`cupyx.empty_pinned`), used in turn: each block's power copied into one with
`.get(out=..., stream=..., blocking=False)` on a copy stream that waits for the block's event
(non-blocking, so CuPy's default stream, where the beamforming runs, does not wait for it), the
host reading a buffer only after its copy's event, a block later, while the GPU beamforms the
next block: the same bytes, the same monitor. --resident: the monitor's totals kept on the GPU,
no copies, read once at the end. Every form reports the same mean power and brightest beam."""

# cause: pageable_copies
# fix: the power copied into two pinned buffers made once, .get(out=, stream=, blocking=False)
# step: STEP
# resident: yes
# gpus: 1
# needs: cupy

import math

import cupy as cp
import cupyx
import numpy as np
from corpus import Loop, options

args = options(250, resident=True)

ANTENNAS, POLS, CHANNELS, SAMPLES = 64, 2, 64, 8192  # a block: 64 x 8192 x 2 x 64 complex64
GRID = 16
BEAMS = GRID * GRID  # 256
INTEGRATE = 16  # time samples summed into one power sample
INTEGRATIONS = SAMPLES // INTEGRATE  # 512 a block
MONITOR = 32  # the quick-look monitor takes every 32nd integration
RING, WARMUP, SEED = 4, 3, 0
LIGHT = 299_792_458.0  # m/s
FIRST_HZ, WIDTH_HZ = 1.2e9, 390_625.0  # this node's first channel and the channels' width
SPAN = 0.004  # the beams' directions: direction cosines from -SPAN to SPAN in l and m
SOURCE_BEAM = 5 * GRID + 11  # the source's direction: that beam's
SOURCE_POWER = 0.05  # its power at each antenna, the noise's being 1

# the array, measured once: each antenna's east and north offsets (m) within 400 m
host_rng = np.random.default_rng(SEED)
east, north = host_rng.uniform(-200.0, 200.0, (2, ANTENNAS))
freqs = FIRST_HZ + WIDTH_HZ * np.arange(CHANNELS)
cosines = np.linspace(-SPAN, SPAN, GRID)
beam_l, beam_m = (g.ravel() for g in np.meshgrid(cosines, cosines, indexing="ij"))  # beam i*16+j
# each antenna's delay (s) towards each beam's direction, (antennas, beams)
delays = (np.outer(east, beam_l) + np.outer(north, beam_m)) / LIGHT
# the steering weights, made once: (channels, antennas, beams), each beam's phases undone and
# scaled so that the noise keeps its power
weights = cp.asarray(
    np.exp(2j * np.pi * freqs[:, None, None] * delays[None]) / np.sqrt(ANTENNAS),
    dtype=cp.complex64,
)
# the source's phase at each antenna, (channels, antennas)
arrival = cp.asarray(
    np.exp(-2j * np.pi * freqs[:, None] * delays[None, :, SOURCE_BEAM]), dtype=cp.complex64
)

# the capture's ring of blocks on the GPU, (channels, samples, pols, antennas): complex noise
# of unit power at each antenna, and the source's signal with its phase at each
gpu_rng = cp.random.default_rng(SEED)
SHAPE = (CHANNELS, SAMPLES, POLS, ANTENNAS)
ring = cp.empty((RING, *SHAPE), dtype=cp.complex64)
for r in range(RING):
    ring[r] = math.sqrt(0.5) * (
        gpu_rng.standard_normal(SHAPE, dtype=cp.float32)
        + 1j * gpu_rng.standard_normal(SHAPE, dtype=cp.float32)
    )
    source = math.sqrt(0.5 * SOURCE_POWER) * (
        gpu_rng.standard_normal(SHAPE[:3], dtype=cp.float32)
        + 1j * gpu_rng.standard_normal(SHAPE[:3], dtype=cp.float32)
    )
    ring[r] += source[..., None] * arrival[:, None, None, :]
del source

# the monitor's totals, each beam's; on the GPU in the resident form
totals = cp.zeros(BEAMS, dtype=cp.float64) if args.resident else np.zeros(BEAMS)
# --fixed: two pinned buffers for the power, made once, and a copy stream; each buffer's copy
# marked by an event, its block's power kept on the GPU until then (CuPy's pool would give
# its memory to the next block's beamforming while the copy stream still reads it)
pinned = [
    cupyx.empty_pinned((CHANNELS, INTEGRATIONS, BEAMS), dtype=np.float32)
    for _ in range(2 if args.fixed else 0)
]
copies = cp.cuda.Stream(non_blocking=True) if args.fixed else None
ready = cp.cuda.Event(disable_timing=True)  # a block's power made, on the default stream
copied = [cp.cuda.Event(disable_timing=True) for _ in range(2)]
in_flight: list[cp.ndarray | None] = [None, None]


def beamform(block: cp.ndarray) -> cp.ndarray:
    """A block's beams' power: (channels, integrations, beams) float32."""
    voltages = block.reshape(CHANNELS, SAMPLES * POLS, ANTENNAS)
    beams = cp.matmul(voltages, weights)  # (channels, samples * pols, beams)
    power = cp.abs(beams) ** 2
    # a sample's two polarizations lie side by side: an integration is 16 x 2 of them in a row
    return power.reshape(CHANNELS, INTEGRATIONS, INTEGRATE * POLS, BEAMS).sum(axis=2)


def monitor(power: np.ndarray) -> None:
    """The quick-look monitor, on the host: every 32nd integration added to each beam's total."""
    np.add(totals, power[:, ::MONITOR].sum(axis=(0, 1), dtype=np.float64), out=totals)


def hand_on(i: int) -> None:
    """--fixed: block i's power, copied into its pinned buffer, handed to the host's stages."""
    k = i % 2
    copied[k].synchronize()  # queued a block ago: done soon after this block's beamforming began
    monitor(pinned[k])
    in_flight[k] = None


def block_step(i: int) -> None:
    power = beamform(ring[i % RING])  # STEP
    if args.resident:
        cp.add(totals, power[:, ::MONITOR].sum(axis=(0, 1), dtype=cp.float64), out=totals)
        return
    if not args.fixed:
        monitor(power.get())  # STEP: waits for the GPU, then copies into a new pageable array
        return
    k = i % 2  # its buffer's last block, two before, was handed on in the step before
    ready.record()
    copies.wait_event(ready)
    power.get(out=pinned[k], stream=copies, blocking=False)  # STEP
    copied[k].record(copies)
    in_flight[k] = power
    if i > 0:
        hand_on(i - 1)  # the block before, while the GPU beamforms this one


for i in range(WARMUP):  # cuBLAS's handle and CuPy's kernels made, the pools filled
    block_step(i)
cp.cuda.Device().synchronize()
loop = Loop(args, sync=cp.cuda.Device().synchronize)
loop.start()
for i in range(WARMUP, WARMUP + args.steps):
    block_step(i)
    loop.step()
if args.fixed:
    hand_on(WARMUP + args.steps - 1)  # the last block's power
cp.cuda.Device().synchronize()
loop.stop()
sums = cp.asnumpy(totals)  # the resident form's, read once at the end
count = (WARMUP + args.steps) * CHANNELS * len(range(0, INTEGRATIONS, MONITOR)) * BEAMS
loop.report(
    blocks=WARMUP + args.steps,
    mean_power=round(float(sums.sum()) / count, 6),
    brightest_beam=int(np.argmax(sums)),
)
