"""The case table: every combination xferscope can measure, each with a key, a one-line
description and a waiver rule, decided by the engine's own rules.

Whether a combination of direction, memory, mechanism and timing can be measured is decided in
one place, the engine's `refusal()` (engine/include/xferscope/cases.hpp), which the native
engine applies to every transfer and which this module reads through the bindings: the options
of every command, the simulated engine and the native engine therefore accept the same
combinations and refuse the others with the same words. The axes and the engine's limits come
from there too (`LIMITS`), never retyped.

A case the rules accept can still be waived on a machine that lacks what it needs (mapped
memory on a GPU that cannot map host memory, peer copies with one GPU): `waiver()` says why,
as nvbandwidth's case filters do.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

from .compiled import engine_module

_engine = engine_module()  # the rules live in the engine; it imports without a GPU or driver

DIRECTIONS: tuple[str, ...] = tuple(_engine.DIRECTIONS)  # h2d, d2h, d2d, roundtrip, p2p
MEMORY_KINDS: tuple[str, ...] = tuple(_engine.MEMORY_KINDS)  # host kinds, then device
HOST_MEMORY: tuple[str, ...] = tuple(k for k in MEMORY_KINDS if k != "device")
MECHANISMS: tuple[str, ...] = tuple(_engine.MECHANISMS)
TIMINGS: tuple[str, ...] = tuple(_engine.TIMINGS)
# most_held_copies, min_rotated_bytes, slot_alignment, cache_line, blocking_timeout_s
LIMITS: Mapping[str, float] = dict(_engine.LIMITS)
# The data pattern's seed when none is given (cases.hpp's Limits::default_seed).
DEFAULT_SEED: int = int(_engine.DEFAULT_SEED)

DEVICE_DIRECTIONS = ("d2d", "p2p")  # copy device memory; the others move host memory
# Host memory the driver stages in a copy, as malloc memory (buffer.hpp's staged_by_driver).
DRIVER_STAGED: tuple[str, ...] = tuple(_engine.DRIVER_STAGED_KINDS)

_DIRECTION_TEXT = {
    "h2d": "host to device",
    "d2h": "device to host",
    "d2d": "device to device on one GPU",
    "roundtrip": "host to device and back (NetPIPE's ping-pong)",
    "p2p": "one GPU's memory to another's",
}
_MEMORY_TEXT = {
    "pageable": "pageable memory (malloc)",
    "pinned": "pinned memory (cudaMallocHost)",
    "wc": "write-combined pinned memory",
    "registered": "pageable memory pinned in place (cudaHostRegister)",
    "mapped": "mapped pinned memory",
    "thp": "pageable memory in transparent huge pages (madvise)",
    "hugetlb": "pageable memory from the reserved huge pages (MAP_HUGETLB)",
    "readonly": "pageable memory pinned in place read-only (cudaHostRegisterReadOnly)",
    "portable": "pinned memory made under another GPU (cudaHostAllocPortable)",
    "system": "malloc memory the GPU reads in place (HMM or ATS)",
    "managed": "managed memory prefetched to the host (cudaMallocManaged)",
    "device": "device memory",
}
_MECHANISM_TEXT = {
    "memcpy": "cudaMemcpy",
    "async": "cudaMemcpyAsync on a copy engine",
    "kernel": "an SM copy kernel",
    "staged": "xferscope's staged copy (host threads and a pinned pool)",
    "driver": "the driver API's cuMemcpy",
    "driver-async": "the driver API's cuMemcpyAsync on a copy engine",
}
_TIMING_TEXT = {
    "api": "API time (host clock around calls that complete)",
    "device": "device time (CUDA events, copies held behind a blocking kernel)",
}


def memories_for(direction: str) -> tuple[str, ...]:
    """The memory kinds a direction moves: device memory for d2d and p2p, host kinds else."""
    return ("device",) if direction in DEVICE_DIRECTIONS else HOST_MEMORY


def refusal(
    direction: str,
    memory: str,
    mechanism: str,
    timing: str | None = None,
    peer_access: bool = True,
) -> str | None:
    """Why the engine cannot measure this combination, or None. `timing` None: only the checks
    that do not depend on it (a transfer is opened before it is timed)."""
    return _engine.refusal(direction, memory, mechanism, timing, peer_access) or None


def blocks_for_device_timing(
    direction: str, memory: str, mechanism: str, peer_access: bool = True
) -> bool:
    """Whether device timing holds the copies behind the blocking kernel (the engine's rule):
    only asynchronous copies that the host does not stage itself."""
    return bool(_engine.blocks_for_device_timing(direction, memory, mechanism, peer_access))


def label(
    direction: str, memory: str, mechanism: str, timing: str | None = None, peer: bool = True
) -> str:
    """'h2d pinned async device', as tables and messages name a combination."""
    parts = [direction, memory, mechanism, *([timing] if timing else [])]
    if direction == "p2p":
        parts.append("peer" if peer else "nopeer")
    return " ".join(parts)


@dataclass(frozen=True, slots=True)
class Case:
    """One combination the engine measures."""

    direction: str
    memory: str
    mechanism: str
    timing: str
    peer_access: bool = True  # p2p only

    @property
    def key(self) -> str:
        """h2d_pinned_async_device; p2p_device_async_device_peer."""
        return label(
            self.direction, self.memory, self.mechanism, self.timing, self.peer_access
        ).replace(" ", "_")

    @property
    def description(self) -> str:
        p2p = f", peer access {'on' if self.peer_access else 'off'}" * (self.direction == "p2p")
        return (
            f"{_DIRECTION_TEXT[self.direction]}: {_MEMORY_TEXT[self.memory]} by "
            f"{_MECHANISM_TEXT[self.mechanism]}{p2p}, {_TIMING_TEXT[self.timing]}"
        )

    @property
    def blocks_for_device_timing(self) -> bool:
        return blocks_for_device_timing(
            self.direction, self.memory, self.mechanism, self.peer_access
        )


def combinations() -> Iterator[tuple[str, str, str, str, bool]]:
    """Every combination of the axes, refused ones included (the contract test runs them all):
    (direction, memory, mechanism, timing, peer_access)."""
    for direction in DIRECTIONS:
        for memory in MEMORY_KINDS:
            for mechanism in MECHANISMS:
                for timing in TIMINGS:
                    for peer_access in (True, False) if direction == "p2p" else (True,):
                        yield direction, memory, mechanism, timing, peer_access


@cache
def table() -> tuple[Case, ...]:
    """Every case the engine accepts, in the order of the axes."""
    return tuple(Case(*c) for c in combinations() if refusal(*c[:4], peer_access=c[4]) is None)


def case(key: str) -> Case:
    """The case of a key; KeyError naming the key if there is none."""
    for c in table():
        if c.key == key:
            return c
    raise KeyError(f"no case {key!r}")


def waiver(
    c: Case,
    gpu: Mapping[str, Any],
    gpus: int,
    peer_access_possible: bool = True,
    host: Mapping[str, Any] | None = None,
) -> str | None:
    """Why a machine cannot run a case the rules accept, or None: `gpu` is the device's facts
    (engine.device_info), `gpus` how many there are, `peer_access_possible` whether the GPU
    pair of a p2p case can reach each other directly, `host` the host's facts
    (machine.host_facts: its huge pages)."""
    why = memory_waiver(c.memory, gpu, host)
    if why is not None:
        return why
    if c.direction == "p2p" and gpus < 2:
        return "a peer copy needs two GPUs"
    if c.direction == "p2p" and c.peer_access and not peer_access_possible:
        return "these GPUs have no direct peer access between them"
    return None


# The kinds whose waiver reads the host's facts (memory_waiver), read only for them.
HOST_FACT_KINDS = ("thp", "hugetlb")


def memory_waiver(
    memory: str, gpu: Mapping[str, Any], host: Mapping[str, Any] | None = None
) -> str | None:
    """Why this machine has no `memory` for GPU `gpu` (its facts, engine.device_info), or None:
    both engines refuse to open a transfer of it with these words, and waiver() waives its
    cases. `host`: the host's facts (machine.host_facts: its huge pages)."""
    name = f"GPU {gpu.get('index', '?')}"
    if memory == "mapped" and not gpu.get("can_map_host_memory", True):
        return f"{name} cannot map host memory into its address space"
    if memory == "system" and not gpu.get("pageable_memory_access", False):
        return (
            f"{name} cannot read malloc memory in place (pageableMemoryAccess 0: HMM needs the "
            "open kernel modules on x86, ATS a Grace Hopper)"
        )
    if memory == "readonly" and not gpu.get("host_register_read_only", False):
        return f"{name} does not support cudaHostRegisterReadOnly"
    if memory == "managed" and not gpu.get("concurrent_managed_access", False):
        return f"{name} cannot read managed memory while the CPU runs (concurrentManagedAccess 0)"
    pages = (host or {}).get("huge_pages") or {}
    if memory == "thp" and pages.get("thp") in (None, "never"):
        return "transparent huge pages are off (/sys/kernel/mm/transparent_hugepage/enabled)"
    if memory == "hugetlb" and not pages.get("hugetlb_free_bytes"):
        return (
            "no huge pages are reserved (HugePages_Free 0 in /proc/meminfo): reserve some with "
            "sysctl vm.nr_hugepages=N"
        )
    return None


# ---- experiments -------------------------------------------------------------------------------
# What `run`, `overlap` and `pageable` measure beyond the single-transfer cases above: each one
# is declared here once, with the key its results carry, the command that measures it, a one-line
# description, the transfer cases it is made of and how many GPUs it needs (its waiver rule).


@dataclass(frozen=True, slots=True)
class Experiment:
    """A measurement made of several transfers or steps, run by one command."""

    key: str  # what its results carry: run's Concurrent.kind, a document's experiment
    command: str  # the command that measures it
    description: str
    cases: tuple[str, ...] = ()  # the keys of the transfer cases it runs
    min_gpus: int = 1
    needs_peer_access: bool = False

    def waiver(self, gpus: int, peer_access_possible: bool = True) -> str | None:
        """Why a machine with `gpus` GPUs cannot run it, or None."""
        if gpus < self.min_gpus:
            return f"needs {self.min_gpus} GPUs, this machine has {gpus}"
        if self.needs_peer_access and not peer_access_possible:
            return "these GPUs have no direct peer access between them"
        return None


EXPERIMENTS: tuple[Experiment, ...] = (
    Experiment(
        "bidirectional",
        "run",
        "H2D while D2H on one GPU, pinned memory on both copy engines",
        ("h2d_pinned_async_device", "d2h_pinned_async_device"),
    ),
    Experiment(
        "pinning",
        "run",
        "what pinning costs: cudaMallocHost, cudaHostRegister and their frees, and the copies "
        "after which pinning pays",
    ),
    Experiment(
        "cpu_overlap",
        "run",
        "a D2H readback alone, then with CPU work of half its time before the wait, pinned and "
        "pageable",
        ("d2h_pinned_async_device", "d2h_pageable_async_device"),
    ),
    Experiment(
        "p2p",
        "run",
        "the peer-to-peer matrix: every GPU pair, copy engines and SMs, peer access on and off, "
        "one direction and both",
        (
            "p2p_device_async_device_peer",
            "p2p_device_kernel_device_peer",
            "p2p_device_async_device_nopeer",
        ),
        min_gpus=2,
    ),
    Experiment(
        "all_gpus_host",
        "run",
        "every GPU to the host, from the host and both at once: do the GPUs share a link",
        ("h2d_pinned_async_device", "d2h_pinned_async_device"),
        min_gpus=2,
    ),
    Experiment(
        "overlap_cpu",
        "overlap cpu",
        "asynchronous transfer: one copy issued, W seconds of CPU work, then the wait; how "
        "much of the work the copy hides",
    ),
    Experiment(
        "overlap_buffers",
        "overlap buffers",
        "a stream of chunks through N pinned buffers in rotation while the CPU consumes or "
        "produces the others (as with OpenGL pixel buffer objects)",
    ),
    Experiment(
        "overlap_gpu",
        "overlap gpu",
        "H2D, a kernel and D2H over one array, sequential against chunks over K streams, "
        "against the bound the stage times allow",
        ("h2d_pinned_async_device", "d2h_pinned_async_device"),
    ),
    Experiment(
        "pageable_ways",
        "pageable",
        "a pageable buffer sent k times: as it is, through pinned memory, registered in place "
        "or by the staged copy, setup costs counted, and where the ways cross",
        (
            "h2d_pageable_memcpy_api",
            "h2d_pinned_memcpy_api",
            "h2d_registered_memcpy_api",
            "h2d_pageable_staged_api",
        ),
    ),
)


def experiment(key: str) -> Experiment:
    """The experiment of a key; KeyError naming the key if there is none."""
    for e in EXPERIMENTS:
        if e.key == key:
            return e
    raise KeyError(f"no experiment {key!r}")
