"""PyTorch's tensors in `xferscope.to_device` and `to_host`: each leaf's destination made as
PyTorch makes it (`torch.empty` on the GPU, on the host pinned when `non_blocking`, as
`.to("cpu", non_blocking=True)` pins), and the streams made safe as PyTorch's own copies are:
the current stream of each GPU involved is synchronized first, so that no kernel still writes a
source or reads memory the caching allocator hands to a destination, and copy_many returns once
every byte has arrived (so no `record_stream` is needed: nothing runs on its stream after).
PyTorch is never imported here: a leaf is a tensor only where the program imported torch."""

from __future__ import annotations

import bisect
import sys
from collections.abc import Callable, Iterator
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


# Where a structure's copies are queued as its destinations are made (structure_copies.py),
# the first run of new tensors is this many and each later run twice the one before: the copy
# engine starts after a few are made, and later runs are made while it moves the earlier ones.
FIRST_RUN = 8

Runs = Iterator[tuple[range, list[Any], list[Any]]]


def upload_many(ts: list[Any], index: int) -> tuple[list[Any], list[Any]]:
    """(each tensor on GPU `index`, the source to copy into it or None where nothing is to be
    copied): one already there is itself; one on another GPU moves by `.to()`."""
    return _whole(upload_runs(ts, index, False))


def download_many(ts: list[Any], non_blocking: bool) -> tuple[list[Any], list[Any]]:
    """(each tensor on the host, pinned where `non_blocking`, the GPU tensor to copy from or
    None where nothing is to be copied): a host tensor is itself."""
    return _whole(download_runs(ts, non_blocking, False))


def upload_runs(ts: list[Any], index: int, runs: bool) -> Runs:
    """upload_many's answer run by run: (the places in `ts`, their tensors, their sources), in
    growing runs (`runs`, from FIRST_RUN) or one."""
    device = _device(sys.modules["torch"], index)

    def kept(t: Any) -> Any:
        return (t if t.device.index == index else t.to(device)) if t.is_cuda else None

    return _move_runs(ts, kept, device, False, runs)


def download_runs(ts: list[Any], non_blocking: bool, runs: bool) -> Runs:
    """download_many's answer run by run, as upload_runs gives upload_many's."""
    device = _device(sys.modules["torch"], None)
    return _move_runs(ts, lambda t: None if t.is_cuda else t, device, non_blocking, runs)


def _whole(runs: Runs) -> tuple[list[Any], list[Any]]:
    made: list[Any] = []
    sources: list[Any] = []
    for _, m, s in runs:
        made += m
        sources += s
    return made, sources


def _move_runs(
    ts: list[Any], kept: Callable[[Any], Any], device: Any, pinned: bool, runs: bool
) -> Runs:
    """(places, made, sources) for upload_runs and download_runs: each tensor that `kept` keeps
    (on the side already, or moved there), else a new one on `device` with its source to copy
    (None for an empty one). Every allocation is made before the first run is given."""
    n = len(ts)
    made: list[Any] = [None] * n
    sources: list[Any] = [None] * n
    fresh: list[int] = []
    for i, t in enumerate(ts):
        made[i] = kept(t)
        if made[i] is None:
            fresh.append(i)
            if t.numel():
                sources[i] = t if t.is_contiguous() else t.contiguous()
    torch = sys.modules["torch"]
    groups = _allocate(torch, ts, fresh, device, pinned)
    size = FIRST_RUN if runs else max(n, 1)
    lo = 0
    while lo < n:
        hi = min(n, lo + size)
        for group in groups:
            group.make(lo, hi, made)
        yield range(lo, hi), made[lo:hi], sources[lo:hi]
        lo, size = hi, 2 * size


class _Group:
    """New tensors of one dtype, each like its template: views of one allocation at ALIGN-byte
    boundaries (`flat`), or each its own torch.empty (flat None: fewer than SHARE_FROM)."""

    def __init__(self, torch: Any, ts: list[Any], at: list[int], device: Any, pinned: bool):
        self.torch, self.ts, self.at, self.device, self.pinned = torch, ts, at, device, pinned
        self.flat: Any = None
        if len(at) < SHARE_FROM:
            return
        dtype = ts[at[0]].dtype
        step = max(1, ALIGN // dtype.itemsize)
        self.starts: list[int] = []  # each tensor's first element in flat
        self.pads: list[int] = []  # elements of padding after each
        total = 0
        for i in at:
            n = ts[i].numel()
            self.starts.append(total)
            self.pads.append(-n % step)
            total += n + self.pads[-1]
        self.flat = torch.empty(total, dtype=dtype, device=device, pin_memory=pinned)

    def make(self, lo: int, hi: int, made: list[Any]) -> None:
        """made[i] for this group's places i in [lo, hi)."""
        first, last = bisect.bisect_left(self.at, lo), bisect.bisect_left(self.at, hi)
        if first == last:
            return
        ts, at, torch = self.ts, self.at, self.torch
        if self.flat is None:
            for i in at[first:last]:
                made[i] = torch.empty(
                    ts[i].shape, dtype=ts[i].dtype, device=self.device, pin_memory=self.pinned
                )
            return
        shapes: list[Any] = []  # each tensor's template, then the padding after it
        ours: list[int] = []  # where each tensor's view is among the views
        for k in range(first, last):
            ours.append(len(shapes))
            shapes.append(ts[at[k]])
            if self.pads[k]:  # a view each too: only where one is needed (most weights need none)
                shapes.append(_pad(torch, self.flat.dtype, self.pads[k]))
        begin = self.starts[first]
        end = self.starts[last - 1] + ts[at[last - 1]].numel() + self.pads[last - 1]
        views = torch._utils._unflatten_dense_tensors(
            self.flat.narrow(0, begin, end - begin), shapes
        )
        for k, place in zip(range(first, last), ours, strict=True):
            made[at[k]] = views[place]


def _allocate(torch: Any, ts: list[Any], at: list[int], device: Any, pinned: bool) -> list[_Group]:
    """The new tensors for places `at`, by dtype: where SHARE_FROM or more share one, one
    allocation for them all; made now, their tensors made by each group's make()."""
    by_dtype: dict[Any, list[int]] = {}
    for i in at:
        by_dtype.setdefault(ts[i].dtype, []).append(i)
    return [_Group(torch, ts, group, device, pinned) for group in by_dtype.values()]


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


def nbytes(ts: list[Any]) -> int:
    return sum(int(t.nbytes) for t in ts)


def pinned(t: Any) -> bool:
    """Whether host tensor `t` is in pinned memory (a driver call)."""
    return not t.is_cuda and bool(t.is_pinned())


def gpu_of(t: Any) -> int | None:
    return int(t.device.index) if t.is_cuda else None
