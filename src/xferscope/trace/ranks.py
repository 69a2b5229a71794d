"""The ranks of a multi-GPU job (a process per GPU, as torchrun starts them): how long each GPU
ran NCCL's kernels, and how much of that was waiting for the others. A collective's kernel runs
on each GPU from its own launch until every rank has arrived and the data has moved, so the
rank that arrives last shows the shortest NCCL time: the others waited for it, the straggler
(what nccl-tests' analyser names), and its GPU's largest idle (timeline.py) says why it came
late: the host away from CUDA until its batch copy is its input, blocked in a copy its copies.
Only NCCL's time with no other kernel beside it counts: DistributedDataParallel runs its
gradients' all-reduce beside the backward pass, and a collective that waits while the GPU still
computes costs the step nothing. With kernels recorded in windows, each GPU's NCCL time is
judged in its windows and scaled to its span as its idle is."""

from __future__ import annotations

from dataclasses import dataclass

from .costs import covered_ns, merged
from .idle import IdleCause
from .records import Trace
from .timeline import Timelines

MIN_WAIT_S = 1e-3  # NCCL time beyond the straggler's under this is no waiting worth naming


@dataclass(frozen=True, slots=True)
class Rank:
    """One GPU of the job: its process, its time in NCCL's kernels, and how much of it was
    waiting for the straggler."""

    device: int
    pid: int
    nccl_s: float
    waited_s: float
    # why its GPU sat idle the most, step after step (the straggler's: why it came late; a
    # start-up's one long wait left aside), None if never idle
    cause: IdleCause | None = None


def ranks(trace: Trace, gpus: Timelines) -> tuple[tuple[Rank, ...], Rank | None]:
    """Each GPU that ran NCCL kernels, and the straggler (None with fewer than two such GPUs,
    or where no GPU waited MIN_WAIT_S more than the one that waited least); `gpus`: the
    trace's timelines."""
    nccl = [i for i in trace.intervals if i.what == "kernel" and "nccl" in i.name.lower()]
    parts = merged(nccl)
    others = merged(
        i for i in trace.intervals if i.what == "kernel" and "nccl" not in i.name.lower()
    )
    pids: dict[int, int] = {}
    for i in nccl:
        pids.setdefault(i.device, i.pid)
    seconds = {}
    why = {}
    for g in gpus.gpus:
        if g.device in parts and g.scale is not None:
            alone = _alone(parts[g.device], others.get(g.device, ([], [])))
            seconds[g.device] = sum(covered_ns(*alone, a, b) for a, b in g.judged) * 1e-9 * g.scale
            causes = [c for c in g.idle if c.kind != "launch"]
            why[g.device] = max(causes, key=lambda c: c.steady_s, default=None)
    if not seconds:
        return (), None
    least = min(seconds.values())
    found = tuple(Rank(d, pids[d], seconds[d], seconds[d] - least, why[d]) for d in sorted(seconds))
    if len(found) < 2 or max(r.waited_s for r in found) < MIN_WAIT_S:
        return found, None
    return found, min(found, key=lambda r: r.nccl_s)


def _alone(
    nccl: tuple[list[int], list[int]], others: tuple[list[int], list[int]]
) -> tuple[list[int], list[int]]:
    """The parts of NCCL's time (disjoint parts) when no other kernel ran."""
    starts: list[int] = []
    ends: list[int] = []
    o_starts, o_ends = others
    j = 0
    for a, b in zip(*nccl, strict=True):
        cursor = a
        while j < len(o_starts) and o_ends[j] <= cursor:
            j += 1
        k = j
        while k < len(o_starts) and o_starts[k] < b:
            if o_starts[k] > cursor:
                starts.append(cursor)
                ends.append(o_starts[k])
            cursor = max(cursor, o_ends[k])
            k += 1
        if cursor < b:
            starts.append(cursor)
            ends.append(b)
    return starts, ends
