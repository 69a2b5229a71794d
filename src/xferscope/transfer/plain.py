"""A process's first copies PyTorch's own way (`copy_` on the current stream, then synchronized
unless non_blocking: the plain copy), while xferscope sets up on another thread
(setting_up.py), where a model of the two ways says the plain one ends first. The first such
call is that copy alone; the second begins the setting up. Light: it loads neither NumPy nor
the native engine."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Sequence
from typing import Any

from . import engine as engines
from . import setting_up
from .choice import Choice
from .streams import hold

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

_calls: list[None] = []  # the calls that went PyTorch's way


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
        setting_up._begin_set_up(gpu)
    if not choice:
        return True
    if pinned is None:
        pinned = _pinned(plain, upload)
    memory = "pinned" if pinned else "pageable"
    direction = "h2d" if upload else "d2h"
    return Choice("loop", direction, memory, len(plain), total, gpu, "first call", PLAIN_REASON)


def _plain_copy(pairs: list[Any], gpu: int) -> Any:
    """A structure's pairs: PyTorch's way where that ends first, else xferscope's (set up)."""
    made = _plain(pairs, gpu, None, choice=False)
    return made or setting_up.api("copy_many")(pairs, device=gpu)


def _queued_copy(on: int) -> Callable[[list[Any], int], Any]:
    """_plain_copy for a non_blocking move: queued on the current stream (`on`), either way,
    the sources held until the stream has run the copies (streams.hold)."""

    def copy(pairs: list[Any], gpu: int) -> Any:
        made = _plain(pairs, gpu, None, choice=False, queued=True)
        if made:  # PyTorch's copy_ keeps its own pinned sources until the stream has run it
            return made
        made = setting_up.api("copy_many")(pairs, device=gpu, non_blocking=True, stream=on)
        hold(pairs, on, gpu)
        return made

    return copy
