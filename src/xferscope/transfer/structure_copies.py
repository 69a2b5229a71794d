"""The tensors and arrays of a structure moved to a GPU or to the host, the same structure given
back (under `xferscope.to_device` and `to_host`): each leaf's destination made by its
framework's adapter (frameworks/), the current streams finished, and the pairs handed to a copy
(copy_many, or PyTorch's own copy for a process's first calls: first.py). Light: it loads
neither NumPy nor the native engine."""

from __future__ import annotations

import contextlib
import re
import sys
from collections import defaultdict
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any, Protocol

from .frameworks import cupy as cupy_leaves
from .frameworks import torch as torch_leaves
from .structures import flatten

# a copy of (destination, source) pairs, all on GPU `gpu`, that returns once they have landed
Copy = Callable[[list[Any], int], Any]


class Queue(Protocol):
    """A copy that returns once its pairs are queued (copy.queue_pairs), and its finish: a
    structure's destinations are then made run by run while the copy engine moves the runs
    before (where the framework's adapter makes them so: upload_runs, download_runs)."""

    def __call__(self, pairs: list[Any], gpu: int) -> Any: ...
    def finish(self, gpu: int) -> None: ...


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


# From this many bytes of pinned host memory, a structure's copy is queued run by run (Queue)
# as its destinations are made: below it the runs' calls cost more than making them while the
# copy engine works saves.
QUEUE_FROM = 64 << 20


def up(obj: Any, index: int, copy: Copy, queue: Queue | None = None, ordered: bool = False) -> Any:
    """`obj` with every leaf on GPU `index`, the pairs made by `copy` at once (or by `queue`,
    run by run, where the leaves are large and pinned). `ordered`: `copy` and `queue` queue on
    the caller's stream, which orders the copies after its work: nothing synchronized."""
    flat = flatten(obj, _is_leaf)
    kinds = [_framework(x) for x in flat.leaves]
    if not ordered:
        _synchronize(flat.leaves, kinds, {index})
    made: list[Any] = [None] * len(kinds)
    pairs = []
    with _finished(queue) as queued:
        for f, at in _by_framework(kinds):
            leaves = [flat.leaves[i] for i in at]
            if queue is not None and _queued(f, leaves, True):
                for places, destinations, sources in f.upload_runs(leaves, index, True):
                    run = _place(made, [at[p] for p in places], destinations, sources)
                    if run:
                        queue(run, index)
                        queued.add(index)
                continue
            destinations, sources = f.upload_many(leaves, index)
            pairs += _place(made, at, destinations, sources)
        if pairs:
            copy(pairs, index)
    return flat.rebuild(made)


def down(
    obj: Any, non_blocking: bool, copy: Copy, queue: Queue | None = None, ordered: bool = False
) -> Any:
    """`obj` with every leaf in host memory (pinned where `non_blocking`), by one `copy` per
    GPU the leaves are on (or by `queue`, run by run, into pinned memory). `ordered`: as up()
    takes it; the host tensors are then read once the stream has run the copies."""
    flat = flatten(obj, _is_leaf)
    kinds = [_framework(x) for x in flat.leaves]
    if not ordered:
        _synchronize(flat.leaves, kinds, set())
    made: list[Any] = [None] * len(kinds)
    by_gpu: dict[int, list[tuple[Any, Any]]] = defaultdict(list)
    with _finished(queue) as queued:
        for f, at in _by_framework(kinds):
            leaves = [flat.leaves[i] for i in at]
            if queue is not None and non_blocking and _queued(f, leaves, False):
                for places, destinations, sources in f.download_runs(leaves, non_blocking, True):
                    run = _place(made, [at[p] for p in places], destinations, sources)
                    for gpu, pairs in sorted(_by_gpu(f, run).items()):
                        queue(pairs, gpu)
                        queued.add(gpu)
                continue
            destinations, sources = f.download_many(leaves, non_blocking)
            for gpu, pairs in _by_gpu(f, _place(made, at, destinations, sources)).items():
                by_gpu[gpu] += pairs
        for gpu, pairs in sorted(by_gpu.items()):
            copy(pairs, gpu)
    return flat.rebuild(made)


@contextlib.contextmanager
def _finished(queue: Queue | None) -> Iterator[set[int]]:
    """The GPUs a move queued copies on (the caller adds them); on the way out, whatever
    happened, each one's queued copies waited for, so no copy still runs into or out of memory
    the caller may free. A failure already on its way is the one raised."""
    queued: set[int] = set()
    try:
        yield queued
    except BaseException:
        for gpu in sorted(queued):
            with contextlib.suppress(Exception):
                assert queue is not None
                queue.finish(gpu)
        raise
    for gpu in sorted(queued):
        assert queue is not None
        queue.finish(gpu)


def _place(
    made: list[Any], at: list[int], destinations: list[Any], sources: list[Any]
) -> list[tuple[Any, Any]]:
    """made[at[k]] = destinations[k]; the (destination, source) pairs with a source."""
    pairs = []
    for i, d, s in zip(at, destinations, sources, strict=True):
        made[i] = d
        if s is not None:
            pairs.append((d, s))
    return pairs


def _by_gpu(f: Any, pairs: list[tuple[Any, Any]]) -> dict[int, list[tuple[Any, Any]]]:
    out: dict[int, list[tuple[Any, Any]]] = defaultdict(list)
    for d, s in pairs:
        out[f.gpu_of(s)].append((d, s))
    return out


def _queued(f: Any, leaves: list[Any], upload: bool) -> bool:
    """Whether `f`'s leaves go run by run: its adapter makes runs, they are QUEUE_FROM bytes or
    more, and the host side is pinned (its first leaf's, for uploads; downloads into pinned)."""
    if not hasattr(f, "upload_runs") or f.nbytes(leaves) < QUEUE_FROM:
        return False
    return not upload or f.pinned(leaves[0])


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
