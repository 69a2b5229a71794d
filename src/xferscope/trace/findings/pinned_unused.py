"""Host memory pinned but never copied from or to: what pinning it cost, saved by not pinning it."""

from __future__ import annotations

from ...core.units import format_bytes
from .base import Context, TraceFinding, framework, in_words, places

ORDER = 6  # where it stands among findings of equal price
CODE = "pinned_unused"
ADVICE: dict[str | None, str] = {
    None: "do not pin it (pinned memory is taken from the OS for as long as it lives)",
    "PyTorch": "do not pin tensors that are never copied (`tensor.pin_memory()`)",
    "PyTorch DataLoader": "do not pin tensors that are never copied (`pin_memory()`, or "
    "`pin_memory=True` for a DataLoader whose batches stay on the host)",
}


def find(context: Context) -> TraceFinding | None:
    trace = context.trace
    used = [  # copied at any time, start-up and end included
        (c.pid, p)
        for c in (context.whole or trace).copies
        for p, side in ((c.src_ptr, c.src), (c.dst_ptr, c.dst))
        if p is not None and side in ("pinned", "pageable")
    ]
    idle = [
        pin
        for pin in trace.pins
        if pin.bytes
        and not any(
            pid == pin.pid and pin.address <= p < pin.address + pin.bytes for pid, p in used
        )
    ]
    if not idle or any(c.src_ptr is None for c in trace.copies if c.call):
        return None  # without every copy's pointers, an unused buffer cannot be told
    cost = sum(p.seconds or 0.0 for p in idle)
    used_framework = framework(trace, idle)
    return TraceFinding(
        CODE,
        "host memory pinned but never copied from or to",
        len(idle),
        sum(p.bytes for p in idle),
        ", ".join(sorted({format_bytes(p.bytes) for p in idle})),
        places(trace, idle),
        cost,
        cost,
        in_words(ADVICE, used_framework, context.uses_loader),
        f"{format_bytes(sum(p.bytes for p in idle))} held pinned",
        framework=used_framework,
    )
