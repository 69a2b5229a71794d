"""Each diagnosis rule, case by case: the headline verdicts at their edges, pageable memory, a
link trained down, NUMA, verification, noise and throttling, asymmetry, concurrency and failures.
Every case starts from a simulated run (test_diagnose.py builds them) and changes one thing."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from xferscope.core.findings import ERROR, INFO, OK, WARNING
from xferscope.core.links import pcie_peak
from xferscope.core.units import format_bytes
from xferscope.run import diagnose, health
from xferscope.run.investigate import gpu_curves
from xferscope.run.records import Concurrent, GpuSection, RunResult

from .run_samples import sample_run
from .test_diagnose import (
    D2H_PINNED,
    GEN5_X16,
    H2D_PINNED,
    _asymmetric,
    _collapsed,
    _corrupt,
    _downtrained,
    _headline_warning,
    _noisy,
    _pageable_quiet,
    _stream,
    bandwidth,
    findings,
    map_curve,
    one_gpu_run,
    slow_largest,
    two_gpu_run,
    with_gpu,
    with_host,
    with_section,
)

# test_diagnose.py's runs, made once for this module too


@pytest.fixture(scope="module")
def one() -> RunResult:
    return one_gpu_run()


@pytest.fixture(scope="module")
def two() -> RunResult:
    return two_gpu_run()


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

    (f,) = findings(health.verification_failed, map_curve(one, D2H_PINNED, corrupt))
    assert f.severity == ERROR and f.gpu == 0
    assert f.figure == "gpu0/d2h/pinned/async/device/bandwidth"
    assert f.value == 7.0
    assert "1 of 8 sizes" in f.message and "offset 12" in f.message
    assert "(7 B wrong at " in f.message and not re.search(r"\d{5,}", f.message), f.message


def test_corrupt_run_fails_verification_of_every_curve(one):
    found = findings(health.verification_failed, _corrupt(one, None))
    assert len(found) == len(gpu_curves(0)) and {f.severity for f in found} == {ERROR}


# ---- noise and throttling ----------------------------------------------------------------------


def test_three_noisy_points_are_a_warning(one):
    (f,) = findings(health.noisy_or_throttled, _noisy(one, None))
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
    (f,) = findings(health.noisy_or_throttled, with_section(one, curves=tuple(curves)))
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
    assert findings(health.noisy_or_throttled, with_section(one, curves=tuple(curves))) == []


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
    found = findings(health.noisy_or_throttled, with_gpu(one, clock_event_reasons=reasons))
    if not names:
        assert found == []
        return
    (f,) = found
    assert f.code == "throttled" and f.severity == WARNING
    assert f.figure == "gpu0/clock_event_reasons" and f.value == float(reasons)
    for name in names:
        assert name in f.message


def test_the_clocks_are_judged_while_the_transfers_were_measured(one):
    """A section's own reasons, read right after its curves, decide: the machine's record is
    read after every check, when the GEMMs' own power draw may still cap the clocks."""
    after_gemms = with_gpu(one, clock_event_reasons=0x4)  # power cap after the GEMM check
    assert not [
        f
        for f in findings(
            health.noisy_or_throttled, with_section(after_gemms, clock_event_reasons=0)
        )
        if f.code == "throttled"
    ]
    (f,) = findings(health.noisy_or_throttled, with_section(one, clock_event_reasons=0x40))
    assert "while its transfers were measured: software thermal" in f.message
    (f,) = findings(health.noisy_or_throttled, after_gemms)  # an older document: the record
    assert "power cap" in f.message and "while" not in f.message


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
    (f,) = findings(health.failures, result)
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
    (f,) = findings(health.failures, result)
    assert f.code == "incomplete" and f.severity == WARNING and f.gpu is None
    assert "GPU 0, 1 not fully measured" in f.message


def test_failed_concurrent_measurement(two):
    failed = replace(two.multi[0], streams=(), status="failed", error="out of memory")
    (f,) = findings(health.failures, replace(two, multi=(failed, *two.multi[1:])))
    assert f.code == "measurement_failed" and f.severity == WARNING
    assert f.figure == two.multi[0].label and "out of memory" in f.message


def test_complete_run_has_no_failure_findings(one, two):
    assert findings(health.failures, one) == findings(health.failures, two) == []
