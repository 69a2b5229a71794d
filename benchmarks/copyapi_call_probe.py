"""Issue 49: where copy_many's per-call time goes for a few pinned pieces (the dense grid's
losses, all by the loop method): the same batch by PyTorch's loop (as copyapi_bench times it),
copy_many, its native entry without the Python wrapper (copy_pairs), the same with the loop
forced, the native copy of a batch already read (copy_resolved), the reading alone
(resolve_pairs) and a synchronize alone; 3,000 rounds, the ways shuffled each round, medians in
microseconds after the first 200. Writes one JSON object (argv[1]).

    python3 benchmarks/copyapi_call_probe.py out.json
"""

import json
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, "benchmarks")
import torch

import copyapi_bench as base
import xferscope
from xferscope.core.compiled import engine_module
from xferscope.transfer.buffers import read_pair
from xferscope.transfer.copy import copies_of, copy_many
from xferscope.transfer.engine import default_engine

_e = engine_module()
xferscope.warmup()
copies = copies_of(default_engine())
native = copies.copier(0).native
g = torch.Generator(device="cuda").manual_seed(3)
stream = torch.cuda.current_stream()


def cell(direction: str, n: int, size: int) -> dict:
    dst, src = base.torch_pieces(direction, "pinned", n, size, g)
    pairs = list(zip(dst, src, strict=True))
    resolved = _e.resolve_pairs(pairs, -1, None, read_pair)

    def loop() -> None:
        for d, s in pairs:
            d.copy_(s, non_blocking=True)
        stream.synchronize()

    ways = {
        "torch_loop": loop,
        "copy_many": lambda: copy_many(pairs),
        "copy_pairs": lambda: copies.copy_pairs(pairs, -1, None, -1),
        "copy_pairs_loop": lambda: copies.copy_pairs(pairs, -1, "loop", -1),
        "copy_resolved": lambda: _e.copy_resolved(native, "loop", resolved),
        "resolve_only": lambda: _e.resolve_pairs(pairs, -1, None, read_pair),
        "sync_only": lambda: stream.synchronize(),
    }
    t: dict = {k: [] for k in ways}
    names = list(ways)
    for _ in range(3000):
        random.shuffle(names)
        for k in names:
            a = time.perf_counter_ns()
            ways[k]()
            t[k].append(time.perf_counter_ns() - a)
    row: dict = {k: round(statistics.median(v[200:]) / 1e3, 2) for k, v in t.items()}
    row["method"] = copy_many(pairs).method
    return row


out = {}
for direction, n, size in (
    ("d2h", 4, 256 << 10),
    ("d2h", 12, 96 << 10),
    ("h2d", 12, 256 << 10),
    ("h2d", 4, 96 << 10),
    ("d2h", 1, 64),
):
    key = f"{direction} {n} x {size}"
    out[key] = cell(direction, n, size)
    print(key, out[key], flush=True)
Path(sys.argv[1]).write_text(json.dumps(out, indent=1))
