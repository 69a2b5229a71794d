"""What `xferscope trace` recorded of a program, read from the injection library's JSON lines
(engine/src/trace/, one file per traced process): every copy with its API call, its pointers, a
sampled hash of its host source and its caller; memsets and kernels; the calls that copy, set,
synchronize or pin; host memory pinned; and the library's exact totals per kind, which stay right
when records beyond the limit were only counted."""

from __future__ import annotations

import bisect
import linecache
import os
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from ..core import frameworks

# CUPTI's CUpti_ActivityMemcpyKind and CUpti_ActivityMemoryKind
COPY_KINDS = {
    1: "h2d",
    2: "d2h",
    3: "h2a",
    4: "a2h",
    5: "a2a",
    6: "a2d",
    7: "d2a",
    8: "d2d",
    9: "h2h",
    10: "p2p",
}
MEMORY_KINDS = {
    0: "unknown",
    1: "pageable",
    2: "pinned",
    3: "device",
    4: "array",
    5: "managed",
    6: "device",
    7: "managed",
}
# nvprof's names for the kinds of copy
NVPROF_NAMES = {
    "h2d": "[CUDA memcpy HtoD]",
    "d2h": "[CUDA memcpy DtoH]",
    "d2d": "[CUDA memcpy DtoD]",
    "p2p": "[CUDA memcpy PtoP]",
    "h2h": "[CUDA memcpy HtoH]",
    "memset": "[CUDA memset]",
}


# frames in these are CUDA's or CUPTI's own, not the program's
CUDA_LIBRARIES = (
    "libcudart",
    "libcuda.so",
    "libcupti",
    "libxferscope_inject",
    "libc10_cuda",
    "(cuda",  # the CUDA runtime linked statically into the program: its functions by name
    "(__cuda",
    "(cudart::",
    "(libcudart",
)


# Python frames in these are libraries', not the program's own code: installed packages, the
# standard library, frozen modules
PYTHON_LIBRARIES = ("/site-packages/", "/dist-packages/", "<frozen ")
STDLIB = re.compile(r"/lib/python3\.\d+/")


@dataclass(frozen=True, slots=True)
class PyFrame:
    """One Python frame of the code that made a call."""

    file: str
    line: int
    function: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line} ({self.function})"

    def source(self) -> str:
        """The line's source text, where its file can be read here ("" elsewhere)."""
        return linecache.getline(self.file, self.line).strip()[:200]

    @property
    def is_library(self) -> bool:
        """In an installed package, the standard library or a frozen module: not the program's
        own code."""
        return any(lib in self.file for lib in PYTHON_LIBRARIES) or bool(STDLIB.search(self.file))

    @property
    def framework(self) -> str | None:
        """The framework whose package this frame is in (PyTorch, CuPy, JAX, Numba), if any."""
        for package in ("site-packages", "dist-packages"):
            _, found, rest = self.file.partition(f"/{package}/")
            if found:
                framework = frameworks.by_package(rest.split("/", 1)[0])
                return framework.name if framework else None
        return None


def shown(where: str) -> str:
    """A place as a person reads it here: a path under the current directory made relative."""
    here = os.getcwd().rstrip("/") + "/"
    return where[len(here) :] if where.startswith(here) else where


# The thread xferscope.torch.DeviceLoader moves batches on (transfer/prefetch.py's Prefetcher):
# its copies run ahead of the program's step on a side stream and its waits are for its own
# copies, which the step never waits for. Its calls are named after it, not after the frames
# of xferscope inside it, and the findings about the step's own copies and waits leave them out.
LOADER_FRAME = ("/xferscope/transfer/prefetch.py", "_run")
DATALOADER = "/torch/utils/data/dataloader.py"  # PyTorch's DataLoader: made, iterated, waited on
NO_CALLER = "(no caller recorded)"  # a copy's place where no line of the program made it
LOADER_WHERE = "xferscope.torch.DeviceLoader's thread (batches moved ahead of the step)"
# Copies one after another with no more than this between one's end and the next one's call are
# one run (a batch's small tensors, a loop's rows copied one by one)
RUN_GAP_NS = 100_000


def split_runs(copies: Iterable[Copy], joins: Callable[[Copy, Copy], bool]) -> list[list[Copy]]:
    """The copies, in order, cut into runs: each copy joins the run before it where
    joins(its last copy, the copy), else starts one."""
    out: list[list[Copy]] = []
    for c in copies:
        if out and joins(out[-1][-1], c):
            out[-1].append(c)
        else:
            out.append([c])
    return out


def unwound_lines(trace: Trace) -> dict[int, str]:
    """The line of each native copy call left without callers (the engine unwinds one native
    call in 64 after its first 1,000), by id(copy): the one line its run's unwound calls
    name (a run: the copies of one thread, direction and host memory, each called within
    RUN_GAP_NS of the last one's end; those of its size first: a renderer's run of 128
    instances' structs, then 64 lights', from two lines), else the one line the unwound calls
    of its thread, direction, host memory and size name. A CUDA C++ loop's 185 small copies a
    step, 960,009 in all, were 944,041 "(no caller recorded)" against 15,968 at their line
    (1 x H200). And of each such call that waits or sets (by id(call)), the one line the
    unwound calls of its name on its thread name."""
    main = sorted(
        (c for c in trace.copies if c.call is not None and not c.python),
        key=lambda c: (c.pid, c.call.thread if c.call else 0, c.call.start_ns if c.call else 0),
    )

    def joins(last: Copy, c: Copy) -> bool:
        return (
            last.call is not None
            and c.call is not None
            and (last.pid, last.call.thread, last.direction, last.host_memory)
            == (c.pid, c.call.thread, c.direction, c.host_memory)
            and c.call.start_ns - last.end_ns <= RUN_GAP_NS
        )

    def key(c: Copy) -> tuple[int, int, str, str, int]:
        return (c.pid, c.call.thread if c.call else 0, c.direction, c.host_memory, c.bytes)

    by_kind: dict[tuple[int, int, str, str, int], set[str | None]] = {}
    for c in main:
        if c.frames:
            by_kind.setdefault(key(c), set()).add(trace.where(c.frames))
    out: dict[int, str] = {}
    calls: dict[tuple[int, int, str], set[str | None]] = {}  # the calls': by thread and name
    for call in trace.calls:
        if call.frames and not call.python:
            calls.setdefault((call.pid, call.thread, call.name), set()).add(
                trace.where(call.frames)
            )
    for call in trace.calls:
        found = calls.get((call.pid, call.thread, call.name), set())
        if not call.frames and not call.python and len(found) == 1 and (line := next(iter(found))):
            out[id(call)] = line
    for run in split_runs(main, joins):
        sized: dict[int, set[str | None]] = {}  # the run's unwound lines by size
        for c in run:
            if c.frames:
                sized.setdefault(c.bytes, set()).add(trace.where(c.frames))
        lines = set().union(*sized.values())
        for c in run:
            if c.frames:
                continue
            found = sized.get(c.bytes) or lines or by_kind.get(key(c), set())
            if len(found) == 1 and (line := next(iter(found))):
                out[id(c)] = line
    return out


# xferscope's own native module: its threads (the staged copy's) call CUDA with no Python stack.
# The loader names its addresses after the nearest exported symbol, unrelated to them (its
# functions are hidden), so its symbol table is read instead.
ENGINE_OBJECT = "_engine.cpython"


def in_frame(stack: Sequence[PyFrame], file: str, function: str = "") -> bool:
    """Whether a stack passes through `function` ("": any) of a file ending in `file`. The frame
    reader names a method by its qualified name on Python 3.11 on (`Prefetcher._run`), older
    ones by its own; either matches."""
    return any(
        f.file.endswith(file) and (not function or f.function.rsplit(".", 1)[-1] == function)
        for f in stack
    )


def in_dataloader(stack: Sequence[PyFrame]) -> bool:
    """Whether a stack passes through PyTorch's DataLoader (made, iterated, waited on), not
    through its module's import (`import torch` runs dataloader.py's top level)."""
    return any(f.file.endswith(DATALOADER) and f.function != "<module>" for f in stack)


def on_loader_thread(stack: Sequence[PyFrame]) -> bool:
    """Whether a call's Python stack is the DeviceLoader's thread's."""
    return in_frame(stack, *LOADER_FRAME)


def user_frame(stack: Sequence[PyFrame]) -> PyFrame | None:
    """The innermost frame of the program's own code, else the innermost frame."""
    return next((f for f in stack if not f.is_library), stack[0] if stack else None)


# The frameworks whose copies a program makes are known by their packages' frames, and by the
# native libraries a call went through (a method such as Tensor.to is C++, with no Python frame
# of its package): core/frameworks.py. A Cython module's function, `__pyx_f_4cupy_4cuda_...`,
# names its package first, each name after its length (CuPy's copies go through such modules,
# named `memory.cpython-...`)
CYTHON_SYMBOL = re.compile(r"\(__pyx_[a-z0-9]+_(\d+)(\w+)")


def native_framework(frame: str) -> str | None:
    """The framework a native frame (`library+offset (symbol)`) is in: its library's name, or
    the package of the Cython module it is a function of; None for others."""
    found = frameworks.by_library(frame.split("+", 1)[0])
    cython = CYTHON_SYMBOL.search(frame)
    if found is None and cython is not None:
        length, name = int(cython.group(1)), cython.group(2)
        found = frameworks.by_package(name[:length])
    return found.name if found else None


# the device frees, which wait for the whole device (not cudaFreeAsync, which is queued)
FREES = ("cudaFree", "cuMemFree")
ALLOCS = ("cudaMalloc", "cuMemAlloc")  # device allocations (the injection's allocates)


def api_name(function: str) -> str:
    """A CUDA call's name as CUPTI gives it, without its version suffix:
    cudaMemcpyAsync_v3020 -> cudaMemcpyAsync."""
    head, _, tail = function.rpartition("_v")
    return head if head and tail.isdigit() else function


@dataclass(frozen=True, slots=True)
class Call:
    """An API call as the runtime or driver saw it: one that issued a copy, set memory, pinned
    it or synchronized; a synchronization with its callers where they were recorded."""

    function: str
    start_ns: int
    end_ns: int
    thread: int
    pid: int = 0
    frames: tuple[int, ...] = ()  # a synchronization's callers' return addresses (sampled)
    python: tuple[PyFrame, ...] = ()  # a synchronization's Python stack, innermost first
    # the tracing's own time in the call's callbacks, outside [start_ns, end_ns] (its record's,
    # before the call and after it): time the program untraced would not spend between calls
    own_ns: int = 0

    @property
    def seconds(self) -> float:
        return (self.end_ns - self.start_ns) * 1e-9

    @property
    def name(self) -> str:
        """The call's name without CUPTI's version suffix (api_name)."""
        return api_name(self.function)

    @property
    def synchronizes(self) -> bool:
        """A call that waits for the GPU's earlier work: cudaStreamSynchronize,
        cudaDeviceSynchronize, cudaEventSynchronize, or a device free (cudaFree waits for the
        whole device before it frees: FREES), or the driver's (the injection's waits_for_gpu)."""
        return "Synchronize" in self.function or self.frees

    @property
    def frees(self) -> bool:
        """A device free (cudaFree, cuMemFree): `torch.cuda.empty_cache()` and CuPy's
        `free_all_blocks()` make one a cached block."""
        return self.function.startswith(FREES) and self.name in FREES  # the first: cheap

    @property
    def allocates(self) -> bool:
        """A device allocation (cudaMalloc, cuMemAlloc): where a loop frees its blocks, the
        next step allocates them again."""
        return self.function.startswith(ALLOCS) and self.name in ALLOCS


@dataclass(frozen=True, slots=True)
class Copy:
    pid: int
    direction: str  # h2d, d2h, d2d, p2p, h2h, ...
    src: str  # pageable, pinned, device, managed, ...
    dst: str
    bytes: int
    start_ns: int  # on the GPU
    end_ns: int
    device: int
    stream: int
    is_async: bool
    correlation: int
    call: Call | None = None  # the API call that issued it
    src_ptr: int | None = None
    dst_ptr: int | None = None
    content: int | None = None  # a sampled hash of a host source's bytes (h2d)
    frames: tuple[int, ...] = ()  # the caller's return addresses (sampled)
    python: tuple[PyFrame, ...] = ()  # the Python stack, innermost first

    @property
    def seconds(self) -> float:
        return (self.end_ns - self.start_ns) * 1e-9

    @property
    def host_memory(self) -> str:
        """The host side's memory kind, or the device's for d2d and p2p."""
        return self.src if self.direction.startswith("h") else self.dst

    @property
    def crosses_link(self) -> bool:
        """Between host memory and a GPU, over its link (h2d, d2h)."""
        return self.direction in ("h2d", "d2h")

    @property
    def call_is_async(self) -> bool:
        """Issued by an asynchronous call (cudaMemcpyAsync, cuMemcpyHtoDAsync, ...)."""
        return self.call is not None and "Async" in self.call.function

    @property
    def off_main_thread(self) -> bool:
        """Issued by a thread other than its process's main one (JAX's PJRT threads, a loader's
        thread), so no call of the main thread's made it."""
        return self.call is not None and self.call.thread != self.pid

    @property
    def by_framework_thread(self) -> bool:
        """Issued by a framework's own thread, with no Python stack (JAX's PJRT threads copy a
        `jax.device_put`'s arrays), not a Python thread of the program's (a loader's)."""
        return self.off_main_thread and not self.python

    @property
    def blocks_host(self) -> bool:
        """The host waited for this copy inside its call: a synchronous call, or a pageable copy
        (which the driver stages through its own buffer)."""
        return self.call is not None and (not self.call_is_async or self.host_memory == "pageable")

    @property
    def blocked_s(self) -> float:
        """Host time blocked in the copy's call: the call's time where the host waited for the
        copy, else none."""
        return self.call.seconds if self.call is not None and self.blocks_host else 0.0

    @property
    def host_cost_s(self) -> float:
        """What the copy cost the program: its call's time where the host waited, else its GPU
        time."""
        return self.call.seconds if self.call is not None and self.blocks_host else self.seconds


@dataclass(frozen=True, slots=True)
class Interval:
    """A memset or kernel on the GPU."""

    pid: int
    what: str  # memset, kernel
    name: str
    start_ns: int
    end_ns: int
    device: int
    stream: int
    bytes: int = 0

    @property
    def seconds(self) -> float:
        return (self.end_ns - self.start_ns) * 1e-9


@dataclass(frozen=True, slots=True)
class Pin:
    """Host memory pinned (cudaMallocHost, cudaHostAlloc, cudaHostRegister, their driver
    forms): where, how much, and what the call cost."""

    pid: int
    how: str  # alloc, register
    function: str
    address: int
    bytes: int
    seconds: float | None
    frames: tuple[int, ...] = ()
    python: tuple[PyFrame, ...] = ()
    start_ns: int = 0  # when its call began (0: its call was not recorded)


@dataclass(frozen=True, slots=True)
class Range:
    """An NVTX range the program (or its framework) pushed: `torch.cuda.nvtx.range`,
    `nvtxRangePush`; a mark where it has no end (end_ns == start_ns)."""

    pid: int
    name: str
    domain: str
    start_ns: int
    end_ns: int
    thread: int = 0  # as CUPTI names it (0: not a thread's)


Timed = TypeVar("Timed", Copy, Call)  # what happened in a process at a time: a copy, a call


@dataclass(frozen=True, slots=True)
class MainSamples:
    """One process's looks at its main thread (samples.py): when (ns, CUPTI's clock), sorted,
    and the stack seen each time (innermost first)."""

    period_s: float
    ts: tuple[int, ...]
    stacks: tuple[tuple[PyFrame, ...], ...]


@dataclass(frozen=True, slots=True)
class Trace:
    """Everything recorded, over all traced processes."""

    copies: tuple[Copy, ...]
    intervals: tuple[Interval, ...]
    pins: tuple[Pin, ...]
    calls: tuple[Call, ...]  # every recorded API call (copies, syncs, allocs, pinning)
    totals: dict[str, dict[str, int]]  # per record type: records, written, b, ns
    frames: dict[int, str]  # return address -> "object+offset (symbol)"
    processes: tuple[dict[str, Any], ...]  # per process: pid, ppid, start, end, file
    dropped: int = 0  # records CUPTI dropped (its buffers were full)
    warnings: tuple[str, ...] = field(default=())
    # where kernels were recorded in windows (`trace --kernels`): (pid, opened, closed) in ns
    kernel_windows: tuple[tuple[int, int, int], ...] = field(default=())
    # each Python process's main thread, looked at every few ms (samples.py), by pid
    samples: dict[int, MainSamples] = field(default_factory=dict)
    ranges: tuple[Range, ...] = ()  # the NVTX ranges and marks the program pushed
    # what is found once and asked often (made anew, not copied, by dataclasses.replace)
    _found: dict[str, Any] = field(default_factory=dict, init=False, repr=False, compare=False)

    def line_of(self, c: Copy | Call) -> str | None:
        """A copy's or a call's line: where(), else, for a native call the engine did not
        unwind, the line its run's unwound calls name, or, a call's, the one line the unwound
        calls of its name on its thread name (unwound_lines)."""
        where = self.where(c.frames, c.python)
        if where is not None or c.frames or c.python:
            return where
        if "unwound" not in self._found:
            self._found["unwound"] = unwound_lines(self)
        lines: dict[int, str] = self._found["unwound"]
        return lines.get(id(c))

    @property
    def sampled(self) -> bool:
        """True when some records beyond the limit were only counted."""
        return any(t["records"] > t["written"] for t in self.totals.values())

    def kernels(self) -> list[Interval]:
        return [i for i in self.intervals if i.what == "kernel"]

    def waits(self) -> list[Call]:
        """The calls in which the host waited for the GPU's earlier work: the explicit waits
        (Call.synchronizes) and the copies down that block the host (a synchronous copy, or one
        to pageable memory: PyTorch's `.cpu()` and `.tolist()`, CuPy's `.get()`), each with the
        stack of its copy; in time order."""
        found = [c for c in self.calls if c.synchronizes]
        found += [
            replace(c.call, pid=c.pid, frames=c.frames, python=c.python)
            for c in self.copies
            if c.call is not None and c.direction == "d2h" and c.blocks_host
        ]
        return sorted(found, key=lambda c: c.start_ns)

    @property
    def kernel_coverage(self) -> str:
        """all, none, or sampled (some process's kernels recorded in windows only)."""
        seen = {str(p.get("kernels", "all")) for p in self.processes} or {"all"}
        return "all" if seen == {"all"} else "none" if seen == {"none"} else "sampled"

    def seen_with_kernels(self, copies: Iterable[Timed]) -> list[Timed]:
        """The copies (or calls) whose neighbouring kernels were recorded: every kernel of their
        process was, or they ran inside one of its kernel windows."""
        how = {p.get("pid"): str(p.get("kernels", "all")) for p in self.processes}
        windows: dict[int, tuple[list[int], list[int]]] = {}
        for pid, a, b in sorted(self.kernel_windows, key=lambda w: w[1]):
            starts, ends = windows.setdefault(pid, ([], []))
            starts.append(a)
            ends.append(b)
        seen = []
        for c in copies:
            mode = how.get(c.pid, "all")
            if mode == "sampled":
                starts, ends = windows.get(c.pid, ([], []))
                i = bisect.bisect_right(starts, c.start_ns) - 1
                if i < 0 or c.end_ns > ends[i]:
                    continue
            elif mode != "all":
                continue
            seen.append(c)
        return seen

    def where(self, frames: Iterable[int], python: Sequence[PyFrame] = ()) -> str | None:
        """The program's line that made the call: the innermost Python frame of its own code
        (`file:line (function)`), else the first native caller outside CUDA's own libraries,
        named."""
        if on_loader_thread(python):
            return LOADER_WHERE
        frame = user_frame(python)
        if frame is not None:
            return str(frame)
        return self.native(frames)

    def framework(self, frames: Iterable[int], python: Sequence[PyFrame] = ()) -> str | None:
        """The framework a call went through (PyTorch, CuPy, JAX, Numba): the package of a
        Python frame, else a native library it called through; None where neither tells."""
        found = next((f.framework for f in python if f.framework), None)
        if found:
            return found
        for a in frames:
            found = native_framework(self.frames.get(a, ""))
            if found:
                return found
        return None

    def engine_thread(self, frames: Iterable[int], python: Sequence[PyFrame] = ()) -> bool:
        """Made by one of xferscope's own engine threads (the staged copy's): no Python stack,
        and its first caller outside CUDA in xferscope's engine. Such a wait is for the engine's
        own copies; the program's thread waits for those apart, at its own line."""
        if python:
            return False
        name = self.native(frames)
        return name is not None and name.startswith(ENGINE_OBJECT)

    def native(self, frames: Iterable[int]) -> str | None:
        """The first native caller outside CUDA's own libraries, named."""
        for a in frames:
            name = self.frames.get(a)
            if name and not any(lib in name for lib in CUDA_LIBRARIES):
                return name
        return None
