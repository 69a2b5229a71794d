"""The copy API as `xferscope` gives it (`xferscope.copy_many`, `copy_to_device`, `copy_to_host`,
`to_device`, `to_host`, `warmup`): a program's first calls never wait for xferscope to set up.

Setting up costs more than a small copy: importing the copy modules and loading the native engine
took 22-54 ms on H100 hosts, and the staged copy's threads, memcpy probe and pinned chunks 70-120
ms, against 0.24 ms for PyTorch's copy of 1 MB. So until it is set up, a call whose pieces are
all PyTorch tensors goes PyTorch's own way (`copy_` on the current stream, then synchronized: the
plain copy). The first such call is that copy alone; the second begins the setting up on another
thread, and once it has ended every call goes xferscope's way. Where xferscope's way pays even
with the setting up in it (thousands of pieces, see `plain_first`), the call sets up first and
goes xferscope's way. `xferscope.warmup()` sets up at once. Calls with other objects (NumPy,
CuPy, addresses), an engine or a method import the copy API first (its staged copy is then made
on the copier's own thread: many.hpp).

This module is light: it loads neither NumPy nor the native engine, so that a first call pays
for neither."""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any

from . import engine as engines
from .choice import Choice
from .streams import handle, hold
from .structure_copies import down, gpu_index, up

# A model of a first call's two ways, from H100 measurements (copyapi_loop_probe.py,
# copyapi_first.py): PyTorch's loop pays about 15 us a piece and moves pinned memory at 50 GB/s
# and pageable at 8; xferscope's way pays the setting up, about 2 us a piece and 45 GB/s.
PLAIN_PIECE_S = 15e-6
PLAIN_BPS = {"pinned": 50e9, "pageable": 8e9}
SET_UP_S = 0.15
OURS_PIECE_S = 2e-6
OURS_BPS = 45e9
PLAIN_REASON = (
    "xferscope was still setting up on another thread (the copy modules, the native engine, "
    "the staged copy's threads and pinned chunks), so this call went PyTorch's own way: "
    "copy_ on the current stream, then synchronized unless non_blocking; xferscope.warmup() "
    "sets up at once"
)

_real: dict[str, Callable[..., Any]] = {}  # the copy API's functions, once set up
_setting_up: list[threading.Thread] = []
_calls: list[None] = []  # the calls that went PyTorch's way
_switch: list[float] = []  # the switch interval before the setting up
SWITCH_S = 0.5e-3  # the interpreter's switch interval while setting up (its default: 5 ms)
_lock = threading.Lock()


def ready() -> bool:
    """Whether the copy API is set up (every call goes xferscope's way)."""
    return bool(_real)


def _import_api() -> None:
    """The copy API's own functions, imported: from now on every call goes xferscope's way."""
    from . import moving
    from .copy import copy_many, copy_pairs
    from .staged import copy_to_device, copy_to_host

    _real.update(
        copy_many=copy_many, copy_to_device=copy_to_device, copy_to_host=copy_to_host,
        to_device=moving.to_device, to_host=moving.to_host, warmup=moving.warmup,
        copy_pairs=copy_pairs,
    )  # fmt: skip


def _set_up(device: int) -> None:
    """Another thread's setting up: GPU `device`'s copier and staged copy made
    (moving.warmup), then the copy API's functions put in place. A failure is left for the
    calls, which then go xferscope's way and raise it where the caller sees it. Meanwhile the
    interpreter switches threads every SWITCH_S: the program's thread, back from a copy, waits
    that long at most for this one's imports to let go of the GIL (not 5 ms)."""
    was = _switch.pop() if _switch else sys.getswitchinterval()
    try:
        from . import moving

        moving.warmup(device)
    except Exception:
        pass
    finally:
        _import_api()
        if sys.getswitchinterval() == min(was, SWITCH_S):  # unless the program set another
            sys.setswitchinterval(was)


def _begin_set_up(device: int) -> None:
    """Sets up on another thread, unless it is set up or being set up. The thread is not a
    daemon: a program that ends first waits for it (at most the setting up) before CUDA ends."""
    with _lock:
        if _real or _setting_up:
            return
        thread = threading.Thread(target=_set_up, args=(device,), name="xferscope-set-up")
        _setting_up.append(thread)
        _switch.append(sys.getswitchinterval())  # set before the start: it waits for the GIL
        sys.setswitchinterval(min(_switch[0], SWITCH_S))
        thread.start()


def api(name: str) -> Callable[..., Any]:
    """The copy API's function `name`: where it is being set up on another thread, once that
    has ended (one setting up, not two at once); else imported here."""
    fn = _real.get(name)
    if fn is None:
        with _lock:
            waiting = list(_setting_up)
        for thread in waiting:
            if thread is not threading.current_thread():
                thread.join()
        if not _real:
            _import_api()
        fn = _real[name]
    return fn


def _torch_pairs(pairs: Sequence[Any]) -> tuple[bool, int, list[tuple[Any, Any]], int] | None:
    """(upload, GPU, the pairs, their bytes) where every pair is two contiguous PyTorch tensors
    of the same bytes, all one way between the host and one GPU; else None. Read with as few
    of PyTorch's calls as can tell (a first copy of 1 MB takes 0.25 ms)."""
    torch = sys.modules.get("torch")
    if torch is None or type(pairs) not in (list, tuple) or not pairs:
        return None  # an iterator is left whole for xferscope's way
    tensor = torch.Tensor
    upload: bool | None = None
    gpu: int | None = None
    total = 0
    for pair in pairs:
        if type(pair) not in (tuple, list) or len(pair) != 2:
            return None
        d, s = pair
        if not (isinstance(d, tensor) and isinstance(s, tensor)):
            return None
        up = d.is_cuda
        on_gpu, host = (d, s) if up else (s, d)
        if up == s.is_cuda or host.device.type != "cpu":
            return None
        if upload is None:
            upload, gpu = up, on_gpu.device.index
        elif up != upload or on_gpu.device.index != gpu:
            return None
        n = d.nbytes
        if not (0 < n == s.nbytes and d.is_contiguous() and s.is_contiguous()):
            return None
        total += n
    assert upload is not None and gpu is not None
    return upload, gpu, list(pairs), total


def _bytes(t: Any) -> Any:
    """`t`'s bytes as a flat uint8 tensor over its memory (copy_ then copies bytes, as
    copy_many does, whatever the two dtypes and shapes)."""
    return t.detach().reshape(-1).view(sys.modules["torch"].uint8)


def plain_first(count: int, pageable_bytes: int, pinned_bytes: int) -> bool:
    """Whether a first call of `count` pieces goes PyTorch's way: where the model says it ends
    before xferscope's way with the setting up in it."""
    plain = (
        count * PLAIN_PIECE_S
        + pageable_bytes / PLAIN_BPS["pageable"]
        + pinned_bytes / PLAIN_BPS["pinned"]
    )
    ours = SET_UP_S + count * OURS_PIECE_S + (pageable_bytes + pinned_bytes) / OURS_BPS
    return plain <= ours


def _pinned(pairs: list[tuple[Any, Any]], upload: bool) -> bool:
    """Whether every host end is pinned (a driver call each)."""
    return all(bool((s if upload else d).is_pinned()) for d, s in pairs)


def _plain(
    pairs: Sequence[Any],
    device: int | None,
    way: bool | None,
    choice: bool = True,
    queued: bool = False,
    stream: Any = None,
) -> Choice | bool:
    """The pairs copied PyTorch's way, where they are all PyTorch tensors going `way` (True:
    up; None: either) to GPU `device` (None: theirs) and that way ends first: the Choice
    (`choice`), else True. Else False, nothing copied (xferscope's way reads and refuses the
    rest). The first such call is PyTorch's copy alone; the second begins the setting up.
    `queued` (copy_many's non_blocking): the copies queued on the current stream, or on
    `stream` where it is PyTorch's, and nothing waited for, as PyTorch's own."""
    chosen = engines.chosen()
    if chosen is not None and chosen.simulated:
        return False
    torch = sys.modules.get("torch")
    if stream is not None and (torch is None or not isinstance(stream, torch.cuda.Stream)):
        return False  # a stream PyTorch does not know: xferscope's way
    found = _torch_pairs(pairs)
    if found is None:
        return False
    upload, gpu, plain, total = found
    assert torch is not None  # the pairs are its tensors
    if (way is not None and way != upload) or (device is not None and device != gpu):
        return False
    pinned: bool | None = None  # asked of the driver only where needed, once
    if not plain_first(len(plain), total, 0):  # pageable as the model's worst; else asked
        pinned = _pinned(plain, upload)
        if not plain_first(len(plain), 0 if pinned else total, total if pinned else 0):
            return False
    one = len(plain) == 1 and not queued  # PyTorch's own blocking copy: copy, synchronize
    with contextlib.nullcontext() if stream is None else torch.cuda.stream(stream):
        for d, s in plain:
            if d.dtype != s.dtype or d.shape != s.shape:
                d, s = _bytes(d), _bytes(s)
            d.copy_(s, non_blocking=not one)
    if not one and not queued:
        torch.cuda.current_stream(gpu).synchronize()
    _calls.append(None)
    if len(_calls) > 1:
        _begin_set_up(gpu)
    if not choice:
        return True
    if pinned is None:
        pinned = _pinned(plain, upload)
    memory = "pinned" if pinned else "pageable"
    direction = "h2d" if upload else "d2h"
    return Choice("loop", direction, memory, len(plain), total, gpu, "first call", PLAIN_REASON)


def copy_many(
    pairs: Sequence[Any] | None = None,
    *,
    destinations: Any = None,
    sources: Any = None,
    sizes: Any = None,
    device: int | None = None,
    method: str | None = None,
    engine: Any = None,
    non_blocking: bool = False,
    stream: Any = None,
) -> Choice:
    """xferscope.copy_many (transfer/copy.py); until set up, PyTorch pairs go PyTorch's way."""
    fn = _real.get("copy_many")
    plain = method is None and engine is None and destinations is None and pairs is not None
    if fn is None:
        if pairs is not None and plain and (non_blocking or stream is None):
            made = _plain(pairs, device, None, queued=non_blocking, stream=stream)
            if made:
                return made  # type: ignore[return-value]
        fn = api("copy_many")
    elif plain and sources is None and sizes is None and not non_blocking and stream is None:
        return _real["copy_pairs"](pairs, device)  # type: ignore[no-any-return]  # the common call
    return fn(  # type: ignore[no-any-return]
        pairs, destinations=destinations, sources=sources, sizes=sizes, device=device,
        method=method, engine=engine, non_blocking=non_blocking, stream=stream,
    )  # fmt: skip


def copy_to_device(
    device_ptr: object, host: object, nbytes: int | None = None, device: int = 0
) -> None:
    """xferscope.copy_to_device (transfer/staged.py); until set up, PyTorch tensors go
    PyTorch's way."""
    _one("copy_to_device", device_ptr, host, nbytes, device, True)


def copy_to_host(
    host: object, device_ptr: object, nbytes: int | None = None, device: int = 0
) -> None:
    """xferscope.copy_to_host (transfer/staged.py); until set up, PyTorch tensors go PyTorch's
    way."""
    _one("copy_to_host", host, device_ptr, nbytes, device, False)


def _one(name: str, destination: object, source: object, nbytes: int | None, device: int,
         upload: bool) -> None:  # fmt: skip
    """copy_to_device or copy_to_host (`name`, going `upload`): PyTorch's way until set up."""
    fn = _real.get(name)
    if fn is None:
        if nbytes is None and _plain([(destination, source)], device, upload, choice=False):
            return
        fn = api(name)
    fn(destination, source, nbytes, device)


def _plain_copy(pairs: list[Any], gpu: int) -> Any:
    """A structure's pairs: PyTorch's way where that ends first, else xferscope's (set up)."""
    made = _plain(pairs, gpu, None, choice=False)
    return made or api("copy_many")(pairs, device=gpu)


def _queued_copy(on: int) -> Callable[[list[Any], int], Any]:
    """_plain_copy for a non_blocking move: queued on the current stream (`on`), either way,
    the sources held until the stream has run the copies (streams.hold)."""

    def copy(pairs: list[Any], gpu: int) -> Any:
        made = _plain(pairs, gpu, None, choice=False, queued=True)
        made = made or api("copy_many")(pairs, device=gpu, non_blocking=True, stream=on)
        hold(pairs, on, gpu)
        return made

    return copy


def to_device(obj: Any, device: Any = None, non_blocking: bool = False, **options: Any) -> Any:
    """xferscope.to_device (transfer/moving.py); until set up, PyTorch leaves go PyTorch's way
    where that ends first."""
    fn = _real.get("to_device")
    if fn is None and not options:
        index = gpu_index(device)
        if not non_blocking:
            return up(obj, index, _plain_copy)
        on = handle(None, index)
        return up(obj, index, _queued_copy(on), ordered=True)
    return (fn or api("to_device"))(obj, device, non_blocking, **options)


def to_host(obj: Any, non_blocking: bool = False, **options: Any) -> Any:
    """xferscope.to_host (transfer/moving.py); until set up, PyTorch leaves go PyTorch's way
    where that ends first."""
    fn = _real.get("to_host")
    if fn is None and not options:
        if not non_blocking:
            return down(obj, non_blocking, _plain_copy)
        on = handle(None, None)
        return down(obj, non_blocking, _queued_copy(on), ordered=True)
    return (fn or api("to_host"))(obj, non_blocking, **options)


def warmup(device: Any = None, **options: Any) -> None:
    """xferscope.warmup (transfer/moving.py): sets up now, on this thread."""
    api("warmup")(device, **options)
