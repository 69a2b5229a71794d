"""Many copies between host memory and one GPU at once, by the method this machine measured
fastest for their count and size:

    import numpy as np, torch, xferscope

    blocks = [torch.empty(4096, dtype=torch.uint8, device="cuda") for _ in range(1024)]
    pinned = torch.empty(1024 * 4096, dtype=torch.uint8).pin_memory()
    pieces = [pinned[i * 4096:(i + 1) * 4096] for i in range(1024)]
    choice = xferscope.copy_many(list(zip(blocks, pieces)))     # (destination, source) pairs
    print(choice.explain())

Pairs are (destination, source) or (destination, source, nbytes); each end a NumPy array or
another buffer-protocol object, a PyTorch tensor, a CuPy array, an object with
__cuda_array_interface__ or __dlpack__, or an integer address (then nbytes is needed). For many
pieces given as addresses, `copy_many(destinations=..., sources=..., sizes=...)` takes three
arrays and skips the per-object work. All copies of a call go one way, host to GPU or GPU to
host, on one GPU; the host side may be pinned or pageable. The call returns once every byte has
arrived. Like the staged copy, it does not wait for work queued on other streams: synchronize
first if a kernel still writes a source.

The method: `xferscope batch --calibrate` measures every method over a grid of counts and sizes
on this GPU and stores it; copy_many takes the fastest for the nearest count and size, and
without a calibration follows a built-in rule. `method=` forces one of COPY_MANY_METHODS.

Memory kept for later calls: pack and staged stage the whole batch in memory of the GPU (a 1 GiB
batch keeps 1 GiB there, grown to the largest batch so far, until the engine is closed), pack as
much again in pinned host memory, and staged the staged copier's pinned chunks (threads x 3 x
chunk, 192 MiB at most)."""

from __future__ import annotations

import atexit
import threading
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..core.compiled import engine_module
from ..core.engine import Engine
from .choose import DECISIONS, LOOK_AGAIN_S, Choice, gpu_key, load, rule
from .resolve import is_address, side

_e = engine_module()
COPY_MANY_METHODS: tuple[str, ...] = tuple(_e.COPY_MANY_METHODS)
_KINDS = {0: "pageable", 1: "pinned", 2: "device", 3: "managed"}

_engine: Engine | None = None
# keyed by the engine itself, not its id: an id can be reused by a later engine
_copiers: dict[tuple[Engine, int], Any] = {}
_lock = threading.Lock()
# per (engine, device): the GPU's calibration key and the driver version, asked once (the
# device's facts take about a millisecond to gather, as long as a batch of small copies)
_facts: dict[tuple[Engine, int], tuple[str, int]] = {}


def _facts_of(engine: Engine, device: int) -> tuple[str, int]:
    key = (engine, device)
    facts = _facts.get(key)
    if facts is None:
        facts = (gpu_key(engine.device_info(device)), engine.driver_version())
        _facts[key] = facts
    return facts


def _default_engine() -> Engine:
    global _engine
    if _engine is None:
        from ..core.engine import NativeEngine

        _engine = NativeEngine()
    return _engine


_last: list[Any] = [None, -1, None]  # the last copier asked for: (engine, device, copier)


def _copier(engine: Engine, device: int) -> Any:
    last = _last
    if last[0] is engine and last[1] == device and not last[2].closed:
        return last[2]  # every call asks: the same one again, without the lock
    key = (engine, device)
    with _lock:
        copier = _copiers.get(key)
        if copier is None or copier.closed:  # closed: by the engine at a command's end
            copier = engine.many_copier(device)
            _copiers[key] = copier
        _last[:] = [engine, device, copier]
        return copier


def _slow_pair(pair: Any, i: int) -> tuple[int, int, int, bool, tuple[object, object]]:
    """Pair `i` as the Python reader reads it (what the native reader leaves: other objects,
    a third item, and every error): (destination address, source address, nbytes, whether the
    destination is read-only, what to keep while the copy runs)."""
    if not isinstance(pair, (tuple, list)) or len(pair) not in (2, 3):
        raise TypeError(
            f"pair {i} must be (destination, source) or (destination, source, nbytes), not "
            f"{type(pair).__name__}"
        )
    d = side(pair[0], i, "destination")
    s = side(pair[1], i, "source")
    if len(pair) == 3:
        n = pair[2]
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            raise ValueError(f"pair {i} nbytes {n!r} is not a size of at least 1 byte")
        n = int(n)
        for end, name in ((d, "destination"), (s, "source")):
            if end.nbytes is not None and end.nbytes < n:
                raise ValueError(
                    f"pair {i}: nbytes {n} is more than the {name} holds ({end.nbytes} bytes)"
                )
    else:
        if d.nbytes is None or s.nbytes is None:
            raise TypeError(f"pair {i}: give nbytes as a third item for a raw address")
        if d.nbytes != s.nbytes:
            raise ValueError(
                f"pair {i}: the destination holds {d.nbytes} bytes and the source "
                f"{s.nbytes}; give nbytes as a third item to copy part of one"
            )
        n = s.nbytes
        if n == 0:
            raise ValueError(f"pair {i} is empty (0 bytes)")
    owner = d.keep
    read_only = (isinstance(owner, np.ndarray) and not owner.flags.writeable) or (
        isinstance(owner, memoryview) and owner.readonly
    )
    return d.address, s.address, n, read_only, (d.keep, s.keep)


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
) -> Choice:
    """Copies every pair, host to GPU or GPU to host, and returns what was done and why (a
    Choice: .method, .explain()). TypeError and ValueError for bad buffers, each naming the pair;
    xferscope's EngineError for the GPU side."""
    if method is not None and method not in COPY_MANY_METHODS:
        raise ValueError(f"method {method!r} is not one of {', '.join(COPY_MANY_METHODS)}")
    if pairs is not None and engine is None and destinations is sources is sizes is None:
        done = _native_copy(pairs, device, method, -1)
        if done is not None:
            return done
    return _copy(pairs, destinations, sources, sizes, device, method, engine, None)


def _native_copy(
    pairs: Sequence[Any], device: int | None, method: str | None, upload: int
) -> Choice | None:
    """The common call, on the default (native) engine: one native call reads, decides (the
    decision remembered) and copies; None where the default engine is not native."""
    native = _engine if _engine is not None else _default_engine()
    if not getattr(native, "classifies_natively", False) or not len(pairs):
        return None
    try:
        return _e.copy_pairs(pairs, -1 if device is None else device, method, upload)  # type: ignore[no-any-return]
    except Exception:  # the engine's errors translated; the readers' go through as they are
        with native._translated():  # type: ignore[attr-defined]
            raise


def _decide(
    direction: str, memory: str, count: int, total: int, device: int, asked: str | None
) -> Choice:
    """copy_many's decision for the native path (_choose on the default engine)."""
    return _choose(_default_engine(), device, direction, memory, count, total, asked)


def _native_copier(device: int) -> Any:
    """The native handle of the default engine's copier for `device`."""
    return _copier(_default_engine(), device)._handle


def copy_one(
    destination: Any,
    source: Any,
    nbytes: int | None,
    device: int | None,
    upload: bool,
    engine: Engine | None = None,
) -> Choice:
    """One copy (copy_to_device, copy_to_host) by copy_many's reader, rule and copier: one
    cudaMemcpyAsync, or the staged copy for pageable memory from choose.staged_from. `upload`:
    the direction the caller named, checked before anything is copied."""
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
    if engine is None:
        done = _native_copy([pair], device, None, int(upload))
        if done is not None:
            return done
    return _copy([pair], None, None, None, device, None, engine, upload)


def _copy(
    pairs: Sequence[Any] | None,
    destinations: Any,
    sources: Any,
    sizes: Any,
    device: int | None,
    method: str | None,
    engine: Engine | None,
    upload: bool | None,
) -> Choice:
    """copy_many's work (its method already checked); `upload` (not None): the direction the
    caller asked for."""
    engine = engine if engine is not None else _default_engine()
    # the driver's answers, remembered per live object, for the native engine; the engine's own
    # classify_pointers for any other (the simulated engine's memory map)
    classify = None if getattr(engine, "classifies_natively", False) else engine.classify_pointers
    target = -1 if device is None else device
    if pairs is not None:
        if destinations is not None or sources is not None or sizes is not None:
            raise TypeError("give either pairs or destinations, sources and sizes, not both")
        if not len(pairs):
            return _nothing(device)
        batch = _e.resolve_pairs(pairs, target, classify, _slow_pair, _refuse)
    else:
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

        def refuse(what: str, *args: Any) -> None:
            if what == "positive":  # the array (0, 1, 2) that holds a value below 1
                name = ("destinations", "sources", "sizes")[args[0]]
                given = {"destinations": destinations, "sources": sources, "sizes": sizes}
                value = int(np.asarray(given[name]).min())
                raise ValueError(f"{name} holds {value}: addresses and sizes are positive")
            _refuse(what, *args)

        batch = _e.resolve_addresses(dst, src, nbytes, target, classify, refuse)
    if upload is not None and batch.upload != upload:
        _refuse("way", upload)
    direction = "h2d" if batch.upload else "d2h"
    memory = "pinned" if batch.pinned else "pageable"
    choice = _choose(engine, batch.device, direction, memory, batch.count, batch.total, method)
    _copier(engine, batch.device).copy_resolved(choice.method, batch)
    return choice


def _nothing(device: int | None) -> Choice:
    """What copy_many did with no pairs."""
    return Choice("loop", "h2d", "pinned", 0, 0, device or 0, "asked", "there was nothing")


def forget_memory_kinds() -> None:
    """Forgets which memory each object's buffer is in. copy_many remembers it per object while
    the object lives (the driver is asked once); call this after unregistering host memory
    (cudaHostUnregister) that a live object still holds."""
    _e.forget_memory_kinds()


def _refuse(what: str, *args: Any) -> None:
    """The error of a broken rule of a batch, found by the native reader: directions (kinds of
    every end, count, upload), device (pair, its GPU, the call's GPU), read_only (pair), way
    (the direction copy_to_device or copy_to_host was asked for)."""
    if what == "directions":
        kinds, count, upload = args
        _refuse_directions(kinds, kinds >= 2, count, upload)
    if what == "device":
        i, gpu, target = args
        raise ValueError(
            f"pair {i}: its GPU buffer is on GPU {gpu}, and this copy runs on GPU {target}; "
            "copy_many moves data between the host and one GPU at a time"
        )
    if what == "read_only":
        raise ValueError(f"pair {args[0]} destination is read-only")
    if what == "way":  # copy_to_device / copy_to_host given buffers that go the other way
        upload = args[0]
        wanted, found = ("host to GPU", "GPU to host") if upload else ("GPU to host", "host to GPU")
        raise ValueError(
            f"{'copy_to_device' if upload else 'copy_to_host'} copies {wanted}, and these buffers "
            f"go {found}: swap the arguments, or call "
            f"{'copy_to_host' if upload else 'copy_to_device'}"
        )
    raise ValueError(f"copy_many: {what}")


def _refuse_directions(kinds: np.ndarray, on_gpu: np.ndarray, count: int, upload: bool) -> None:
    """The ValueError for the first pair whose ends are both on one side, or that goes the
    other way from pair 0."""
    on_gpu_d, on_gpu_s = on_gpu[:count], on_gpu[count:]
    same = np.flatnonzero(on_gpu_d == on_gpu_s)
    if len(same):
        i = int(same[0])
        both = "GPU" if on_gpu_d[i] else "host"
        raise ValueError(
            f"pair {i}: both ends are {both} memory ({_KINDS[int(kinds[i])]} and "
            f"{_KINDS[int(kinds[count + i])]}); copy_many copies between host memory and a GPU"
        )
    i = int(np.flatnonzero(on_gpu_d != upload)[0])
    raise ValueError(
        f"pair {i} copies {'host to GPU' if on_gpu_d[i] else 'GPU to host'} while pair 0 "
        f"copies {'host to GPU' if upload else 'GPU to host'}: one direction per call"
    )


# decisions already made, by (engine, device, direction, memory, count, total, method asked):
# a choice is kept for as long as a stored calibration is trusted without looking at its file
# again; a method asked for and allowed for good (a refusal depends on the shape and the driver)


def _choose(
    engine: Engine,
    device: int,
    direction: str,
    memory: str,
    count: int,
    total: int,
    asked: str | None,
) -> Choice:
    """The method `asked` for (if it can make the batch), else this shape's decision: made from
    the calibration or the rule, and remembered for LOOK_AGAIN_S."""
    key = (engine, device, direction, memory, count, total, asked)
    now = time.monotonic()
    made = DECISIONS.get(key)
    if made is not None and (asked is not None or now - made[0] < LOOK_AGAIN_S):
        return made[1]
    size = total // count
    gpu, driver = _facts_of(engine, device)
    shape = (direction, memory, count, total, device)

    def refused(method: str) -> str:
        return str(_e.copy_many_refusal(direction, memory, [size], method, driver))

    if asked is not None:
        if refused(asked):
            raise ValueError(f"method {asked!r} cannot make this batch: {refused(asked)}")
        choice = Choice(asked, *shape, "asked", "it was asked for")
    else:
        calibration = load(gpu)
        chosen = calibration.choose(direction, memory, count, size) if calibration else None
        if chosen is not None and not refused(chosen[0]):
            method, reason, cell, times = chosen
            choice = Choice(method, *shape, "calibration", reason, cell, times)
        else:
            method, reason = rule(direction, memory, count, size, not refused("batch-stream"))
            choice = Choice(method, *shape, "rule", reason)
    if len(DECISIONS) > 4096:
        DECISIONS.clear()
    DECISIONS[key] = (now, choice)
    return choice


# copy_pairs' Python side, given once; let go before the interpreter's teardown (the native
# decisions hold each GPU's copier)
_e.configure_copy_pairs(LOOK_AGAIN_S, _decide, _native_copier, _slow_pair, _refuse)
atexit.register(_e.forget_copy_pairs)
