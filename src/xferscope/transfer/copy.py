"""Many copies between host memory and one GPU at once, by the method this machine measured
fastest for their count and size:

    import numpy as np, torch, xferscope

    blocks = [torch.empty(4096, dtype=torch.uint8, device="cuda") for _ in range(1024)]
    pinned = torch.empty(1024 * 4096, dtype=torch.uint8).pin_memory()
    pieces = [pinned[i * 4096:(i + 1) * 4096] for i in range(1024)]
    choice = xferscope.copy_many(list(zip(blocks, pieces)))     # (destination, source) pairs
    print(choice.explain())

Pairs are (destination, source) or (destination, source, nbytes); each end a NumPy array or another
buffer-protocol object, a PyTorch tensor, a CuPy array, an object with __cuda_array_interface__ or
__dlpack__, or an integer address (then nbytes is needed). For many pieces given as addresses,
`copy_many(destinations=..., sources=..., sizes=...)` takes three arrays and skips the per-object
work. All copies of a call go one way, host to GPU or GPU to host, on one GPU; the host side may be
pinned or pageable. The call returns once every byte has arrived; with `non_blocking=True` once its
copies are queued on the caller's stream (`stream=`, else the GPU's current one: streams.py), which
orders them after what is queued there. Where a call that waits goes by the loop (one piece, a few),
its copies go on the legacy default stream, PyTorch's and CuPy's default, as PyTorch's copy_ does:
they follow the kernels queued there. Its other methods go on a stream of its own, which does not
wait for work queued on other streams: synchronize first if a kernel still writes a source. Where a
batch of pinned pieces of the same shape last went by the loop, each piece is queued as soon as it
is read; a batch then refused at pair k (CopyRefused) has copied the pairs before k, and returns
once they have landed.

The method: `xferscope batch --calibrate` measures every method over a grid of counts and sizes
on this GPU and stores it; copy_many takes the fastest for the nearest count and size, and
without a calibration follows a built-in rule. `method=` forces one of COPY_MANY_METHODS.

Errors: CopyRefused (a ValueError) for a batch copy_many will not make, TypeError and ValueError
for a bad buffer, each naming the pair; xferscope's EngineError for the GPU side.

Memory kept for later calls: pack and staged stage the whole batch in memory of the GPU (a 1 GiB
batch keeps 1 GiB there, grown to the largest batch so far, until the engine is closed), pack as
much again in pinned host memory, and staged the staged copier's pinned chunks (threads x 3 x
chunk, 192 MiB at most)."""

from __future__ import annotations

import atexit
import functools
from collections.abc import Sequence
from typing import Any, NoReturn

import numpy as np

from ..core.compiled import engine_module
from ..core.engine import Engine
from .buffers import is_address, read_pair, side
from .calibration import LOOK_AGAIN_S
from .choice import Choice, Shape
from .engine import default_engine
from .policy import COPY_MANY_METHODS, choose
from .streams import queued_on

_e = engine_module()

# copy_many on each engine (xferscope._engine.Copies): its reader, its copiers and its decisions,
# the one cache of them; the last one asked for is asked again without the dictionary
_routes: dict[Engine, Any] = {}
_last: list[Any] = [None, None]


def copies_of(engine: Engine) -> Any:
    """copy_many's native Copies on `engine`: its reader, its copier per GPU (`.copier(gpu)`) and
    its decisions, made once and kept (what copy_many, copy_to_device and to_device copy by)."""
    if _last[0] is engine:
        return _last[1]
    copies = _routes.get(engine)
    if copies is None:
        classify = None if engine.classifies_natively else engine.classify_pointers
        decide = functools.partial(_choose, engine)
        copies = _e.Copies(classify, decide, engine.many_copier, read_pair, LOOK_AGAIN_S)
        _routes[engine] = copies
    _last[:] = [engine, copies]
    return copies


def _choose(
    engine: Engine,
    direction: str,
    memory: str,
    count: int,
    total: int,
    device: int,
    asked: str | None,
) -> Choice:
    return choose(engine, Shape(direction, memory, count, total, device), asked)


def decide(shape: Shape, asked: str | None = None, engine: Engine | None = None) -> Choice:
    """copy_many's decision for a batch of this shape: the method `asked` for (CopyRefused if it
    cannot make it), else the calibration's or the rule's; remembered as copy_many remembers it
    (for a second, for good when asked for, until a calibration is stored)."""
    copies = copies_of(engine if engine is not None else default_engine())
    upload, pinned = shape.direction == "h2d", shape.memory == "pinned"
    return copies.decide(upload, pinned, shape.count, shape.bytes, shape.device, asked)  # type: ignore[no-any-return]


def _reraise(engine: Engine) -> NoReturn:
    """Raises the exception being handled as the engine's error (a reader's and a refusal go
    through as they are); called in an except block, so a copy pays no closure for it."""
    with engine.translated():
        raise


def _addresses(values: Any, name: str) -> np.ndarray:
    """`values` as a C-contiguous uint64 array; whether each is positive is checked later, for
    all three arrays at once (by the native reader)."""
    if type(values) is np.ndarray and values.ndim == 1 and values.dtype.kind in "iu":
        return np.ascontiguousarray(values, dtype=np.uint64)  # the common case, fast
    try:
        array = np.asarray(values)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a sequence of integers") from None
    if array.ndim != 1 or (array.size and array.dtype.kind not in "iu"):
        raise TypeError(f"{name} must be a 1-D sequence of integers")
    return np.ascontiguousarray(array, dtype=np.uint64)


def copy_many(
    pairs: Sequence[Any] | None = None,
    *,
    destinations: Any = None,
    sources: Any = None,
    sizes: Any = None,
    device: int | None = None,
    method: str | None = None,
    engine: Engine | None = None,
    non_blocking: bool = False,
    stream: Any = None,
) -> Choice:
    """Copies every pair, host to GPU or GPU to host, and returns what was done and why (a
    Choice: .method, .explain()). CopyRefused for a batch it will not make, TypeError and
    ValueError for bad buffers, each naming the pair; xferscope's EngineError for the GPU
    side.

    `non_blocking=True` queues the copies on the caller's stream, `stream` (STREAM_WORDS), or
    the current stream of the GPU (PyTorch's, else CuPy's), and returns: they follow what is
    queued there and what the program queues next follows them, as `.to(device,
    non_blocking=True)` does; the caller keeps every buffer as it is until the stream has run
    them. Only the loop and the batch API queue so (any other method decided goes by the
    loop, and the Choice says so)."""
    if method is not None and method not in COPY_MANY_METHODS:
        raise ValueError(f"method {method!r} is not one of {', '.join(COPY_MANY_METHODS)}")
    queued = queued_on(non_blocking, stream, device)
    on = -1 if queued is None else queued
    engine = engine if engine is not None else default_engine()
    target = -1 if device is None else device
    if pairs is not None:
        if destinations is not None or sources is not None or sizes is not None:
            raise TypeError("give either pairs or destinations, sources and sizes, not both")
        return copy_pairs(pairs, device, method, engine, on)
    if destinations is None or sources is None or sizes is None:
        raise TypeError("give pairs, or all three of destinations, sources and sizes")
    dst = _addresses(destinations, "destinations")
    src = _addresses(sources, "sources")
    nbytes = _addresses(sizes, "sizes")
    if not len(dst) == len(src) == len(nbytes):
        raise ValueError(
            f"destinations, sources and sizes differ in length ({len(dst)}, {len(src)}, "
            f"{len(nbytes)})"
        )
    if not len(dst):
        return _nothing(device)
    try:
        return copies_of(engine).copy_addresses(dst, src, nbytes, target, method, -1, True, on)  # type: ignore[no-any-return]
    except Exception:
        _reraise(engine)


def copy_pairs(
    pairs: Sequence[Any],
    device: int | None = None,
    method: str | None = None,
    engine: Engine | None = None,
    stream: int = -1,
) -> Choice:
    """copy_many(pairs, device=, method=, engine=) with `method` already checked: the common
    call, in as few steps as it can be made (the first call's wrapper, first.py, calls it
    straight for pairs alone); `stream` >= 0: queued on that stream of the caller's
    (streams.handle), nothing waited for."""
    engine = engine if engine is not None else default_engine()
    if not len(pairs):
        return _nothing(device)
    try:
        return copies_of(engine).copy_pairs(  # type: ignore[no-any-return]
            pairs, -1 if device is None else device, method, -1, True, stream
        )
    except Exception:
        _reraise(engine)


def copy_one(
    destination: Any,
    source: Any,
    nbytes: int | None,
    device: int | None,
    upload: bool,
    engine: Engine | None = None,
) -> Choice:
    """One copy (copy_to_device, copy_to_host) by copy_many's reader, rule and copier: one
    cudaMemcpyAsync, or the staged copy for pageable memory from rule.staged_from. `upload`:
    the direction the caller named, checked before anything is copied (CopyRefused)."""
    pair: tuple[Any, ...] = (destination, source)  # the common call: two objects
    if nbytes is not None:
        pair = (destination, source, nbytes)
    elif is_address(destination) or is_address(source):
        if is_address(destination) and is_address(source):
            raise TypeError("nbytes is required when both ends are addresses")
        # the other end's size is the copy's
        other, role = (
            (source, "source") if is_address(destination) else (destination, "destination")
        )
        pair = (destination, source, side(other, 0, role).nbytes)
    engine = engine if engine is not None else default_engine()
    target = -1 if device is None else device
    try:
        return copies_of(engine).copy_pairs([pair], target, None, int(upload))  # type: ignore[no-any-return]
    except Exception:
        _reraise(engine)


def queue_pairs(pairs: list[Any], device: int, engine: Engine | None = None) -> Choice:
    """copy_many's copy of `pairs` to or from GPU `device`, returning once the copies are queued
    where its method allows it (the loop and batch methods; the others return once landed):
    `finish(device)` then returns once they have landed, and until then the caller keeps every
    buffer as it is. For a structure's moves (structure_copies.py), which make the next destinations
    while the copy engine moves these."""
    engine = engine if engine is not None else default_engine()
    try:
        return copies_of(engine).copy_pairs(pairs, device, None, -1, False)  # type: ignore[no-any-return]
    except Exception:
        _reraise(engine)


def finish(device: int, engine: Engine | None = None) -> None:
    """Returns once every copy queue_pairs queued for GPU `device` has landed (its error, if
    one failed)."""
    engine = engine if engine is not None else default_engine()
    try:
        copies_of(engine).finish(device)
    except Exception:
        _reraise(engine)


def _nothing(device: int | None) -> Choice:
    """What copy_many did with no pairs."""
    return Choice("loop", "h2d", "pinned", 0, 0, device or 0, "asked", "there was nothing")


def forget_memory_kinds() -> None:
    """Forgets which memory each object's buffer is in. copy_many remembers it per object while
    the object lives (the driver is asked once); call this after unregistering host memory
    (cudaHostUnregister) that a live object still holds."""
    _e.forget_memory_kinds()


def held_pinned_bytes() -> int:
    """Pinned host memory copy_many's copiers hold for later calls (staging, staged chunks)."""
    return sum(c.pinned_bytes() for copies in list(_routes.values()) for c in copies.held_copiers())


def close_copiers() -> None:
    """Closes every copier copy_many holds, each engine's for each GPU (their pinned staging
    and GPU buffers given back); the next copy makes one again."""
    for copies in list(_routes.values()):
        copies.close_copiers()


def _forget_routes() -> None:
    """Lets go of every engine's copies before the interpreter's teardown (they hold each GPU's
    copier)."""
    _routes.clear()
    _last[:] = [None, None]


atexit.register(_forget_routes)
