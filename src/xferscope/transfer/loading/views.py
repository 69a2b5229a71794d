"""A file's tensors made as views of the GPU buffer its data are read into, before the bytes
are there: tensors of one dtype and shape whose offsets step evenly (an MoE's experts, a
transformer's layers) become one strided tensor unbound into its parts, so PyTorch makes the
18,000 tensors of an MoE's file in one call per kind instead of one call each.

    later = views(kit, layout, buffer, layout.data_begin, layout.tensors, out)
    ...   # the bytes read
    for fix in later:
        fix()   # a tensor whose offset does not suit its dtype, copied out to a fresh block"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .layout import CheckpointError, Layout, Tensor

MOST_PERIOD = 4  # tensors of a kind interleaved with up to this many others of it (gate, up)


def views(
    kit: Any,
    layout: Layout,
    buffer: Any,
    first: int,
    tensors: Sequence[Tensor],
    out: dict[str, Any],
) -> list[Callable[[], None]]:
    """Each of `tensors` into `out` (in their order) as a view of `buffer`, which holds
    `layout`'s file from byte `first`; what must wait for the bytes, returned to be called
    after they are there; `kit` the framework's (kits.py). CheckpointError for a dtype the
    framework lacks."""
    kinds = _kinds(kit, layout, tensors)
    typed: dict[Any, Any] = {}  # the buffer as each dtype
    made: dict[str, Any] = {}
    later: list[Callable[[], None]] = []
    groups: dict[tuple[str, tuple[int, ...]], list[Tensor]] = {}
    for t in tensors:
        kind = kinds[t.dtype]
        at = t.begin - first
        if at % kind.itemsize:
            raw = buffer[at : at + t.nbytes]
            later.append(functools.partial(_copied, kit, out, t, raw, kind))
        else:
            groups.setdefault((t.dtype, t.shape), []).append(t)
    for (dtype, shape), members in groups.items():
        kind = kinds[dtype]
        size = kind.itemsize
        whole = typed.get(kind)
        if whole is None:
            whole = typed[kind] = kit.typed(buffer, kind)
        strides = tuple(math.prod(shape[i + 1 :]) for i in range(len(shape)))
        for run, step in _progressions(members):
            at = (run[0].begin - first) // size
            if len(run) == 1:
                made[run[0].name] = kit.strided(whole, shape, strides, at)
            else:
                block = kit.strided(whole, (len(run), *shape), (step // size, *strides), at)
                made.update(zip([t.name for t in run], kit.parts(block), strict=True))
    out.update((t.name, made[t.name]) for t in tensors if t.name in made)
    return later


def _progressions(members: list[Tensor]) -> list[tuple[list[Tensor], int]]:
    """`members` (in file order, of one dtype and shape) as runs whose offsets step evenly,
    each with its step: all of them, or every p-th from each of the first p where the offsets
    repeat with a period p up to MOST_PERIOD, else the longest runs of consecutive members."""
    if len(members) < 2 or members[0].nbytes == 0:
        return [([t], 0) for t in members]
    begins = np.fromiter((t.begin for t in members), dtype=np.int64, count=len(members))
    for p in range(1, min(MOST_PERIOD, len(members) // 2) + 1):
        steps = begins[p:] - begins[:-p]
        if (steps == steps[0]).all():
            return [(members[j::p], int(steps[0])) for j in range(p)]
    runs: list[tuple[list[Tensor], int]] = []
    steps = np.diff(begins)
    start = 0
    for i in range(1, len(members) + 1):  # a run ends where the next step differs
        if i == len(members) or (i > start + 1 and steps[i - 1] != steps[start]):
            runs.append((members[start:i], int(steps[start]) if i > start + 1 else 0))
            start = i
    return runs


def _kinds(kit: Any, layout: Layout, tensors: Sequence[Tensor]) -> dict[str, Any]:
    kinds = {}
    for dtype in {t.dtype for t in tensors}:
        kind = kit.kind(dtype)
        if kind is None:
            name = next(t.name for t in tensors if t.dtype == dtype)
            raise CheckpointError(
                f"{layout.path}: tensor {name!r} is {dtype}, which {kit.name} has no dtype for "
                f"({kit.kind_name(dtype)})"
            )
        kinds[dtype] = kind
    return kinds


def _copied(kit: Any, out: dict[str, Any], t: Tensor, raw: Any, kind: Any) -> None:
    out[t.name] = kit.copied(raw, kind, t.shape)  # a fresh, aligned block
