"""Whole structures of tensors and arrays moved in one call, with one copy_many under it:

    import torch, xferscope

    state = torch.load("model.pt", map_location="cpu")       # a state dict on the host
    on_gpu = xferscope.to_device(state, device="cuda:0")      # the same dict, on GPU 0
    batch = xferscope.to_host({"logits": logits, "ids": ids})

A structure is a dict (OrderedDict, defaultdict, ...), list, tuple, namedtuple or dataclass,
nested (structures.py); its leaves are PyTorch tensors, and CuPy arrays with NumPy arrays
beside them where the program imported CuPy; anything else stays as it is. The result has the
same structure, each leaf a new tensor or array on the other side (one already there is itself,
as `.to()` returns it) without autograd history. One object met twice is moved once.

Streams as PyTorch's copies keep them: the current stream of each GPU involved is synchronized
first, and the call returns once every byte has arrived. `non_blocking=True` makes host
destinations pinned, as `.to("cpu", non_blocking=True)` does; the call still returns with the
bytes arrived. `xferscope.warmup()` at start-up makes what the first copy would make."""

from __future__ import annotations

import re
import sys
from collections import defaultdict
from types import ModuleType
from typing import Any

from ..core.engine import Engine
from .copy import _copies, close_copiers, copy_many, decide, held_pinned_bytes
from .engine import default_engine
from .frameworks import cupy as cupy_leaves
from .frameworks import torch as torch_leaves
from .policy import Shape
from .staged import close_shared, shared_pinned_bytes
from .structures import flatten

FRAMEWORKS: tuple[ModuleType, ...] = (torch_leaves, cupy_leaves)
MOST_GPU = 1 << 31  # an index past a C int names no GPU
DEVICE_WORDS = "a GPU index, 'cuda', 'cuda:N' or torch.device('cuda:N')"


def _framework(x: Any) -> ModuleType | None:
    return next((f for f in FRAMEWORKS if f.is_leaf(x)), None)


def _is_leaf(x: Any) -> bool:
    return _framework(x) is not None


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


def release() -> None:
    """Gives back what the copy API keeps between calls: each GPU's copy_many copier (its pinned
    staging and its GPU buffer, grown to the largest batch so far) and the staged copy's pinned
    chunks and threads. The next copy makes them again (tens of milliseconds)."""
    close_copiers()
    close_shared()


def pinned_bytes() -> int:
    """Pinned host memory the copy API holds between calls (what `release()` gives back): it
    grows to the largest packed batch and the staged copy's chunks, then stays."""
    return held_pinned_bytes() + shared_pinned_bytes()


def warmup(device: Any = None, *, engine: Engine | None = None) -> None:
    """Makes now what the first copy in a process would make: the engine, GPU `device`'s
    copy_many copier with the staged copy's threads and pinned chunks, and what copy_many
    decides by (the GPU's facts, its stored calibration). Called at start-up, it lets a
    program's first copy (a checkpoint's load, one batch) cost what later ones do."""
    index = gpu_index(device)
    engine = engine if engine is not None else default_engine()
    copies = _copies(engine)
    decide(Shape("h2d", "pinned", 1, 1 << 20, index), engine=engine)
    copies.copier(index).prepare_staged()


def to_device(
    obj: Any, device: Any = None, non_blocking: bool = False, *, engine: Engine | None = None
) -> Any:
    """`obj` with every tensor and array on GPU `device` (DEVICE_WORDS; None: the current
    one), the same structure, moved by one copy_many."""
    index = gpu_index(device)
    flat = flatten(obj, _is_leaf)
    kinds = [_framework(x) for x in flat.leaves]
    _synchronize(flat.leaves, kinds, {index})
    made, pairs = [], []
    for leaf, f in zip(flat.leaves, kinds, strict=True):
        assert f is not None
        destination, source = f.upload(leaf, index)
        made.append(destination)
        if source is not None:
            pairs.append((destination, source))
    if pairs:
        copy_many(pairs, device=index, engine=engine)
    return flat.rebuild(made)


def to_host(obj: Any, non_blocking: bool = False, *, engine: Engine | None = None) -> Any:
    """`obj` with every tensor and array in host memory (pinned where `non_blocking`), the same
    structure, moved by one copy_many per GPU the leaves are on."""
    flat = flatten(obj, _is_leaf)
    kinds = [_framework(x) for x in flat.leaves]
    _synchronize(flat.leaves, kinds, set())
    made, by_gpu = [], defaultdict(list)
    for leaf, f in zip(flat.leaves, kinds, strict=True):
        assert f is not None
        destination, source = f.download(leaf, non_blocking)
        made.append(destination)
        if source is not None:
            by_gpu[f.gpu_of(source)].append((destination, source))
    for gpu, pairs in sorted(by_gpu.items()):
        copy_many(pairs, device=gpu, engine=engine)
    return flat.rebuild(made)


def _synchronize(leaves: tuple[Any, ...], kinds: list[Any], gpus: set[int]) -> None:
    """Each framework's current stream on the GPUs its leaves are on (and `gpus`), finished."""
    for f in FRAMEWORKS:
        mine = [x for x, k in zip(leaves, kinds, strict=True) if k is f]
        if mine:
            f.synchronize({g for g in map(f.gpu_of, mine) if g is not None} | gpus)
