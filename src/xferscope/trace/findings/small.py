"""Runs of many small copies, one after another, that one copy of their bytes would replace:
priced by this machine's one copy of each run's bytes, or, where the GPU waited while the host
issued them, by the host's time between the run's first call and its last."""

from __future__ import annotations

import itertools

from ...core import stats
from ...core.units import format_seconds
from ..costs import expected, idle_ns, work_ended
from ..records import Copy
from ..reference import Reference
from .base import NO_CURVES, Context, TraceFinding, finding
from .repeated import repeated_ids
from .runs import BATCH_MIN, small_runs

ORDER = 2  # where it stands among findings of equal price
CODE = "small_copies"
ADVICE: dict[str | None, str] = {
    None: "gather them into one buffer and copy once (cudaMemcpyBatchAsync on CUDA 12.8+, or "
    "a pinned staging buffer and one copy), then scatter on the GPU; xferscope.copy_many "
    "makes the batch by the method measured fastest here",
    "PyTorch": "copy many small tensors as one: where they are views of one pinned buffer, "
    "copy the buffer once and cut the same views from its GPU copy; else `torch.cat` on the "
    "host, one `.to(device)`, then split; or xferscope.copy_many",
    "CuPy": "concatenate them on the host and copy once "
    "(`cupy.asarray(numpy.concatenate(...))`), or use xferscope.copy_many",
    "JAX": "put them as one: stack the host arrays of each dtype (`np.stack`, "
    "`np.concatenate`), move each stack with one `jax.device_put`, and cut the arrays from it "
    "on the device (inside the jitted step)",
}
# where the runs upload the same bytes again and again (small constants made each step): made
# once, first, then ADVICE
ONCE: dict[str | None, str] = {
    None: "copy them once, before the loop, and keep them on the GPU",
    "PyTorch": "make small constant tensors once, on the GPU, outside the loop "
    "(`torch.tensor(values, device=device)` copies from the host each time it runs)",
    "CuPy": "build small arrays once, on the GPU, outside the loop",
    "JAX": "make small constant arrays once, on the device (`jax.device_put` or `jnp.asarray` "
    "before the loop), and pass them to the jitted step",
}
CONSTANT_ADVICE = {k: f"{ONCE[k]}; else {v}" for k, v in ADVICE.items()}


def advice_for(copies: list[Copy], again: set[int]) -> dict[str | None, str]:
    """CONSTANT_ADVICE where at least half the copies whose contents were sampled upload data
    already uploaded (`again`: repeated.repeated_ids, in a loop within its WITHIN steps), the
    same bytes again and again; else ADVICE: distinct data each time (a batch's features), which
    only fewer, larger copies help. A camera pipeline's tile parameters, replayed from a clip of
    512 frames, repeat only 512 steps later: each step's are new."""
    hashes = [c for c in copies if c.content is not None]
    repeated = sum(id(c) in again for c in hashes)
    return CONSTANT_ADVICE if hashes and repeated * 2 >= len(hashes) else ADVICE


def find(context: Context) -> TraceFinding | None:
    """Runs of many small copies, one after another, that one copy of their bytes would replace."""
    trace, reference = context.trace, context.reference
    runs = small_runs(context)
    if not runs:
        return None
    copies = [c for run in runs for c in run]
    title = f"runs of many small copies ({len(runs)} runs of {BATCH_MIN} or more)"
    if reference is None:
        cost = sum(c.host_cost_s for c in copies)
        return finding(
            CODE, title, advice_for(copies, repeated_ids(context)), trace, copies, cost, None,
            unpriced=f"not priced: {NO_CURVES}",
        )  # fmt: skip
    # what they cost: as traced, or what this machine takes for them untraced if less (a
    # traced call carries the tracing's own microsecond or so)
    cost = min(sum(c.host_cost_s for c in copies), expected(reference, copies) or float("inf"))
    one = 0.0
    for run in runs:
        t = reference.seconds(run[0].direction, run[0].host_memory, sum(c.bytes for c in run))
        one += t or 0.0
    host = host_saving(runs, context.gpus.busy, reference)
    return finding(
        CODE,
        title,
        advice_for(copies, repeated_ids(context)),
        trace,
        copies,
        max(cost, host),
        max(cost - one, host),
        "the saving prices each run as one copy of all its bytes on this machine, or, where the "
        f"GPU sat idle while the host issued them ({format_seconds(host)}), as the host's time "
        "between the run's first call and its last, which one call would not take; `xferscope "
        "batch --size-mix file:copies.csv` compares the ways of batching on these very sizes",
    )


def host_saving(
    runs: list[list[Copy]],
    busy: dict[int, tuple[list[int], list[int]]],
    reference: Reference | None = None,
) -> float:
    """What one copy per run would save the host while its GPU waited: each run's time from its
    first call to its last, less one call's spacing and less the tracing's own time between
    them (its records of the calls, which the program untraced does not spend), at most the
    GPU's idle meanwhile (a GPU busy with other work hides the host's calls). A call the host
    waited in (blocks_host) counts at most what this machine's untraced cudaMemcpy of its size
    takes (`reference`): traced, CUPTI's records lengthen it (a CUDA C++ loop's 256-byte
    cudaMemcpy from pinned memory, 11.4 us traced against 6.9 us untraced, on 1 x H200), and a
    wait for the GPU's earlier work in it is the one copy's too. A run that native
    threads other than its process's main one issued, with no Python stack (JAX's `device_put`:
    PJRT's threads copy each array), starts where the GPU's work before it ended: the main
    thread's work for each array before the first copy (the tree flattened, a buffer made
    each) is one array's with one put. A Python thread's run (a loader's) is its own work."""
    total = 0
    for run in runs:
        calls = [c.call for c in run if c.call is not None]
        if len(calls) < 2:
            continue
        spacings = [
            b.start_ns - a.start_ns - a.own_ns for a, b in itertools.pairwise(calls)
        ]  # a's exit record and b's entry record: a.own_ns and b's share it stands for
        spacing = int(stats.median(spacings))
        issued = sum(spacings) - spacing + calls[-1].end_ns - calls[-1].start_ns
        if longer := _traced_longer(run, reference):
            issued -= sum(longer) - int(stats.median(longer))  # one call is the one copy's
        first = calls[0].start_ns
        on_main = any(c.call is not None and not c.off_main_thread for c in run)
        if not on_main and not any(c.python for c in run):
            before = work_ended(busy, run[0].device, first)
            issued += first - before
            first = before
        total += min(max(issued, 0), idle_ns(busy, run[0].device, first, run[-1].end_ns))
    return total * 1e-9


def _traced_longer(run: list[Copy], reference: Reference | None) -> list[int]:
    """How much longer, in ns, each call of the run that the host waited in took traced than
    this machine's untraced cudaMemcpy of its size; [] without the machine's curves."""
    longer = []
    for c in run:
        if c.call is None or not c.blocks_host or reference is None:
            continue
        untraced = reference.seconds(c.direction, c.host_memory, c.bytes)
        if untraced is None:
            return []
        longer.append(max(c.call.end_ns - c.call.start_ns - int(untraced * 1e9), 0))
    return longer
