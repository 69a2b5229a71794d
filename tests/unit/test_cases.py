"""The case table is the one place a combination's validity is decided: the engine's rule,
exported through the bindings, asked by the options, the simulated engine and the native engine.
The contract: every combination of the axes, refusals included, gets the same answer with the
same words from each. tests/gpu/test_cases_gpu.py runs the same matrix on a GPU."""

from __future__ import annotations

import typing

import pytest

from xferscope import _engine
from xferscope.core import cases, engine
from xferscope.core.engine.simulated import SimulatedEngine
from xferscope.core.errors import EngineError
from xferscope.sweep.options import SweepOptions

SIZE = 4096


def outcome(eng, direction, memory, mechanism, timing, peer_access, peer=1):
    """What an engine says to one combination: 'ok', or the words it refuses it with."""
    try:
        t = eng.open_transfer(
            0,
            direction,
            memory,
            mechanism,
            SIZE,
            0,
            True,
            peer if direction == "p2p" else -1,
            peer_access,
        )
    except EngineError as exc:
        return str(exc)
    try:
        r = t.time(timing, SIZE, 2)
        assert r.seconds > 0 and r.iterations == 2
        assert r.blocking_kernel == (timing == "device" and t.blocks_for_device_timing)
        v = t.verify(SIZE)
        assert v.ok and v.bytes_checked == SIZE and v.first_mismatch == -1
        return "ok"
    except EngineError as exc:
        return str(exc)
    finally:
        t.close()


def expected(direction, memory, mechanism, timing, peer_access, eng=None):
    """The rule's refusal; else, for an engine, what its machine lacks (cases.memory_waiver):
    both engines refuse those with the waiver's words before allocating."""
    refused = cases.refusal(direction, memory, mechanism, timing, peer_access)
    if refused or eng is None:
        return refused or "ok"
    return engine.memory_refusal(eng, 0, memory) or "ok"


COMBINATIONS = list(cases.combinations())


def test_the_matrix_is_complete():
    # 5 directions x 12 memory kinds x 6 mechanisms x 2 timings, p2p twice (peer access on, off)
    assert len(COMBINATIONS) == (4 + 2) * 12 * 6 * 2
    assert len(cases.table()) == sum(expected(*c) == "ok" for c in COMBINATIONS)
    keys = [c.key for c in cases.table()]
    assert len(set(keys)) == len(keys), "every case has its own key"
    assert cases.case("h2d_pinned_async_device").description == (
        "host to device: pinned memory (cudaMallocHost) by cudaMemcpyAsync on a copy engine, "
        "device time (CUDA events, copies held behind a blocking kernel)"
    )


@pytest.mark.parametrize("combination", COMBINATIONS, ids=lambda c: "-".join(map(str, c)))
def test_the_simulated_engine_keeps_the_contract(combination):
    simulated = SimulatedEngine(devices=2)
    assert outcome(simulated, *combination) == expected(*combination, eng=simulated)


def test_what_a_machine_lacks_both_engines_refuse_with_the_waivers_words():
    simulated = SimulatedEngine(devices=2)  # x86 without HMM or read-only registration
    for memory, words in (
        ("system", "cannot read malloc memory in place"),
        ("readonly", "does not support cudaHostRegisterReadOnly"),
        ("hugetlb", "no huge pages are reserved"),  # the fixed host reserved none
    ):
        assert words in outcome(simulated, "h2d", memory, "async", "api", True)
    assert outcome(simulated, "h2d", "thp", "async", "api", True) == "ok"
    assert outcome(simulated, "d2h", "managed", "kernel", "device", True) == "ok"


@pytest.mark.parametrize(
    ("combination", "words"),
    [
        (("h2d", "pageable", "kernel", "api", True), "the GPU cannot address pageable memory"),
        (("d2h", "pinned", "staged", "api", True), "the staged copy moves pageable memory"),
        (("h2d", "pageable", "staged", "device", True), "API time only"),
        (("d2d", "pinned", "async", "api", True), "d2d and p2p copies move device memory"),
        (("h2d", "device", "async", "api", True), "device memory is for d2d and p2p"),
        (("p2p", "device", "memcpy", "device", True), "async or kernel mechanism"),
        (("p2p", "device", "driver-async", "api", True), "async or kernel mechanism"),
        (("p2p", "device", "kernel", "device", False), "needs peer access"),
        (("h2d", "hugetlb", "kernel", "api", True), "the GPU cannot address hugetlb memory"),
        (("d2h", "readonly", "async", "api", True), "read-only is only read by the GPU"),
        (("roundtrip", "readonly", "memcpy", "api", True), "h2d copies only"),
        (("h2d", "thp", "staged", "api", True), "the staged copy moves pageable memory"),
    ],
)
def test_refusals_say_why(combination, words):
    assert words in expected(*combination)


def test_sweep_options_offer_exactly_the_accepted_cases():
    options = SweepOptions(
        directions=("h2d", "d2h", "d2d", "roundtrip"),
        memories=cases.HOST_MEMORY,
        mechanisms=cases.MECHANISMS,
        timings=cases.TIMINGS,
        sizes=(SIZE,),
    )
    configs, skipped = options.configs()
    offered = {(c.direction, c.memory, c.mechanism, c.timing) for c in configs}
    accepted = {
        (c.direction, c.memory, c.mechanism, c.timing)
        for c in cases.table()
        if c.direction != "p2p"
    }
    assert offered == accepted
    assert "h2d pageable kernel: the GPU cannot address pageable memory" in " ".join(skipped)


def test_the_rules_and_limits_come_from_the_engine():
    assert cases.DIRECTIONS == _engine.DIRECTIONS and cases.MECHANISMS == _engine.MECHANISMS
    assert cases.LIMITS["most_held_copies"] == 128
    assert cases.LIMITS["min_rotated_bytes"] == 64 << 10


def test_the_simulated_engine_rotates_as_the_native_one_counts():
    """Rotation through the buffer the caller sized (not a fixed 256 MiB), from the engine's
    smallest rotated size, one slot per page-aligned copy."""
    sim = SimulatedEngine()
    small = cases.LIMITS["min_rotated_bytes"] // 2
    for rotation, size, slots in (
        (1 << 30, 1 << 20, 1024),
        (64 << 20, 1 << 20, 64),
        (64 << 20, small, 1),
        (0, 1 << 20, 1),
    ):
        t = sim.open_transfer(0, "h2d", "pinned", "async", size, rotation)
        r = t.time("device", size, 10_000)
        assert r.footprint_bytes == min(slots, 10_000) * size, (rotation, size)


@pytest.mark.parametrize("kind", engine.RESULT_CLASSES)
def test_the_result_protocols_match_the_engines_classes(kind):
    """The type checker's view of each result (core/engine.py) is the engine's class."""
    protocol = getattr(engine, kind)
    fields = [n for n in vars(protocol) if isinstance(vars(protocol)[n], property)]
    native = getattr(_engine, kind)
    assert fields, kind
    assert set(fields) == {n for n in dir(native) if not n.startswith("_")}
    hints = typing.get_type_hints(getattr(protocol, fields[0]).fget)
    assert "return" in hints


def test_results_are_read_only():
    r = engine.result(
        "TrialTiming",
        seconds=1.0,
        iterations=1,
        copies_per_iteration=1,
        blocking_kernel=False,
        blocking_timed_out=False,
        footprint_bytes=4,
    )
    with pytest.raises(AttributeError):
        r.seconds = 2.0


def test_waivers_name_what_the_machine_lacks():
    p2p = cases.case("p2p_device_async_device_peer")
    assert cases.waiver(p2p, {"index": 0}, gpus=1) == "a peer copy needs two GPUs"
    assert "no direct peer access" in cases.waiver(p2p, {}, gpus=2, peer_access_possible=False)
    mapped = cases.case("h2d_mapped_async_device")
    assert "cannot map host memory" in cases.waiver(mapped, {"can_map_host_memory": False}, 1)
    assert cases.waiver(mapped, {"can_map_host_memory": True}, 1) is None


# ---- experiments and `xferscope cases` ------------------------------------------------------


def test_every_experiment_runs_declared_cases_and_keys_are_unique():
    keys = [c.key for c in cases.table()]
    assert len(keys) == len(set(keys))
    experiments = [e.key for e in cases.EXPERIMENTS]
    assert len(experiments) == len(set(experiments))
    for e in cases.EXPERIMENTS:
        for key in e.cases:
            assert cases.case(key)  # KeyError if not declared
    with pytest.raises(KeyError, match="no experiment 'nope'"):
        cases.experiment("nope")


def test_what_run_measures_is_declared_in_the_case_table():
    from xferscope.run.investigate import RUN_CASES, RunOptions, run_investigation
    from xferscope.run.streams import concurrent

    assert len(RUN_CASES) == 23 and all(cases.case(k) for k in RUN_CASES)
    result = run_investigation(SimulatedEngine(devices=2), RunOptions(devices=(0, 1), quick=True))
    kinds = {c.kind for c in result.multi} | {c.kind for g in result.gpus for c in g.concurrent}
    assert kinds == {"bidirectional", "p2p", "all_gpus_host"}
    assert all(cases.experiment(k).command == "run" for k in kinds)
    with pytest.raises(KeyError, match="undeclared"):
        concurrent(SimulatedEngine(), "undeclared", "x", [], 1 << 20, None)  # type: ignore[arg-type]


def test_experiment_waivers():
    p2p = cases.experiment("p2p")
    assert p2p.waiver(1) == "needs 2 GPUs, this machine has 1"
    assert p2p.waiver(2) is None
    assert cases.experiment("bidirectional").waiver(1) is None


def test_cases_command_lists_every_case_with_its_waiver(capsys):
    import json

    from xferscope import cli

    assert cli.main(["cases", "--simulate", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [r["key"] for r in doc["cases"]] == [c.key for c in cases.table()]
    assert [e["key"] for e in doc["experiments"]] == [e.key for e in cases.EXPERIMENTS]
    waived = {r["key"]: r["waived"] for r in doc["cases"]}
    assert waived["p2p_device_async_device_peer"] == "a peer copy needs two GPUs"
    assert waived["h2d_pinned_async_device"] is None
    assert doc["waivers_checked"] is True and doc["gpus"] == 1
    used = {r["key"]: r["used_by"] for r in doc["cases"]}
    assert used["h2d_pageable_staged_api"] == ["sweep", "run", "pageable"]
    assert used["roundtrip_pinned_async_device"] == ["sweep"]
    assert cli.main(["cases", "--simulate"]) == 0
    out = capsys.readouterr().out
    assert "h2d_pinned_async_device" in out and "needs 2 GPUs, this machine has 1" in out


def test_cases_without_a_gpu_lists_the_table_unchecked(capsys, monkeypatch):
    from xferscope import cli
    from xferscope.core.errors import NoDeviceError

    class NoGpu(SimulatedEngine):
        def device_count(self) -> int:
            raise NoDeviceError("no CUDA device: test")

    monkeypatch.setattr("xferscope.cli.common.open_engine", lambda simulate: NoGpu())
    assert cli.main(["cases"]) == 0
    out = capsys.readouterr().out
    assert "waivers not checked: no CUDA device: test" in out
    assert "h2d_pinned_async_device" in out
