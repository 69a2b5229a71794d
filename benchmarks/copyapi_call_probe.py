"""Issue 49: where copy_many's per-call time goes for a few pinned pieces (the dense grid's
losses): the same batch by PyTorch's loop (as copyapi_bench times it), copy_many, its native
entry without the Python wrapper (copy_pairs), the same with the loop, the kernel or the batch
call forced, the native copy of a batch already read (copy_resolved), the reading alone
(resolve_pairs) and a synchronize alone; PyTorch's loop on a stream of its own, and the cost of
asking PyTorch for its current stream's handle; with CuPy, one cudaMemcpyAsync and synchronize per
piece on the legacy default stream, on a non-blocking stream (as copy_many's copier has) and on
a blocking one, to tell the stream's part. $XFERSCOPE_PROBE_ROUNDS rounds (3,000), the ways
shuffled each round, medians in microseconds after the first fifteenth. Writes one JSON object
(argv[1]); argv[2], optional: the cells, direction:count:size comma-separated.

    python3 benchmarks/copyapi_call_probe.py out.json [d2h:1:64,h2d:1:8192]
"""

import json
import os
import random
import statistics
import sys
import time

sys.path.insert(0, "benchmarks")
import torch

import copyapi_bench as base
import xferscope
from xferscope.core.compiled import engine_module
from xferscope.transfer import copy as direct
from xferscope.transfer.buffers import read_pair
from xferscope.transfer.copy import copies_of
from xferscope.transfer.engine import default_engine
from xferscope.transfer.first import copy_many  # as `from xferscope import copy_many` binds it

if len(sys.argv) < 2:
    raise SystemExit("usage: copyapi_call_probe.py OUT.json [direction:count:size,...]")
OUT = base.out_file("OUT.json", sys.argv[1])
_rounds = os.environ.get("XFERSCOPE_PROBE_ROUNDS", "3000")
if not _rounds.isdigit() or not 30 <= int(_rounds) <= 100_000:
    raise SystemExit(f"XFERSCOPE_PROBE_ROUNDS: {_rounds!r} is not a count from 30 to 100000")
ROUNDS = int(_rounds)
CELLS = (("d2h", 4, 256 << 10), ("d2h", 12, 96 << 10), ("h2d", 12, 256 << 10),
         ("h2d", 4, 96 << 10), ("d2h", 1, 64))  # fmt: skip
if len(sys.argv) > 2:
    try:
        CELLS = tuple(
            (d, int(n), int(s)) for d, n, s in (c.split(":") for c in sys.argv[2].split(","))
        )
    except ValueError:
        raise SystemExit(f"cells: {sys.argv[2]!r} is not direction:count:size, ...") from None
    if not all(
        d in ("h2d", "d2h") and 1 <= n <= 1 << 16 and 1 <= s <= 1 << 30 for d, n, s in CELLS
    ):
        raise SystemExit("cells: each is h2d or d2h, a count from 1 to 65536, 1 B to 1 GiB")

_e = engine_module()
xferscope.warmup()
copies = copies_of(default_engine())
native = copies.copier(0).native
g = torch.Generator(device="cuda").manual_seed(3)
stream = torch.cuda.current_stream()
side = torch.cuda.Stream()


def cell(direction: str, n: int, size: int) -> dict:
    dst, src = base.torch_pieces(direction, "pinned", n, size, g)
    pairs = list(zip(dst, src, strict=True))
    resolved = _e.resolve_pairs(pairs, -1, None, read_pair)

    def loop() -> None:
        for d, s in pairs:
            d.copy_(s, non_blocking=True)
        stream.synchronize()

    def side_loop() -> None:  # PyTorch's loop on a stream of its own, as copy_many's copier
        with torch.cuda.stream(side):
            for d, s in pairs:
                d.copy_(s, non_blocking=True)
        side.synchronize()

    ways = {
        "torch_loop": loop,
        "torch_loop_side_stream": side_loop,
        "current_stream_handle": lambda: torch.cuda.current_stream().cuda_stream,
        "copy_many": lambda: copy_many(pairs),
        "copy_pairs": lambda: copies.copy_pairs(pairs, -1, None, -1),
        "copy_pairs_loop": lambda: copies.copy_pairs(pairs, -1, "loop", -1),
        "copy_resolved": lambda: _e.copy_resolved(native, "loop", resolved),
        "resolve_only": lambda: _e.resolve_pairs(pairs, -1, None, read_pair),
        "sync_only": lambda: stream.synchronize(),
        "copy_many_direct": lambda: direct.copy_many(pairs),
        "copy_pairs_kernel": lambda: copies.copy_pairs(pairs, -1, "kernel", -1),
        "copy_pairs_batch": lambda: copies.copy_pairs(pairs, -1, "batch-stream", -1),
    }
    try:
        import cupy

        rt = cupy.cuda.runtime
        kind = rt.memcpyHostToDevice if direction == "h2d" else rt.memcpyDeviceToHost
        ends = [(d.data_ptr(), s.data_ptr(), d.nbytes) for d, s in pairs]
        streams = {"legacy": 0, "non_blocking": rt.streamCreateWithFlags(1),
                   "blocking": rt.streamCreateWithFlags(0)}  # fmt: skip

        def raw(handle: int):
            def run() -> None:
                for d, s, n in ends:
                    rt.memcpyAsync(d, s, n, kind, handle)
                rt.streamSynchronize(handle)

            return run

        for name, handle in streams.items():
            ways[f"cupy_{name}"] = raw(handle)
    except ImportError:
        pass
    t: dict = {k: [] for k in ways}
    names = list(ways)
    for _ in range(ROUNDS):
        random.shuffle(names)
        for k in names:
            a = time.perf_counter_ns()
            ways[k]()
            t[k].append(time.perf_counter_ns() - a)
    row: dict = {k: round(statistics.median(v[ROUNDS // 15 :]) / 1e3, 2) for k, v in t.items()}
    row["method"] = direct.copy_many(pairs).method
    return row


out = {}
for direction, n, size in CELLS:
    key = f"{direction} {n} x {size}"
    out[key] = cell(direction, n, size)
    print(key, out[key], flush=True)
OUT.write_text(json.dumps(out, indent=1))
