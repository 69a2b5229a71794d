"""Copy API in a training loop (issue 69): xferscope.to_device(batch, non_blocking=True) against
PyTorch's `{k: v.to(device, non_blocking=True)}`, each step moving a pinned batch dict, the two
ways alternated round by round in one process on one GPU:

  to_device_training_loop_vs_torch   milliseconds a step of a ResNet-18 (bf16 autocast, SGD,
                                     channels_last) on 256 x 3 x 160 x 160 images, and of a
                                     GPU-bound step of large bf16 matmuls, with the batch moved
                                     each step: the worse of the two steps' ratio, PyTorch's
                                     median over ours (goal >= 1.0)
  to_device_nested_pinned_vs_loop    a pinned HF-style batch dict with small and large leaves
                                     (input_ids, attention_mask, labels, 32 x 3 x 224 x 224
                                     pixel values), each move followed by a stream synchronize,
                                     against PyTorch's loop of `.to(non_blocking=True)`
                                     (goal >= 1.0)

Every step's batch is random (never zeros), a pool of pinned batches used in turn; each form's
moved batch is checked against its source once per round. Writes
benchmarks/results/copyapi-loop-<gpu>-<date>.json.

    python3 benchmarks/copyapi_loop.py --commit $(git rev-parse HEAD) [--rounds 5] [--steps 60]
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from foundation import bench_parser, comparison, write_record
from xferscope import to_device
from xferscope.core.machine import collect
from xferscope.transfer.engine import default_engine

POOL = 4  # pinned batches used in turn
PEER = "torch .to(non_blocking=True) a leaf"


def _images(generator: torch.Generator) -> dict[str, torch.Tensor]:
    return {
        "images": torch.rand(256, 3, 160, 160, generator=generator).pin_memory(),
        "labels": torch.randint(0, 1000, (256,), generator=generator).pin_memory(),
    }


def _hf(generator: torch.Generator) -> dict[str, torch.Tensor]:
    ids = torch.randint(1, 32000, (32, 512), generator=generator)
    return {
        "input_ids": ids.pin_memory(),
        "attention_mask": (ids % 7 != 0).long().pin_memory(),
        "labels": torch.randint(0, 100, (32,), generator=generator).pin_memory(),
        "pixel_values": torch.rand(32, 3, 224, 224, generator=generator).pin_memory(),
    }


def torch_move(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: v.to("cuda", non_blocking=True) for k, v in batch.items()}


def ours_move(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return to_device(batch, "cuda", non_blocking=True)  # type: ignore[no-any-return]


def _resnet_step() -> Callable[[dict[str, torch.Tensor]], None]:
    import torchvision

    model = (
        torchvision.models.resnet18(num_classes=1000).cuda().to(memory_format=torch.channels_last)
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def step(batch: dict[str, torch.Tensor]) -> None:
        with torch.autocast("cuda", torch.bfloat16):
            logits = model(batch["images"].contiguous(memory_format=torch.channels_last))
        loss = torch.nn.functional.cross_entropy(logits.float(), batch["labels"])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    return step


def _matmul_step() -> Callable[[dict[str, torch.Tensor]], None]:
    weights = [torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16) for _ in range(4)]

    def step(batch: dict[str, torch.Tensor]) -> None:
        x = batch["images"].reshape(256, -1)[:, :8192].to(torch.bfloat16)
        for w in weights * 4:
            x = torch.tanh(x @ w)
        torch.nn.functional.cross_entropy(x.float()[:, :1000], batch["labels"])

    return step


def _step_ms(step: Callable[[dict[str, torch.Tensor]], None],
             move: Callable[[dict[str, torch.Tensor]], dict[str, torch.Tensor]],
             pool: list[dict[str, torch.Tensor]], steps: int) -> float:  # fmt: skip
    """Milliseconds a step, the batch moved by `move` each step, after a few warm-up steps."""
    for i in range(3):
        step(move(pool[i % len(pool)]))
    torch.cuda.synchronize()
    start = time.perf_counter()
    for i in range(steps):
        step(move(pool[i % len(pool)]))
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / steps * 1e3


def _check(move: Callable[[dict[str, torch.Tensor]], dict[str, torch.Tensor]],
           batch: dict[str, torch.Tensor]) -> None:  # fmt: skip
    moved = move(batch)
    torch.cuda.synchronize()
    for k, v in batch.items():
        if not torch.equal(moved[k].cpu(), v):
            raise SystemExit(f"{move.__name__}: {k} arrived wrong")


def _move_us(move: Callable[[dict[str, torch.Tensor]], dict[str, torch.Tensor]],
             pool: list[dict[str, torch.Tensor]], reps: int) -> float:  # fmt: skip
    """Microseconds a move of the batch and a stream synchronize, the median of `reps`."""
    times = []
    for i in range(reps):
        start = time.perf_counter()
        move(pool[i % len(pool)])
        torch.cuda.current_stream().synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=60)
    args = parser.parse_args()
    for option, value in (("--rounds", args.rounds), ("--steps", args.steps)):
        if value < 1:
            parser.error(f"{option}: {value} is not a count of at least 1")
    generator = torch.Generator().manual_seed(0)
    images = [_images(generator) for _ in range(POOL)]
    hf = [_hf(generator) for _ in range(POOL)]
    steps = {"resnet18": _resnet_step(), "matmul": _matmul_step()}
    ms: dict[str, dict[str, list[float]]] = {s: {"torch": [], "ours": []} for s in steps}
    us: dict[str, list[float]] = {"torch": [], "ours": []}
    forms = {"torch": torch_move, "ours": ours_move}
    failed = None
    try:
        for r in range(args.rounds):
            order = list(forms) if r % 2 == 0 else list(reversed(forms))
            for name in order:
                _check(forms[name], images[r % POOL])
                _check(forms[name], hf[r % POOL])
                for s, step in steps.items():
                    ms[s][name].append(_step_ms(step, forms[name], images, args.steps))
                us[name].append(_move_us(forms[name], hf, 50))
            print(f"round {r + 1}: " + ", ".join(
                f"{s} {ms[s]['torch'][-1]:.2f}/{ms[s]['ours'][-1]:.2f} ms" for s in steps
            ) + f", hf dict {us['torch'][-1]:.0f}/{us['ours'][-1]:.0f} us", flush=True)  # fmt: skip
    except KeyboardInterrupt:
        failed = "interrupted"
    comparisons, figures = [], {}
    ratios = []
    for s in steps:
        if ms[s]["ours"]:
            ours_ms, peer = statistics.median(ms[s]["ours"]), statistics.median(ms[s]["torch"])
            name = f"to_device_training_loop_{s}_ms"
            comparisons.append(comparison(name, ours_ms, peer, PEER, "ms", False, 1.0))
            ratios.append(peer / ours_ms)
            figures[f"{s}_ms"] = {k: [round(x, 3) for x in v] for k, v in ms[s].items()}
    if ratios:
        figures["to_device_training_loop_vs_torch"] = round(min(ratios), 4)
    if us["ours"]:
        ours_us, peer_us = statistics.median(us["ours"]), statistics.median(us["torch"])
        name = "to_device_nested_pinned_us"
        comparisons.append(comparison(name, ours_us, peer_us, PEER, "us", False, 1.0))
        figures["to_device_nested_pinned_vs_loop"] = round(peer_us / ours_us, 4)
        figures["nested_us"] = {k: [round(x, 1) for x in v] for k, v in us.items()}
    if failed:
        figures["failed"] = failed
    meta = collect(default_engine(), [0])
    write_record("copyapi-loop", args.commit, meta, 1, comparisons, figures, Path(args.out),
                 rounds=args.rounds, steps=args.steps)  # fmt: skip


if __name__ == "__main__":
    main()
