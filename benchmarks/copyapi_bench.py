"""Copy API benchmark (issue 31): xferscope.copy_many and copy_to_device / copy_to_host called
with framework tensors, against the framework's own ways, interleaved in one run on one GPU:

  copy_many_torch_worst_vs_loop    over a grid of 1-1024 copies of 64 B-1 MiB, up and down,
                                   pinned and pageable (separately allocated tensors, the same for
                                   every method): the worst cell's PyTorch loop of
                                   copy_(non_blocking=True) + stream synchronize against
                                   copy_many, medians of the trials (goal >= 0.97); the same
                                   against torch._foreach_copy_ (copy_many_torch_worst_vs_foreach)
  copy_many_torch_cells_lost       cells where PyTorch's loop or _foreach_copy_ was faster beyond
                                   the trials' spread (its slowest quarter faster than our fastest
                                   quarter; goal 0)
  copy_many_torch_1024x4KiB_h2d_vs_loop, _d2h_   (goal >= 3)
  copy_many_cupy_worst_vs_loop     CuPy arrays (host side NumPy, pinned by cupyx.empty_pinned or
                                   pageable) against CuPy's loop of set/get on one stream
  copy_to_device_torch_worst_vs_copy_   copy_to_device / copy_to_host of one tensor against
                                   dst.copy_(src) + synchronize, 64 B to 256 MiB, pinned and
                                   pageable, both ways (goal >= 0.97)
  copy_many_call_overhead_us       1-4 pieces: copy_many's time less that of its chosen method
                                   alone (the copier's call on the pieces read once), the median
                                   of the two calls' difference in each trial (goal <= 5 us)

Every method's copy is verified once per cell (destinations poisoned first, random sources);
--inject METHOD corrupts one byte after that method's verified copy, to show a fault is caught.
Without a stored calibration (a scratch XFERSCOPE_CALIBRATION) copy_many follows its built-in
rule, as on a fresh machine. Writes benchmarks/results/copyapi-<gpu>-<date>.json.

    python3 benchmarks/copyapi_bench.py --commit $(git rev-parse HEAD) [--trials 15]
        [--parts torch,cupy,single,overhead] [--counts 1,4,...] [--sizes 64,4096,...]
"""

from __future__ import annotations

import json
import os
import random
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("XFERSCOPE_CALIBRATION", tempfile.mkdtemp(prefix="xfs-nocal-"))

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from foundation import bench_parser, comparison, write_record
from xferscope import copy_many, copy_to_device, copy_to_host
from xferscope.core.compiled import engine_module
from xferscope.core.engine import NativeEngine
from xferscope.core.errors import XferscopeError
from xferscope.core.machine import collect
from xferscope.transfer.buffers import read_pair
from xferscope.transfer.engine import default_engine

COUNTS = (1, 4, 16, 64, 256, 1024)
SIZES = (64, 4096, 65536, 1 << 20)
SINGLE_SIZES = (64, 4096, 65536, 1 << 20, 16 << 20, 256 << 20)
PARTS = ("torch", "cupy", "single", "overhead")
MOST_BYTES = 8 << 30  # a cell's pieces on one side
OVERHEAD_TRIALS = 101  # per overhead cell, each method
MOST_TRIALS = 1000  # --trials, as the CLI's limit
# a cell's trials go on (to 4x --trials) while a method's quartiles lie further apart than this
# share of its median: pageable copies of 1 MiB spread 10-20% on an H100, and with 15 trials their
# medians moved 9% between runs
SPREAD = 0.05
INJECTED: set[str] = set()  # --inject: methods whose verified copy is corrupted afterwards


class Mismatch(AssertionError):
    pass


def quartiles(samples: list[float]) -> tuple[float, float]:
    q = statistics.quantiles(samples, n=4, method="inclusive")
    return q[0], q[2]


def interleaved(
    methods: dict[str, Callable[[], None]], trials: int, warmup: int = 2, most: int | None = None
) -> dict[str, list[float]]:
    """Each method's seconds per call over `trials`, the methods' order shuffled each trial
    (seeded); then, up to `most` trials, more rounds while a method's spread (its quartiles)
    exceeds SPREAD of its median, so a noisy cell's median is not one lucky draw.

    Shuffled, not rotated: a rotation keeps each method after the same one, and what ran before
    moves a call's time. On an H100 copy_many and the same call with the loop asked for (the
    same work) differed by 0.7-1.2 us in cells of one piece while copy_many always followed
    _foreach_copy_ (copyapi_early_probe.py at 363be7f)."""
    names = list(methods)
    order = random.Random(len(names) * 7919 + trials)
    for _ in range(warmup):
        for name in names:
            methods[name]()
    seconds: dict[str, list[float]] = {name: [] for name in names}

    def wide() -> bool:
        return any(
            (q[1] - q[0]) > SPREAD * statistics.median(v)
            for v in seconds.values()
            for q in (quartiles(v),)
        )

    t = 0
    while t < trials or (most and t < most and wide()):
        order.shuffle(names)
        for name in names:
            start = time.perf_counter()
            methods[name]()
            seconds[name].append(time.perf_counter() - start)
        t += 1
    return seconds


def random_bytes(n: int, generator: torch.Generator) -> torch.Tensor:
    return torch.randint(0, 256, (n,), dtype=torch.uint8, device="cuda", generator=generator)


def torch_pieces(
    direction: str, memory: str, count: int, size: int, generator: torch.Generator
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """(destinations, sources): `count` separately allocated uint8 tensors of `size` bytes a
    side, the sources random."""
    pinned = memory == "pinned"
    hosts = [torch.empty(size, dtype=torch.uint8, pin_memory=pinned) for _ in range(count)]
    devices = [torch.empty(size, dtype=torch.uint8, device="cuda") for _ in range(count)]
    sources = hosts if direction == "h2d" else devices
    for s in sources:
        s.copy_(random_bytes(size, generator))
    torch.cuda.synchronize()
    return (devices, hosts) if direction == "h2d" else (hosts, devices)


def verify(name: str, destinations: list[Any], sources: list[Any], run: Callable[[], None]) -> None:
    """Poisons every destination (each byte the source's complement), runs the method once
    and checks every byte arrived."""
    for d, s in zip(destinations, sources, strict=True):
        d.copy_(torch.bitwise_not(s.cuda() if d.is_cuda else s.cpu()))
    torch.cuda.synchronize()
    run()
    if name in INJECTED:
        destinations[-1].view(-1)[-1] ^= 1
    torch.cuda.synchronize()
    for i, (d, s) in enumerate(zip(destinations, sources, strict=True)):
        if not torch.equal(d.cpu(), s.cpu()):
            raise Mismatch(f"{name}: piece {i} differs from its source after the copy")


def cell_figures(seconds: dict[str, list[float]], ours: str) -> dict[str, Any]:
    med = {k: statistics.median(v) for k, v in seconds.items()}
    q = {k: quartiles(v) for k, v in seconds.items()}
    lost = [
        k
        for k in seconds
        if k != ours and q[k][1] < q[ours][0]  # its slow quarter beat our fast
    ]
    return {
        "median_us": {k: round(v * 1e6, 2) for k, v in med.items()},
        "quartiles_us": {k: [round(a * 1e6, 2), round(b * 1e6, 2)] for k, (a, b) in q.items()},
        "vs": {k: round(med[k] / med[ours], 4) for k in seconds if k != ours},
        "lost_to": lost,
    }


def part_cells(figures: dict, key: str, seed: int) -> tuple[torch.Generator, list[dict]]:
    """A part's random source and its cells, kept in the record as they grow (a run stopped
    early keeps what was measured)."""
    cells: list[dict] = []
    figures[key] = cells
    return torch.Generator(device="cuda").manual_seed(seed), cells


def torch_cell(
    memory: str, direction: str, count: int, size: int, generator: torch.Generator, trials: int
) -> dict:
    """One cell of PyTorch tensors: copy_many, PyTorch's loop and _foreach_copy_, each verified
    once, then interleaved; the row of figures the record keeps."""
    stream = torch.cuda.current_stream()
    dst, src = torch_pieces(direction, memory, count, size, generator)
    pairs = list(zip(dst, src, strict=True))

    def loop() -> None:
        for d, s in zip(dst, src, strict=True):
            d.copy_(s, non_blocking=True)
        stream.synchronize()

    def foreach() -> None:
        torch._foreach_copy_(dst, src, non_blocking=True)
        stream.synchronize()

    def ours() -> None:
        copy_many(pairs)  # the call alone, as the peers' (its method read after, untimed)

    methods = {"copy_many": ours, "torch_loop": loop, "torch_foreach": foreach}
    for name, run in methods.items():
        verify(name, dst, src, run)
    seconds = interleaved(methods, trials, most=4 * trials)
    chosen = [copy_many(pairs).method]
    row = {"memory": memory, "direction": direction, "count": count, "size": size,
           "method": chosen[0], "verified": True, **cell_figures(seconds, "copy_many")}  # fmt: skip
    print(
        f"{memory:8} {direction} {count:5} x {size:9}: {row['median_us']} {chosen[0]} vs "
        f"{row['vs']} lost to {row['lost_to']}",
        flush=True,
    )
    return row


def torch_part(args: Any, figures: dict, comparisons: list[dict]) -> None:
    generator, cells = part_cells(figures, "torch_cells", seed=1)
    for memory in ("pinned", "pageable"):
        for direction in ("h2d", "d2h"):
            for count in args.counts:
                for size in args.sizes:
                    cells.append(torch_cell(memory, direction, count, size, generator, args.trials))
    summarize_grid(cells, "torch", ("torch_loop", "torch_foreach"), comparisons, figures)


def summarize_grid(
    cells: list[dict], framework: str, peers: tuple[str, ...], comparisons: list[dict],
    figures: dict,
) -> None:  # fmt: skip
    if not cells:
        return
    for peer in peers:
        worst = min(cells, key=lambda c: c["vs"][peer])
        short = peer.split("_", 1)[1]
        comparisons.append(
            comparison(
                f"copy_many_{framework}_worst_vs_{short}",
                worst["vs"][peer],
                1.0,
                f"{peer} (median seconds / copy_many's) in the worst cell: {worst['count']} x "
                f"{worst['size']} B {worst['direction']} {worst['memory']}",
                "ratio",
                True,
                0.97,
            )
        )
    lost = sum(1 for c in cells if c["lost_to"])
    figures[f"copy_many_{framework}_cells_lost"] = lost
    figures[f"copy_many_{framework}_cells"] = len(cells)
    for direction in ("h2d", "d2h"):
        for c in cells:
            if (c["count"], c["size"], c["direction"], c["memory"]) == (
                1024,
                4096,
                direction,
                "pinned",
            ):
                comparisons.append(
                    comparison(
                        f"copy_many_{framework}_1024x4KiB_{direction}_vs_loop",
                        c["vs"][peers[0]],
                        1.0,
                        f"{peers[0]} (median seconds / copy_many's), pinned",
                        "ratio",
                        True,
                        3.0,
                    )
                )


def cupy_part(args: Any, figures: dict, comparisons: list[dict]) -> None:
    import cupy
    import cupyx

    rng = np.random.default_rng(2)
    cells: list[dict] = []
    figures["cupy_cells"] = cells
    stream = cupy.cuda.Stream(non_blocking=True)
    for memory in ("pinned", "pageable"):
        for direction in ("h2d", "d2h"):
            for count in args.counts:
                for size in args.sizes:
                    make = (
                        (lambda n: cupyx.empty_pinned(n, dtype=np.uint8))
                        if memory == "pinned"
                        else (lambda n: np.empty(n, dtype=np.uint8))
                    )
                    hosts = [make(size) for _ in range(count)]
                    devices = [cupy.empty(size, dtype=cupy.uint8) for _ in range(count)]
                    for h, d in zip(hosts, devices, strict=True):
                        data = rng.integers(0, 256, size, dtype=np.uint8)
                        if direction == "h2d":
                            h[...] = data
                        else:
                            d.set(data)
                    cupy.cuda.runtime.deviceSynchronize()
                    upload = direction == "h2d"
                    pairs = list(
                        zip(devices, hosts, strict=True)
                        if upload
                        else zip(hosts, devices, strict=True)
                    )

                    def loop(
                        hosts: list = hosts, devices: list = devices, up: bool = upload
                    ) -> None:
                        for h, d in zip(hosts, devices, strict=True):
                            if up:
                                d.set(h, stream=stream)
                            else:
                                d.get(stream=stream, out=h)
                        stream.synchronize()

                    def ours(pairs: list = pairs) -> None:
                        copy_many(pairs)  # the call alone (its method read after, untimed)

                    for name, run in (("copy_many", ours), ("cupy_loop", loop)):
                        for h, d in zip(hosts, devices, strict=True):  # poison the destinations
                            if upload:
                                d.set(~h)
                            else:
                                h[...] = ~d.get()
                        run()
                        ok = all(
                            np.array_equal(h, d.get()) for h, d in zip(hosts, devices, strict=True)
                        )
                        if name in INJECTED:
                            ok = False
                        if not ok:
                            raise Mismatch(f"{name}: a piece differs from its source")
                    seconds = interleaved(
                        {"copy_many": ours, "cupy_loop": loop}, args.trials, most=4 * args.trials
                    )
                    chosen = [copy_many(pairs).method]
                    row = {"memory": memory, "direction": direction, "count": count,
                           "size": size, "method": chosen[0], "verified": True,
                           **cell_figures(seconds, "copy_many")}  # fmt: skip
                    cells.append(row)
                    print(f"cupy {memory:8} {direction} {count:5} x {size:8}: {row['median_us']} "
                          f"{chosen[0]} vs {row['vs']}", flush=True)  # fmt: skip
    summarize_grid(cells, "cupy", ("cupy_loop",), comparisons, figures)


def single_part(args: Any, figures: dict, comparisons: list[dict]) -> None:
    generator, cells = part_cells(figures, "single_cells", seed=3)
    stream = torch.cuda.current_stream()
    for memory in ("pinned", "pageable"):
        for direction in ("h2d", "d2h"):
            for size in SINGLE_SIZES:
                (dst,), (src,) = torch_pieces(direction, memory, 1, size, generator)
                ours_call = copy_to_device if direction == "h2d" else copy_to_host

                def plain(dst: torch.Tensor = dst, src: torch.Tensor = src) -> None:
                    dst.copy_(src)
                    stream.synchronize()

                def ours(
                    dst: torch.Tensor = dst, src: torch.Tensor = src, f: Any = ours_call
                ) -> None:
                    f(dst, src)

                try:
                    ours()
                except TypeError:  # before issue 31: the host side as a NumPy view
                    numpy_view = (src if direction == "h2d" else dst).numpy()

                    def ours(dst: torch.Tensor = dst, src: torch.Tensor = src, f: Any = ours_call,
                             view: Any = numpy_view) -> None:  # fmt: skip
                        if f is copy_to_device:
                            f(dst, view)
                        else:
                            f(view, src)

                    figures["single_took_tensors"] = False

                methods = {"xferscope": ours, "torch_copy_": plain}
                for name, run in methods.items():
                    verify(name, [dst], [src], run)
                trials = args.trials if size < (64 << 20) else max(5, args.trials // 3)
                seconds = interleaved(methods, trials, most=4 * trials)
                row = {"memory": memory, "direction": direction, "size": size, "verified": True,
                       **cell_figures(seconds, "xferscope")}  # fmt: skip
                cells.append(row)
                print(f"single {memory:8} {direction} {size:10}: {row['median_us']} "
                      f"vs {row['vs']}", flush=True)  # fmt: skip
                del dst, src
    worst = min(cells, key=lambda c: c["vs"]["torch_copy_"])
    comparisons.append(
        comparison(
            "copy_to_device_torch_worst_vs_copy_",
            worst["vs"]["torch_copy_"],
            1.0,
            f"tensor.copy_() + synchronize (median seconds / ours) in the worst cell: "
            f"{worst['size']} B {worst['direction']} {worst['memory']}",
            "ratio",
            True,
            0.97,
        )
    )
    figures["copy_to_device_torch_cells_lost"] = sum(1 for c in cells if c["lost_to"])


def overhead_part(args: Any, figures: dict, comparisons: list[dict]) -> None:
    """1-4 pieces: copy_many with tensors against its chosen method forced through addresses."""
    generator, rows = part_cells(figures, "overhead_cells", seed=4)
    copiers: dict[int, Any] = {}  # a copier of the engine copy_many runs on, as its own
    for memory in ("pinned", "pageable"):
        for direction in ("h2d", "d2h"):
            for count in (1, 2, 4):
                for size in (64, 256 << 10):
                    dst, src = torch_pieces(direction, memory, count, size, generator)
                    pairs = list(zip(dst, src, strict=True))
                    method = copy_many(pairs).method
                    # the method's own time: the same pieces, read once, copied by the copier
                    batch = engine_module().resolve_pairs(pairs, -1, None, read_pair)
                    copier = copiers.setdefault(0, default_engine().many_copier(0))

                    def ours(pairs: list = pairs) -> None:
                        copy_many(pairs)

                    def forced(b: Any = batch, c: Any = copier, m: str = method) -> None:
                        c.copy_resolved(m, b)

                    # a difference of a few microseconds between calls of up to 170 us
                    # (pageable pieces): 31 trials and a difference of medians left it 3-12 us
                    # either way on an H100; the median of each trial's difference (the two
                    # calls side by side) over more trials is steadier
                    seconds = interleaved({"copy_many": ours, "method_only": forced},
                                          max(args.trials, OVERHEAD_TRIALS))  # fmt: skip
                    med = {k: statistics.median(v) for k, v in seconds.items()}
                    pairs_s = zip(seconds["copy_many"], seconds["method_only"], strict=True)
                    paired = statistics.median(a - b for a, b in pairs_s)
                    apart = med["copy_many"] - med["method_only"]
                    rows.append({"memory": memory, "direction": direction, "count": count,
                                 "size": size, "method": method,
                                 "median_us": {k: round(v * 1e6, 2) for k, v in med.items()},
                                 "quartiles_us": {k: [round(a * 1e6, 2), round(b * 1e6, 2)]
                                                  for k, (a, b) in
                                                  ((k, quartiles(v)) for k, v in seconds.items())},
                                 "overhead_us": round(paired * 1e6, 2),
                                 "difference_of_medians_us": round(apart * 1e6, 2)})  # fmt: skip
                    print("overhead", rows[-1], flush=True)
    worst = max(rows, key=lambda r: r["overhead_us"])
    comparisons.append(
        comparison(
            "copy_many_call_overhead_us",
            max(worst["overhead_us"], 1e-3),
            5.0,
            f"5 us goal; copy_many with tensors less its method ({worst['method']}) alone, "
            f"worst of 1-4 pieces: {worst['count']} x {worst['size']} B "
            f"{worst['direction']} {worst['memory']}",
            "us",
            False,
            1.0,
        )
    )


PART_FUNCTIONS = {
    "torch": torch_part, "cupy": cupy_part, "single": single_part, "overhead": overhead_part,
}  # fmt: skip


def out_file(option: str, text: str) -> Path:
    """A probe's output file, checked before anything is measured: not a directory, and in
    one that exists (SystemExit naming `option` otherwise)."""
    path = Path(text)
    if path.is_dir() or not path.parent.is_dir() or (path.exists() and not path.is_file()):
        raise SystemExit(f"{option}: {text} is not a file to write in an existing directory")
    return path


def positive_list(parser: Any, option: str, text: str, most: int) -> list[int]:
    """`text` as a comma-separated list of whole numbers from 1 to `most`, else parser.error."""
    values = [v.strip() for v in text.split(",")]
    if not all(v.isascii() and v.isdigit() and 0 < int(v) <= most for v in values):
        parser.error(f"{option}: '{text}' is not a comma-separated list of whole numbers from 1 "
                     f"to {most}")  # fmt: skip
    return [int(v) for v in values]


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--trials", type=int, default=15)
    parser.add_argument("--parts", default=",".join(PARTS))
    parser.add_argument("--counts", default=",".join(map(str, COUNTS)))
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)))
    parser.add_argument("--inject", default="", help="methods whose verified copy is corrupted")
    args = parser.parse_args()
    args.counts = positive_list(parser, "--counts", args.counts, 1 << 16)
    args.sizes = positive_list(parser, "--sizes", args.sizes, 1 << 30)
    most = max(args.counts) * max(args.sizes)
    if most > MOST_BYTES:
        parser.error(
            f"--counts x --sizes: {most} B a side is more than this benchmark's "
            f"{MOST_BYTES >> 30} GiB"
        )
    if not 2 <= args.trials <= MOST_TRIALS:
        parser.error(f"--trials: {args.trials} is not from 2 (quartiles need two) to {MOST_TRIALS}")
    INJECTED.update(m for m in args.inject.split(",") if m)
    if INJECTED - {"copy_many", "torch_loop", "torch_foreach", "cupy_loop", "xferscope",
                   "torch_copy_"}:  # fmt: skip
        parser.error(f"--inject: {args.inject} names no method this benchmark times")
    parts = [p for p in args.parts.split(",") if p]
    bad = [p for p in parts if p not in PARTS]
    if bad:
        parser.error(f"--parts: {', '.join(bad)} not among {', '.join(PARTS)}")
    try:
        engine = NativeEngine()
        meta = collect(engine, [0])
    except XferscopeError as exc:
        raise SystemExit(f"copyapi_bench: {exc}") from None
    comparisons: list[dict] = []
    figures: dict = {"trials": args.trials, "parts": parts}
    measured(lambda: [PART_FUNCTIONS[p](args, figures, comparisons) for p in parts], figures)
    recorded(args, meta, comparisons, figures)


def joined(parser: Any, into: str | None) -> tuple[dict, list[dict]]:
    """The figures and comparisons of the record `into` names (--into: parts measured in
    separate calls, one file), else empty ones; parser.error where it cannot be read."""
    if not into:
        return {}, []
    if not Path(into).is_file():  # a FIFO would hang the read, a directory fail it
        parser.error(f"--into: {into} is not a record file")
    try:
        earlier = json.loads(Path(into).read_text())
        return earlier["figures"], earlier["comparisons"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        parser.error(f"--into: cannot read {into}: {exc}")
        raise  # parser.error does not return


def measured(run: Callable[[], Any], figures: dict) -> None:
    """Runs the parts; a time limit's SIGTERM or Ctrl-C keeps what was measured, and a copy
    that failed its verification is said in the figures."""

    def stop(_signum: int, _frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    try:
        run()
    except KeyboardInterrupt as exc:
        figures["interrupted"] = repr(exc)
    except Mismatch as exc:
        figures["verification_failed"] = str(exc)
        print(f"verification failed: {exc}", flush=True)


def recorded(
    args: Any, meta: dict, comparisons: list[dict], figures: dict, benchmark: str = "copyapi"
) -> None:
    """Writes the `benchmark` record (of the GPUs `meta` names); exits 1 where a copy failed its
    verification (the record keeps what was measured; the run failed)."""
    write_record(benchmark, args.commit, meta, len(meta["gpus"]), comparisons, figures,
                 Path(args.out))  # fmt: skip
    if "verification_failed" in figures:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
