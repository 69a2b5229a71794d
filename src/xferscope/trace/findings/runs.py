"""Runs of many small copies, one after another (a run: each called within RUN_GAP_NS of the
last one's end), that one copy of their bytes would replace: found once a context, for the
small copies' finding (small.py), and for the input's wait (starving.py), whose host time
away is theirs to issue where its uploads are in them."""

from __future__ import annotations

import bisect
from collections import defaultdict

from ..records import RUN_GAP_NS, Copy, Trace, split_runs
from .base import Context

SMALL_BYTES = 256 << 10  # copies this small pay their fixed cost more than their bytes
BATCH_MIN = 16  # this many small copies in a row (a run: RUN_GAP_NS) make a batch worth merging


def small_runs(context: Context) -> list[list[Copy]]:
    """The runs of BATCH_MIN small copies or more (one_put's joined), found once a context."""
    return context.once("small_runs", lambda: _small_runs(context.trace))


def _small_runs(trace: Trace) -> list[list[Copy]]:
    def small(c: Copy) -> bool:
        return c.bytes <= SMALL_BYTES and c.crosses_link

    def joins(last: Copy, c: Copy) -> bool:
        return (
            small(last)
            and small(c)
            and (last.pid, last.direction, last.host_memory, last.stream)
            == (c.pid, c.direction, c.host_memory, c.stream)
            and (c.call.start_ns if c.call else c.start_ns) - last.end_ns <= RUN_GAP_NS
        )

    runs = one_put(trace, split_runs(trace.copies, joins))
    return [r for r in runs if len(r) >= BATCH_MIN and small(r[0])]


def one_put(trace: Trace, runs: list[list[Copy]]) -> list[list[Copy]]:
    """The runs, those of a framework's own threads (no Python stack, off the main thread: JAX's
    PJRT threads) joined where no kernel of their GPU started between them and its kernels
    were recorded there: one `jax.device_put` of a list, whose arrays the main thread hands
    over one by one (a buffer made each), pauses over RUN_GAP_NS between its copies (a 256
    sample list: 4 runs a step, the gaps between them left unpriced), and one put of the
    stacked arrays saves them all."""
    starts: dict[int, list[int]] = defaultdict(list)
    for k in trace.kernels():
        starts[k.device].append(k.start_ns)
    for each in starts.values():
        each.sort()
    seen = {id(c) for c in trace.seen_with_kernels([c for run in runs for c in run])}

    out: list[list[Copy]] = []
    joining = False  # whether the last run of `out` is a framework thread's, all seen
    for run in runs:
        handed = all(c.by_framework_thread and id(c) in seen for c in run)
        last = out[-1] if out else None
        if (
            last is not None
            and joining
            and handed
            and (last[-1].pid, last[-1].device, last[-1].direction, last[-1].host_memory)
            == (run[0].pid, run[0].device, run[0].direction, run[0].host_memory)
            and bisect.bisect_left(starts[run[0].device], run[0].start_ns)
            == bisect.bisect_right(starts[run[0].device], last[-1].end_ns)
        ):
            last.extend(run)
        else:
            out.append(list(run))
            joining = handed
    return out
