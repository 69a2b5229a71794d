"""Issue 49: copy_many with its early pieces on and off (and with the loop
asked for), beside PyTorch's loop (on the current
stream and on a side stream of its own, as copy_many's copier has) and _foreach_copy_, on the
cells of pinned PyTorch tensors given (the dense grid's lost cells and held-out ones). Every
way verified once a cell, then interleaved (copyapi_bench.interleaved); medians and quartiles
in microseconds, and which ways beat early copy_many beyond the spread. Writes one JSON object.

    python3 benchmarks/copyapi_early_probe.py out.json --cells h2d:12:262144,d2h:6:393216
        [--trials 31]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import torch

import copyapi_bench as base
import xferscope
from xferscope.transfer.copy import copies_of, copy_many
from xferscope.transfer.engine import default_engine


def cell(direction: str, count: int, size: int, trials: int, generator: torch.Generator) -> dict:
    copies = copies_of(default_engine())
    stream = torch.cuda.current_stream()
    side = torch.cuda.Stream()
    dst, src = base.torch_pieces(direction, "pinned", count, size, generator)
    pairs = list(zip(dst, src, strict=True))
    made: dict[str, str] = {}

    def loop() -> None:
        for d, s in pairs:
            d.copy_(s, non_blocking=True)
        stream.synchronize()

    def side_loop() -> None:
        with torch.cuda.stream(side):
            for d, s in pairs:
                d.copy_(s, non_blocking=True)
        side.synchronize()

    def foreach() -> None:
        torch._foreach_copy_(dst, src, non_blocking=True)
        stream.synchronize()

    def ours(early: bool) -> None:
        copies.early = early
        made["early" if early else "whole"] = copy_many(pairs).method

    def ours_loop() -> None:
        copies.early = True
        made["loop asked"] = copy_many(pairs, method="loop").method

    ways = {
        "copy_many": lambda: ours(True),
        "copy_many_not_early": lambda: ours(False),
        "copy_many_loop": ours_loop,
        "torch_loop": loop,
        "torch_side_stream": side_loop,
        "torch_foreach": foreach,
    }
    for name, run in ways.items():
        base.verify(name, dst, src, run)
    seconds = base.interleaved(ways, trials, most=4 * trials)
    copies.early = True
    row = {"direction": direction, "count": count, "size": size, "methods": made}
    row.update(base.cell_figures(seconds, "copy_many"))
    print(direction, count, size, row["median_us"], "lost to", row["lost_to"], flush=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--cells", required=True, help="direction:count:size, comma-separated")
    parser.add_argument("--trials", type=int, default=31)
    args = parser.parse_args()
    out_path = base.out_file("out", args.out)
    if not 2 <= args.trials <= base.MOST_TRIALS:
        parser.error(f"--trials: {args.trials} is not from 2 to {base.MOST_TRIALS}")
    cells = []
    for text in args.cells.split(","):
        try:
            direction, count, size = text.split(":")
            cells.append((direction, int(count), int(size)))
        except ValueError:
            parser.error(f"--cells: {text!r} is not direction:count:size (h2d:4:65536)")
        if not (1 <= cells[-1][1] <= 1 << 16 and 1 <= cells[-1][2] <= 1 << 30):
            parser.error(f"--cells: {text!r}: a count from 1 to 65536 of 1 B to 1 GiB")
        if direction not in ("h2d", "d2h"):
            parser.error(f"--cells: {text!r}: the direction is h2d or d2h")
    xferscope.warmup()
    generator = torch.Generator(device="cuda").manual_seed(11)
    rows = [cell(d, n, s, args.trials, generator) for d, n, s in cells]
    lost = [r for r in rows if r["lost_to"]]
    out = {
        "gpu": torch.cuda.get_device_name(),
        "cells": rows,
        "lost": [[r["direction"], r["count"], r["size"], r["lost_to"]] for r in lost],
        "worst_vs_loop": min(r["vs"]["torch_loop"] for r in rows),
        "worst_vs_foreach": min(r["vs"]["torch_foreach"] for r in rows),
        "worst_not_early_vs_loop": min(
            r["median_us"]["torch_loop"] / r["median_us"]["copy_many_not_early"] for r in rows
        ),
    }
    out_path.write_text(json.dumps(out, indent=1))
    print({k: v for k, v in out.items() if k != "cells"}, flush=True)


if __name__ == "__main__":
    main()
