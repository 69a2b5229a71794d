"""A CuPy loop for `xferscope trace`'s benchmark that copies each step's batch from pageable
NumPy memory with `cupy.asarray`; --fixed fills two pinned buffers (cupyx.empty_pinned) in turn
and copies each on a stream of its own, once the GPU is done with the step that used its GPU
buffer last (two steps before), so the copy runs beside the step before's kernels; --resident
keeps one batch on the GPU. Each step the host refreshes the batch's first rows only (FRESH), as
pageable_loop.py does, so that the copy is what the fix changes. `cupy.asarray` of pageable
memory stages it through CuPy's pinned pool (a host copy, no CUDA call) and copies it on the
current stream, after the step before. Prints the loop's time as JSON."""

import time

import cupy
import cupyx
import numpy as np
from loop_options import options, report

args = options(100)

shape = (2048, 4096)  # 32 MiB of fp32 a batch
FRESH = 32  # rows made anew each step
rng = np.random.default_rng(0)
pageable = rng.random(shape, dtype=np.float32)
pinned = [cupyx.empty_pinned(shape, dtype=np.float32) for _ in range(2)]
for buffer in pinned:
    buffer[...] = pageable
weight = cupy.random.rand(4096, 4096, dtype=np.float32)
resident = cupy.random.rand(*shape, dtype=np.float32)
streams = [cupy.cuda.Stream(non_blocking=True) for _ in range(2)]
on_gpu = [cupy.empty(shape, dtype=np.float32) for _ in range(2)]
done = [cupy.cuda.get_current_stream().record() for _ in range(2)]  # each buffer's last step
turn = [0]


def batch() -> cupy.ndarray:
    if args.resident:
        return resident
    if args.fixed:
        done[turn[0]] = cupy.cuda.get_current_stream().record()  # after the step that used it
        k = turn[0] = 1 - turn[0]
        streams[k].synchronize()  # its copy two batches ago is done: refill it
        rng.random((FRESH, shape[1]), dtype=np.float32, out=pinned[k][:FRESH])
        streams[k].wait_event(done[k])  # the step two before is done with its GPU buffer
        on_gpu[k].set(pinned[k], stream=streams[k])
        cupy.cuda.get_current_stream().wait_event(streams[k].record())
        return on_gpu[k]
    rng.random((FRESH, shape[1]), dtype=np.float32, out=pageable[:FRESH])
    return cupy.asarray(pageable)  # pageable


for _ in range(3):
    cupy.tanh(batch() @ weight).sum()
cupy.cuda.Device().synchronize()
start = time.perf_counter()
for _ in range(args.steps):
    x = batch()
    for _ in range(2):
        x = cupy.tanh(x @ weight)
cupy.cuda.Device().synchronize()
report(args.steps, time.perf_counter() - start)
