"""Which method copy_many uses for a batch: the one this machine measured fastest for the nearest
count and size in its stored calibration (`xferscope batch --calibrate`, calibration.py), or,
without one, the built-in rule (rule.py). `choose` makes a decision; copy.py's `decide` keeps
it, in copy_many's one cache."""

from __future__ import annotations

from ..core.compiled import engine_module
from ..core.engine import Engine
from .calibration import gpu_key, load
from .choice import Choice, Shape
from .rule import rule

__all__ = ["COPY_MANY_METHODS", "POINTER_KINDS", "Choice", "CopyRefused", "Shape", "choose"]

_e = engine_module()
COPY_MANY_METHODS: tuple[str, ...] = tuple(_e.COPY_MANY_METHODS)
# A batch copy_many will not make: its pairs go more than one way or to more than one GPU, a
# destination is read-only, an address or size is not positive, copy_to_device's buffers go
# down (or copy_to_host's up), or the method asked for cannot make it. A ValueError; its message
# names the pair or the argument.
CopyRefused: type[ValueError] = _e.CopyRefused
# what memory an address lies in, as the driver names it: classify_pointers' kinds, by number
POINTER_KINDS: tuple[str, ...] = tuple(_e.POINTER_KINDS)


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


def choose(engine: Engine, shape: Shape, asked: str | None) -> Choice:
    """The method `asked` for (CopyRefused if it cannot make the batch), else the decision of
    this GPU's calibration or of the rule: made afresh (copy.decide remembers it)."""
    direction, memory, count = shape.direction, shape.memory, shape.count
    size = shape.bytes // count
    where = (direction, memory, count, shape.bytes, shape.device)
    gpu, driver = _facts_of(engine, shape.device)

    def refused(method: str) -> str:
        return str(_e.copy_many_refusal(direction, memory, [size], method, driver))

    if asked is not None:
        if refused(asked):
            raise CopyRefused(f"method {asked!r} cannot make this batch: {refused(asked)}")
        return Choice(asked, *where, "asked", "it was asked for")
    calibration = load(gpu)
    chosen = calibration.choose(direction, memory, count, size) if calibration else None
    if chosen is not None and not refused(chosen[0]):
        method, reason, cell, times = chosen
        return Choice(method, *where, "calibration", reason, cell, times)
    method, reason = rule(direction, memory, count, size, not refused("batch-stream"))
    return Choice(method, *where, "rule", reason)
