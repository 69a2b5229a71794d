"""The copy API as `xferscope` gives it (`xferscope.copy_many`, `copy_to_device`, `copy_to_host`,
`to_device`, `to_host`, `warmup`): a program's first calls never wait for xferscope to set up.

Setting up costs more than a small copy: importing the copy modules and loading the native engine
took 22-54 ms on H100 hosts, and the staged copy's threads, memcpy probe and pinned chunks 70-120
ms, against 0.24 ms for PyTorch's copy of 1 MB. So until it is set up, a call whose pieces are
all PyTorch tensors goes PyTorch's own way (`copy_` on the current stream, then synchronized: the
plain copy). The first such call is that copy alone; the second begins the setting up on another
thread, and once it has ended every call goes xferscope's way. Where xferscope's way pays even
with the setting up in it (thousands of pieces, see plain.plain_first), the call sets up first
and goes xferscope's way. `xferscope.warmup()` sets up at once. Calls with other objects (NumPy,
CuPy, addresses), an engine or a method import the copy API first (its staged copy is then made
on the copier's own thread: many.hpp).

This module only chooses between the two ways: plain.py makes the plain copy, setting_up.py
sets up. It is light: it loads neither NumPy nor the native engine, so that a first call pays
for neither."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from . import setting_up
from .choice import Choice
from .plain import _plain, _plain_copy, _queued_copy
from .streams import handle
from .structure_copies import down, gpu_index, up


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
    fn = setting_up._real.get("copy_many")
    plain = method is None and engine is None and destinations is None and pairs is not None
    if fn is None:
        if pairs is not None and plain and (non_blocking or stream is None):
            made = _plain(pairs, device, None, queued=non_blocking, stream=stream)
            if made:
                return made  # type: ignore[return-value]
        fn = setting_up.api("copy_many")
    elif plain and sources is None and sizes is None and not non_blocking and stream is None:
        return setting_up._real["copy_pairs"](pairs, device)  # type: ignore[no-any-return]  # the common call
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
    fn = setting_up._real.get(name)
    if fn is None:
        if nbytes is None and _plain([(destination, source)], device, upload, choice=False):
            return
        fn = setting_up.api(name)
    fn(destination, source, nbytes, device)


def to_device(obj: Any, device: Any = None, non_blocking: bool = False, **options: Any) -> Any:
    """xferscope.to_device (transfer/moving.py); until set up, PyTorch leaves go PyTorch's way
    where that ends first."""
    fn = setting_up._real.get("to_device")
    if fn is None and not options:
        index = gpu_index(device)
        if not non_blocking:
            return up(obj, index, _plain_copy)
        on = handle(None, index)
        return up(obj, index, _queued_copy(on), ordered=True)
    return (fn or setting_up.api("to_device"))(obj, device, non_blocking, **options)


def to_host(obj: Any, non_blocking: bool = False, **options: Any) -> Any:
    """xferscope.to_host (transfer/moving.py); until set up, PyTorch leaves go PyTorch's way
    where that ends first."""
    fn = setting_up._real.get("to_host")
    if fn is None and not options:
        if not non_blocking:
            return down(obj, non_blocking, _plain_copy)
        on = handle(None, None)
        return down(obj, non_blocking, _queued_copy(on), ordered=True)
    return (fn or setting_up.api("to_host"))(obj, non_blocking, **options)


def warmup(device: Any = None, **options: Any) -> None:
    """xferscope.warmup (transfer/moving.py): sets up now, on this thread."""
    setting_up.api("warmup")(device, **options)
