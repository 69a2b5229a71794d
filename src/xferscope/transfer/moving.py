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
first, and the call returns once every byte has arrived. `non_blocking=True` queues the copies on
the caller's stream (`stream=`, else the GPU's current one) and returns, as `.to(device,
non_blocking=True)` does: they follow the kernels queued there and what is queued next follows
them, the host never waiting; host destinations are pinned, as `.to("cpu", non_blocking=True)`
makes them, and read once the stream has run the copies. The sources are kept until then
(streams.hold). `xferscope.warmup()` at start-up makes what the first copy would make."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..core.engine import Engine
from .choice import Shape
from .copy import (
    close_copiers,
    copies_of,
    copy_many,
    copy_pairs,
    decide,
    held_pinned_bytes,
    queue_pairs,
)
from .copy import finish as finish_queued
from .engine import default_engine
from .streams import as_current, hold, queued_on
from .structure_copies import down, gpu_index, up


def release() -> None:
    """Gives back what the copy API keeps between calls: each GPU's copy_many copier (its pinned
    staging and its GPU buffer, grown to the largest batch so far) and the staged copy's pinned
    chunks and threads. The next copy makes them again (tens of milliseconds)."""
    close_copiers()


def pinned_bytes() -> int:
    """Pinned host memory the copy API holds between calls (what `release()` gives back): it
    grows to the largest packed batch and the staged copy's chunks, then stays."""
    return held_pinned_bytes()


def warmup(device: Any = None, *, engine: Engine | None = None) -> None:
    """Makes now what the first copy in a process would make: the engine, GPU `device`'s
    copy_many copier with the staged copy's threads and pinned chunks, and what copy_many
    decides by (the GPU's facts, its stored calibration). Called at start-up, it lets a
    program's first copy (a checkpoint's load, one batch) cost what later ones do."""
    index = gpu_index(device)
    engine = engine if engine is not None else default_engine()
    copies = copies_of(engine)
    decide(Shape("h2d", "pinned", 1, 1 << 20, index), engine=engine)
    copies.copier(index).prepare_staged()


def to_device(
    obj: Any,
    device: Any = None,
    non_blocking: bool = False,
    *,
    stream: Any = None,
    engine: Engine | None = None,
) -> Any:
    """`obj` with every tensor and array on GPU `device` (DEVICE_WORDS; None: the current
    one), the same structure, moved by one copy_many; with `non_blocking`, queued on the
    caller's stream (`stream`, else the GPU's current one) and returned at once."""
    index = gpu_index(device)
    on = queued_on(non_blocking, stream, index)
    with as_current(stream):
        return up(obj, index, *_ways(engine, on))


def to_host(
    obj: Any, non_blocking: bool = False, *, stream: Any = None, engine: Engine | None = None
) -> Any:
    """`obj` with every tensor and array in host memory (pinned where `non_blocking`), the same
    structure, moved by one copy_many per GPU the leaves are on; with `non_blocking`, queued on
    the caller's stream (`stream`, else the current one of the GPU the leaves are on) and
    returned at once: the host tensors are read once that stream has run the copies."""
    on = queued_on(non_blocking, stream, None)
    with as_current(stream):
        return down(obj, non_blocking, *_ways(engine, on))


def _ways(engine: Engine | None, on: int | None) -> tuple[Any, Any, bool]:
    """What a move hands its pairs to (its copy and its queue), and whether the caller's
    stream `on` orders them (None: the move synchronizes first and waits)."""
    if on is None:
        return _by_copy_many(engine), _Queued(engine), False
    ordered = _OnStream(engine, on)
    return ordered, ordered, True


def _by_copy_many(engine: Engine | None) -> Callable[[list[Any], int], Any]:
    return lambda pairs, gpu: copy_many(pairs, device=gpu, engine=engine)


class _OnStream:
    """copy_many's copies queued on the caller's stream `on`, a structure's at once or run by
    run (structure_copies.Queue), their sources held until the stream has run them
    (streams.hold); their finish waits for nothing, the stream orders what comes next."""

    def __init__(self, engine: Engine | None, on: int) -> None:
        self.engine, self.on = engine, on

    def __call__(self, pairs: list[Any], gpu: int) -> Any:
        made = copy_pairs(pairs, gpu, None, self.engine, self.on)
        hold(pairs, self.on, gpu)
        return made

    def finish(self, gpu: int) -> None:
        pass


class _Queued:
    """copy_many's copies queued run by run, then finished (structure_copies.Queue)."""

    def __init__(self, engine: Engine | None) -> None:
        self.engine = engine

    def __call__(self, pairs: list[Any], gpu: int) -> Any:
        return queue_pairs(pairs, gpu, self.engine)

    def finish(self, gpu: int) -> None:
        finish_queued(gpu, self.engine)
