"""The caller's stream, where a copy is queued on it and not waited for (copy_many's
`non_blocking=True`, with `stream=`): the stream given, or the current stream of the GPU, as
PyTorch's `.to(device, non_blocking=True)` and CuPy's `ndarray.set(array, stream=)` queue theirs.
Light: it loads no framework; one is asked only where the program imported it."""

from __future__ import annotations

import collections
import contextlib
import sys
from typing import Any

STREAM_WORDS = "a torch.cuda.Stream, a cupy.cuda.Stream, or a cudaStream_t as an int"
MOST_HANDLE = 1 << 63  # a handle past this is no pointer of a process's


def queued_on(non_blocking: bool, stream: Any, device: int | None) -> int | None:
    """The caller's stream a copy with `non_blocking` is queued on (handle), None where the
    call waits for its copies; ValueError where a stream is given without non_blocking."""
    if non_blocking:
        return handle(stream, device)
    if stream is not None:
        raise ValueError(
            "stream: a stream is where non_blocking=True queues the copies; without it the "
            "call returns once every byte has landed"
        )
    return None


def handle(stream: Any, device: int | None) -> int:
    """The cudaStream_t `stream` names, as an integer (0: the legacy default stream); None:
    the current stream of GPU `device` (of the current GPU where None). ValueError naming the
    option otherwise."""
    if stream is None:
        return current(device)
    # a raw handle, or a torch.cuda.Stream's (and ExternalStream's) or CuPy's Stream's
    for value in (stream, getattr(stream, "cuda_stream", None), getattr(stream, "ptr", None)):
        if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < MOST_HANDLE:
            return value
    raise ValueError(f"stream: {stream!r} is not a CUDA stream ({STREAM_WORDS})")


def current(device: int | None) -> int:
    """The current stream of GPU `device`: PyTorch's where the program imported it (read raw,
    about a microsecond), else CuPy's, else the legacy default stream (0), CUDA's own."""
    torch = sys.modules.get("torch")
    if torch is not None:
        index = torch.cuda.current_device() if device is None else device
        try:
            raw = torch._C._cuda_getCurrentRawStream
        except AttributeError:  # a PyTorch without it: its Stream object (about 10 us)
            return int(torch.cuda.current_stream(index).cuda_stream)
        return int(raw(index))
    cupy = sys.modules.get("cupy")
    if cupy is not None:
        with contextlib.nullcontext() if device is None else cupy.cuda.Device(device):
            return int(cupy.cuda.get_current_stream().ptr)
    return 0


# What copies queued on a caller's stream still read: each call's objects with an event
# recorded on the stream after its copies, let go once the event has passed (looked at by each
# later call), so that no host buffer is freed and handed out again (PyTorch's caching host
# allocator reuses a pinned block at once) while a copy still reads it.
_held: collections.deque[tuple[Any, Any]] = collections.deque()
_wrapped: dict[tuple[int, int], Any] = {}  # each (handle, GPU)'s stream, as its framework's object


def hold(objects: Any, on: int, device: int) -> None:
    """Keeps `objects` until stream `on` of GPU `device` has run what is queued on it now; lets
    go of what earlier calls held once their streams have passed them."""
    while _held and _held[0][0].query():
        _held.popleft()
    _held.append((_event_on(on, device), objects))


def held() -> int:
    """How many calls' objects are still held."""
    return len(_held)


def _event_on(on: int, device: int) -> Any:
    """An event recorded now on stream `on` of GPU `device`, PyTorch's or CuPy's (one of them
    made the objects the copies read)."""
    torch = sys.modules.get("torch")
    stream = _wrapped.get((on, device))
    if torch is not None:
        if stream is None:
            stream = _wrapped[(on, device)] = (
                torch.cuda.default_stream(device)  # the legacy default stream, PyTorch's
                if on == 0
                else torch.cuda.ExternalStream(on, device=device)
            )
        event = torch.cuda.Event()
        event.record(stream)
        return event
    cupy = sys.modules["cupy"]
    with cupy.cuda.Device(device):
        if stream is None:
            stream = cupy.cuda.Stream.null if on == 0 else cupy.cuda.ExternalStream(on)
            _wrapped[(on, device)] = stream
        event = cupy.cuda.Event()
        event.record(stream)
    return event


def as_current(stream: Any) -> contextlib.AbstractContextManager[Any]:
    """`stream` made the current one while the destinations are made (where it is PyTorch's or
    CuPy's), so that the caching allocator gives them to the stream their copies go on, as
    `.to()` inside `torch.cuda.stream(s)` does; nothing where None or a raw handle."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(stream, torch.cuda.Stream):
        return torch.cuda.stream(stream)  # type: ignore[no-any-return]
    cupy = sys.modules.get("cupy")
    if cupy is not None and isinstance(stream, cupy.cuda.Stream | cupy.cuda.ExternalStream):
        return stream  # type: ignore[no-any-return]
    return contextlib.nullcontext()
