"""PyTorch's tensors in `xferscope.to_device` and `to_host`: each leaf's destination made as
PyTorch makes it (`torch.empty` on the GPU, on the host pinned when `non_blocking`, as
`.to("cpu", non_blocking=True)` pins), and the streams made safe as PyTorch's own copies are:
the current stream of each GPU involved is synchronized first, so that no kernel still writes a
source or reads memory the caching allocator hands to a destination, and copy_many returns once
every byte has arrived (so no `record_stream` is needed: nothing runs on its stream after).
PyTorch is never imported here: a leaf is a tensor only where the program imported torch."""

from __future__ import annotations

import sys
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


def upload(t: Any, index: int) -> tuple[Any, Any | None]:
    """(the tensor on GPU `index`, the source to copy into it, or None where nothing is to be
    copied): a tensor already there is itself; one on another GPU moves by `.to()`."""
    torch = sys.modules["torch"]
    if t.is_cuda:
        return (t if t.device.index == index else t.to(f"cuda:{index}")), None
    made = torch.empty(t.shape, dtype=t.dtype, device=_gpu(torch, index))
    return made, (t if t.is_contiguous() else t.contiguous()) if t.numel() else None


def download(t: Any, non_blocking: bool) -> tuple[Any, Any | None]:
    """(the tensor on the host, the GPU tensor to copy from, or None where nothing is to be
    copied): a host tensor is itself."""
    torch = sys.modules["torch"]
    if not t.is_cuda:
        return t, None
    made = torch.empty(t.shape, dtype=t.dtype, device="cpu", pin_memory=non_blocking)
    return made, (t if t.is_contiguous() else t.contiguous()) if t.numel() else None


_devices: dict[int, Any] = {}  # torch.device("cuda:N") by N: made once, not parsed per leaf


def _gpu(torch: Any, index: int) -> Any:
    device = _devices.get(index)
    if device is None:
        device = _devices[index] = torch.device("cuda", index)
    return device


def gpu_of(t: Any) -> int | None:
    return int(t.device.index) if t.is_cuda else None
