"""Why the staged copy stages (issue 13's staged_1GiB goals): 1 GiB of pageable memory moved by
xferscope's staged copy against registering the same buffer in place (cudaHostRegister) and
handing it to the copy engine, in one run on one GPU.

Registering in place needs no host memcpy, so it is the one way past the host-memory traffic
that bounds the staged copy (the host reads the pageable source and writes the pinned staging
while the copy engine reads the staging). Measured here, each as a median of 5:

  register_1GiB_s, unregister_1GiB_s   cudaHostRegister / cudaHostUnregister of the whole buffer
  register_pipeline                     the buffer registered chunk by chunk (32 MiB), each chunk
                                        queued on the copy engine once registered, by 1, 2, 4 and
                                        8 threads with a stream each, unregistered at the end:
                                        the copy overlaps the registering
  host_memcpy_gbps                      the host's own memcpy of the 1 GiB, by 1-16 threads

and, as comparisons, the staged copy (API time through the sweep, as batch_bench.py times it)
against the best register pipeline (goal >= 1: staging is the faster way) and against
cudaMemcpy of pinned memory. Writes benchmarks/results/register-<gpu>-<date>.json.

    python3 benchmarks/register_bench.py --commit $(git rev-parse HEAD) [--out benchmarks/results]
"""

from __future__ import annotations

import ctypes
import ctypes.util
import glob
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from async_bench import api_bandwidth, staged_vs_pinned
from foundation import GiB, bench_parser, comparison, synced_seconds, write_record
from xferscope.core.engine import NativeEngine
from xferscope.core.machine import collect

HERE = Path(__file__).resolve().parent
CHUNK = 32 << 20
THREADS = (1, 2, 4, 8)
MEMCPY_THREADS = (1, 4, 8, 16)
REPS = 5
H2D, D2H = 1, 2  # cudaMemcpyKind
NON_BLOCKING = 1  # cudaStreamNonBlocking


def cudart() -> ctypes.CDLL:
    """The CUDA runtime library: the system's, the toolkit's, or the one PyTorch brought."""
    found = [ctypes.util.find_library("cudart")]
    for root in (os.environ.get("CUDA_HOME", ""), "/usr/local/cuda"):
        found += sorted(glob.glob(os.path.join(root, "lib64", "libcudart.so*")))
    for path in sys.path:
        found += sorted(glob.glob(os.path.join(path, "nvidia", "*", "lib", "libcudart.so*")))
    for name in filter(None, found):
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    raise SystemExit("register_bench: no libcudart found (set CUDA_HOME)")


RT = cudart()


def check(status: int, what: str) -> None:
    if status:
        raise RuntimeError(f"{what} failed: CUDA error {status}")


def median_s(call: Callable[[], object]) -> tuple[float, list[float]]:
    seconds = synced_seconds(call, REPS)
    return statistics.median(seconds), [round(s, 5) for s in seconds]


def register_whole(host: np.ndarray) -> tuple[float, float]:
    """Seconds of cudaHostRegister and of cudaHostUnregister of the whole buffer."""
    start = time.perf_counter()
    check(RT.cudaHostRegister(ctypes.c_void_p(host.ctypes.data), ctypes.c_size_t(host.nbytes), 0),
          "cudaHostRegister")  # fmt: skip
    registered = time.perf_counter()
    check(RT.cudaHostUnregister(ctypes.c_void_p(host.ctypes.data)), "cudaHostUnregister")
    return registered - start, time.perf_counter() - registered


def pipeline(host: np.ndarray, device: int, threads: int, upload: bool) -> None:
    """Thread t registers chunks t, t + T, ... and queues each on its own stream once registered
    (ctypes lets go of the GIL during each call), then waits and unregisters them."""
    errors: list[BaseException] = []

    def work(t: int) -> None:
        try:
            check(RT.cudaSetDevice(torch.cuda.current_device()), "cudaSetDevice")
            stream = ctypes.c_void_p()
            check(RT.cudaStreamCreateWithFlags(ctypes.byref(stream), NON_BLOCKING), "stream")
            mine = range(t * CHUNK, host.nbytes, threads * CHUNK)
            try:
                for at in mine:
                    n = ctypes.c_size_t(min(CHUNK, host.nbytes - at))
                    h = ctypes.c_void_p(host.ctypes.data + at)
                    d = ctypes.c_void_p(device + at)
                    check(RT.cudaHostRegister(h, n, 0), "cudaHostRegister")
                    dst, src = (d, h) if upload else (h, d)
                    kind = H2D if upload else D2H
                    check(RT.cudaMemcpyAsync(dst, src, n, kind, stream), "cudaMemcpyAsync")
                check(RT.cudaStreamSynchronize(stream), "cudaStreamSynchronize")
            finally:
                for at in mine:
                    RT.cudaHostUnregister(ctypes.c_void_p(host.ctypes.data + at))
                RT.cudaStreamDestroy(stream)
        except BaseException as exc:
            errors.append(exc)

    workers = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    if errors:
        raise errors[0]


def host_memcpy_gbps(source: np.ndarray, threads: int) -> float:
    """GB/s of the host copying `source` into another pageable buffer, split over threads
    (numpy lets go of the GIL while it copies)."""
    target = np.empty_like(source)
    target[::4096] = 1  # the pages exist before the timing
    share = -(-source.nbytes // threads)

    def part(t: int) -> None:
        np.copyto(target[t * share : (t + 1) * share], source[t * share : (t + 1) * share])

    def copy() -> None:
        workers = [threading.Thread(target=part, args=(t,)) for t in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()

    copy()
    seconds, _ = median_s(copy)
    assert np.array_equal(target[:: 1 << 16], source[:: 1 << 16])
    return source.nbytes / seconds / 1e9


def main() -> None:
    parser = bench_parser(__doc__)
    args = parser.parse_args()

    engine = NativeEngine()
    meta = collect(engine, [0])
    rng = np.random.default_rng(13)
    host = rng.integers(1, 256, GiB, dtype=np.uint8)  # random, never zeros
    back = np.zeros(GiB, dtype=np.uint8)
    back[::4096] = 1  # the pages exist before the timing, as the source's do
    gpu = torch.empty(GiB, dtype=torch.uint8, device="cuda")
    address = gpu.data_ptr()

    whole = [register_whole(host) for _ in range(REPS)]
    pipelines: dict[str, dict[str, object]] = {}
    for direction, buffer, upload in (("h2d", host, True), ("d2h", back, False)):
        if not upload:
            gpu.copy_(torch.from_numpy(host))
        for threads in THREADS:
            seconds, trials = median_s(
                lambda b=buffer, t=threads, u=upload: pipeline(b, address, t, u)
            )
            pipelines[f"{direction}_{threads}_threads"] = {
                "gbps": round(GiB / seconds / 1e9, 2),
                "trials_s": trials,
            }
        if upload:
            assert torch.equal(gpu[:: 1 << 16].cpu(), torch.from_numpy(host[:: 1 << 16]))
        else:
            assert np.array_equal(back, host)

    comparisons = []
    staged = {}
    for direction in ("h2d", "d2h"):
        staged[direction] = api_bandwidth(engine, direction, "pageable", "staged", GiB)
        best = max(
            (k for k in pipelines if k.startswith(direction)),
            key=lambda k: float(pipelines[k]["gbps"]),  # type: ignore[arg-type]
        )
        comparisons.append(
            comparison(
                f"staged_1GiB_{direction}_vs_register_in_place",
                staged[direction] / 1e9,
                float(pipelines[best]["gbps"]),  # type: ignore[arg-type]
                f"cudaHostRegister of the pageable buffer in {CHUNK >> 20} MiB chunks, each "
                f"copied once registered, then unregistered; the best of {THREADS} threads "
                f"({best})",
                "GB/s",
                True,
                1.0,
            )
        )
        comparisons.append(staged_vs_pinned(engine, direction, staged[direction]))
    figures = {
        "register_1GiB_s": round(statistics.median(r for r, _ in whole), 5),
        "unregister_1GiB_s": round(statistics.median(u for _, u in whole), 5),
        "register_pipeline": pipelines,
        "host_memcpy_gbps": {
            f"{t}_threads": round(host_memcpy_gbps(host, t), 2) for t in MEMCPY_THREADS
        },
    }
    write_record(
        "register", args.commit, meta, torch.cuda.device_count(), comparisons, figures,
        Path(args.out),
    )  # fmt: skip


if __name__ == "__main__":
    main()
