"""Host memory on one NUMA node: the calling thread bound to the node's CPUs and its new pages
to the node's memory while a transfer lives (numactl --cpunodebind=N --membind=N for one
transfer), so its buffers are allocated, filled and copied from there. The rule of which nodes
exist is the host's facts (host.py), read here for both engines."""

from __future__ import annotations

import os
from collections.abc import Callable

from .. import host
from ..errors import EngineError

# the nodes placed now, innermost last: a placement undone gives its memory back to the one
# before it (or to the default policy)
_stack: list[int] = []


def numa_nodes() -> dict[int, str]:
    """The host's NUMA nodes that have CPUs, with their cpulists (host.py): the nodes memory
    can be placed on."""
    listed = host.host_facts().get("numa_cpus") or []
    return {node: cpus for node, cpus in enumerate(listed) if cpus}


def numa_refusal(node: int) -> str | None:
    """Why host memory cannot be placed on `node`, or None (-1: not placed)."""
    if node < 0:
        return None
    nodes = numa_nodes()
    if node not in nodes:
        have = ", ".join(map(str, nodes)) or "none listed"
        return f"there is no NUMA node {node} with CPUs on this host (it has: {have})"
    return None


class Placement:
    """The calling thread on NUMA node `node` (its CPUs and its new pages) until undo()."""

    def __init__(self, node: int, bind: Callable[[int], None]) -> None:
        cpus = numa_nodes().get(node)
        if cpus is None:
            raise EngineError(str(numa_refusal(node)))
        self.node = node
        self._bind = bind
        self._cpus = os.sched_getaffinity(0)
        os.sched_setaffinity(0, host.cpus_of(cpus))
        try:
            bind(node)
        except BaseException:
            os.sched_setaffinity(0, self._cpus)
            raise
        _stack.append(node)

    def undo(self) -> None:
        if self.node not in _stack:
            return
        _stack.remove(self.node)
        self._bind(_stack[-1] if _stack else -1)
        os.sched_setaffinity(0, self._cpus)
