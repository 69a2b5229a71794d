"""The diagnosis: every rule fires on the figures it is about and stays quiet on the others, and
diagnose() orders what they find.

Each case starts from a simulated run and changes one thing with dataclasses.replace, so a
rule that fires for the wrong reason, or not at all, shows. Each rule's own cases, edge by
edge, are in test_diagnose_rules.py, built with the helpers here."""

from __future__ import annotations

import copy
from dataclasses import replace

import pytest

from xferscope.core.engine.simulated import SimulatedEngine
from xferscope.core.findings import ERROR, OK, SEVERITIES, WARNING
from xferscope.core.links import pcie_peak
from xferscope.run import diagnose
from xferscope.run.diagnose import RULES
from xferscope.run.investigate import RunOptions, run_investigation
from xferscope.run.records import (
    Concurrent,
    GpuSection,
    RunResult,
    Stream,
)

MIB = 1 << 20
GEN5_X16 = pcie_peak(5, 16)
H2D_PINNED = ("h2d", "pinned", "async", "device")
D2H_PINNED = ("d2h", "pinned", "async", "device")


def _normalised(result: RunResult) -> RunResult:
    """Pin the host's and every simulated GPU's CPUs to 0-15, so no case depends on the machine
    the tests run on."""
    result = with_host(result, process_cpus="0-15")
    for gpu in result.machine["gpus"]:
        result = with_gpu(result, gpu["index"], cpu_affinity="0-15")
    return result


def one_gpu_run() -> RunResult:
    """A quick simulated run on one GPU, its CPUs pinned (the `one` fixtures)."""
    return _normalised(run_investigation(SimulatedEngine(), RunOptions(devices=(0,), quick=True)))


def two_gpu_run() -> RunResult:
    """A quick simulated run on two GPUs, its CPUs pinned (the `two` fixtures)."""
    result = run_investigation(SimulatedEngine(devices=2), RunOptions(devices=(0, 1), quick=True))
    return _normalised(result)


@pytest.fixture(scope="module")
def one() -> RunResult:
    return one_gpu_run()


@pytest.fixture(scope="module")
def two() -> RunResult:
    return two_gpu_run()


# ---- helpers -----------------------------------------------------------------------------------


def with_host(result: RunResult, **facts) -> RunResult:
    machine = copy.deepcopy(result.machine)
    machine["host"].update(facts)
    return replace(result, machine=machine)


def with_gpu(result: RunResult, index: int = 0, **facts) -> RunResult:
    machine = copy.deepcopy(result.machine)
    (gpu,) = [g for g in machine["gpus"] if g["index"] == index]
    gpu.update(facts)
    return replace(result, machine=machine)


def with_section(result: RunResult, index: int = 0, **changes) -> RunResult:
    gpus = tuple(replace(g, **changes) if g.index == index else g for g in result.gpus)
    return replace(result, gpus=gpus)


def map_curve(result: RunResult, key: tuple[str, ...], change, index: int = 0) -> RunResult:
    section = result.gpus[index]
    target = section.curve(*key)
    assert target is not None, key
    curves = tuple(change(c) if c is target else c for c in section.curves)
    return with_section(result, index, curves=curves)


def slow_largest(factor: float):
    """A curve change: the largest point's bandwidth times `factor` (its times divided by it)."""

    def change(curve):
        *rest, largest = curve.points
        slower = replace(largest, samples_s=tuple(s / factor for s in largest.samples_s))
        return replace(curve, points=(*rest, slower))

    return change


def bandwidth(result: RunResult, key: tuple[str, ...], index: int = 0) -> float:
    curve = result.gpus[index].curve(*key)
    assert curve is not None
    return curve.points[-1].bandwidth


def findings(rule, result: RunResult, code: str | None = None) -> list:
    return [f for f in rule(result) if code is None or f.code == code]


def _stream(label, direction, concurrent_bps, alone_bps, device=0):
    size = 64 * MIB
    samples = tuple(size / concurrent_bps * (1 + 0.001 * i) for i in range(3))
    return Stream(label, device, direction, None, size, samples, size / alone_bps)


# ---- every rule, firing and quiet --------------------------------------------------------------
# Each case: (rule, builder(one, two) -> run, the finding code expected, or None for quiet).


def _headline_warning(one, two):
    return with_gpu(one, pcie_peak_bps=4 * GEN5_X16)


def _pageable_quiet(one, two):
    for direction in ("h2d", "d2h"):
        pinned = one.gpus[0].curve(direction, "pinned", "memcpy", "api")
        one = map_curve(
            one,
            (direction, "pageable", "memcpy", "api"),
            lambda c, p=pinned: replace(c, points=p.points),
        )
    return one


def _downtrained(one, two):
    return map_curve(
        with_gpu(one, pcie_generation=4, pcie_peak_bps=pcie_peak(4, 16)),
        H2D_PINNED,
        slow_largest(0.45),
    )


def _numa_far(one, two):
    return with_gpu(with_host(one, process_cpus="0-31"), cpu_affinity="32-63", numa_node=1)


def _corrupt(one, two):
    return _normalised(
        run_investigation(SimulatedEngine(corrupt=True), RunOptions(devices=(0,), quick=True))
    )


def _noisy(one, two):
    gpu = one.gpus[0]
    curves = list(gpu.curves)
    for i in (0, 5, 9):
        curve = curves[i]
        curves[i] = replace(
            curve, points=(replace(curve.points[0], stopped_by="max_trials"), *curve.points[1:])
        )
    return with_section(one, curves=tuple(curves))


def _asymmetric(one, two):
    return map_curve(one, D2H_PINNED, slow_largest(0.7))


def _collapsed(one, two):
    streams = (_stream("h2d", "h2d", 28.9e9, 55e9), _stream("d2h", "d2h", 28.9e9, 55e9))
    return with_section(
        one,
        concurrent=(Concurrent("bidirectional", "bidirectional", "async", None, streams=streams),),
    )


def _gpu_failed(one, two):
    return run_investigation(
        SimulatedEngine(devices=2, failing_devices=(1,)), RunOptions(devices=(0, 1), quick=True)
    )


def _overlapping_pageable(one, two):
    """As if pageable readbacks overlapped CPU work as well as pinned ones do."""
    points = tuple(replace(o, issue_s=3e-6, total_s=o.alone_s) for o in one.gpus[0].overlap)
    return with_section(one, overlap=points)


def _gemm_points(one, **change):
    """The run's GEMM check with its fp32 point changed."""
    check = one.gpus[0].gemm
    points = tuple(dict(p, **change) if p["precision"] == "fp32" else p for p in check.points)
    return with_section(one, gemm=replace(check, points=points))


def _confidential(result, *_):
    """The run made on a confidential computing system (NVML's state, as machine.py records
    it)."""
    cc = {"enabled": True, "environment": "prod", "devtools": False, "cpu_tee": "amd_sev_snp"}
    return replace(result, machine={**result.machine, "confidential_computing": cc})


CASES = {
    "confidential_computing": [
        (_confidential, "confidential_computing"),
        (lambda one, two: one, None),
    ],
    "gemm_check": [
        (lambda one, two: _gemm_points(one, verified=False), "gemm_wrong_result"),
        (lambda one, two: _gemm_points(one, share_of_peak=0.2), "gemm_far_below_peak"),
        (
            lambda one, two: _gemm_points(one, status="failed", tflops=None, error="no memory"),
            "gemm_failed",
        ),
        (lambda one, two: one, None),
    ],
    "cpu_overlap": [
        (lambda one, two: one, "no_overlap"),
        (_overlapping_pageable, None),
        (lambda one, two: with_section(one, overlap=()), None),
    ],
    "headline_verdicts": [
        (lambda one, two: one, "verdict"),
        (_headline_warning, "verdict"),
        (lambda one, two: with_gpu(one, pcie_peak_bps=None, memory_peak_bps=None), None),
    ],
    "pageable_slow": [(lambda one, two: one, "pageable_slow"), (_pageable_quiet, None)],
    "link_downtrained": [(_downtrained, "link_downtrained"), (lambda one, two: one, None)],
    "numa_affinity": [(_numa_far, "numa_far"), (lambda one, two: one, None)],
    # the fixed host has two nodes, and the model's far node halves H2D
    "numa_far_slower": [
        (lambda one, two: one, "numa_far_slower"),
        (lambda one, two: with_section(one, numa=()), None),
    ],
    "verification_failed": [(_corrupt, "verification_failed"), (lambda one, two: one, None)],
    "noisy_or_throttled": [
        (_noisy, "noisy"),
        (lambda one, two: with_gpu(one, clock_event_reasons=0x40), "throttled"),
        (lambda one, two: with_gpu(one, clock_event_reasons=0x1), None),
    ],
    "asymmetry": [(_asymmetric, "asymmetry"), (lambda one, two: one, None)],
    "concurrency_collapse": [(_collapsed, "concurrency_collapse"), (lambda one, two: two, None)],
    "failures": [(_gpu_failed, "gpu_failed"), (lambda one, two: two, None)],
}
RULES_BY_NAME = {rule.__name__: rule for rule in RULES}


def test_every_rule_has_a_firing_and_a_quiet_case():
    assert set(CASES) == set(RULES_BY_NAME)
    for name, cases in CASES.items():
        assert any(code for _, code in cases), f"{name} never fires"
        assert any(code is None for _, code in cases), f"{name} is never quiet"


@pytest.mark.parametrize(
    ("name", "case"), [(name, i) for name, cases in CASES.items() for i in range(len(cases))]
)
def test_rule_fires_or_stays_quiet(name, case, one, two):
    build, code = CASES[name][case]
    result = build(one, two)
    found = list(RULES_BY_NAME[name](result))
    if code is None:
        assert found == [], [f.message for f in found]
    else:
        assert code in [f.code for f in found]
    # The rule's findings reach diagnose() too.
    assert {(f.code, f.figure) for f in found} <= {
        (f.code, f.figure) for f in diagnose.diagnose(result)
    }


# ---- diagnose() --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def everything(one, two) -> RunResult:
    """A run on which every rule fires, with every severity."""
    result = with_gpu(
        two,
        0,
        pcie_generation=4,
        pcie_peak_bps=pcie_peak(4, 16),
        clock_event_reasons=0x40,
        cpu_affinity="32-63",
    )
    result = with_gpu(result, 1, pcie_peak_bps=bandwidth(two, H2D_PINNED, 1) / 0.7)
    result = with_host(result, process_cpus="0-31")
    result = map_curve(result, D2H_PINNED, slow_largest(0.5))
    result = map_curve(result, H2D_PINNED, slow_largest(0.7))
    gpu0 = result.gpus[0]
    curves = list(gpu0.curves)
    for i in (0, 1, 2):
        curves[i] = replace(
            curves[i], points=tuple(replace(p, stopped_by="max_trials") for p in curves[i].points)
        )
    wrong = replace(curves[4].points[0].verification, ok=False)
    curves[4] = replace(
        curves[4], points=(replace(curves[4].points[0], verification=wrong), *curves[4].points[1:])
    )
    result = with_section(
        result,
        0,
        curves=tuple(curves),
        concurrent=_collapsed(one, two).gpus[0].concurrent,
        gemm=_gemm_points(one, share_of_peak=0.2).gpus[0].gemm,
    )
    failed = replace(result.multi[0], streams=(), status="failed", error="out of memory")
    return replace(
        _confidential(result),
        multi=(failed, *result.multi[1:]),
        interrupted=True,
        gpus=(*result.gpus, GpuSection(2, "failed", "CUDA error: gone", (), (), None)),
    )


def test_everything_fires_every_rule(everything):
    fired = {name for name, rule in RULES_BY_NAME.items() if list(rule(everything))}
    assert fired == set(RULES_BY_NAME)
    severities = {f.severity for f in diagnose.diagnose(everything)}
    assert severities == set(SEVERITIES)


def test_diagnose_sorts_the_gravest_first(everything):
    found = diagnose.diagnose(everything)
    rank = [SEVERITIES.index(f.severity) for f in found]
    assert rank == sorted(rank, reverse=True)
    assert found[0].severity == ERROR and found[-1].severity == OK
    # Within a severity the rules keep their order.
    unsorted = [f for rule in RULES for f in rule(everything)]
    for severity in SEVERITIES:
        assert [f for f in found if f.severity == severity] == [
            f for f in unsorted if f.severity == severity
        ]


def test_diagnose_is_what_the_run_records():
    result = run_investigation(SimulatedEngine(devices=2), RunOptions(devices=(0, 1), quick=True))
    assert tuple(diagnose.diagnose(result)) == result.findings


def test_warnings_and_errors_say_why_and_what_to_do(everything):
    """The contract: every warning and error has a cause and a fix, but for a measurement that
    failed (its error is the news) and an interrupted run (its fix is to run again)."""
    found = diagnose.diagnose(everything)
    grave = [f for f in found if f.severity in (WARNING, ERROR)]
    codes = {f.code for f in grave}
    assert {"measurement_failed", "incomplete", "gpu_failed", "verification_failed"} <= codes
    for f in grave:
        if f.code == "measurement_failed":
            assert f.cause == "" and f.fix == ""
        elif f.code == "incomplete":
            assert f.cause == "" and f.fix
        else:
            assert f.cause and f.fix, f.code
        assert f.message and f.figure


def test_ok_findings_carry_no_cause_or_fix(everything):
    for f in diagnose.diagnose(everything):
        if f.severity == OK:
            assert f.cause == "" and f.fix == ""
