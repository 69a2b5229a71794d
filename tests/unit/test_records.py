"""Result records and their JSON form (xferscope.sweep.records)."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from xferscope.core.findings import Finding, finding
from xferscope.documents.reader import SchemaError
from xferscope.sweep import records
from xferscope.sweep.records import (
    CUT_SHORT,
    ESTIMATED,
    MEASURED,
    STOP_BUDGET,
    STOP_MAX_TRIALS,
    STOP_NOISE,
    Curve,
    CurveConfig,
    Point,
    SweepResult,
    Verification,
)

OK = Verification(ok=True, bytes_checked=4096, mismatched_bytes=0, first_mismatch=None)
BAD = Verification(ok=False, bytes_checked=65536, mismatched_bytes=3, first_mismatch=32768)


def make_point(
    size: int,
    samples: tuple[float, ...] = (2e-6, 1e-6, 4e-6),
    verification: Verification | None = None,
    **changes: Any,
) -> Point:
    point = Point(
        bytes=size,
        iterations=1000,
        copies_per_iteration=1,
        samples_s=samples,
        warmup_s=3e-6,
        target_s=0.25,
        status=MEASURED,
        stopped_by=STOP_NOISE,
        blocking_kernel=False,
        blocking_timed_out=False,
        footprint_bytes=size * 1000,
        cache_resident=False,
        verification=verification,
    )
    return replace(point, **changes)


def make_result() -> SweepResult:
    h2d = Curve(
        config=CurveConfig(0, "h2d", "pinned", "memcpy", "api"),
        points=(
            make_point(1, (6.7e-6, 6.6e-6, 6.9e-6), OK, cache_resident=True),
            make_point(
                4096,
                (7.1e-6, 7.0e-6, 7.4e-6, 7.2e-6),
                None,
                status=CUT_SHORT,
                stopped_by=STOP_BUDGET,
            ),
            make_point(65536, (1.9e-5, 1.8e-5), BAD, stopped_by=STOP_MAX_TRIALS),
        ),
        status="complete",
        budget_s=12.0,
        requested_target_s=0.25,
        wall_s=3.5,
    )
    d2h = Curve(
        config=CurveConfig(1, "roundtrip", "wc", "kernel", "device"),
        points=(
            make_point(
                1 << 20,
                (1e-4,),
                OK,
                status=ESTIMATED,
                stopped_by=STOP_BUDGET,
                copies_per_iteration=2,
                blocking_kernel=True,
                blocking_timed_out=True,
            ),
        ),
        status="interrupted",
        error=None,
        budget_s=None,
        requested_target_s=0.01,
        wall_s=0.125,
    )
    failed = Curve(
        config=CurveConfig(0, "d2d", "device", "async", "device"),
        points=(),
        status="failed",
        error="cannot allocate 1073741824 bytes of device memory: out of memory",
    )
    return SweepResult(
        tool_version="0.1.0",
        created="2025-01-02T03:04:05+00:00",
        simulated=False,
        machine={
            "simulated": False,
            "gpus": [{"index": 0, "name": "GPU", "pcie_peak_bps": 6.3e10}],
        },
        options={"sizes": [1, 4096, 65536], "budget_s": 12.0, "verify": True},
        curves=(h2d, d2h, failed),
        interrupted=True,
        wall_s=4.25,
        findings=(
            Finding.legacy("first warning"),
            finding("noisy", "warning", "h2d", "second", "a cause", "a fix", 0, 0.1, 0.05),
        ),
    )


# ---- round trip --------------------------------------------------------------------------------


def test_round_trip_through_a_dict() -> None:
    result = make_result()
    assert records.from_dict(records.to_dict(result)) == result


def test_round_trip_through_json_text() -> None:
    result = make_result()
    text = json.dumps(records.to_dict(result))
    back = records.from_dict(json.loads(text))
    assert back == result
    # The loaded records are typed like the originals, not left as lists.
    assert isinstance(back.curves, tuple)
    assert isinstance(back.curves[0].points[0].samples_s, tuple)
    assert isinstance(back.findings, tuple) and back.findings == result.findings
    assert back.curves[0].points[0].verification == OK
    assert back.curves[0].points[1].verification is None
    assert back.curves[0].points[2].verification == BAD
    assert back.curves[0].points[2].verification.first_mismatch == 32768


def test_round_trip_notices_a_change() -> None:
    """The equality the round trips rely on compares the fields that matter."""
    result = make_result()
    d = records.to_dict(result)
    d["curves"][0]["points"][0]["samples_s"][0] = 1.0
    assert records.from_dict(d) != result


def test_to_dict_writes_schema_and_summary() -> None:
    d = records.to_dict(make_result())
    assert d["schema"] == records.SCHEMA_NAME == "xferscope-sweep"
    assert d["schema_version"] == records.SCHEMA_VERSION
    curve = d["curves"][0]
    assert curve["label"] == "h2d pinned memcpy api"
    summary = curve["points"][0]["summary"]
    assert summary["trials"] == 3
    assert summary["median_s"] == pytest.approx(6.7e-6)
    assert summary["latency_us"] == pytest.approx(6.7)
    assert summary["bandwidth_gbps"] == pytest.approx(1 / 6.7e-6 / 1e9)
    assert d["curves"][1]["label"] == "roundtrip wc kernel device gpu1"


def test_from_dict_ignores_the_derived_summary() -> None:
    result = make_result()
    d = records.to_dict(result)
    for curve in d["curves"]:
        for point in curve["points"]:
            point["summary"] = {"median_s": -1.0}
    assert records.from_dict(d) == result


def test_from_dict_rejects_another_schema() -> None:
    d = records.to_dict(make_result())
    d["schema"] = "something-else"
    with pytest.raises(SchemaError, match="something-else"):
        records.from_dict(d)


def test_from_dict_rejects_a_missing_schema() -> None:
    d = records.to_dict(make_result())
    del d["schema"]
    with pytest.raises(SchemaError):
        records.from_dict(d)


@pytest.mark.parametrize("version", [0, records.SCHEMA_VERSION + 1, "1", None])
def test_from_dict_rejects_another_schema_version(version: object) -> None:
    d = records.to_dict(make_result())
    d["schema_version"] = version
    with pytest.raises(SchemaError, match="version"):
        records.from_dict(d)


def test_schema_error_is_a_value_error() -> None:
    assert issubclass(SchemaError, ValueError)


# ---- derived properties ------------------------------------------------------------------------


def test_point_statistics() -> None:
    p = make_point(4096, (3e-6, 1e-6, 2e-6, 10e-6, 4e-6))
    assert p.min_s == 1e-6
    assert p.median_s == 3e-6
    assert p.max_s == 10e-6
    assert p.bandwidth == pytest.approx(4096 / 3e-6)
    assert p.peak_bandwidth == pytest.approx(4096 / 1e-6)
    assert p.peak_bandwidth >= p.bandwidth


def test_point_median_of_an_even_count() -> None:
    p = make_point(1000, (1.0, 2.0, 3.0, 4.0))
    assert p.median_s == 2.5
    assert p.bandwidth == 400.0


@pytest.mark.parametrize(
    ("verification", "timed_out", "valid"),
    [
        (None, False, True),
        (OK, False, True),
        (BAD, False, False),
        (None, True, False),
        (OK, True, False),
        (BAD, True, False),
    ],
)
def test_point_validity(verification: Verification | None, timed_out: bool, valid: bool) -> None:
    p = make_point(4096, verification=verification, blocking_timed_out=timed_out)
    assert p.valid is valid


def test_curve_point_lookup() -> None:
    curve = make_result().curves[0]
    found = curve.point(4096)
    assert found is not None
    assert found.bytes == 4096
    assert curve.point(12345) is None


def test_curve_label_names_only_a_non_zero_device() -> None:
    assert CurveConfig(0, "h2d", "pinned", "memcpy", "api").label == "h2d pinned memcpy api"
    assert CurveConfig(2, "d2d", "device", "kernel", "device").label == (
        "d2d device kernel device gpu2"
    )


def test_a_version_1_document_is_still_read_its_warnings_as_findings() -> None:
    d = records.to_dict(make_result())
    d["schema_version"] = 1
    del d["findings"]
    d["warnings"] = ["an old warning"]
    back = records.from_dict(d)
    assert back.findings == (Finding.legacy("an old warning"),)
    assert back.findings[0].severity == "warning" and back.findings[0].message == "an old warning"
