"""The copy API set up on another thread while a program's first calls go PyTorch's way
(plain.py): importing the copy modules and loading the native engine took 22-54 ms on H100
hosts, and the staged copy's threads, memcpy probe and pinned chunks 70-120 ms. The second
plain call begins it (`_begin_set_up`); `api(name)` gives the copy API's function, waiting for
a setting up under way, or importing it here. Light: it loads neither NumPy nor the native
engine until it sets up."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from typing import Any

_real: dict[str, Callable[..., Any]] = {}  # the copy API's functions, once set up
_setting_up: list[threading.Thread] = []
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
