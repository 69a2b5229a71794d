"""NUMA placement with the native engine on a real host (the lent machines have one node):
a placed transfer's pages land on its node and the thread's CPUs come back as they were; a node
the host lacks is refused; a one-node host's run says it measured no placement. Skipped without
a GPU."""

from __future__ import annotations

import os

import pytest

from xferscope.core.engine.placement import numa_nodes
from xferscope.core.errors import EngineError
from xferscope.run.investigate import numa_notes

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("memory", ["pageable", "registered", "thp"])
def test_a_placed_transfer_lands_on_its_node_and_lets_the_thread_go(native_engine, memory):
    node = max(numa_nodes())
    before = os.sched_getaffinity(0)
    t = native_engine.open_transfer(0, "h2d", memory, "memcpy", 8 << 20, 0, numa_node=node)
    try:
        t.fill(11)
        assert t.host_node() == node
        assert t.verify(8 << 20).ok
    finally:
        t.close()
    assert os.sched_getaffinity(0) == before


def test_a_node_the_host_lacks_is_refused(native_engine):
    missing = max(numa_nodes()) + 3
    with pytest.raises(EngineError, match=f"no NUMA node {missing}"):
        native_engine.open_transfer(0, "h2d", "pinned", "async", 4096, 0, numa_node=missing)


def test_a_one_node_host_says_it_measured_no_placement():
    if len(numa_nodes()) > 1:
        assert numa_notes() == ()
    else:
        assert "one NUMA node" in numa_notes()[0]
