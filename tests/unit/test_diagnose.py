"""The diagnosis: every rule fires on the figures it is about and stays quiet on the others.

Each case starts from a simulated run and changes one thing with dataclasses.replace, so a
rule that fires for the wrong reason, or not at all, shows."""

from __future__ import annotations

import copy
import re
from dataclasses import replace

import pytest

from xferscope.core.engine.simulated import SimulatedEngine
from xferscope.core.findings import ERROR, INFO, OK, SEVERITIES, WARNING
from xferscope.core.links import pcie_peak
from xferscope.core.units import format_bytes
from xferscope.run import diagnose
from xferscope.run.diagnose import RULES
from xferscope.run.investigate import RunOptions, gpu_curves, run_investigation
from xferscope.run.records import (
    Concurrent,
    GpuSection,
    RunResult,
    Stream,
)

from .run_samples import sample_run

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


@pytest.fixture(scope="module")
def one() -> RunResult:
    return _normalised(run_investigation(SimulatedEngine(), RunOptions(devices=(0,), quick=True)))


@pytest.fixture(scope="module")
def two() -> RunResult:
    result = run_investigation(SimulatedEngine(devices=2), RunOptions(devices=(0, 1), quick=True))
    return _normalised(result)


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


# ---- headline verdicts -------------------------------------------------------------------------


def _pcie_verdicts(result):
    return [
        f
        for f in findings(diagnose.headline_verdicts, result, "verdict")
        if "/h2d/" in f.figure or "/d2h/" in f.figure
    ]


def test_headline_is_ok_at_88_percent_of_the_link(one):
    verdicts = _pcie_verdicts(one)
    assert [f.figure for f in verdicts] == [
        "gpu0/h2d/pinned/async/device/bandwidth",
        "gpu0/d2h/pinned/async/device/bandwidth",
    ]
    for f in verdicts:
        assert f.severity == OK
        assert f.reference == pytest.approx(GEN5_X16)
        assert 0.86 < f.value / f.reference < 0.90
        assert "88%" in f.message or "87%" in f.message
        assert f.cause == "" and f.fix == ""


def test_headline_is_a_warning_well_below_the_link(one):
    verdicts = _pcie_verdicts(_headline_warning(one, None))
    assert [f.severity for f in verdicts] == [WARNING, WARNING]
    assert all(f.value / f.reference < 0.6 for f in verdicts)
    assert all(f.cause and f.fix for f in verdicts)


@pytest.mark.parametrize(
    ("share", "severity"), [(0.55, WARNING), (0.62, INFO), (0.78, INFO), (0.82, OK)]
)
def test_headline_severity_at_the_edges(one, share, severity):
    link = bandwidth(one, H2D_PINNED) / share
    (h2d, _) = _pcie_verdicts(with_gpu(one, pcie_peak_bps=link))
    assert h2d.value / h2d.reference == pytest.approx(share)
    assert h2d.severity == severity


def test_headline_is_info_between_60_and_80_percent(one):
    link = bandwidth(one, H2D_PINNED) / 0.7
    verdicts = _pcie_verdicts(with_gpu(one, pcie_peak_bps=link))
    assert [f.severity for f in verdicts] == [INFO, INFO]
    assert all(0.6 <= f.value / f.reference < 0.8 for f in verdicts)


def test_headline_rates_device_to_device_against_memory(one):
    (d2d,) = [f for f in diagnose.headline_verdicts(one) if "/d2d/" in f.figure]
    assert d2d.severity == OK
    slow = with_gpu(one, memory_peak_bps=one.machine["gpus"][0]["memory_peak_bps"] * 2)
    (d2d,) = [f for f in diagnose.headline_verdicts(slow) if "/d2d/" in f.figure]
    assert d2d.severity == INFO


def test_headline_skips_invalid_and_unmeasured_gpus(two):
    failed = with_section(
        two, 1, status="failed", error="CUDA error: x", curves=(), concurrent=(), pinning=None
    )
    assert {f.gpu for f in diagnose.headline_verdicts(failed)} == {0}


# ---- pageable --------------------------------------------------------------------------------


def test_pageable_slow_fires_on_the_model_for_both_directions(one):
    found = findings(diagnose.pageable_slow, one)
    assert [f.figure for f in found] == [
        "gpu0/h2d/pageable/memcpy/api/bandwidth",
        "gpu0/d2h/pageable/memcpy/api/bandwidth",
    ]
    for f in found:
        assert f.severity == WARNING and f.value < f.reference / 1.5
        assert "cudaMallocHost" in f.fix
        # The run measured what registering costs, so the fix says when it pays.
        assert "registering a buffer" in f.fix


def test_pageable_slow_without_pinning_costs_says_nothing_of_registering(one):
    (f, _) = findings(diagnose.pageable_slow, with_section(one, pinning=None))
    assert "registering a buffer" not in f.fix


def test_pageable_slow_is_quiet_when_pageable_is_as_fast_as_pinned(one):
    assert findings(diagnose.pageable_slow, _pageable_quiet(one, None)) == []


# ---- link trained down -------------------------------------------------------------------------


def test_link_downtrained_and_slow_is_a_warning(one):
    result = _downtrained(one, None)
    (f,) = findings(diagnose.link_downtrained, result)
    assert f.code == "link_downtrained" and f.severity == WARNING and f.gpu == 0
    assert "Gen4 x16" in f.message and "Gen5 x16" in f.message
    assert f.value == 416 and f.reference == 516
    assert f.cause and f.fix


def test_link_downtrained_but_at_full_speed_is_info(one):
    result = with_gpu(one, pcie_generation=4, pcie_peak_bps=pcie_peak(4, 16))
    assert bandwidth(result, H2D_PINNED) >= 0.8 * result.machine["gpus"][0]["pcie_peak_max_bps"]
    (f,) = findings(diagnose.link_downtrained, result)
    assert f.severity == INFO and "power-saving" in f.message


def test_link_narrower_than_its_max_is_a_warning(one):
    result = with_gpu(one, pcie_width=8, pcie_peak_bps=pcie_peak(5, 8))
    result = map_curve(result, H2D_PINNED, slow_largest(0.5))
    (f,) = findings(diagnose.link_downtrained, result)
    assert f.severity == WARNING and "x8" in f.message


def test_link_at_its_max_or_unknown_is_quiet(one):
    assert findings(diagnose.link_downtrained, one) == []
    assert findings(diagnose.link_downtrained, with_gpu(one, pcie_generation_max=None)) == []


# ---- NUMA --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("process", "local", "code"),
    [
        ("0-31", "32-63", "numa_far"),
        ("0-47", "32-63", "affinity_mismatch"),
        ("0-15,32-47", "32-63", "affinity_mismatch"),
        ("32-47", "32-63", None),
        ("40", "32-63", None),
        ("0-31", None, None),
        (None, "32-63", None),
        ("", "32-63", None),
    ],
)
def test_numa_affinity(one, process, local, code):
    result = with_gpu(with_host(one, process_cpus=process), cpu_affinity=local, numa_node=1)
    found = findings(diagnose.numa_affinity, result)
    assert [f.code for f in found] == ([code] if code else [])
    for f in found:
        assert f.severity == WARNING and f.gpu == 0
        assert "--cpunodebind=1" in f.fix and f.cause


# ---- verification ------------------------------------------------------------------------------


def test_one_wrong_point_fails_verification_of_its_curve(one):
    def corrupt(curve):
        point = curve.points[3]
        wrong = replace(point.verification, ok=False, mismatched_bytes=7, first_mismatch=12)
        return replace(
            curve, points=(*curve.points[:3], replace(point, verification=wrong), *curve.points[4:])
        )

    (f,) = findings(diagnose.verification_failed, map_curve(one, D2H_PINNED, corrupt))
    assert f.severity == ERROR and f.gpu == 0
    assert f.figure == "gpu0/d2h/pinned/async/device/bandwidth"
    assert f.value == 7.0
    assert "1 of 8 sizes" in f.message and "offset 12" in f.message
    assert "(7 B wrong at " in f.message and not re.search(r"\d{5,}", f.message), f.message


def test_corrupt_run_fails_verification_of_every_curve(one):
    found = findings(diagnose.verification_failed, _corrupt(one, None))
    assert len(found) == len(gpu_curves(0)) and {f.severity for f in found} == {ERROR}


# ---- noise and throttling ----------------------------------------------------------------------


def test_three_noisy_points_are_a_warning(one):
    (f,) = findings(diagnose.noisy_or_throttled, _noisy(one, None))
    assert f.code == "noisy" and f.severity == WARNING and f.gpu == 0
    assert "3 sizes" in f.message


def test_the_noisiest_size_is_named_as_a_person_reads_it(one):
    curves = list(one.gpus[0].curves)
    for i in (0, 5, 9):  # the largest size of three curves, the first the noisiest
        last = curves[i].points[-1]
        spread = 2.0 if i == 0 else 1.2  # the largest trial this many times the smallest
        samples = (last.samples_s[0], last.samples_s[0] * spread, *last.samples_s[1:])
        noisy = replace(last, stopped_by="max_trials", samples_s=samples)
        curves[i] = replace(curves[i], points=(*curves[i].points[:-1], noisy))
    (f,) = findings(diagnose.noisy_or_throttled, with_section(one, curves=tuple(curves)))
    size = format_bytes(curves[0].points[-1].bytes)
    assert f.message.endswith(f"at {size})") and size.endswith("iB"), f.message
    assert not re.search(r"\d{5,}", f.message), f.message


def test_two_noisy_points_are_not(one):
    gpu = one.gpus[0]
    curves = list(gpu.curves)
    for i in (0, 5):
        curves[i] = replace(
            curves[i],
            points=(replace(curves[i].points[0], stopped_by="max_trials"), *curves[i].points[1:]),
        )
    assert findings(diagnose.noisy_or_throttled, with_section(one, curves=tuple(curves))) == []


@pytest.mark.parametrize(
    ("reasons", "names"),
    [
        (0x40, ["software thermal"]),
        (0x4 | 0x80, ["power cap", "hardware thermal"]),
        (0x1, []),
        (0, []),
        (None, []),
    ],
)
def test_clock_event_reasons(one, reasons, names):
    found = findings(diagnose.noisy_or_throttled, with_gpu(one, clock_event_reasons=reasons))
    if not names:
        assert found == []
        return
    (f,) = found
    assert f.code == "throttled" and f.severity == WARNING
    assert f.figure == "gpu0/clock_event_reasons" and f.value == float(reasons)
    for name in names:
        assert name in f.message


# ---- asymmetry ---------------------------------------------------------------------------------


def test_d2h_30_percent_slower_is_asymmetric(one):
    result = _asymmetric(one, None)
    (f,) = findings(diagnose.asymmetry, result)
    assert f.severity == WARNING and f.gpu == 0
    assert f.figure == "gpu0/d2h/pinned/async/device/bandwidth"
    # 30% slower than the simulated D2H, whose noise moves the H2D beside it by a point or so
    slower = 1 - bandwidth(result, D2H_PINNED) / bandwidth(result, H2D_PINNED)
    assert 0.28 < slower < 0.33
    assert "D2H" in f.message and f"D2H {slower:.0%} slower" in f.message
    assert f.value == pytest.approx(bandwidth(result, D2H_PINNED))
    assert f.reference == pytest.approx(bandwidth(result, H2D_PINNED))


def test_h2d_slower_names_h2d(one):
    result = map_curve(one, H2D_PINNED, slow_largest(0.6))
    (f,) = findings(diagnose.asymmetry, result)
    slower = 1 - bandwidth(result, H2D_PINNED) / bandwidth(result, D2H_PINNED)
    assert 0.38 < slower < 0.43
    assert f"H2D {slower:.0%} slower" in f.message and "/h2d/" in f.figure


def test_5_percent_apart_is_not_asymmetric(one):
    assert findings(diagnose.asymmetry, map_curve(one, D2H_PINNED, slow_largest(0.95))) == []


# ---- concurrency -------------------------------------------------------------------------------


def test_bidirectional_barely_above_one_direction_collapses(one):
    (f,) = findings(diagnose.concurrency_collapse, _collapsed(one, None))
    assert f.severity == WARNING and f.gpu == 0
    assert f.figure == "gpu0/concurrent/bidirectional/total_bandwidth"
    assert f.value == pytest.approx(2 * 28.9e9, rel=0.01)
    assert f.reference == pytest.approx(2 * 55e9)
    assert f.cause and f.fix


def test_normal_bidirectional_does_not_collapse(one):
    assert findings(diagnose.concurrency_collapse, one) == []


def test_all_gpus_below_one_gpu_alone_collapses(two):
    streams = tuple(_stream(f"h2d gpu{i}", "h2d", 20e9, 55e9, i) for i in (0, 1))
    collapsed = Concurrent("all_gpus_host", "all_gpus/h2d", "async", None, streams=streams)
    multi = tuple(collapsed if c.label == "all_gpus/h2d" else c for c in two.multi)
    (f,) = findings(diagnose.concurrency_collapse, replace(two, multi=multi))
    assert f.gpu is None and f.figure == "multi/all_gpus/h2d/total_bandwidth"
    assert f.value == pytest.approx(40e9, rel=0.01) and f.reference == pytest.approx(55e9)


def test_failed_or_single_stream_measurements_are_not_judged(one):
    streams = (_stream("h2d", "h2d", 10e9, 55e9), _stream("d2h", "d2h", 10e9, 55e9))
    failed = Concurrent(
        "bidirectional", "bidirectional", "async", None, "failed", "x", streams=streams
    )
    single = Concurrent("bidirectional", "bidirectional", "async", None, streams=streams[:1])
    for c in (failed, single):
        assert findings(diagnose.concurrency_collapse, with_section(one, concurrent=(c,))) == []


# ---- failures ----------------------------------------------------------------------------------


def test_failed_gpu_is_an_error():
    result = sample_run(gpus=2, failed_gpu=1)
    (f,) = findings(diagnose.failures, result)
    assert f.code == "gpu_failed" and f.severity == ERROR and f.gpu == 1
    assert "cudaErrorLaunchFailure" in f.message and f.cause and f.fix


def test_interrupted_run_is_incomplete(two):
    result = replace(
        two,
        interrupted=True,
        gpus=(
            replace(two.gpus[0], status="interrupted"),
            GpuSection(1, "not_run", None, (), (), None),
        ),
    )
    (f,) = findings(diagnose.failures, result)
    assert f.code == "incomplete" and f.severity == WARNING and f.gpu is None
    assert "GPU 0, 1 not fully measured" in f.message


def test_failed_concurrent_measurement(two):
    failed = replace(two.multi[0], streams=(), status="failed", error="out of memory")
    (f,) = findings(diagnose.failures, replace(two, multi=(failed, *two.multi[1:])))
    assert f.code == "measurement_failed" and f.severity == WARNING
    assert f.figure == two.multi[0].label and "out of memory" in f.message


def test_complete_run_has_no_failure_findings(one, two):
    assert findings(diagnose.failures, one) == findings(diagnose.failures, two) == []


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


def test_the_clocks_are_judged_while_the_transfers_were_measured(one):
    """A section's own reasons, read right after its curves, decide: the machine's record is
    read after every check, when the GEMMs' own power draw may still cap the clocks."""
    after_gemms = with_gpu(one, clock_event_reasons=0x4)  # power cap after the GEMM check
    assert not [
        f
        for f in findings(
            diagnose.noisy_or_throttled, with_section(after_gemms, clock_event_reasons=0)
        )
        if f.code == "throttled"
    ]
    (f,) = findings(diagnose.noisy_or_throttled, with_section(one, clock_event_reasons=0x40))
    assert "while its transfers were measured: software thermal" in f.message
    (f,) = findings(diagnose.noisy_or_throttled, after_gemms)  # an older document: the record
    assert "power cap" in f.message and "while" not in f.message
