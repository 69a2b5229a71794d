"""Traces made by hand for the trace tests: a GPU's kernel, and a loop fed a batch a step."""

from __future__ import annotations

import itertools

from xferscope.trace.records import Copy, Interval, PyFrame, Trace


def _kernel(start: int, end: int, device: int = 0) -> Interval:
    return Interval(1, "kernel", "k", start, end, device, 7)


def _fed_loop(starts: list[int], at: tuple, looks: tuple = (), then: int = 0) -> Trace:
    """A loop whose step at each of `starts` (ns) copies a batch up from the line `at` (its
    call 0.1 ms before, the copy 0.1 ms) and then computes until 3 ms past the start; with
    `looks`, a stack, the main thread is seen there every 1 ms while the GPU waits; with
    `then` (ns), a second copy from the same line that long after the first ends (the labels
    after the images)."""
    from xferscope.trace.records import Call, MainSamples

    copies, kernels, calls = [], [], []
    seen: list[int] = []
    for i, t in enumerate(starts):
        for n, a in enumerate((t, t + 100_000 + then) if then else (t,)):
            call = Call("cudaMemcpyAsync_v3020", a - 100_000 + 20_000 * n, a - 50_000, 1, 1)
            calls.append(call)
            copies.append(Copy(1, "h2d", "pinned", "device", 1 << 20, a, a + 100_000, 0, 7,
                               True, len(copies), call, python=at))  # fmt: skip
        kernels.append(_kernel(copies[-1].end_ns, t + 3_000_000))
        if looks and i + 1 < len(starts):
            seen += range(t + 3_500_000, starts[i + 1] - 200_000, 1_000_000)
    samples = {1: MainSamples(1e-3, tuple(seen), tuple(looks for _ in seen))} if looks else {}
    return Trace(tuple(copies), tuple(kernels), (), tuple(calls), {}, {}, (), samples=samples)


def loader_loop(steps: int, step_ms: int, epoch_ms: int, epochs_at: tuple[int, ...]) -> Trace:
    """`steps` steps `step_ms` apart copying a batch at train.py:43, fed by a DataLoader (the
    main thread seen in its next while the GPU waits), `epoch_ms` at each step of `epochs_at`
    (the workers starting again)."""
    ms = 1_000_000
    at = (PyFrame("train.py", 43, "train"),)
    looks = (PyFrame("/site-packages/torch/utils/data/dataloader.py", 9, "next"),
             PyFrame("train.py", 42, "train"))  # fmt: skip
    lengths = ((epoch_ms if i in epochs_at else step_ms) * ms for i in range(steps))
    return _fed_loop(list(itertools.accumulate(lengths)), at, looks)
