"""Where copy_many's loop method loses to PyTorch's loop (issue 49: 8-14 us a call for 1-12
pinned pieces of 96 KiB-16 MiB), one variable at a time, interleaved in one process: PyTorch's
loop on the current stream and on a side stream, copy_many, its copier alone on the pieces read
once, and raw cudaMemcpyAsync through ctypes with cudaMemcpyDefault or the explicit kind, on a
non-blocking stream or the legacy default one, each followed by a stream synchronize. Prints
each cell's medians in microseconds; writes nothing.

    python3 benchmarks/copyapi_loop_probe.py [--trials 150]
"""

from __future__ import annotations

import argparse
import ctypes
import glob
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

import xferscope
from xferscope.core.compiled import engine_module
from xferscope.transfer.buffers import read_pair
from xferscope.transfer.engine import default_engine

DEFAULT_KIND, H2D, D2H, NON_BLOCKING = 4, 1, 2, 1  # cudaMemcpyKind, cudaStreamNonBlocking


def runtime() -> Any:
    """libcudart as PyTorch loaded it (the soname), else its wheel's, else the toolkit's."""
    here = os.path.dirname(torch.__file__)
    wheels = glob.glob(os.path.join(here, "..", "nvidia", "**", "libcudart.so*"), recursive=True)
    for name in ["libcudart.so.13", *wheels, "/usr/local/cuda/lib64/libcudart.so"]:
        try:
            rt = ctypes.CDLL(name)
        except OSError:
            continue
        rt.cudaMemcpyAsync.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                                       ctypes.c_int, ctypes.c_void_p]  # fmt: skip
        rt.cudaStreamSynchronize.argtypes = [ctypes.c_void_p]
        return rt
    raise SystemExit("copyapi_loop_probe: no libcudart found")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=150)
    args = parser.parse_args()
    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    rt = runtime()
    own = ctypes.c_void_p()
    rt.cudaStreamCreateWithFlags(ctypes.byref(own), NON_BLOCKING)
    copier = default_engine().many_copier(0)
    side = torch.cuda.Stream()
    current = torch.cuda.current_stream()

    def raw(pairs: list, kind: int, stream: Any) -> Callable[[], None]:
        def run() -> None:
            for d, s in pairs:
                rt.cudaMemcpyAsync(d.data_ptr(), s.data_ptr(), d.nbytes, kind, stream)
            rt.cudaStreamSynchronize(stream)

        return run

    for direction in ("h2d", "d2h"):
        for size in (64 << 10, 96 << 10, 256 << 10, 1 << 20, 16 << 20):
            for count in (1, 4, 12):
                host = [torch.randint(0, 256, (size,), dtype=torch.uint8).pin_memory()
                        for _ in range(count)]  # fmt: skip
                dev = [torch.empty(size, dtype=torch.uint8, device="cuda") for _ in range(count)]
                ends = (dev, host) if direction == "h2d" else (host, dev)
                pairs = list(zip(*ends, strict=True))
                batch = engine_module().resolve_pairs(pairs, -1, None, read_pair)
                kind = H2D if direction == "h2d" else D2H

                def loop(stream: Any = current, pairs: list = pairs) -> None:
                    with torch.cuda.stream(stream):
                        for d, s in pairs:
                            d.copy_(s, non_blocking=True)
                    stream.synchronize()

                methods: dict[str, Callable[[], Any]] = {
                    "torch_loop": loop,
                    "torch_side_stream": lambda p=pairs: loop(side, p),
                    "copy_many": lambda p=pairs: xferscope.copy_many(p),
                    "method_only": lambda b=batch: copier.copy_resolved("loop", b),
                    "raw_default_kind": raw(pairs, DEFAULT_KIND, own),
                    "raw_explicit_kind": raw(pairs, kind, own),
                    "raw_legacy_stream": raw(pairs, kind, None),
                }
                names = list(methods)
                seconds: dict[str, list[float]] = {n: [] for n in names}
                for _ in range(3):
                    for n in names:
                        methods[n]()
                for t in range(args.trials):
                    for n in names[t % len(names) :] + names[: t % len(names)]:
                        start = time.perf_counter()
                        methods[n]()
                        seconds[n].append(time.perf_counter() - start)
                med = {n: round(statistics.median(v) * 1e6, 1) for n, v in seconds.items()}
                print(direction, count, "x", size >> 10, "KiB", med, flush=True)


if __name__ == "__main__":
    main()
