"""A CuPy detection pipeline over camera frames: each 2048 x 2048 float32 frame, taken in turn
from a ring of pinned host buffers (`cupyx.empty_pinned`), is uploaded into one GPU buffer with
`ndarray.set` on the stream (`cupy.asarray` would copy it into CuPy's own pinned pool first),
smoothed (cupyx.scipy.ndimage's gaussian_filter), thresholded against its local background
(a uniform_filter) and reduced to a 64 x 64 grid of detection counts on the GPU. The counts are
read back with `.get()` each frame, and the host turns them into the frame's list of hot cells
(NumPy, then a Python loop over the cells). `.get()` waits for the GPU, and the GPU sits idle
while the host makes the list. The fix: each frame's counts copied into a pinned array on the
stream (`counts.data.copy_to_host_async`, as `.get(blocking=False)` does in CuPy 13) and an
event recorded; the host makes the previous frame's list (its event synchronized: long done)
while the GPU works on this one. The same lists either way."""

# cause: synchronizations
# fix: counts copied into pinned memory without waiting; the previous frame's list made meanwhile
# step: STEP
# resident: no
# gpus: 1
# needs: cupy

import ctypes

import cupy as cp
import cupyx
import numpy as np
from corpus import Loop, options
from cupyx.scipy import ndimage

args = options(150)
SIZE, CELLS, POOL = 2048, 64, 4
CELL = SIZE // CELLS
rng = np.random.default_rng(0)
ring = [cupyx.empty_pinned((SIZE, SIZE), dtype=np.float32) for _ in range(POOL)]
for frame in ring:
    frame[...] = rng.random((SIZE, SIZE), dtype=np.float32)
image = cp.empty((SIZE, SIZE), dtype=cp.float32)  # the frame's buffer on the GPU, reused
counts_host = [cupyx.empty_pinned((CELLS, CELLS), dtype=np.int32) for _ in range(2)]
done = [cp.cuda.Event() for _ in range(2)]
found: list[list[tuple[int, int, int]]] = []


def detect(frame: np.ndarray) -> cp.ndarray:
    """A frame's detection counts, a CELLS x CELLS grid, on the GPU."""
    image.set(frame, stream=cp.cuda.get_current_stream())  # STEP: queued, from pinned memory
    smooth = ndimage.gaussian_filter(image, 2.0)
    background = ndimage.uniform_filter(smooth, 31)
    hot = (smooth > background + 0.02).astype(cp.int32)
    return hot.reshape(CELLS, CELL, CELLS, CELL).sum(axis=(1, 3), dtype=cp.int32)


def cells(counts: np.ndarray) -> list[tuple[int, int, int]]:
    """The host's part: the frame's hot cells, busiest first."""
    rows, cols = np.nonzero(counts > counts.mean() + counts.std())
    return sorted(((int(counts[r, c]), int(r), int(c)) for r, c in zip(rows, cols, strict=True)),
                  reverse=True)  # fmt: skip


def frame_step(i: int) -> None:
    counts = detect(ring[i % POOL])  # STEP
    if not args.fixed:
        found.append(cells(counts.get()))  # STEP: waits for the GPU
        return
    into = counts_host[i % 2].ctypes.data_as(ctypes.c_void_p)  # every CuPy takes a c_void_p
    counts.data.copy_to_host_async(into, counts.nbytes, cp.cuda.get_current_stream())  # STEP
    done[i % 2].record()
    if i > 0:
        done[(i - 1) % 2].synchronize()  # the previous frame's counts: long done
        found.append(cells(counts_host[(i - 1) % 2]))


for i in range(POOL):  # warm-up: CuPy's kernels compiled and cached
    frame_step(i)
cp.cuda.Device().synchronize()
found.clear()
loop = Loop(args, sync=cp.cuda.Device().synchronize).timed(frame_step)
if args.fixed and args.steps:
    done[(args.steps - 1) % 2].synchronize()
    found.append(cells(counts_host[(args.steps - 1) % 2]))
loop.report(frames=len(found))
