"""Copy API dense benchmark (issue 49): copy_many against PyTorch's loop and _foreach_copy_ on
every cell of a dense grid, and the first call in a fresh process against PyTorch's, joined
into one record across calls (--into) so that the grid can be measured in parts:

  copy_many_dense_worst_vs_loop     the worst cell's PyTorch loop of copy_(non_blocking=True) +
                                    synchronize against copy_many, medians (goal >= 0.97); the
                                    same against _foreach_copy_ (..._worst_vs_foreach)
  copy_many_dense_cells_lost        cells where a peer's slowest quarter beat copy_many's
                                    fastest quarter (goal 0; a figure, its comparison the share
                                    not lost: copy_many_dense_cells_not_lost_share)
  copy_to_device_first_call_worst_vs_torch   per size, a fresh process whose context PyTorch
                                    made: the first pageable copy_to_device against PyTorch's
                                    first dst.copy_(src) in another (median over --first-repeats
                                    of each, the two alternating; goal >= 0.95); beside it, the
                                    first call after `xferscope.warmup()` (warmed_vs_torch,
                                    --first-warm-repeats processes a size after the pairs)
  pinned_pool_growth_10k_calls_bytes   part pool: the pinned memory the copy API holds after
                                    10,000 calls of changing shapes less after 1,000 (goal 0;
                                    a figure, its comparison pinned_pool_held_flat)

The grid: counts 1, 2, 3, 4, 6, 8, 12, 16, then powers of two to 1024; sizes 64 B to 256 MiB at
2^k and 1.5 x 2^k; pinned and pageable, both ways; cells over --cell-most bytes a side are not
measured and are listed in the record (figures["dense_skipped"]). Every method's copy is
verified once per cell (copyapi_bench.verify). Writes benchmarks/results/copyapi-<gpu>-<date>.json.

    python3 benchmarks/copyapi_dense.py --commit $(git rev-parse HEAD) [--parts dense,first]
        [--memory pinned,pageable] [--directions h2d,d2h] [--counts ...] [--sizes ...]
        [--cell-most BYTES] [--trials 15] [--first-sizes ...] [--first-repeats 9] [--into FILE]
"""

from __future__ import annotations

import compileall
import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch

import copyapi_bench as base
import xferscope
from foundation import bench_parser, comparison
from xferscope.core.engine import NativeEngine
from xferscope.core.errors import XferscopeError
from xferscope.core.machine import collect

HERE = Path(__file__).resolve().parent
DENSE_COUNTS = (1, 2, 3, 4, 6, 8, 12, 16, 32, 64, 128, 256, 512, 1024)
DENSE_SIZES = tuple(sorted({64 << k for k in range(23)} | {96 << k for k in range(22)}))
CELL_MOST = 2 << 30  # bytes a side of one cell
# 1 MiB to 1 GiB at 2^k and 1.5 x 2^k, and the sizes (1 MB, 16.8 MB, 79 MB, 268 MB)
FIRST_SIZES = tuple(
    sorted({1 << k for k in range(20, 31)} | {3 << k for k in range(19, 29)}
           | {1_000_000, 16_777_216 + 4096, 79_000_000, 268_435_456 + 4096})
)  # fmt: skip
PARTS = ("dense", "first", "pool")
PEERS = ("torch_loop", "torch_foreach")


def key(cell: dict) -> tuple:
    return (cell["memory"], cell["direction"], cell["count"], cell["size"])


def dense_part(args: Any, figures: dict, comparisons: list[dict]) -> None:
    cells: list[dict] = figures.setdefault("dense_cells", [])
    skipped: list[list] = figures.setdefault("dense_skipped", [])
    done = {key(c) for c in cells}  # measured by an earlier call (--into)
    generator = torch.Generator(device="cuda").manual_seed(5)
    # set up before the first cell: a process's first calls go PyTorch's way while xferscope
    # sets up on another thread (part first measures them); unwarmed, the first cell's trials
    # met that thread (1 x 64 KiB up on an H100: 24.8 us against PyTorch's 15.5)
    xferscope.warmup()
    for memory in args.memory:
        for direction in args.directions:
            for count in args.counts:
                for size in args.sizes:
                    if (memory, direction, count, size) in done:
                        continue
                    if count * size > args.cell_most:
                        skipped.append([memory, direction, count, size])
                        continue
                    cells.append(
                        base.torch_cell(memory, direction, count, size, generator, args.trials)
                    )
                    torch.cuda.empty_cache()


def dense_summary(figures: dict, comparisons: list[dict]) -> None:
    cells = figures.get("dense_cells", [])
    if not cells:
        return
    for peer in PEERS:
        worst = min(cells, key=lambda c: c["vs"][peer])
        comparisons.append(
            comparison(
                f"copy_many_dense_worst_vs_{peer.split('_', 1)[1]}",
                worst["vs"][peer],
                1.0,
                f"{peer} (median seconds / copy_many's) in the worst of {len(cells)} cells: "
                f"{worst['count']} x {worst['size']} B {worst['direction']} {worst['memory']} "
                f"({worst['method']})",
                "ratio",
                True,
                0.97,
            )
        )
    # copy_many_dense_cells_lost (goal 0) is a count, kept as a figure; its comparison is the
    # share of cells not lost (goal 1.0)
    lost = [key(c) for c in cells if c["lost_to"]]
    figures["dense_lost_cells"] = [list(k) for k in lost]
    figures["copy_many_dense_cells_lost"] = len(lost)
    comparisons.append(
        comparison(
            "copy_many_dense_cells_not_lost_share",
            (len(cells) - len(lost)) / len(cells),
            1.0,
            f"cells of {len(cells)} where no peer's slowest quarter beat copy_many's fastest",
            "share",
            True,
            1.0,
        )
    )


def first_run(size: int, who: str) -> dict:
    ran = subprocess.run(
        [sys.executable, str(HERE / "copyapi_first.py"), str(size), who],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    if ran.returncode != 0:
        raise base.Mismatch(f"copyapi_first.py {size} {who}: {ran.stderr.strip()[-300:]}")
    return dict(json.loads(ran.stdout.strip().splitlines()[-1]))


def first_part(args: Any, figures: dict, comparisons: list[dict]) -> None:
    rows: list[dict] = figures.setdefault("first_call", [])
    done = {r["size"] for r in rows}
    # the package's bytecode written first, as installing a wheel writes it: a fresh process
    # then pays the imports a user's does, not the compiling of every module
    compileall.compile_dir(str(Path(xferscope.__file__).parent), quiet=1)
    for size in args.first_sizes:
        if size in done:
            continue
        times: dict[str, list[float]] = {"xferscope": [], "torch": [], "xferscope_warm": []}
        later: list[float] = []
        # ours and PyTorch's alternate, each first half the time; the warmed runs come after
        # (a process that made the staged copy's pinned chunks is not the one before a pair's)
        for r in range(args.first_repeats):
            pair = ["xferscope", "torch"] if r % 2 == 0 else ["torch", "xferscope"]
            for who in pair:
                got = first_run(size, who)
                times[who].append(got["first_s"])
                if who == "xferscope":
                    later.append(got["second_s"])
        for _ in range(args.first_warm_repeats):
            times["xferscope_warm"].append(first_run(size, "xferscope_warm")["first_s"])
        med = {k: statistics.median(v) for k, v in times.items() if v}
        vs = {k: round(med["torch"] / med[k], 4) if k in med else None
              for k in ("xferscope", "xferscope_warm")}  # fmt: skip
        rows.append(
            {"size": size, "first_s": times, "ours_second_s": later,
             "vs_torch": vs["xferscope"], "warmed_vs_torch": vs["xferscope_warm"]}
        )  # fmt: skip
        print("first", rows[-1], flush=True)
    # where the first call's time went, at the smallest size and the largest (cProfile)
    if rows and "first_profile" not in figures:
        figures["first_profile"] = {
            str(s): first_run_profiled(s) for s in (min(args.first_sizes), max(args.first_sizes))
        }


def first_run_profiled(size: int) -> list[str]:
    ran = subprocess.run(
        [sys.executable, str(HERE / "copyapi_first.py"), str(size), "xferscope", "--profile"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    return list(json.loads(ran.stdout.strip().splitlines()[-1]).get("profile", []))


def first_summary(figures: dict, comparisons: list[dict]) -> None:
    rows = figures.get("first_call", [])
    if rows:
        worst = min(rows, key=lambda r: r["vs_torch"])
        comparisons.append(
            comparison(
                "copy_to_device_first_call_worst_vs_torch",
                worst["vs_torch"],
                1.0,
                f"PyTorch's first dst.copy_(src) (median seconds / ours) at {worst['size']} B, "
                f"pageable, each in a fresh process, worst of {len(rows)} sizes",
                "ratio",
                True,
                0.95,
            )
        )


POOL_CALLS, POOL_SETTLED = 10_000, 1_000


def pool_part(args: Any, figures: dict, comparisons: list[dict]) -> None:
    """10,000 calls of changing shapes (copy_many up and down, pinned and pageable, 1-64 pieces
    of 1 KiB-4 MiB; copy_to_device and to_device of one piece): the pinned memory the copy API
    holds after the first 1,000 and at the end (xferscope.transfer.moving.pinned_bytes), and the
    process's resident memory (pytorch#97432: PyTorch's host allocator grew to 90% of a host)."""
    import resource

    from xferscope import copy_many, copy_to_device, to_device
    from xferscope.transfer.moving import pinned_bytes

    rng = torch.Generator().manual_seed(7)
    most = 4 << 20
    pinned = torch.empty(64 * most, dtype=torch.uint8).pin_memory()
    pageable = torch.empty(64 * most, dtype=torch.uint8)
    gpu = torch.empty(64 * most, dtype=torch.uint8, device="cuda")
    held: dict[str, int] = {}
    for call in range(POOL_CALLS):
        count = int(torch.randint(1, 65, (1,), generator=rng))
        size = int(torch.randint(1024, most + 1, (1,), generator=rng)) // max(count // 8, 1)
        host = pinned if call % 2 else pageable
        hs = [host[i * size : (i + 1) * size] for i in range(count)]
        gs = [gpu[i * size : (i + 1) * size] for i in range(count)]
        kind = call % 4
        if kind == 0:
            copy_many(list(zip(gs, hs, strict=True)))
        elif kind == 1:
            copy_many(list(zip(hs, gs, strict=True)))
        elif kind == 2:
            copy_to_device(gs[0], hs[0])
        else:
            to_device({"x": hs[0]}, 0)
        if call + 1 == POOL_SETTLED:
            held["after_1000_calls"] = pinned_bytes()
    held["after_10000_calls"] = pinned_bytes()
    growth = held["after_10000_calls"] - held["after_1000_calls"]
    figures["pool"] = held | {"max_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
                              * 1024}  # fmt: skip
    figures["pinned_pool_growth_10k_calls_bytes"] = growth
    comparisons[:] = [c for c in comparisons if c["name"] != "pinned_pool_held_flat"]
    comparisons.append(
        comparison(
            "pinned_pool_held_flat",
            held["after_1000_calls"] / max(held["after_10000_calls"], 1),
            1.0,
            f"pinned memory held after {POOL_SETTLED} calls over after {POOL_CALLS} (growth "
            f"{growth} B: pinned_pool_growth_10k_calls_bytes, goal 0)",
            "ratio",
            True,
            1.0,
        )
    )


PART_FUNCTIONS = {"dense": dense_part, "first": first_part, "pool": pool_part}


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--parts", default=",".join(PARTS))
    parser.add_argument("--memory", default="pinned,pageable")
    parser.add_argument("--directions", default="h2d,d2h")
    parser.add_argument("--counts", default=",".join(map(str, DENSE_COUNTS)))
    parser.add_argument("--sizes", default=",".join(map(str, DENSE_SIZES)))
    parser.add_argument("--cell-most", type=int, default=CELL_MOST)
    parser.add_argument("--trials", type=int, default=15)
    parser.add_argument("--first-sizes", default=",".join(map(str, FIRST_SIZES)))
    parser.add_argument("--first-repeats", type=int, default=9)
    parser.add_argument("--first-warm-repeats", type=int, default=3)
    parser.add_argument("--into", default=None, help="a record whose cells this run joins")
    args = parser.parse_args()
    args.counts = base.positive_list(parser, "--counts", args.counts, 1 << 16)
    args.sizes = base.positive_list(parser, "--sizes", args.sizes, 1 << 30)
    args.first_sizes = base.positive_list(parser, "--first-sizes", args.first_sizes, 4 << 30)
    args.memory = [m for m in args.memory.split(",") if m]
    args.directions = [d for d in args.directions.split(",") if d]
    if not set(args.memory) <= {"pinned", "pageable"} or not args.memory:
        parser.error(f"--memory: '{','.join(args.memory)}' is not pinned, pageable or both")
    if not set(args.directions) <= {"h2d", "d2h"} or not args.directions:
        parser.error(f"--directions: '{','.join(args.directions)}' is not h2d, d2h or both")
    if not 1 << 20 <= args.cell_most <= base.MOST_BYTES:
        parser.error(f"--cell-most: {args.cell_most} is not from 1 MiB to {base.MOST_BYTES} B")
    if not 2 <= args.trials <= base.MOST_TRIALS or not 1 <= args.first_repeats <= 99:
        parser.error("--trials: 2 to 1000; --first-repeats: 1 to 99")
    if not 0 <= args.first_warm_repeats <= 99:
        parser.error("--first-warm-repeats: 0 to 99")
    parts = [p for p in args.parts.split(",") if p]
    if not parts or set(parts) - set(PARTS):
        parser.error(f"--parts: '{args.parts}' is not among {', '.join(PARTS)}")
    figures, comparisons = base.joined(parser, args.into)
    try:
        meta = collect(NativeEngine(), [0])
    except XferscopeError as exc:
        raise SystemExit(f"copyapi_dense: {exc}") from None
    base.measured(lambda: [PART_FUNCTIONS[p](args, figures, comparisons) for p in parts], figures)
    made = {"copy_many_dense_worst_vs_loop", "copy_many_dense_worst_vs_foreach",
            "copy_many_dense_cells_not_lost_share",
            "copy_to_device_first_call_worst_vs_torch"}  # fmt: skip
    comparisons[:] = [c for c in comparisons if c["name"] not in made]
    dense_summary(figures, comparisons)
    first_summary(figures, comparisons)
    base.recorded(args, meta, comparisons, figures)


if __name__ == "__main__":
    main()
