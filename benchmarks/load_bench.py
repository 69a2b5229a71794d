"""Checkpoint load benchmark (issue 51): xferscope.load against the loaders people use, on
safetensors checkpoints this script writes on the machine's disk (random bytes, no download),
each loaded cold (the page cache dropped for its files with posix_fadvise(DONTNEED), checked
with mincore) and warm (every page resident), every tensor checked against what was written:

  load_warm_vs_pinned_h2d       our warm GB/s over pinned memory's host-to-GPU rate (goal 0.9)
  load_cold_vs_disk_read        our cold GB/s over the disk's best read rate (goal 0.9): threads
                                reading the files with pread, buffered and O_DIRECT, the best
                                way's median over the rounds (as our load's is)
  load_vs_best_peer_worst       our GB/s over the best peer's, the worst workload and state
                                (goal 1.0)
  load_gpu_memory_left_after_error_bytes   a truncated file and one changed while loading: GPU
                                memory still allocated after each error (a figure; goal 0)

Workloads: dense1g (about 1 GB in 300 tensors, one file), moe1g (18,000 tensors of an MoE's
sizes, 1 GB), dense15g (15 GB in 300 tensors, 4 shards with an index), dense60g (59 GB in 300
tensors, 16 shards; for a host with the disk and the memory for it). --gpus W loads W over
every GPU too (shard k on GPU k mod n; each peer a thread a GPU), as the row "W@<n>gpus".
Peers: safetensors (load_file(device="cuda")), safe_open_pin (safe_open on the CPU, pin_memory,
.to non_blocking), fastsafetensors (fastsafe_open, nogds), runai (SafetensorsStreamer, then .to
each tensor), instanttensor (safe_open(device=)), torch_mmap (torch.load(mmap=True) of the same
tensors as a .pt file, then .to; workloads up to --pt-most bytes), beside xferscope_pt
(xferscope.load of that .pt file). Methods alternate in a shuffled order each round. Writes
benchmarks/results/load-<gpu>-<date>.json (--into joins an earlier record).

    python3 benchmarks/load_bench.py --commit $(git rev-parse HEAD) --dir /var/tmp/ckpt
        [--workloads dense1g,moe1g] [--peers ...] [--rounds 2] [--into FILE] [--errors]
        [--gpus dense60g]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

import copyapi_bench as base
import xferscope
from foundation import bench_parser, comparison
from xferscope.core.engine import NativeEngine
from xferscope.core.machine import collect
from xferscope.transfer.loading import CheckpointError, read_layout, storage

GB = 1e9
WORKLOADS = ("dense1g", "moe1g", "dense15g", "dense60g")
DISK_MOST = 8 * GB  # the disk's ceiling is read from at most about this much of a checkpoint
PEERS = ("safetensors", "safe_open_pin", "fastsafetensors", "runai", "instanttensor", "torch_mmap")


def shapes(name: str) -> list[list[tuple[str, tuple[int, ...]]]]:
    """Each shard's tensors (name, shape), bf16: a transformer's layers, or an MoE's experts."""
    if name == "moe1g":  # 18,000 tensors of 55 KiB: 24 layers x 250 experts x 3 matrices
        experts = [(i, e, w) for i in range(24) for e in range(250) for w in ("gate", "up", "down")]
        return [[(f"layers.{i}.experts.{e}.{w}", (160, 176) if w == "down" else (176, 160))
                 for i, e, w in experts]]  # fmt: skip
    # 37 layers of 8 tensors and 4 more: 300 tensors, 1.0 GB, 14.9 GB or 59.3 GB
    hidden, layers, shards = {"dense1g": (1280, 37, 1), "dense15g": (4992, 37, 4),
                              "dense60g": (9984, 37, 16)}[name]  # fmt: skip
    square, wide = (hidden, hidden), (hidden * 2, hidden)
    per_layer = [("q", square), ("k", square), ("v", square), ("o", square), ("up", wide),
                 ("down", wide[::-1]), ("norm1", (hidden,)), ("norm2", (hidden,))]  # fmt: skip
    names = [(f"layers.{i}.{n}", s) for i in range(layers) for n, s in per_layer]
    names = [("embed", (8192, hidden)), *names, ("head", (8192, hidden)), ("step", (1,)),
             ("final_norm", (hidden,))]  # fmt: skip
    return [names[k::shards] for k in range(shards)]


def written(name: str, root: Path, pt_most: int) -> tuple[list[Path], Path | None, dict]:
    """The workload's files (written once, fsync'd), its .pt where small enough, and each
    tensor's bytes as written (for the checks)."""
    from safetensors.torch import save_file

    where = root / name
    where.mkdir(parents=True, exist_ok=True)
    parts = shapes(name)
    g = torch.Generator(device="cuda").manual_seed(len(name))
    files, wanted, weight_map = [], {}, {}
    for k, part in enumerate(parts):
        tensors = {n: torch.randint(-(1 << 15), 1 << 15, s, dtype=torch.int16, device="cuda",
                                    generator=g).view(torch.bfloat16).cpu()
                   for n, s in part}  # fmt: skip
        file = where / (f"model-{k + 1:05d}-of-{len(parts):05d}.safetensors"
                        if len(parts) > 1 else "model.safetensors")  # fmt: skip
        if not file.exists():
            save_file(tensors, str(file))
            with file.open("rb") as f:
                os.fsync(f.fileno())
        files.append(file)
        wanted.update(tensors)
        weight_map.update(dict.fromkeys(tensors, file.name))
    if len(parts) > 1:
        (where / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    total = sum(t.nbytes for t in wanted.values())
    pt = where / "model.pt" if total <= pt_most else None
    if pt is not None and not pt.exists():
        torch.save(wanted, pt)
        with pt.open("rb") as f:
            os.fsync(f.fileno())
    return files, pt, wanted


def pinned_h2d_gbps(nbytes: int = 1 << 30) -> float:
    host = torch.randint(0, 255, (nbytes,), dtype=torch.uint8).pin_memory()
    gpu = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    best = 0.0
    for _ in range(5):
        torch.cuda.synchronize()
        start = time.perf_counter()
        gpu.copy_(host, non_blocking=True)
        torch.cuda.synchronize()
        best = max(best, nbytes / (time.perf_counter() - start) / GB)
    return best


def loaders(files: list[Path], pt: Path | None, index: int) -> dict[str, Callable[[], dict]]:
    dev = f"cuda:{index}"
    names = [str(f) for f in files]

    def safetensors_peer() -> dict:
        from safetensors.torch import load_file

        return {k: v for f in names for k, v in load_file(f, device=dev).items()}

    def safe_open_pin() -> dict:
        from safetensors import safe_open

        out = {}
        for f in names:
            with safe_open(f, framework="pt", device="cpu") as s:
                for k in s.keys():  # noqa: SIM118 (safe_open has no iterator)
                    out[k] = s.get_tensor(k).pin_memory().to(dev, non_blocking=True)
        return out

    def fastsafetensors_peer() -> dict:
        from fastsafetensors import fastsafe_open

        with fastsafe_open(filenames=names, nogds=True, device=dev) as f:
            return {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118

    def runai_peer() -> dict:
        from runai_model_streamer import SafetensorsStreamer

        with SafetensorsStreamer() as s:
            s.stream_files(names)
            return {k: t.to(dev) for k, t in s.get_tensors()}

    def instanttensor_peer() -> dict:
        from instanttensor import safe_open

        with safe_open(names, framework="pt", device=index) as f:
            return dict(f.tensors())

    made = {
        "xferscope": lambda: xferscope.load(files, device=dev),
        "safetensors": safetensors_peer,
        "safe_open_pin": safe_open_pin,
        "fastsafetensors": fastsafetensors_peer,
        "runai": runai_peer,
        "instanttensor": instanttensor_peer,
    }
    if pt is not None:
        made["torch_mmap"] = lambda: {
            k: v.to(dev) for k, v in torch.load(pt, mmap=True, weights_only=True).items()
        }
        made["xferscope_pt"] = lambda: xferscope.load(pt, device=dev)  # ours, of the .pt
    return made


def check(who: str, got: dict, wanted: dict) -> None:
    """Every tensor `who` loaded against what was written, bit for bit, on the GPU."""
    if got.keys() != wanted.keys():
        raise base.Mismatch(f"{who}: {len(got)} tensors, {len(wanted)} written")
    for name, want in wanted.items():
        g = got[name]
        if (
            not g.is_cuda
            or g.shape != want.shape
            or not torch.equal(g.view(torch.int16), want.view(torch.int16).to(g.device))
        ):
            raise base.Mismatch(f"{who}: tensor {name!r} differs from what was written")


def workload_part(args: Any, name: str, figures: dict, gpus: int = 1) -> None:
    """`name` loaded by each way, cold and warm, `args.rounds` rounds, onto GPU 0, or where
    `gpus` > 1 spread over that many GPUs (shard k on GPU k mod gpus: ours with a callable
    placing each tensor by its shard, each peer a thread a GPU loading that GPU's shards).
    The row is filled load by load, so a time limit keeps the loads made."""
    key = name if gpus == 1 else f"{name}@{gpus}gpus"
    rows = figures.setdefault("workloads", {})
    if key in rows:
        return
    files, pt, wanted = written(name, Path(args.dir), args.pt_most if gpus == 1 else 0)
    nbytes = sum(t.nbytes for t in wanted.values())
    ways = spread(files, gpus, args.peers) if gpus > 1 else {
        k: v for k, v in loaders(files, pt, 0).items() if k in ("xferscope", "xferscope_pt",
                                                                 *args.peers)}  # fmt: skip
    paths = [*files, *([pt] if pt else [])]
    seconds: dict[str, dict[str, list[float]]] = {"cold": {}, "warm": {}}
    row = rows[key] = {"bytes": nbytes, "tensors": len(wanted), "files": len(files),
                       "gpus": gpus, "gbps": {}, "seconds": seconds, "failed": {},
                       "resident_share_cold_most": 0.0,
                       "resident_share_warm_least": 1.0}  # fmt: skip
    for who, run in ways.items():  # each verified once, warm
        storage.cached(paths, warm=True)
        try:
            out = run()
            synchronized(gpus)  # a peer's copies on a stream of its own have landed
            check(who, out, wanted)
        except base.Mismatch:
            raise
        except Exception as exc:  # a peer that cannot run here is said, not fatal
            row["failed"][who] = f"{type(exc).__name__}: {str(exc)[:300]}"
        out = None
        freed(gpus)
    order = [w for w in ways if w not in row["failed"]]
    for _ in range(args.rounds):
        random.shuffle(order)
        for state in ("warm", "cold"):  # warm first: the pages the checks read are still there
            for who in order:
                share = storage.cached(paths, warm=state == "warm")
                if state == "cold":
                    row["resident_share_cold_most"] = max(row["resident_share_cold_most"], share)
                else:
                    row["resident_share_warm_least"] = min(row["resident_share_warm_least"], share)
                synchronized(gpus)
                start = time.perf_counter()
                out = ways[who]()
                synchronized(gpus)
                seconds[state].setdefault(who, []).append(time.perf_counter() - start)
                del out  # the GPU memory goes before the next way
                freed(gpus)
                row["gbps"] = {s: {w: round(nbytes / statistics.median(v) / GB, 3)
                                   for w, v in d.items()} for s, d in seconds.items()}  # fmt: skip
    row["disk_gbps"] = disk_ceiling(files, args.rounds)
    print(key, json.dumps({"gbps": row["gbps"], "failed": row["failed"]}), flush=True)


def synchronized(gpus: int) -> None:
    for g in range(gpus):
        torch.cuda.synchronize(g)


def freed(gpus: int) -> None:
    synchronized(gpus)
    torch.cuda.empty_cache()


def spread(files: list[Path], gpus: int, peers: list[str]) -> dict[str, Callable[[], dict]]:
    """The ways to load `files` over `gpus` GPUs, shard k on GPU k mod gpus: xferscope.load
    with a callable placing each tensor by its shard; each peer of `peers` (but torch_mmap,
    which has no .pt here) as a thread a GPU, each loading its GPU's shards as loaders() does."""
    import threading

    shard_of = {name: k for k, f in enumerate(files) for name in read_names(f)}
    mine = [[f for k, f in enumerate(files) if k % gpus == g] for g in range(gpus)]

    def threaded(peer: str) -> Callable[[], dict]:
        def run() -> dict:
            parts: list[dict] = [{} for _ in range(gpus)]
            errors: list[BaseException] = []

            def one(g: int) -> None:
                try:
                    parts[g] = loaders(mine[g], None, g)[peer]()
                except BaseException as exc:  # said by the caller's thread
                    errors.append(exc)

            # daemons: Ctrl-C's record is written at once, and the exit does not wait on a load
            threads = [threading.Thread(target=one, args=(g,), daemon=True)
                       for g in range(gpus) if mine[g]]  # fmt: skip
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            if errors:
                raise errors[0]
            return {k: v for part in parts for k, v in part.items()}

        return run

    ways = {"xferscope": lambda: xferscope.load(files, device=lambda n: shard_of[n] % gpus)}
    ways.update({p: threaded(p) for p in peers if p != "torch_mmap"})
    return ways


def disk_ceiling(files: list[Path], rounds: int) -> dict[str, float]:
    """GB/s threads of pread read the files at from cold: buffered with 16 and 64 MiB reads,
    O_DIRECT, and buffered with the kernel asked to read ahead (storage.Ahead); each way's
    median of `rounds` reads, the ways shuffled each round (the best of single reads of a
    noisy disk would set the ceiling by its luckiest read). Of a sharded checkpoint, the
    shards that make up the first DISK_MOST bytes: a disk's rate does not grow past that."""
    files = files[: next((k + 1 for k in range(len(files))
                          if sum(f.stat().st_size for f in files[: k + 1]) >= DISK_MOST),
                         len(files))]  # fmt: skip
    ways = {"buffered_1x64M": (1, False, 64, 0), "buffered_4x16M": (4, False, 16, 0),
            "buffered_4x64M": (4, False, 64, 0), "buffered_8x64M": (8, False, 64, 0),
            "direct_8x64M": (8, True, 64, 0), "direct_16x16M": (16, True, 16, 0),
            "ahead64M_4x16M": (4, False, 16, 64)}  # fmt: skip
    rates: dict[str, list[float]] = {}
    order = list(ways)
    for _ in range(rounds):
        random.shuffle(order)
        for name in order:
            threads, direct, block, ahead = ways[name]
            storage.cached(files, warm=False)
            rate = storage.read_rate(files, threads, direct, block << 20, ahead << 20) / GB
            rates.setdefault(name, []).append(rate)
    return {name: round(statistics.median(v), 3) for name, v in rates.items()}


def error_part(args: Any, figures: dict) -> None:
    """GPU memory still allocated after a load refused for a truncated file, and for a file
    changed after its header was read (what the load had allocated must be given back)."""
    root = Path(args.dir) / "broken"
    root.mkdir(parents=True, exist_ok=True)
    files, _, _ = written("dense1g", Path(args.dir), 0)
    cut = root / "cut.safetensors"
    cut.write_bytes(files[0].read_bytes()[: -(1 << 20)])
    left = {}
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    try:
        xferscope.load(cut)
    except CheckpointError as exc:
        left["truncated"] = torch.cuda.memory_allocated() - before
        left["truncated_error"] = str(exc)
    from xferscope.transfer.loading import load as loading

    layout = read_layout(files[0])
    real = loading.checkpoint_layouts
    loading.checkpoint_layouts = lambda paths, files=None: [layout]  # type: ignore[assignment]
    stamp = layout.version[2] + 10**9
    os.utime(files[0], ns=(stamp, stamp))
    try:
        xferscope.load(files[0])
    except CheckpointError as exc:
        left["changed"] = torch.cuda.memory_allocated() - before
        left["changed_error"] = str(exc)
    finally:
        loading.checkpoint_layouts = real  # type: ignore[assignment]
    figures["errors"] = left
    figures["load_gpu_memory_left_after_error_bytes"] = max(
        v for k, v in left.items() if not k.endswith("_error")
    )


def read_names(path: Path) -> list[str]:
    return [t.name for t in read_layout(path).tensors]


def summary(figures: dict, comparisons: list[dict]) -> None:
    """The comparisons over the rows measured (a row cut short by a time limit counts for what
    it has); warm against pinned only where the load went to one GPU, as the pinned rate did."""
    rows = figures.get("workloads", {})
    warm_rows = {k: r for k, r in rows.items()
                 if r.get("gpus", 1) == 1 and "xferscope" in r["gbps"].get("warm", {})}  # fmt: skip
    if warm_rows:
        h2d = figures.setdefault("pinned_h2d_gbps", round(pinned_h2d_gbps(), 3))
        name, warm = min(warm_rows.items(), key=lambda kv: kv[1]["gbps"]["warm"]["xferscope"])
        comparisons.append(comparison(
            "load_warm_vs_pinned_h2d", warm["gbps"]["warm"]["xferscope"], h2d,
            f"pinned host-to-GPU GB/s (1 GiB, best of 5); our warm GB/s, worst workload {name}",
            "ratio", True, 0.9))  # fmt: skip
    cold_rows = {k: r for k, r in rows.items()
                 if r.get("disk_gbps") and "xferscope" in r["gbps"].get("cold", {})}  # fmt: skip
    if cold_rows:
        name, cold = min(cold_rows.items(), key=lambda kv: kv[1]["gbps"]["cold"]["xferscope"]
                         / max(kv[1]["disk_gbps"].values()))  # fmt: skip
        comparisons.append(comparison(
            "load_cold_vs_disk_read", cold["gbps"]["cold"]["xferscope"],
            max(cold["disk_gbps"].values()),
            f"the disk's best read GB/s (threads x pread, buffered and O_DIRECT); {name}",
            "ratio", True, 0.9))  # fmt: skip
    cases = []
    for name, row in rows.items():
        for state, by in row["gbps"].items():
            peers = {k: v for k, v in by.items() if not k.startswith("xferscope")}
            if peers and "xferscope" in by:
                best = max(peers, key=peers.__getitem__)
                cases.append((by["xferscope"] / peers[best], name, state, best, by))
    if cases:
        _, name, state, best, by = min(cases, key=lambda c: c[0])
        comparisons.append(comparison(
            "load_vs_best_peer_worst", by["xferscope"], by[best],
            f"{best}, the best peer (GB/s); the worst of {len(cases)} cases: {name} {state}",
            "ratio", True, 1.0))  # fmt: skip


def checkpoint_dir(parser: argparse.ArgumentParser, text: str) -> Path:
    """--dir: a directory, or one to make in one (parser.error otherwise)."""
    where = Path(text)
    if (where.exists() and not where.is_dir()) or not where.parent.is_dir():
        parser.error(f"--dir: {text} is not a directory, nor one to make in one")
    return where


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--dir", required=True, help="where the checkpoints are written")
    parser.add_argument("--workloads", default="dense1g,moe1g")
    parser.add_argument("--peers", default=",".join(PEERS))
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--pt-most", type=int, default=2 << 30)
    parser.add_argument("--errors", action="store_true", help="also the error part")
    parser.add_argument("--gpus", default="",
                        help="workloads also loaded over every GPU, e.g. dense60g")  # fmt: skip
    parser.add_argument("--into", default=None)
    args = parser.parse_args()
    workloads = [w for w in args.workloads.split(",") if w]
    args.peers = [p for p in args.peers.split(",") if p]
    spread_over = [w for w in args.gpus.split(",") if w]
    if set(workloads) - set(WORKLOADS) or (not workloads and not spread_over):
        parser.error(f"--workloads: '{args.workloads}' is not among {', '.join(WORKLOADS)}")
    if set(spread_over) - set(WORKLOADS):
        parser.error(f"--gpus: '{args.gpus}' is not among {', '.join(WORKLOADS)}")
    if set(args.peers) - set(PEERS):
        parser.error(f"--peers: '{','.join(args.peers)}' is not among {', '.join(PEERS)}")
    if not 1 <= args.rounds <= 20:
        parser.error(f"--rounds: {args.rounds} is not from 1 to 20")
    if args.pt_most < 0:
        parser.error(f"--pt-most: {args.pt_most} is not a size in bytes (0: no .pt file)")
    checkpoint_dir(parser, args.dir)
    if spread_over and torch.cuda.device_count() < 2:
        parser.error(f"--gpus: {torch.cuda.device_count()} GPU here; it needs 2 or more")
    figures, comparisons = base.joined(parser, args.into)
    meta = collect(NativeEngine(), list(range(torch.cuda.device_count() if spread_over else 1)))

    def run() -> None:
        for w in workloads:
            workload_part(args, w, figures)
        if args.errors:
            error_part(args, figures)
        for w in spread_over:
            workload_part(args, w, figures, torch.cuda.device_count())

    base.measured(run, figures)
    names = {"load_warm_vs_pinned_h2d", "load_cold_vs_disk_read", "load_vs_best_peer_worst"}
    comparisons[:] = [c for c in comparisons if c["name"] not in names]
    summary(figures, comparisons)
    base.recorded(args, meta, comparisons, figures, "load")


if __name__ == "__main__":
    main()
