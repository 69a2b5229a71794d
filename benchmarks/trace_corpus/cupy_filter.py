"""A CuPy image-processing pipeline: camera frames of 2048x2048 float32, from a pool of four
pageable NumPy arrays whose first rows the host refreshes each frame, are uploaded into one GPU
buffer with `ndarray.set`, sharpened on the GPU (an FFT scale space of Gaussian blurs whose
difference-of-Gaussian bands boost the frame's detail) and read back with `.get()`.

Cause: the upload and the download go from and to pageable host memory, which the driver stages
through its own buffer a chunk at a time while the host waits. --fixed: the frames in pinned host
arrays (`cupyx.empty_pinned`, filled once from the same data) and the results read into a pinned
array (`.get(out=...)`): the same calls, in the same order, on the same (default) stream.
--resident: the frames kept on the GPU, no copies. (`cupy.asarray` of a pageable array would
stage it through CuPy's own pinned pool, a host copy and then a pinned upload, so the frame goes
in with `set`, as a pipeline that reuses its GPU buffer does.)"""

# cause: pageable_copies
# fix: the frames and the results in pinned host arrays (cupyx.empty_pinned), the same copies
# step: STEP
# resident: yes
# gpus: 1
# needs: cupy

import cupy as cp
import cupyx
import numpy as np
from corpus import Loop, options

args = options(150, resident=True)

SIZE = 2048
SHAPE = (SIZE, SIZE)  # 16 MiB of float32 a frame
POOL = 4  # frames in the camera's ring
FRESH = 16  # rows the camera writes anew each frame
SCALES = 48  # Gaussian blurs of the scale space, sigma from 1 to 64 pixels
GAIN, DETAIL = 8.0, 0.05

rng = np.random.default_rng(0)
frames = [rng.random(SHAPE, dtype=np.float32) for _ in range(POOL)]
if args.fixed:
    pinned = [cupyx.empty_pinned(SHAPE, dtype=np.float32) for _ in range(POOL)]
    for p, f in zip(pinned, frames, strict=True):
        p[...] = f
    frames = pinned
    result = cupyx.empty_pinned(SHAPE, dtype=np.float32)
resident = [cp.asarray(f) for f in frames] if args.resident else []
on_gpu = cp.empty(SHAPE, dtype=cp.float32)

# the blurs' transfer functions, one per scale: a Gaussian of sigma s is exp(-2 pi^2 s^2 f^2)
fy = cp.fft.fftfreq(SIZE)[:, None]
fx = cp.fft.rfftfreq(SIZE)[None, :]
sigmas = cp.asarray(np.geomspace(1.0, 64.0, SCALES))[:, None, None]
bank = cp.exp(-2.0 * cp.pi**2 * sigmas**2 * (fx**2 + fy**2)).astype(cp.float32)
del fy, fx, sigmas


def sharpen(g: cp.ndarray) -> cp.ndarray:
    """The frame with its detail at every scale boosted."""
    blurred = cp.fft.irfft2(cp.fft.rfft2(g) * bank, s=SHAPE)  # (SCALES, 2048, 2048)
    bands = blurred[:-1] - blurred[1:]  # difference-of-Gaussian bands, fine to coarse
    detail = cp.tanh(bands * GAIN).sum(axis=0)
    return cp.clip(g + DETAIL * detail, 0.0, 1.0)


def frame_step(i: int) -> object:
    frame = frames[i % POOL]
    rng.random((FRESH, SIZE), dtype=np.float32, out=frame[:FRESH])  # the camera's new rows
    if args.resident:
        return sharpen(resident[i % POOL])
    on_gpu.set(frame)  # STEP
    out = sharpen(on_gpu)
    return out.get(out=result) if args.fixed else out.get()  # STEP


for i in range(3):
    frame_step(i)
cp.cuda.Device().synchronize()
loop = Loop(args, sync=cp.cuda.Device().synchronize)
loop.start()
for i in range(args.steps):
    last = frame_step(i)
    loop.step()
cp.cuda.Device().synchronize()
loop.stop()
loop.report()
