"""Latency seen from the GPU in `run` (pointer chases), through the simulated engine: the same
refusals as the native engine (its own rule, chase_refusal), the points a default run makes and
a quick one leaves out (its plan says so), their JSON, and what the tables print."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from xferscope.core.engine.simulated import SimulatedEngine
from xferscope.core.errors import EngineError
from xferscope.report.run_html_tables import chase_table
from xferscope.run.investigate import RunOptions, run_investigation
from xferscope.run.records import run_from_dict, run_to_dict
from xferscope.sweep.chase import CHASE_BYTES, CHASE_STRIDE, ChasePoint


@pytest.fixture(scope="module")
def two_gpu_run():
    return run_investigation(SimulatedEngine(devices=2), RunOptions(devices=(0, 1)))


def test_a_default_run_chases_device_host_and_a_peers_memory(two_gpu_run):
    for gpu in two_gpu_run.gpus:
        kinds = [(c.memory, c.peer) for c in gpu.chase]
        assert kinds == [("device", None), ("pinned", None), ("device", 1 - gpu.index)]
        for c in gpu.chase:
            assert c.verified and c.bytes == CHASE_BYTES and c.stride == CHASE_STRIDE
            assert len(c.ns_per_read) == 5 and c.reads > 0
        device, pinned, peer = (c.median_ns for c in gpu.chase)
        assert device < peer < pinned
        assert gpu.phases_s["chase"] > 0


def test_a_chase_survives_its_json(two_gpu_run):
    document = json.loads(json.dumps(run_to_dict(two_gpu_run)))
    assert document["gpus"][0]["chase"][1]["median_ns"] == two_gpu_run.gpus[0].chase[1].median_ns
    assert run_from_dict(document).gpus[1].chase == two_gpu_run.gpus[1].chase


def test_a_quick_run_leaves_them_out_and_its_plan_says_so():
    run = run_investigation(SimulatedEngine(), RunOptions(devices=(0,), quick=True))
    document = run_to_dict(run)
    assert run.gpus[0].chase == () and "chase" not in document["gpus"][0]
    assert document["options"]["plan"]["chase_trials"] == 0


def test_one_gpu_chases_no_peer():
    run = run_investigation(SimulatedEngine(), RunOptions(devices=(0,)))
    assert [c.memory for c in run.gpus[0].chase] == ["device", "pinned"]


@pytest.mark.parametrize(
    "args, words",
    [
        ((0, "pageable", 1 << 20, 4096, 100, 1), "cannot read pageable memory"),
        ((0, "pinned", 1 << 20, 4096, 100, 1, 1), "reads that GPU's device memory"),
        ((0, "device", 1 << 20, 12, 100, 1), "multiple of 8"),
        ((0, "device", 4096, 4096, 100, 1), "two strides"),
        ((0, "device", 1 << 20, 4096, -1, 1), "reads of 0 or more"),
        ((0, "nvme", 1 << 20, 4096, 100, 1), "unknown memory kind 'nvme'"),
    ],
)
def test_the_simulated_engine_refuses_what_the_engine_refuses(args, words):
    with pytest.raises(EngineError, match=words):
        SimulatedEngine(devices=2).chase(*args)


def test_a_failed_or_wrong_chase_is_shown_as_such(two_gpu_run, capsys):
    from rich.console import Console

    from xferscope.report.run_tables import headline_table

    gpu = two_gpu_run.gpus[0]
    failed = ChasePoint("pinned", None, CHASE_BYTES, CHASE_STRIDE, 0, (), None, "out of memory")
    wrong = replace(gpu.chase[0], verified=False)
    run = replace(two_gpu_run, gpus=(replace(gpu, chase=(wrong, failed)),))
    Console(width=200, record=True).print(headline_table(run))
    out = capsys.readouterr().out
    assert "WRONG CHAIN" in out and "failed: out of memory" in out
    html = chase_table((wrong, failed, gpu.chase[1]))
    assert "NO" in html and "out of memory" in html and "1.2" in html


def test_sweep_chases_each_memory_a_gpu_thread_reads(capsys, tmp_path):
    from pathlib import Path

    from xferscope import cli
    from xferscope.sweep.records import from_dict

    args = ["sweep", "--simulate", "--quick", "--sizes", "1MiB", "--no-history", "--chase"]
    code = cli.main([*args, "-o", str(tmp_path), "-m", "pageable,pinned,managed,system,thp"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "Latency seen from the GPU" in out and "managed host memory" in out
    (document,) = Path(tmp_path).glob("*/sweep.json")
    doc = json.loads(document.read_text())
    # pageable and thp: no address a GPU thread can read; system: waived on this machine
    assert [c["memory"] for c in doc["chases"]] == ["device", "pinned", "managed"]
    assert all(c["verified"] and c["median_ns"] > 0 for c in doc["chases"])
    assert from_dict(doc).chases[1].label == "pinned host memory"


def test_a_sweep_without_chase_has_none(capsys, tmp_path):
    from pathlib import Path

    from xferscope import cli

    code = cli.main(["sweep", "--simulate", "--quick", "--sizes", "1MiB", "-o", str(tmp_path)])
    assert code == 0
    (document,) = Path(tmp_path).glob("*/sweep.json")
    assert "chases" not in json.loads(document.read_text())
