"""Loader benchmark (issue 50): `xferscope.torch.DeviceLoader` against PyTorch's ways of feeding
a training step from a DataLoader, on one GPU, each workload's variants interleaved in rounds
in one process (the same model, optimizer and step for every variant of a workload):

  loader_vs_best_peer_worst     per workload, the better of DeviceLoader over a pageable
                                DataLoader (xferscope: its workers collate into pinned slots)
                                and over a pin_memory=True one iterated as it is (slots=False,
                                xferscope_loader: what the slots buy) against the best peer:
                                pin_memory=True then .to(device, non_blocking=True) of every
                                tensor (pin_memory), a
                                side-stream prefetcher one batch ahead as timm's PrefetchLoader
                                does it (timm_pattern; each tensor's record_stream added, which
                                timm leaves out), accelerate's send_to_device (where accelerate
                                imports); the worst workload's steps/s ratio (goal 1.0)
  loader_resnet18_vs_resident   resnet18: the better DeviceLoader against the same batches
                                already on the GPU, the step alone (goal 0.9)
  loader_pinned_held_flat       pinned host memory held after epoch 2 over after epoch 20 of the
                                recsys workload's xferscope variant (capped at 1; goal 1.0), its
                                growth in bytes the figure loader_pinned_growth_20_epochs_bytes

Workloads (forward, backward and an optimizer step; steps per second):
  resnet18   ResNet-18 (bf16 autocast, channels_last, SGD), batches of 256 x 3 x 160 x 160
             float32 (79 MB) + int64 labels from a pool of 1024 random samples, default collate
  jpeg       the same step fed 256 JPEGs (192 x 192, smoothed noise) decoded and cropped to
             160 x 160 in the workers (uint8), made float and normalized on the GPU
  recsys     a dict of 50 tensors of 1 KB-4 MB a batch (log-uniform sizes, mixed dtypes),
             collated from per-sample slices; an EmbeddingBag + MLP that reads every tensor

A round runs each variant --epochs-per-round epochs of --batches batches (the workers started
each epoch, unless --persistent-workers), the variants' order rotated each round; a variant's figure
is the median of its rounds' steps/s, an epoch timed from asking for its iterator to
torch.cuda.synchronize() after its last step. First each variant runs an untimed epoch whose
first batch, back on the host, must equal the dataset's own (a sequential sampler). Apart: the
resnet18 batch's collate, pin_memory() and .to() times. Writes
benchmarks/results/loader-<gpu>-<date>.json.

    python3 benchmarks/loader_bench.py --commit $(git rev-parse HEAD) [--rounds 3]
        [--workloads resnet18,jpeg,recsys] [--epochs-per-round 2] [--batches 40]
        [--workers 4] [--ahead 2] [--persistent-workers]
"""

from __future__ import annotations

import functools
import gc
import math
import os
import random
import statistics
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset, default_collate

import copyapi_bench as base
from foundation import bench_parser, comparison, rounds_count, synced_seconds
from xferscope.core.engine import NativeEngine
from xferscope.core.errors import XferscopeError
from xferscope.core.machine import collect
from xferscope.torch import DeviceLoader
from xferscope.transfer.moving import pinned_bytes

WORKLOADS = ("resnet18", "jpeg", "recsys")
OURS = ("xferscope", "xferscope_loader")
PEERS = ("pin_memory", "timm_pattern", "accelerate")
VARIANTS = ("resident", *PEERS, *OURS)
IMAGE_BATCH, IMAGE_POOL, SIDE, CLASSES = 256, 1024, 160, 1000
JPEGS, JPEG_SIDE = 512, 192
RECSYS_TENSORS, RECSYS_BATCH, RECSYS_POOL, ID_RANGE = 50, 128, 256, 1 << 17
RECSYS_DTYPES = (torch.float32, torch.int64, torch.bfloat16, torch.int32, torch.float16,
                 torch.uint8)  # fmt: skip
GROWTH_EPOCHS, GROWTH_SETTLED, GROWTH_BATCHES = 20, 2, 8
MOST_AHEAD = 64  # DeviceLoader's limit on ahead
MOST_BATCHES = 200  # resnet18's resident epoch holds them all on the GPU: 200 x 79 MB
BREAKDOWN_TRIALS = 5
# torch.cuda.host_memory_stats() keys for the pinned memory PyTorch's host allocator holds, the
# first found (torch 2.11 has allocated_bytes: its cudaHostAlloc'ed blocks, cached ones too)
HOST_KEYS = ("allocated_bytes.current", "reserved_bytes.current")


@dataclass
class Workload:
    name: str
    dataset: Dataset
    batch_size: int
    step: Callable[[Any], None]
    batch_bytes: int


class ImagePool(Dataset):
    """resnet18: `length` samples, index modulo a pool of random 3 x 160 x 160 float32 images
    and labels."""

    def __init__(self, length: int) -> None:
        g = torch.Generator().manual_seed(18)
        self.images = torch.randn(IMAGE_POOL, 3, SIDE, SIDE, generator=g)
        self.labels = torch.randint(0, CLASSES, (IMAGE_POOL,), generator=g)
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.images[i % IMAGE_POOL], self.labels[i % IMAGE_POOL]


class JpegImages(Dataset):
    """jpeg: JPEGS encoded images (smoothed noise) held as bytes, decoded on the CPU in
    __getitem__ and cropped to 160 x 160 at a corner drawn per index once (so that a batch is
    the same every time it is read)."""

    def __init__(self, length: int) -> None:
        from torchvision.io import encode_jpeg

        g = torch.Generator().manual_seed(192)
        low = torch.rand(JPEGS, 3, 12, 12, generator=g) * 255
        smooth = F.interpolate(low, (JPEG_SIDE, JPEG_SIDE), mode="bilinear", align_corners=False)
        noisy = smooth + 24 * torch.randn(smooth.shape, generator=g)
        images = noisy.clamp(0, 255).to(torch.uint8)
        self.jpegs = [encode_jpeg(image, quality=90) for image in images]
        self.corners = torch.randint(0, JPEG_SIDE - SIDE + 1, (length, 2), generator=g)
        self.labels = torch.randint(0, CLASSES, (length,), generator=g)
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        from torchvision.io import decode_jpeg

        image = decode_jpeg(self.jpegs[i % JPEGS])
        top, left = (int(v) for v in self.corners[i])
        return image[:, top : top + SIDE, left : left + SIDE].contiguous(), self.labels[i]


class RecsysRows(Dataset):
    """recsys: per sample a dict of RECSYS_TENSORS slices (index modulo a random pool), each
    key's batch of RECSYS_BATCH rows 1 KB-4 MB, sizes drawn log-uniform (seed 50)."""

    def __init__(self, length: int) -> None:
        sizes, g = random.Random(50), torch.Generator().manual_seed(50)
        self.pool: dict[str, torch.Tensor] = {}
        for i in range(RECSYS_TENSORS):
            dtype = RECSYS_DTYPES[i % len(RECSYS_DTYPES)]
            size = math.exp(sizes.uniform(math.log(1 << 10), math.log(4 << 20)))
            itemsize = torch.empty((), dtype=dtype).element_size()
            shape = (RECSYS_POOL, max(1, round(size / (RECSYS_BATCH * itemsize))))
            if dtype.is_floating_point:
                made = torch.randn(shape, generator=g).to(dtype)
            else:
                top = 256 if dtype == torch.uint8 else ID_RANGE
                made = torch.randint(0, top, shape, generator=g, dtype=dtype)
            self.pool[f"{i:02d}_{str(dtype).removeprefix('torch.')}"] = made
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {k: v[i % RECSYS_POOL] for k, v in self.pool.items()}


class RecsysNet(torch.nn.Module):
    """An EmbeddingBag over one id tensor, an MLP over one dense one, and every tensor's mean
    in the loss (each tensor of the batch read on the GPU)."""

    def __init__(self, dense: str, ids: str, width: int) -> None:
        super().__init__()
        self.dense, self.ids = dense, ids
        self.bag = torch.nn.EmbeddingBag(ID_RANGE, 64, mode="sum")
        self.mlp = torch.nn.Sequential(
            torch.nn.Linear(width, 256), torch.nn.ReLU(), torch.nn.Linear(256, 64)
        )
        self.head = torch.nn.Linear(64, 1)

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        rows = batch[self.dense].shape[0]
        h = self.mlp(batch[self.dense].reshape(rows, -1))
        h = h + self.bag(batch[self.ids].reshape(rows, -1))
        touched = torch.stack([t.float().mean() for t in batch.values()]).sum()
        return self.head(torch.relu(h)).mean() + 1e-6 * touched


def image_step(normalize: bool) -> Callable[[Any], None]:
    """ResNet-18's step (bf16 autocast, channels_last, SGD); `normalize`: uint8 images made
    float and normalized on the GPU first."""
    from torchvision.models import resnet18

    torch.manual_seed(0)
    model = resnet18(num_classes=CLASSES).cuda().to(memory_format=torch.channels_last)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    mean = torch.tensor([0.485, 0.456, 0.406], device="cuda").view(1, 3, 1, 1) * 255
    std = torch.tensor([0.229, 0.224, 0.225], device="cuda").view(1, 3, 1, 1) * 255

    def step(batch: Any) -> None:
        x, y = batch[0], batch[1]
        if normalize:
            x = (x.float() - mean) / std
        x = x.contiguous(memory_format=torch.channels_last)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    return step


def made_workload(name: str, batches: int) -> Workload:
    """The workload `name` with `batches` full batches an epoch."""
    if name == "recsys":
        rows = RecsysRows(batches * RECSYS_BATCH)
        dense, ids = (next(k for k, v in rows.pool.items() if v.dtype == d)
                      for d in (torch.float32, torch.int64))  # fmt: skip
        torch.manual_seed(0)
        net = RecsysNet(dense, ids, rows.pool[dense].shape[1]).cuda()
        optimizer = torch.optim.SGD(net.parameters(), lr=0.01)

        def step(batch: Any) -> None:
            loss = net(batch)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()

        size = sum(v[0].nbytes for v in rows.pool.values()) * RECSYS_BATCH
        return Workload(name, rows, RECSYS_BATCH, step, size)
    pixels = 3 * SIDE * SIDE * IMAGE_BATCH
    if name == "jpeg":
        jpegs = JpegImages(batches * IMAGE_BATCH)
        return Workload(name, jpegs, IMAGE_BATCH, image_step(True), pixels + 8 * IMAGE_BATCH)
    pool = ImagePool(batches * IMAGE_BATCH)
    return Workload(name, pool, IMAGE_BATCH, image_step(False), 4 * pixels + 8 * IMAGE_BATCH)


def moved(batch: Any, device: Any, non_blocking: bool) -> Any:
    """Every tensor of a nested batch (dict, list, tuple) `.to(device)`."""
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=non_blocking)
    if isinstance(batch, Mapping):
        return {k: moved(v, device, non_blocking) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        return type(batch)(moved(v, device, non_blocking) for v in batch)
    return batch


def tensors(batch: Any) -> Iterator[torch.Tensor]:
    """Every tensor of a nested batch."""
    if isinstance(batch, torch.Tensor):
        yield batch
    elif isinstance(batch, (Mapping, list, tuple)):
        for v in batch.values() if isinstance(batch, Mapping) else batch:
            yield from tensors(v)


def same(expected: Any, got: Any, where: str) -> None:
    """Raises base.Mismatch where `got` (on the GPU) is not `expected` (the dataset's batch)."""
    if isinstance(expected, torch.Tensor):
        if not isinstance(got, torch.Tensor) or not got.is_cuda:
            raise base.Mismatch(f"{where}: {type(got).__name__} not on the GPU")
        back = got.cpu()
        if back.dtype != expected.dtype or back.shape != expected.shape:
            raise base.Mismatch(f"{where}: {back.dtype} {tuple(back.shape)} for "
                                f"{expected.dtype} {tuple(expected.shape)}")  # fmt: skip
        if not torch.equal(back, expected):
            raise base.Mismatch(f"{where} differs from the dataset's batch")
    elif isinstance(expected, Mapping):
        if not isinstance(got, Mapping) or set(got) != set(expected):
            raise base.Mismatch(f"{where}: keys differ from the dataset's batch")
        for k, v in expected.items():
            same(v, got[k], f"{where}[{k!r}]")
    elif isinstance(expected, (list, tuple)):
        if not isinstance(got, (list, tuple)) or len(got) != len(expected):
            raise base.Mismatch(f"{where}: not a sequence of {len(expected)} like the dataset's")
        for i, (e, g) in enumerate(zip(expected, got, strict=True)):
            same(e, g, f"{where}[{i}]")
    elif expected != got:
        raise base.Mismatch(f"{where}: {got!r} for {expected!r}")


def variants(
    work: Workload, workers: int, ahead: int, send: Callable[..., Any] | None, persistent: bool
) -> tuple[dict[str, Callable[[], Iterable[Any]]], DeviceLoader]:
    """Each variant as a maker of one epoch's GPU batches, and the xferscope variant's
    DeviceLoader (its stats). Every loader reads the dataset in order."""
    device = torch.device("cuda")

    def loader(pin: bool) -> DataLoader:
        return DataLoader(work.dataset, batch_size=work.batch_size, num_workers=workers,
                          pin_memory=pin, drop_last=False,
                          persistent_workers=persistent and workers > 0)  # fmt: skip

    pageable, pinned = loader(False), loader(True)
    resident = [moved(b, device, False) for b in pageable]  # made once, kept on the GPU
    side = torch.cuda.Stream()  # timm_pattern's, for every epoch

    def pin_memory() -> Iterator[Any]:
        for batch in pinned:
            yield moved(batch, device, True)

    def timm_pattern() -> Iterator[Any]:
        """timm's PrefetchLoader, written out: the next batch's copy on a side stream while
        the step runs on this one, which waits for the copy before using it."""
        current: Any = None
        first = True
        for batch in pinned:
            with torch.cuda.stream(side):
                upcoming = moved(batch, device, True)
            if not first:
                yield current
            first = False
            torch.cuda.current_stream().wait_stream(side)
            for t in tensors(upcoming):  # made on the side stream, freed after this one's use
                t.record_stream(torch.cuda.current_stream())
            current = upcoming
        if not first:
            yield current

    ours = DeviceLoader(pageable, device="cuda", ahead=ahead)
    ours_loader = DeviceLoader(pinned, device="cuda", ahead=ahead, slots=False)
    made: dict[str, Callable[[], Iterable[Any]]] = {
        "resident": lambda: resident,
        "pin_memory": pin_memory,
        "timm_pattern": timm_pattern,
        "xferscope": lambda: ours,
        "xferscope_loader": lambda: ours_loader,
    }
    if send is not None:

        def accelerate() -> Iterator[Any]:
            for batch in pinned:
                yield send(batch, device, non_blocking=True)

        made["accelerate"] = accelerate
    return {v: made[v] for v in VARIANTS if v in made}, ours


def epoch(
    make: Callable[[], Iterable[Any]], step: Callable[[Any], None], batches: int, who: str,
    check: Callable[[Any], None] | None = None,
) -> float:  # fmt: skip
    """One epoch's seconds, synchronized; `check` sees the first batch before its step."""
    torch.cuda.synchronize()
    start = time.perf_counter()
    n = 0
    for batch in make():
        if check is not None and n == 0:
            check(batch)
        step(batch)
        n += 1
    torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    if n != batches:
        raise base.Mismatch(f"{who}: {n} batches in an epoch of {batches}")
    return seconds


def workload_part(
    name: str, args: Any, figures: dict[str, Any], send: Callable[..., Any] | None
) -> None:
    work = made_workload(name, args.batches)
    row: dict[str, Any] = {"batch_size": work.batch_size, "batch_bytes": work.batch_bytes,
                           "batches_per_epoch": args.batches, "num_workers": args.workers,
                           "verified": [], "variants": {}}  # fmt: skip
    figures["workloads"][name] = row
    if send is None:
        row["not_run"] = {"accelerate": figures["accelerate"]["reason"]}
    makers, ours = variants(work, args.workers, args.ahead, send, args.persistent_workers)
    expected = default_collate([work.dataset[i] for i in range(work.batch_size)])
    for v, make in makers.items():  # untimed: warms the variant up, checks its first batch
        check = functools.partial(same, expected, where=f"{name} {v} first batch")
        seconds = epoch(make, work.step, args.batches, f"{name} {v}", check)
        row["verified"].append(v)
        print(f"{name:8} {v:16} warm-up epoch {seconds:.2f} s, first batch verified", flush=True)
    names = list(makers)
    for v in names:
        row["variants"][v] = {"steps_per_s_rounds": []}
    for r in range(args.rounds):
        for v in names[r % len(names) :] + names[: r % len(names)]:
            seconds = sum(epoch(makers[v], work.step, args.batches, f"{name} {v}")
                          for _ in range(args.epochs_per_round))  # fmt: skip
            rate = args.epochs_per_round * args.batches / seconds
            row["variants"][v]["steps_per_s_rounds"].append(round(rate, 3))
            print(f"{name:8} {v:16} round {r + 1}/{args.rounds}: {rate:8.2f} steps/s "
                  f"({1000 / rate:.2f} ms a step)", flush=True)  # fmt: skip
    for figure in row["variants"].values():
        median = statistics.median(figure["steps_per_s_rounds"])
        figure["steps_per_s"] = round(median, 3)
        figure["ms_per_step"] = round(1000 / median, 3)
    stats = ours.stats  # the xferscope variant's last epoch: the last one timed
    row["xferscope_stats"] = stats.as_dict()
    row["xferscope_explain"] = stats.explain()
    if stats.batches != args.batches:  # stats that add up across epochs: say so
        row["xferscope_stats_note"] = f"{stats.batches} batches: the stats cover every epoch"
    print(f"{name:8} xferscope: {row['xferscope_explain']}", flush=True)
    ours.close()  # its slot workers
    del makers, ours, work
    gc.collect()
    torch.cuda.empty_cache()


def breakdown_part(figures: dict[str, Any]) -> None:
    """The resnet18 batch's steps measured apart: collating 256 samples, pin_memory(), and the
    upload from pinned and from pageable memory (medians of BREAKDOWN_TRIALS, milliseconds)."""
    pool = ImagePool(IMAGE_BATCH)
    samples = [pool[i] for i in range(IMAGE_BATCH)]
    batch = default_collate(samples)
    pinned = [t.pin_memory() for t in batch]

    def ms(run: Callable[[], Any]) -> float:
        run()  # once untimed
        return round(statistics.median(synced_seconds(run, BREAKDOWN_TRIALS)) * 1e3, 3)

    figures["breakdown_resnet18_batch"] = {
        "batch_bytes": sum(t.nbytes for t in batch),
        "collate_ms": ms(lambda: default_collate(samples)),
        "pin_memory_ms": ms(lambda: [t.pin_memory() for t in batch]),
        "to_from_pinned_ms": ms(lambda: moved(pinned, "cuda", True)),
        "to_from_pageable_ms": ms(lambda: moved(batch, "cuda", False)),
        "trials": BREAKDOWN_TRIALS,
    }
    print("breakdown", figures["breakdown_resnet18_batch"], flush=True)


def pinned_held(slots: int) -> dict[str, int]:
    """Pinned host memory held: xferscope's (pinned_bytes; `slots`, a DeviceLoader's slot ring)
    and PyTorch's host allocator's (torch.cuda.host_memory_stats, where this torch has it), by
    source."""
    held = {"xferscope_pinned_bytes": pinned_bytes(), "xferscope_slots_bytes": slots}
    stats_of = getattr(torch.cuda, "host_memory_stats", None)
    stats = stats_of() if stats_of is not None else {}
    key = next((k for k in HOST_KEYS if k in stats), None)
    if key is not None:
        held[f"torch_host_memory_stats[{key}]"] = int(stats[key])
    return held


def growth_part(args: Any, figures: dict[str, Any], comparisons: list[dict[str, Any]]) -> None:
    """The recsys workload's xferscope variant (GROWTH_BATCHES an epoch, one DeviceLoader over
    every epoch, as a training script holds it) for GROWTH_EPOCHS epochs: the pinned memory held
    after epoch GROWTH_SETTLED and after the last."""
    work = made_workload("recsys", GROWTH_BATCHES)
    pageable = DataLoader(work.dataset, batch_size=work.batch_size, num_workers=args.workers,
                          pin_memory=False, drop_last=False)  # fmt: skip
    loader = DeviceLoader(pageable, device="cuda", ahead=args.ahead)
    held: dict[str, dict[str, int]] = {}
    for e in range(1, GROWTH_EPOCHS + 1):
        epoch(lambda: loader, work.step, GROWTH_BATCHES, "recsys xferscope (growth)")
        if e in (GROWTH_SETTLED, GROWTH_EPOCHS):
            held[f"after_epoch_{e}"] = pinned_held(loader.stats.pinned_bytes)
    early = sum(held[f"after_epoch_{GROWTH_SETTLED}"].values())
    late = sum(held[f"after_epoch_{GROWTH_EPOCHS}"].values())
    growth = late - early
    figures["pinned_growth"] = {
        "workload": "recsys", "variant": "xferscope", "batches_per_epoch": GROWTH_BATCHES,
        "epochs": GROWTH_EPOCHS, "held": held, "sources": sorted(held[f"after_epoch_{e}"]),
        "torch_has_host_memory_stats": hasattr(torch.cuda, "host_memory_stats"),
    }  # fmt: skip
    figures["loader_pinned_growth_20_epochs_bytes"] = growth
    print(f"pinned held after epoch {GROWTH_SETTLED}: {early} B, after {GROWTH_EPOCHS}: {late} B",
          flush=True)  # fmt: skip
    comparisons.append(
        comparison(
            "loader_pinned_held_flat",
            1.0 if late <= early else early / late,
            1.0,
            f"pinned memory held after epoch {GROWTH_SETTLED} over after epoch {GROWTH_EPOCHS}, "
            f"capped at 1 (growth {growth} B: loader_pinned_growth_20_epochs_bytes, goal 0; "
            f"recsys, xferscope variant)",
            "ratio",
            True,
            1.0,
        )
    )


def summary(figures: dict[str, Any], comparisons: list[dict[str, Any]]) -> None:
    """The comparisons, from the workloads whose rounds finished, put first."""
    found, made = [], []
    for name, row in figures.get("workloads", {}).items():
        med = {v: f["steps_per_s"] for v, f in row["variants"].items() if "steps_per_s" in f}
        ours = [v for v in OURS if v in med]
        peers = [v for v in PEERS if v in med]
        if not ours or not peers:
            continue
        best = max(ours, key=lambda v: med[v])
        peer = max(peers, key=lambda v: med[v])
        found.append((med[best] / med[peer], name, best, peer, med))
        if name == "resnet18" and "resident" in med:
            made.append(
                comparison(
                    "loader_resnet18_vs_resident",
                    med[best],
                    med["resident"],
                    f"resnet18: the same batches resident on the GPU, the step alone (steps/s, "
                    f"median of rounds; ours: {best})",
                    "steps/s",
                    True,
                    0.9,
                )
            )
    if found:
        _, name, best, peer, med = min(found)
        made.insert(
            0,
            comparison(
                "loader_vs_best_peer_worst",
                med[best],
                med[peer],
                f"{name}: {peer}, the best peer (steps/s, median of rounds; ours: {best}); the "
                f"worst of {len(found)} workloads",
                "steps/s",
                True,
                1.0,
            ),
        )
    comparisons[:0] = made


def accelerate_mover() -> tuple[Callable[..., Any] | None, dict[str, Any]]:
    """accelerate's send_to_device where accelerate imports, and what the record says of it."""
    try:
        import accelerate
        from accelerate.utils import send_to_device
    except (ImportError, RuntimeError, AttributeError) as exc:  # not installed, or broken
        return None, {"run": False, "reason": f"{type(exc).__name__}: {exc}"}
    return send_to_device, {"run": True, "version": str(accelerate.__version__)}


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--rounds", type=rounds_count, default=3)
    parser.add_argument("--epochs-per-round", type=int, default=2)
    parser.add_argument("--batches", type=int, default=40, help="batches an epoch")
    parser.add_argument("--workers", type=int, default=4, help="the DataLoader's num_workers")
    parser.add_argument("--ahead", type=int, default=2, help="DeviceLoader's ahead")
    kept = "workers kept between epochs (default: started each epoch)"
    parser.add_argument("--persistent-workers", action="store_true", help=kept)
    args = parser.parse_args()
    workloads = [w for w in args.workloads.split(",") if w]
    if not workloads or set(workloads) - set(WORKLOADS) or len(set(workloads)) < len(workloads):
        parser.error(f"--workloads: '{args.workloads}' is not a list of {', '.join(WORKLOADS)}")
    if not 1 <= args.epochs_per_round <= 20:
        parser.error(f"--epochs-per-round: {args.epochs_per_round} is not from 1 to 20")
    if not 2 <= args.batches <= MOST_BATCHES:
        parser.error(f"--batches: {args.batches} is not from 2 to {MOST_BATCHES}")
    if not 0 <= args.workers <= 256:
        parser.error(f"--workers: {args.workers} is not from 0 (load in this process) to 256")
    if not 1 <= args.ahead <= MOST_AHEAD:
        parser.error(f"--ahead: {args.ahead} is not from 1 to {MOST_AHEAD}")
    try:
        import torchvision

        vision: str | None = str(torchvision.__version__)
    except ImportError as exc:
        vision = None
        if {"resnet18", "jpeg"} & set(workloads):
            parser.error(f"--workloads: resnet18 and jpeg need torchvision ({exc})")
    try:
        meta = collect(NativeEngine(), [0])
    except XferscopeError as exc:
        raise SystemExit(f"loader_bench: {exc}") from None
    torch.backends.cudnn.benchmark = False  # the same kernels every epoch, no autotuning
    send, accelerate = accelerate_mover()
    figures: dict[str, Any] = {
        "workloads_run": workloads, "rounds": args.rounds,
        "epochs_per_round": args.epochs_per_round, "batches_per_epoch": args.batches,
        "num_workers": args.workers, "persistent_workers": args.persistent_workers,
        "ahead": args.ahead, "cpu_count": os.cpu_count(),
        "affinity_cores": len(os.sched_getaffinity(0)), "torch": torch.__version__,
        "torchvision": vision, "accelerate": accelerate, "workloads": {},
    }  # fmt: skip
    comparisons: list[dict[str, Any]] = []

    def run() -> None:
        for name in workloads:
            if name == "resnet18":
                breakdown_part(figures)
            workload_part(name, args, figures, send)
        growth_part(args, figures, comparisons)

    base.measured(run, figures)
    summary(figures, comparisons)
    base.recorded(args, meta, comparisons, figures, "loader")


if __name__ == "__main__":
    main()
