"""Copy API state-dict benchmark (issue 49): whole state dicts moved to the GPU and back by
`xferscope.to_device` / `to_host` against PyTorch's ways and tensordict's, from pinned and from
pageable memory, interleaved in one process, every method's result verified once:

  to_device_statedict_pageable_vs_loop   a 24-layer fp16 transformer's state dict (292 tensors,
                                         about 0.7 GB) from pageable memory: PyTorch's loop of
                                         `.to(device, non_blocking=True)` + synchronize against
                                         to_device (goal >= 3)
  to_device_moe_pinned_vs_loop           an MoE-like state dict of 18,867 tensors (Qwen3-30B-A3B's
                                         names and count, each expert's dimensions divided by 8:
                                         about 0.9 GB) from pinned memory (goal >= 1.0)

Beside them, per workload, memory and direction: `torch._foreach_copy_` into tensors made in
the call, and tensordict's `TensorDict(sd).consolidate()` then `.to(device)` (where tensordict
is installed; from PyPI, carried to the GPU machine as a wheel). Joins the copyapi record with
--into. Writes benchmarks/results/copyapi-<gpu>-<date>.json.

    python3 benchmarks/copyapi_statedict.py --commit $(git rev-parse HEAD) [--trials 7]
        [--workloads transformer,moe] [--into FILE]
"""

from __future__ import annotations

import statistics
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import torch

import copyapi_bench as base
from foundation import bench_parser, comparison
from xferscope import to_device, to_host
from xferscope.core.engine import NativeEngine
from xferscope.core.machine import collect

WORKLOADS = ("transformer", "moe")


def transformer() -> OrderedDict:
    """24 layers of width 1024 (fp16): embeddings, 12 tensors a layer, a final norm: 292."""
    d, vocab, shapes = 1024, 50304, OrderedDict()
    shapes["embed.weight"] = (vocab, d)
    shapes["pos.weight"] = (2048, d)
    for i in range(24):
        p = f"layers.{i}."
        for n in ("ln1", "ln2"):
            shapes[p + n + ".weight"], shapes[p + n + ".bias"] = (d,), (d,)
        shapes[p + "attn.qkv.weight"], shapes[p + "attn.qkv.bias"] = (3 * d, d), (3 * d,)
        shapes[p + "attn.out.weight"], shapes[p + "attn.out.bias"] = (d, d), (d,)
        shapes[p + "mlp.up.weight"], shapes[p + "mlp.up.bias"] = (4 * d, d), (4 * d,)
        shapes[p + "mlp.down.weight"], shapes[p + "mlp.down.bias"] = (d, 4 * d), (d,)
    shapes["norm.weight"], shapes["norm.bias"] = (d,), (d,)
    return _made(shapes, torch.float16)


def moe() -> OrderedDict:
    """Qwen3-30B-A3B's tensors (48 layers, 128 experts of gate, up and down each, attention
    and norms): 18,867, its dimensions divided by 8 (hidden 256, expert 96, bf16)."""
    h, e, heads, kv, hd, shapes = 256, 96, 32, 4, 16, OrderedDict()
    shapes["model.embed_tokens.weight"] = (151936 // 8, h)
    for i in range(48):
        p = f"model.layers.{i}."
        shapes[p + "input_layernorm.weight"] = (h,)
        shapes[p + "post_attention_layernorm.weight"] = (h,)
        shapes[p + "self_attn.q_proj.weight"] = (heads * hd, h)
        shapes[p + "self_attn.k_proj.weight"] = (kv * hd, h)
        shapes[p + "self_attn.v_proj.weight"] = (kv * hd, h)
        shapes[p + "self_attn.o_proj.weight"] = (h, heads * hd)
        shapes[p + "self_attn.q_norm.weight"] = (hd,)
        shapes[p + "self_attn.k_norm.weight"] = (hd,)
        shapes[p + "mlp.gate.weight"] = (128, h)
        for x in range(128):
            q = f"{p}mlp.experts.{x}."
            shapes[q + "gate_proj.weight"], shapes[q + "up_proj.weight"] = (e, h), (e, h)
            shapes[q + "down_proj.weight"] = (h, e)
    shapes["model.norm.weight"] = (h,)
    shapes["lm_head.weight"] = (151936 // 8, h)
    return _made(shapes, torch.bfloat16)


def _made(shapes: OrderedDict, dtype: torch.dtype) -> OrderedDict:
    g = torch.Generator().manual_seed(len(shapes))
    return OrderedDict((k, torch.randn(s, generator=g).to(dtype)) for k, s in shapes.items())


def _equal(a: dict, b: dict) -> None:
    for k, v in a.items():
        if not torch.equal(v.cpu(), b[k].cpu()):
            raise base.Mismatch(f"{k} differs from its source after the copy")


def torch_loop(sd: OrderedDict, where: str) -> Callable[[], Any]:
    """PyTorch's loop: each tensor `.to(where, non_blocking=True)`, then the stream waited for."""
    stream = torch.cuda.current_stream()

    def loop() -> Any:
        out = OrderedDict((k, v.to(where, non_blocking=True)) for k, v in sd.items())
        stream.synchronize()
        return out

    return loop


def methods_up(sd: OrderedDict) -> dict[str, Callable[[], Any]]:
    """Each way to move `sd` to GPU 0, returning the moved dict (synchronized)."""
    stream = torch.cuda.current_stream()

    def foreach() -> Any:
        out = [torch.empty_like(v, device="cuda") for v in sd.values()]
        torch._foreach_copy_(out, list(sd.values()), non_blocking=True)
        stream.synchronize()
        return OrderedDict(zip(sd.keys(), out, strict=True))

    def ours() -> Any:
        return to_device(sd, "cuda")

    made = {"xferscope": ours, "torch_loop": torch_loop(sd, "cuda"), "torch_foreach": foreach}
    try:
        from tensordict import TensorDict  # type: ignore[import-not-found]
    except ImportError:
        return made

    def consolidated() -> Any:
        out = TensorDict(sd, batch_size=[]).consolidate().to("cuda", non_blocking=True)
        stream.synchronize()
        return out.to_dict()

    made["tensordict"] = consolidated
    return made


def methods_down(on_gpu: OrderedDict) -> dict[str, Callable[[], Any]]:
    """Each way to move `on_gpu` back to the host."""
    stream = torch.cuda.current_stream()

    def ours() -> Any:
        out = to_host(on_gpu, non_blocking=True)  # queued on the stream, as PyTorch's loop
        stream.synchronize()
        return out

    return {"xferscope": ours, "torch_loop": torch_loop(on_gpu, "cpu")}


def workload_part(name: str, trials: int, figures: dict) -> None:
    rows: list[dict] = figures.setdefault("statedict", [])
    sd = {"transformer": transformer, "moe": moe}[name]()
    for memory in ("pinned", "pageable"):
        host = OrderedDict((k, v.pin_memory()) for k, v in sd.items()) if memory == "pinned" else sd
        torch.cuda.synchronize()
        for direction in ("h2d", "d2h"):
            if direction == "h2d":
                methods = methods_up(host)
            else:
                methods = methods_down(OrderedDict((k, v.cuda()) for k, v in sd.items()))
            for run in methods.values():
                _equal(sd, run())  # every method's result, verified once
            seconds = base.interleaved(methods, trials, most=3 * trials)
            med = {k: statistics.median(v) for k, v in seconds.items()}
            rows.append({"workload": name, "memory": memory, "direction": direction,
                         "tensors": len(sd), "bytes": sum(v.nbytes for v in sd.values()),
                         "median_s": med, "vs": {k: round(v / med["xferscope"], 4)
                                                 for k, v in med.items()}})  # fmt: skip
            print("statedict", rows[-1], flush=True)
            torch.cuda.empty_cache()


def summary(figures: dict, comparisons: list[dict]) -> None:
    for name, workload, memory, goal in (
        ("to_device_statedict_pageable_vs_loop", "transformer", "pageable", 3.0),
        ("to_device_moe_pinned_vs_loop", "moe", "pinned", 1.0),
    ):
        for row in figures.get("statedict", []):
            if (row["workload"], row["memory"], row["direction"]) == (workload, memory, "h2d"):
                comparisons[:] = [c for c in comparisons if c["name"] != name]
                comparisons.append(
                    comparison(
                        name,
                        row["vs"]["torch_loop"],
                        1.0,
                        f"PyTorch's loop of .to('cuda', non_blocking=True) (median seconds "
                        f"/ to_device's), {row['tensors']} tensors, {row['bytes']} B",
                        "ratio",
                        True,
                        goal,
                    )
                )


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--trials", type=int, default=7)
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--into", default=None, help="a record whose figures this run joins")
    args = parser.parse_args()
    workloads = [w for w in args.workloads.split(",") if w]
    if not workloads or set(workloads) - set(WORKLOADS):
        parser.error(f"--workloads: '{args.workloads}' is not among {', '.join(WORKLOADS)}")
    if not 2 <= args.trials <= base.MOST_TRIALS:
        parser.error(f"--trials: {args.trials} is not from 2 to {base.MOST_TRIALS}")
    figures, comparisons = base.joined(parser, args.into)
    meta = collect(NativeEngine(), [0])
    base.measured(
        lambda: [workload_part(name, args.trials, figures) for name in workloads], figures
    )
    summary(figures, comparisons)
    base.recorded(args, meta, comparisons, figures)


if __name__ == "__main__":
    main()
