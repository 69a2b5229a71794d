"""The tensors and arrays of a structure moved to a GPU or to the host, the same structure given
back (under `xferscope.to_device` and `to_host`): each leaf's destination made by its
framework's adapter (frameworks/), the current streams finished, and the pairs handed to a copy
(copy_many, or PyTorch's own copy for a process's first calls: first.py). Light: it loads
neither NumPy nor the native engine."""

from __future__ import annotations

import re
import sys
from collections import defaultdict
from collections.abc import Callable
from types import ModuleType
from typing import Any

from .frameworks import cupy as cupy_leaves
from .frameworks import torch as torch_leaves
from .structures import flatten

# a copy of (destination, source) pairs, all on GPU `gpu`, that returns once they have landed
Copy = Callable[[list[Any], int], Any]

FRAMEWORKS: tuple[ModuleType, ...] = (torch_leaves, cupy_leaves)
MOST_GPU = 1 << 31  # an index past a C int names no GPU
DEVICE_WORDS = "a GPU index, 'cuda', 'cuda:N' or torch.device('cuda:N')"


def _framework(x: Any) -> ModuleType | None:
    for f in FRAMEWORKS:
        if f.is_leaf(x):
            return f
    return None


def _is_leaf(x: Any) -> bool:
    for f in FRAMEWORKS:  # noqa: SIM110 - a loop, not a generator made for every object
        if f.is_leaf(x):
            return True
    return False


def gpu_index(device: Any) -> int:
    """The GPU `device` names (DEVICE_WORDS); None: the current one (PyTorch's, else CuPy's,
    else 0). ValueError naming the option otherwise."""
    if device is None:
        if "torch" in sys.modules:
            return torch_leaves.current_device()
        if "cupy" in sys.modules:
            return int(sys.modules["cupy"].cuda.Device().id)
        return 0
    if isinstance(device, int) and not isinstance(device, bool) and 0 <= device < MOST_GPU:
        return device
    kind, index = getattr(device, "type", None), getattr(device, "index", None)
    if isinstance(device, str):
        found = re.fullmatch(r"cuda(?::([0-9]{1,9}))?", device.strip())
        kind, index = ("cuda", found[1] and int(found[1])) if found else (None, None)
    if kind == "cuda" and (index is None or 0 <= int(index) < MOST_GPU):
        return gpu_index(None) if index is None else int(index)
    raise ValueError(f"device: {device!r} is not a CUDA device ({DEVICE_WORDS})")


def up(obj: Any, index: int, copy: Copy) -> Any:
    """`obj` with every leaf on GPU `index`, the pairs made by `copy` at once."""
    flat = flatten(obj, _is_leaf)
    kinds = [_framework(x) for x in flat.leaves]
    _synchronize(flat.leaves, kinds, {index})
    made: list[Any] = [None] * len(kinds)
    pairs = []
    for f, at in _by_framework(kinds):
        destinations, sources = f.upload_many([flat.leaves[i] for i in at], index)
        for i, d, s in zip(at, destinations, sources, strict=True):
            made[i] = d
            if s is not None:
                pairs.append((d, s))
    if pairs:
        copy(pairs, index)
    return flat.rebuild(made)


def down(obj: Any, non_blocking: bool, copy: Copy) -> Any:
    """`obj` with every leaf in host memory (pinned where `non_blocking`), by one `copy` per
    GPU the leaves are on."""
    flat = flatten(obj, _is_leaf)
    kinds = [_framework(x) for x in flat.leaves]
    _synchronize(flat.leaves, kinds, set())
    made: list[Any] = [None] * len(kinds)
    by_gpu = defaultdict(list)
    for f, at in _by_framework(kinds):
        destinations, sources = f.download_many([flat.leaves[i] for i in at], non_blocking)
        for i, d, s in zip(at, destinations, sources, strict=True):
            made[i] = d
            if s is not None:
                by_gpu[f.gpu_of(s)].append((d, s))
    for gpu, pairs in sorted(by_gpu.items()):
        copy(pairs, gpu)
    return flat.rebuild(made)


def _by_framework(kinds: list[Any]) -> list[tuple[Any, list[int]]]:
    """Each framework with its leaves' places."""
    out: dict[int, tuple[Any, list[int]]] = {}
    for i, f in enumerate(kinds):
        out.setdefault(id(f), (f, []))[1].append(i)
    return list(out.values())


def _synchronize(leaves: tuple[Any, ...], kinds: list[Any], gpus: set[int]) -> None:
    """Each framework's current stream on the GPUs its leaves are on (and `gpus`), finished."""
    for f in FRAMEWORKS:
        mine = [x for x, k in zip(leaves, kinds, strict=True) if k is f]
        if mine:
            f.synchronize({g for g in map(f.gpu_of, mine) if g is not None} | gpus)
