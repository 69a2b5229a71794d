"""PyTorch's tensors in `xferscope.to_device` and `to_host`: each leaf's destination made as
PyTorch makes it (`torch.empty` on the GPU, on the host pinned when `non_blocking`, as
`.to("cpu", non_blocking=True)` pins), and the streams made safe as PyTorch's own copies are:
the current stream of each GPU involved is synchronized first, so that no kernel still writes a
source or reads memory the caching allocator hands to a destination, and copy_many returns once
every byte has arrived (so no `record_stream` is needed: nothing runs on its stream after).
PyTorch is never imported here: a leaf is a tensor only where the program imported torch."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any


def is_leaf(x: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def current_device() -> int:
    return int(sys.modules["torch"].cuda.current_device())


def synchronize(devices: set[int]) -> None:
    """Each GPU's current stream, finished."""
    torch = sys.modules["torch"]
    for d in sorted(devices):
        torch.cuda.current_stream(d).synchronize()


# From this many tensors of one dtype, their new tensors are views of one allocation, each at a
# 256-byte boundary (as tensordict's consolidate() makes them): on an H100 torch.empty cost 8 us
# a tensor, 152 ms of to_device's 353 for an MoE-like state dict of 18,867 tensors.
SHARE_FROM = 64
ALIGN = 256


def upload_many(ts: list[Any], index: int) -> tuple[list[Any], list[Any]]:
    """(each tensor on GPU `index`, the source to copy into it or None where nothing is to be
    copied): one already there is itself; one on another GPU moves by `.to()`."""
    device = _device(sys.modules["torch"], index)

    def kept(t: Any) -> Any:
        return (t if t.device.index == index else t.to(device)) if t.is_cuda else None

    return _move_many(ts, kept, device, False)


def download_many(ts: list[Any], non_blocking: bool) -> tuple[list[Any], list[Any]]:
    """(each tensor on the host, pinned where `non_blocking`, the GPU tensor to copy from or
    None where nothing is to be copied): a host tensor is itself."""
    device = _device(sys.modules["torch"], None)
    return _move_many(ts, lambda t: None if t.is_cuda else t, device, non_blocking)


def _move_many(
    ts: list[Any], kept: Callable[[Any], Any], device: Any, pinned: bool
) -> tuple[list[Any], list[Any]]:
    """(made, sources) for upload_many and download_many: each tensor that `kept` keeps (on
    the side already, or moved there), else a new one on `device` with its source to copy
    (None for an empty one)."""
    made: list[Any] = [None] * len(ts)
    sources: list[Any] = [None] * len(ts)
    fresh: list[int] = []
    for i, t in enumerate(ts):
        made[i] = kept(t)
        if made[i] is None:
            fresh.append(i)
            if t.numel():
                sources[i] = t if t.is_contiguous() else t.contiguous()
    _make(sys.modules["torch"], ts, fresh, made, device, pinned)
    return made, sources


def _make(torch: Any, ts: list[Any], at: list[int], made: list[Any], device: Any,
          pinned: bool) -> None:  # fmt: skip
    """made[i], for each i in `at`: an empty tensor like ts[i] on `device` (pinned: in pinned
    host memory); where SHARE_FROM or more share a dtype, views of one allocation."""
    by_dtype: dict[Any, list[int]] = {}
    for i in at:
        by_dtype.setdefault(ts[i].dtype, []).append(i)
    for dtype, group in by_dtype.items():
        if len(group) < SHARE_FROM:
            for i in group:
                made[i] = torch.empty(ts[i].shape, dtype=dtype, device=device, pin_memory=pinned)
            continue
        step = max(1, ALIGN // dtype.itemsize)
        shapes: list[Any] = []  # each tensor's template, then the padding after it
        total = 0
        ours: list[int] = []  # where each tensor's view is among the views
        for i in group:
            n = ts[i].numel()
            pad = -n % step
            ours.append(len(shapes))
            shapes.append(ts[i])
            if pad:  # a view each too: only where one is needed (most weights need none)
                shapes.append(_pad(torch, dtype, pad))
            total += n + pad
        flat = torch.empty(total, dtype=dtype, device=device, pin_memory=pinned)
        views = torch._utils._unflatten_dense_tensors(flat, shapes)
        for i, place in zip(group, ours, strict=True):
            made[i] = views[place]


_pads: dict[tuple[Any, int], Any] = {}  # a host tensor of n elements: padding's template


def _pad(torch: Any, dtype: Any, n: int) -> Any:
    pad = _pads.get((dtype, n))
    if pad is None:
        pad = _pads[(dtype, n)] = torch.empty(n, dtype=dtype)
    return pad


_devices: dict[int | None, Any] = {}  # torch.device by GPU (None: the CPU), made once


def _device(torch: Any, index: int | None) -> Any:
    """torch.device("cuda", index), or the CPU's for None: made once, not parsed per leaf."""
    device = _devices.get(index)
    if device is None:
        device = torch.device("cpu") if index is None else torch.device("cuda", index)
        _devices[index] = device
    return device


def gpu_of(t: Any) -> int | None:
    return int(t.device.index) if t.is_cuda else None
