"""The ranks of a multi-GPU job (a process per GPU, as torchrun starts them): how long each GPU
ran NCCL's kernels, and how much of that was waiting for the others. A collective's kernel runs
on each GPU from its own launch until every rank has arrived and the data has moved, so the
rank that arrives last shows the shortest NCCL time: the others waited for it, the straggler
(what nccl-tests' analyser names). Each GPU's own idle (timeline.py) says why it came late."""

from __future__ import annotations

from dataclasses import dataclass

from .costs import merged
from .records import Trace

MIN_WAIT_S = 1e-3  # NCCL time beyond the straggler's under this is no waiting worth naming


@dataclass(frozen=True, slots=True)
class Rank:
    """One GPU of the job: its process, its time in NCCL's kernels, and how much of it was
    waiting for the straggler."""

    device: int
    pid: int
    nccl_s: float
    waited_s: float


def ranks(trace: Trace) -> tuple[tuple[Rank, ...], Rank | None]:
    """Each GPU that ran NCCL kernels, and the straggler (None with fewer than two such GPUs,
    or where no GPU waited MIN_WAIT_S more than the one that waited least)."""
    nccl = [i for i in trace.intervals if i.what == "kernel" and "nccl" in i.name.lower()]
    parts = merged(nccl)
    pids: dict[int, int] = {}
    for i in nccl:
        pids.setdefault(i.device, i.pid)
    seconds = {d: sum(e - s for s, e in zip(st, en, strict=True)) * 1e-9
               for d, (st, en) in parts.items()}  # fmt: skip
    if not seconds:
        return (), None
    least = min(seconds.values())
    found = tuple(Rank(d, pids[d], seconds[d], seconds[d] - least) for d in sorted(seconds))
    if len(found) < 2 or max(r.waited_s for r in found) < MIN_WAIT_S:
        return found, None
    return found, min(found, key=lambda r: r.nccl_s)
