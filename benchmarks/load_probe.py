"""Issue 51: what a cold checkpoint read can reach on this machine's disk, and what making an
MoE's tensors costs apart from reading them. Cold (each file's pages dropped, checked with
mincore) reads of load_bench's dense1g file by 1-16 threads of pread, 2-64 MiB each: each
thread taking the next block, or its own contiguous share of the file (ranges, as Run:ai's
streamer reads), buffered and O_DIRECT; xferscope.load cold by every thread of its staged copy
or by 1, 2 or 4 readers (reads.COLD_READERS); Run:ai's streamer as load_bench runs it. Then
(--parts views), on a GPU buffer already holding moe1g's data: the header read, and its 18,000
tensors made as views three ways. Ways interleaved in a shuffled order each round; medians of
the rounds made (Ctrl-C or SIGTERM keeps them, marked "interrupted"). Writes one JSON object.

    python3 benchmarks/load_probe.py out.json --dir /var/tmp/ckpt [--rounds 3] [--parts cold]
"""

from __future__ import annotations

import argparse
import functools
import json
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import torch

import copyapi_bench as base
import load_bench
import xferscope
from xferscope.transfer.loading import read_layout, reads, storage
from xferscope.transfer.loading.kits import TORCH_DTYPES, TorchKit
from xferscope.transfer.loading.views import views

GB = 1e9
MIB = 1 << 20


def cold_ways(files: list[Path]) -> dict[str, Callable[[], object]]:
    """Each cold way by its name, reading `files` once called (made without touching them, so
    --ways is checked against the names before anything is measured)."""
    ways: dict[str, Callable[[], object]] = {}
    for threads, block in ((1, 64), (2, 64), (4, 64), (8, 4), (16, 2)):
        ways[f"buffered_{threads}x{block}M"] = lambda t=threads, b=block: storage.read_rate(
            files, t, False, b * MIB
        )
    for threads, block in ((2, 64), (4, 16), (8, 2), (8, 8), (16, 2), (16, 8)):  # as Run:ai
        ways[f"ranges_{threads}x{block}M"] = lambda t=threads, b=block: storage.read_rate(
            files, t, False, b * MIB, ranges=True
        )
    ways["direct_8x64M"] = lambda: storage.read_rate(files, 8, True, 64 * MIB)

    def load(readers: int) -> None:
        was = reads.COLD_READERS
        reads.COLD_READERS = readers
        try:
            xferscope.load(files)
            torch.cuda.synchronize()
        finally:
            reads.COLD_READERS = was

    for readers in (0, 1, 2, 4):  # 0: every thread of the staged copy, 4 MiB chunks
        ways[f"load_readers{readers or 'all'}"] = lambda r=readers: load(r)
    runai = load_bench.loaders(files, None, 0)["runai"]
    ways["runai"] = lambda: (runai(), torch.cuda.synchronize())
    return ways


def cold_part(root: Path, rounds: int, out: dict, only: list[str] | None = None) -> None:
    files, _, _ = load_bench.written("dense1g", root, 0)
    nbytes = sum(f.stat().st_size for f in files)
    ways = {k: v for k, v in cold_ways(files).items() if not only or k in only}
    xferscope.load(files)  # the copier made
    seconds: dict[str, list[float]] = {}
    shares = []
    order = list(ways)
    for done in range(1, rounds + 1):
        random.shuffle(order)
        for name in order:
            shares.append(storage.cached(files, warm=False))
            start = time.perf_counter()
            ways[name]()
            seconds.setdefault(name, []).append(time.perf_counter() - start)
            torch.cuda.empty_cache()
        gbps = {k: round(nbytes / statistics.median(v) / GB, 3) for k, v in seconds.items()}
        out.update(bytes=nbytes, rounds=done, resident_share_most=max(shares),
                   gbps=dict(sorted(gbps.items(), key=lambda kv: -kv[1])),
                   seconds=seconds)  # fmt: skip


def views_part(root: Path, rounds: int, out: dict) -> None:
    files, _, _ = load_bench.written("moe1g", root, 0)
    layout = read_layout(files[0])
    first = layout.data_begin
    buffer = torch.empty(layout.size - first, dtype=torch.uint8, device="cuda")
    kind = getattr(torch, TORCH_DTYPES[layout.tensors[0].dtype])
    assert all(t.dtype == layout.tensors[0].dtype for t in layout.tensors)
    size = kind.itemsize
    typed = buffer[: buffer.numel() // size * size].view(kind)

    def sliced() -> dict:
        return {t.name: typed[(t.begin - first) // size : (t.end - first) // size].view(t.shape)
                for t in layout.tensors}  # fmt: skip

    def strided() -> dict:
        out = {}
        for t in layout.tensors:
            strides, n = [], 1
            for d in reversed(t.shape):
                strides.append(n)
                n *= d
            out[t.name] = typed.as_strided(t.shape, strides[::-1], (t.begin - first) // size)
        return out

    def grouped() -> dict:
        out: dict = {}
        views(TorchKit(torch), layout, buffer, first, layout.tensors, out)
        return out

    def header() -> object:
        return read_layout(files[0])

    def load_warm() -> None:
        xferscope.load(files)
        torch.cuda.synchronize()

    a, b = grouped(), sliced()
    assert list(a) == list(b)
    assert all((x.data_ptr(), x.shape, x.stride()) == (b[k].data_ptr(), b[k].shape, b[k].stride())
               for k, x in a.items())  # fmt: skip
    ways = {"sliced": sliced, "as_strided": strided, "grouped": grouped, "read_layout": header,
            "load_warm": load_warm}  # fmt: skip
    storage.cached(files, warm=True)
    load_warm()
    seconds: dict[str, list[float]] = {}
    order = list(ways)
    for done in range(1, rounds * 3 + 1):
        random.shuffle(order)
        for name in order:
            start = time.perf_counter()
            ways[name]()
            seconds.setdefault(name, []).append(time.perf_counter() - start)
        ms = {k: round(statistics.median(v) * 1e3, 2) for k, v in seconds.items()}
        out.update(tensors=len(layout.tensors), bytes=layout.size, rounds=done, ms=ms)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--dir", required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--parts", default="views,cold", help="views, cold or both")
    parser.add_argument("--ways", default="", help="only these cold ways, e.g. runai,load_readers2")
    args = parser.parse_args()
    out = base.out_file("out", args.out)
    root = load_bench.checkpoint_dir(parser, args.dir)
    if not 1 <= args.rounds <= 20:
        parser.error(f"--rounds: {args.rounds} is not from 1 to 20")
    only = [w for w in args.ways.split(",") if w]
    if set(only) - set(cold_ways([])):
        parser.error(f"--ways: '{args.ways}' is not among {', '.join(cold_ways([]))}")
    parts = {"views": views_part, "cold": functools.partial(cold_part, only=only)}
    asked = [p for p in args.parts.split(",") if p]
    if not asked or set(asked) - set(parts):
        parser.error(f"--parts: '{args.parts}' is not among views, cold")
    result: dict = {p: {} for p in asked}

    def run() -> None:
        for p in asked:
            parts[p](root, args.rounds, result[p])
            print(json.dumps(result[p]), flush=True)

    base.measured(run, result)  # Ctrl-C or a time limit's SIGTERM: "interrupted", kept
    out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
