"""NUMA placement (issue 34) on the simulated engine and the fictional two-socket host of
tests/conftest.py (the GPUs on node 0; the model's far node halves H2D, as nvbandwidth#53
reports): run measures its placement curves on each node and warns of the far one, naming the
GPU's node and the fix; a one-node host says so and measures nothing extra; sweep --numa-node
places whole curves; a placement binds and unbinds the thread as numactl would."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from xferscope import cli
from xferscope.core import host
from xferscope.core.engine import placement
from xferscope.core.engine import simulated_handles as handles
from xferscope.core.engine.simulated import SimulatedEngine
from xferscope.core.errors import EngineError
from xferscope.report.run_html import render_html
from xferscope.run.diagnose import diagnose
from xferscope.run.investigate import NUMA_CURVES, RunOptions, run_investigation


def quick_run():
    return run_investigation(SimulatedEngine(), RunOptions(devices=(0,), quick=True))


@pytest.fixture(scope="module")
def two_socket_run():
    return quick_run()


def test_run_places_host_memory_on_each_node(two_socket_run):
    gpu = two_socket_run.gpus[0]
    placed = [(c.config.numa_node, c.host_node) for c in gpu.numa]
    assert len(gpu.numa) == 2 * len(NUMA_CURVES) and placed == [(0, 0), (1, 1)] * 4
    assert all(p.verification.ok for c in gpu.numa for p in c.points)
    assert gpu.phases_s["numa"] > 0 and two_socket_run.notes == ()


def test_run_warns_of_the_far_node_once_with_the_gpus_node_and_the_fix(two_socket_run):
    (far,) = [f for f in diagnose(two_socket_run) if f.code == "numa_far_slower"]
    assert far.severity == "warning" and far.figure.endswith("/node1")
    assert "NUMA node 1 moves slower than on node 0, the GPU's" in far.message
    assert "H2D pinned 0.5" in far.message and "D2H pinned 0.8" in far.message
    assert "numactl --cpunodebind=0 --membind=0" in far.fix
    assert far.value == pytest.approx(far.reference * 0.5, rel=0.1)


def test_the_page_and_the_metrics_show_each_node(two_socket_run):
    from xferscope.run.metrics import run_metrics

    html = render_html(two_socket_run)
    assert "Host memory on each NUMA node" in html and "(the GPU&#x27;s node)" in html
    names = run_metrics(two_socket_run)
    assert "gpu0/numa/node1/h2d/pinned/async/device/bandwidth" in names


def test_a_far_node_as_fast_as_the_near_one_is_no_warning(monkeypatch):
    monkeypatch.setattr(handles, "FAR_NODE_SLOWDOWN", {"h2d": 1.0, "d2h": 1.0, "roundtrip": 1.0})
    assert not [f for f in diagnose(quick_run()) if f.code == "numa_far_slower"]


def test_a_gpu_whose_node_is_unknown_is_compared_with_the_fastest_node(two_socket_run):
    from dataclasses import replace

    machine = dict(two_socket_run.machine)
    machine["gpus"] = [dict(g, numa_node=None) for g in machine["gpus"]]
    (far,) = [
        f for f in diagnose(replace(two_socket_run, machine=machine)) if f.code == "numa_far_slower"
    ]
    assert "node 0, the fastest: the machine does not say which node the GPU is on" in far.message


def test_a_one_node_host_says_so_and_measures_nothing_extra(monkeypatch):
    one = dict(host.host_facts(), numa_nodes=1, numa_cpus=["0-11"])
    monkeypatch.setattr(host, "host_facts", lambda: one)
    run = quick_run()
    assert run.gpus[0].numa == ()
    assert run.notes == ("This host has one NUMA node: host memory placement was not measured.",)


def test_sweep_places_whole_curves_and_marks_the_gpus_node(capsys, tmp_path):
    args = ["sweep", "--simulate", "--quick", "--sizes", "1MiB,64MiB", "--no-history"]
    code = cli.main([*args, "-o", str(tmp_path), "-m", "pinned", "-d", "h2d", "--numa-node", "all"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "h2d pinned memcpy api node0 (the GPU's node)" in out and "node1" in out
    (document,) = Path(tmp_path).glob("*/sweep.json")
    curves = json.loads(document.read_text())["curves"]
    assert [(c["config"]["numa_node"], c["host_node"]) for c in curves] == [(0, 0), (1, 1)]
    near, far = (c["points"][-1]["summary"]["bandwidth_gbps"] for c in curves)
    assert far == pytest.approx(near / 2, rel=0.1)


@pytest.mark.parametrize(
    ("value", "words"),
    [("2", "there is no NUMA node 2"), ("zero", "--numa-node"), ("-1", "--numa-node")],
)
def test_a_node_the_host_lacks_is_one_line(capsys, tmp_path, value, words):
    code = cli.main(["sweep", "--simulate", "--numa-node", value, "-o", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and words in err, err


def test_the_engines_refuse_a_node_the_host_lacks():
    with pytest.raises(EngineError, match="no NUMA node 5"):
        SimulatedEngine().open_transfer(0, "h2d", "pinned", "async", 4096, 0, numa_node=5)


def test_a_placement_binds_the_thread_and_undoes_it_in_order(monkeypatch):
    calls: list[object] = []
    monkeypatch.setattr(placement.os, "sched_getaffinity", lambda pid: {0, 1})
    monkeypatch.setattr(placement.os, "sched_setaffinity", lambda pid, cpus: calls.append(cpus))
    outer = placement.Placement(1, calls.append)
    inner = placement.Placement(0, calls.append)
    inner.undo()
    outer.undo()
    outer.undo()  # once only
    node1 = host.cpus_of("6-11,18-23")
    node0 = host.cpus_of("0-5,12-17")
    assert calls == [node1, 1, node0, 0, 1, {0, 1}, -1, {0, 1}]


def test_a_placement_the_kernel_refuses_leaves_the_thread_as_it_was(monkeypatch):
    calls: list[object] = []
    monkeypatch.setattr(placement.os, "sched_getaffinity", lambda pid: {3})
    monkeypatch.setattr(placement.os, "sched_setaffinity", lambda pid, cpus: calls.append(cpus))

    def refuse(node: int) -> None:
        raise EngineError("cannot place host memory on NUMA node 1")

    with pytest.raises(EngineError):
        placement.Placement(1, refuse)
    assert calls == [host.cpus_of("6-11,18-23"), {3}] and placement._stack == []


def test_ctrl_c_during_the_placements_keeps_those_measured():
    """A stop in the middle of the NUMA phase: the run keeps the placed curves measured, the
    last one marked interrupted (found by bisecting the simulated engine's stop point)."""
    from xferscope.core import interrupt

    def stopped_after(calls: int):
        interrupt.reset()
        try:
            run = run_investigation(
                SimulatedEngine(interrupt_after=calls), RunOptions(devices=(0,), quick=True)
            )
        finally:
            interrupt.reset()
        return run, len(run.gpus[0].numa)

    low, high = 0, 20_000  # stopped before the NUMA phase; after it (or never stopped)
    assert stopped_after(high)[1] == 2 * len(NUMA_CURVES)
    while high - low > 1:
        middle = (low + high) // 2
        run, placed = stopped_after(middle)
        if 0 < placed < 2 * len(NUMA_CURVES):
            break
        low, high = (middle, high) if placed == 0 else (low, middle)
    gpu = run.gpus[0]
    assert run.interrupted and gpu.status == "interrupted" and gpu.numa
    assert len(gpu.curves) == len(quick_run().gpus[0].curves)  # the curves before it kept
    assert gpu.numa[-1].status == "interrupted"
    assert all(c.status == "complete" for c in gpu.numa[:-1])
