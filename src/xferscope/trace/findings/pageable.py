"""Copies from or to pageable memory: the driver stages them through its own buffer, one chunk at
a time; priced by this machine's pinned copies of the same sizes, against what each copy cost
beyond the kernels its GPU ran meanwhile (costs.exposed: a pageable copy's call also waits for
the step before); or, where more, by the host freed to queue the next work (_freed)."""

from __future__ import annotations

from dataclasses import replace

from ..costs import exposed
from ..records import Copy
from ..reference import Reference
from .base import NO_CURVES, PIN_LOADER, Context, TraceFinding, finding, in_words
from .repeated import repeated_ids
from .synchronous import freed

ORDER = 0  # where it stands among findings of equal price
CODE = "pageable_copies"
ADVICE: dict[str | None, str] = {
    None: "pin the host buffers once (cudaHostRegister or cudaMallocHost), or copy through "
    "xferscope's staged copy (xferscope.copy_to_device)",
    "PyTorch": "pin the host tensors once (`tensor.pin_memory()`, or make them with "
    "`pin_memory=True`), then copy with `.to(device, non_blocking=True)`",
    "PyTorch DataLoader": "pin the host tensors once: `pin_memory=True` in the DataLoader, or "
    "`tensor.pin_memory()` for a tensor made once; then `.to(device, non_blocking=True)`",
    "CuPy": "allocate the host arrays pinned, with `cupyx.empty_pinned` (or "
    "`cupyx.zeros_pinned`), and copy them with `cupy.asarray` or `ndarray.set`",
    "JAX": "put the host arrays in pinned host memory (`jax.device_put(x, "
    "sharding.with_memory_kind('pinned_host'))`) before moving them to the device",
    "Numba": "allocate the host arrays pinned (`cuda.pinned_array`, or `with "
    "cuda.pinned(array):`) before `cuda.to_device`",
}
# where the pageable copies that cost the most are read back from the GPU
BACK_ADVICE: dict[str | None, str] = {
    None: "copy into host buffers pinned once (cudaMallocHost or cudaHostRegister) with "
    "cudaMemcpyAsync, and wait on an event recorded after the copy before reading them",
    "PyTorch": "copy into a host tensor pinned once (`out = torch.empty(shape, dtype=dtype, "
    "pin_memory=True)`), with `out.copy_(x, non_blocking=True)` and an event recorded after "
    "it (`torch.cuda.Event()`), synchronized before `out` is read",
    "CuPy": "copy into host arrays pinned once (`cupyx.empty_pinned`), with `x.get(out=pinned)`",
    "JAX": "move the arrays to pinned host memory (`jax.device_put(x, "
    "sharding.with_memory_kind('pinned_host'))`) before reading them",
    "Numba": "copy into host arrays pinned once (`cuda.pinned_array`) with "
    "`x.copy_to_host(pinned)`",
}


def advice_for(copies: list[Copy], used: str | None, loader: bool) -> tuple[str, bool]:
    """The advice for the direction the copies cost the most in: uploads (ADVICE, with a
    DataLoader's knobs where the program uses one), reads back (BACK_ADVICE), or, where both
    cost, the first's followed by the other's; and whether the uploads lead it."""
    cost = {"h2d": 0.0, "d2h": 0.0}
    for c in copies:
        if c.direction in cost:
            cost[c.direction] += c.host_cost_s
    up, back = in_words(ADVICE, used, loader), in_words(BACK_ADVICE, used)
    uploads = cost["h2d"] >= cost["d2h"] or not cost["d2h"]
    if not cost["d2h"] or not cost["h2d"]:
        return (up if uploads else back), uploads
    first, then = (up, back) if uploads else (back, up)
    return f"{first}; {'for the copies back' if uploads else 'for the uploads'}: {then}", uploads


def find(context: Context) -> TraceFinding | None:
    trace, reference = context.trace, context.reference
    copies = [c for c in trace.copies if c.crosses_link and c.host_memory == "pageable"]
    if not copies:
        return None
    cost = sum(c.host_cost_s for c in copies)
    saving = _saving(reference, *exposed(trace, copies, context.kernels))
    if saving is not None and reference is not None:
        saving = max(saving, _freed(context, copies, reference))
    found = finding(
        CODE,
        "copies from or to pageable memory",
        ADVICE,
        trace,
        copies,
        cost,
        saving,
        ""
        if saving is None
        else "priced by this machine's pinned copies of the same sizes, "
        "against each copy's time beyond the kernels its GPU ran meanwhile",
        "" if saving is not None else f"not priced: {NO_CURVES}",
        context.uses_loader,
    )
    advice, uploads = advice_for(copies, found.framework, context.uses_loader)
    found = replace(found, advice=advice)
    # the DataLoader's pinning is the change where the uploads lead the advice
    return replace(found, change=PIN_LOADER) if context.uses_loader and uploads else found


def _freed(context: Context, copies: list[Copy], reference: Reference) -> float:
    """What the uploads issued with cudaMemcpyAsync save once pinned: from pageable memory the
    call waits for the step before and for the copy, so the host cannot queue the next step's
    work meanwhile; pinned, it goes on (synchronous.freed), and the copies themselves take what
    this machine's pinned copies of their sizes take. A video trainer's 4.8 MB clip a step,
    `.to("cuda")` from NumPy's memory: its GPU idle 33% of 6.8 ms steps while the host launched
    the step after each copy; priced by the copies alone at 0.53 ms a step, pinned and
    `non_blocking=True` saved 1.46 ms (1 x H200)."""
    ups = [c for c in copies if c.direction == "h2d" and c.call_is_async]
    faster: dict[tuple[int, int], float] = {}
    for c in ups:
        step = context.step_at(c.pid, c.start_ns)
        pinned = reference.seconds(c.direction, "pinned", c.bytes)
        if step is not None and pinned is not None:
            faster[(c.pid, step)] = faster.get((c.pid, step), 0.0) + max(c.seconds - pinned, 0.0)
    again = repeated_ids(context)  # the same bytes: pinned once, as they are
    return (
        freed(context, ups, faster, lambda c: 0.0 if id(c) in again else _staging(reference, c))
        if ups
        else 0.0
    )


def _staging(reference: Reference, c: Copy) -> float:
    """What copying an upload's data into a pinned buffer first keeps on the host: data made
    each step in pageable memory is pinned by such a copy (as `video_clips_pageable`'s fix
    does), the work the driver's staging did inside the call, so about the time this machine's
    pageable copy of its size takes beyond a pinned one's."""
    pageable = reference.seconds(c.direction, "pageable", c.bytes)
    pinned = reference.seconds(c.direction, "pinned", c.bytes)
    return max(pageable - pinned, 0.0) if pageable is not None and pinned is not None else 0.0


def _saving(
    reference: Reference | None, judged: list[tuple[Copy, float]], scale: float
) -> float | None:
    """What pinning saves: each copy's exposed time less this machine's pinned copy of its
    size, scaled to all copies; None without the machine's curves."""
    if reference is None:
        return None
    total = 0.0
    for c, taken in judged:
        pinned = reference.seconds(c.direction, "pinned", c.bytes)
        if pinned is None:
            return None
        total += max(taken - pinned, 0.0)
    return total * scale
