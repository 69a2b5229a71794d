"""Where each traced Python process's main thread was, looked at every few milliseconds by
site/sitecustomize.py: read back, and asked which of the program's lines it was at within
stretches of time (a GPU's idle gaps with no CUDA call to name: the input pipeline's
`for x, y in loader`, or the step's own Python)."""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from .reading import DAMAGED, LEFT_OUT, jsonl_records, py_stack
from .records import (
    LOADER_FRAME,
    STDLIB,
    MainSamples,
    PyFrame,
    Trace,
    in_dataloader,
    in_frame,
    user_frame,
)

MOST_LINES = 3  # the lines named for one stretch of idle time
OWN = "/xferscope/"  # xferscope's own frames (DeviceLoader's __next__): the program's line named


def read_samples(files: Iterable[Path], unread: list[int] | None = None) -> dict[int, MainSamples]:
    """Each process's samples by pid; a line cut short (the process killed) is skipped, and a
    damaged one (not JSON, a field missing or of the wrong kind) too, counted in `unread`."""
    found: dict[int, MainSamples] = {}
    unread = [0] if unread is None else unread
    for path in sorted(files):
        pid, period = 0, 0.0
        stacks: dict[int, tuple[PyFrame, ...]] = {}
        taken: list[tuple[int, int]] = []
        for r in jsonl_records(path, unread):
            try:
                t = r.get("t")
                if t == "sample":
                    taken.append((int(r["ts"]), int(r["id"])))
                elif t == "pystack":
                    stacks[int(r["id"])] = py_stack(r)
                elif t == "samples":
                    pid, period = int(r["pid"]), float(r.get("period_s", 0.0))
            except DAMAGED:
                unread[0] += 1
        taken.sort()
        if pid and taken:
            found[pid] = MainSamples(
                period, tuple(ts for ts, _ in taken), tuple(stacks.get(i, ()) for _, i in taken)
            )
    return found


def with_samples(trace: Trace, files: Iterable[Path]) -> Trace:
    """`trace` with its processes' samples read from `files` (runner.Ran.samples)."""
    unread = [0]
    samples = read_samples(files, unread)
    warnings = trace.warnings
    if unread[0]:
        warnings += (f"{unread[0]} damaged look(s) {LEFT_OUT}",)
    return replace(trace, samples=samples, warnings=warnings)


def program_line(stack: Sequence[PyFrame]) -> str:
    """The program's own line in a stack: its innermost frame outside installed packages, the
    standard library and xferscope (a step waiting in DeviceLoader is at its `for` line)."""
    own = next((f for f in stack if not f.is_library and OWN not in f.file), None)
    frame = own or user_frame(stack)
    return "" if frame is None else str(frame)


# Where a main thread waits for its next batch: in a DataLoader (records.in_dataloader), or in
# DeviceLoader's next (file, the function's name's end)
DEVICE_LOADER_NEXT = (LOADER_FRAME[0], "__next__")
PYTORCH_LOADER = "/xferscope/transfer/frameworks/torch_loader.py"  # DeviceLoader: PyTorch's
# Where a main thread waits for a value from the device in Python (JAX reads an array's value
# through its runtime's own threads, with no CUDA call of the main thread to record): (file,
# the function's name's end)
VALUE_READS = (
    ("/jax/_src/array.py", "_value"),
    ("/jax/_src/array.py", "block_until_ready"),
    ("/jax/_src/api.py", "block_until_ready"),
    ("/jax/_src/api.py", "device_get"),
)


@dataclass(frozen=True, slots=True)
class Seen:
    """What the looks at the main thread saw in some stretches of time: how many fell in them,
    how many were waiting for the next batch (waits_for_input), the program's lines they saw with
    how many each (the most seen first, at most MOST_LINES), and the framework the waits for a
    batch went through (None: none seen)."""

    looks: int = 0
    input_looks: int = 0
    lines: tuple[tuple[str, int], ...] = ()
    framework: str | None = None
    # what the main thread was doing: the innermost frames seen (doing()), the most seen first
    doing: tuple[tuple[str, int], ...] = ()
    value_looks: int = 0  # those waiting for a value from the device (VALUE_READS)


def waits_for_input(stack: Sequence[PyFrame]) -> bool:
    """Whether a stack is a wait for the next batch: in a DataLoader's next, or DeviceLoader's."""
    return in_dataloader(stack) or in_frame(stack, *DEVICE_LOADER_NEXT)


def lines_in(
    samples: dict[int, MainSamples], pids: Iterable[int], stretches: Iterable[tuple[int, int]]
) -> Seen:
    """What the looks of the processes `pids` saw within the stretches [a, b) ns."""
    mine = [samples[p] for p in pids if p in samples]
    seen: Counter[str] = Counter()
    inner: Counter[str] = Counter()
    waiting = reading = 0
    framework: str | None = None
    for a, b in stretches:
        for s in mine:
            for i in range(bisect.bisect_left(s.ts, a), bisect.bisect_left(s.ts, b)):
                stack = s.stacks[i]
                seen[program_line(stack)] += 1
                inner[doing(stack)] += 1
                if waits_for_input(stack):
                    waiting += 1
                    framework = framework or _framework(stack)
                elif any(in_frame(stack, file, function) for file, function in VALUE_READS):
                    reading += 1
                    framework = framework or _framework(stack)
    return Seen(sum(seen.values()), waiting, tuple(seen.most_common(MOST_LINES)), framework,
                tuple((d, n) for d, n in inner.most_common(MOST_LINES) if d), reading)  # fmt: skip


def doing(stack: Sequence[PyFrame]) -> str:
    """What a look found the thread doing: its innermost frame's function, with its package
    (or its file, for the program's own): `encode_batch (tokenizers)`, `_find_and_load
    (importlib)`, `histogram (train.py)`; "" for an empty stack."""
    if not stack:
        return ""
    f = stack[0]
    if f.file.startswith("<frozen "):
        where = f.file[len("<frozen ") :].rstrip(">").split(".")[0]
    else:
        for package in ("/site-packages/", "/dist-packages/"):
            if package in f.file:
                where = f.file.split(package, 1)[1].split("/", 1)[0]
                break
        else:
            stdlib = STDLIB.search(f.file)
            where = (f.file[stdlib.end() :].split("/", 1)[0].removesuffix(".py") if stdlib
                     else f.file.rsplit("/", 1)[-1])  # fmt: skip
    return f"{f.function.rsplit('.', 1)[-1]} ({where})"


def _framework(stack: Sequence[PyFrame]) -> str | None:
    if any(f.file.endswith(PYTORCH_LOADER) for f in stack):
        return "PyTorch"
    return next((f.framework for f in stack if f.framework), None)
