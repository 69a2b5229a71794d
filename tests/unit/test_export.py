"""Exporters, plots and the printed report. JSON and CSV are compared with golden files.

Set XFERSCOPE_UPDATE_GOLDEN=1 to rewrite tests/golden/sweep.json and sweep.csv from
`golden_result()` instead of comparing; review the diff before committing it.
"""

from __future__ import annotations

import io
import json
import math
import os
from dataclasses import replace
from pathlib import Path

import pytest
from rich.console import Console

from xferscope.core.engine.simulated import SimulatedEngine
from xferscope.core.findings import WARNING, Finding, corrupted, finding
from xferscope.documents import csv as export_csv
from xferscope.documents import json as export_json
from xferscope.documents.csv import write_csv
from xferscope.documents.json import write_json
from xferscope.report.plots import write_plots
from xferscope.report.style import SIMULATED as SIMULATED_BANNER
from xferscope.report.sweep_tables import print_report
from xferscope.sweep.measure import run_sweep
from xferscope.sweep.options import SweepOptions
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

GOLDEN = Path(__file__).resolve().parent.parent / "golden"
UPDATE = os.environ.get("XFERSCOPE_UPDATE_GOLDEN") == "1"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _point(
    size: int,
    samples: tuple[float, ...],
    *,
    iterations: int,
    verification: Verification | None,
    status: str = MEASURED,
    stopped_by: str = STOP_NOISE,
    blocking_kernel: bool = False,
) -> Point:
    return Point(
        bytes=size,
        iterations=iterations,
        copies_per_iteration=1,
        samples_s=samples,
        warmup_s=samples[0] * 1.5,
        target_s=0.25,
        status=status,
        stopped_by=stopped_by,
        blocking_kernel=blocking_kernel,
        blocking_timed_out=False,
        footprint_bytes=size * iterations,
        cache_resident=size * iterations < 120_000_000,
        verification=verification,
    )


def _ok(size: int) -> Verification:
    return Verification(ok=True, bytes_checked=size, mismatched_bytes=0, first_mismatch=None)


def golden_result(simulated: bool = False) -> SweepResult:
    """A fixed sweep: every value is written out, nothing depends on the clock or the host."""
    h2d = Curve(
        config=CurveConfig(0, "h2d", "pinned", "memcpy", "api"),
        points=(
            _point(1, (6.5e-6, 6.25e-6, 7e-6), iterations=37_500, verification=_ok(1)),
            _point(
                4096,
                (7.25e-6, 7e-6, 7.5e-6, 8e-6),
                iterations=35_000,
                verification=None,
                stopped_by=STOP_MAX_TRIALS,
            ),
            _point(
                1 << 20,
                (2.5e-5, 2.4e-5, 2.6e-5),
                iterations=10_000,
                verification=Verification(
                    ok=False, bytes_checked=1 << 20, mismatched_bytes=3, first_mismatch=524288
                ),
            ),
        ),
        status="complete",
        budget_s=12.0,
        requested_target_s=0.25,
        wall_s=2.5,
    )
    d2h = Curve(
        config=CurveConfig(1, "d2h", "pageable", "async", "device"),
        points=(
            _point(
                4096,
                (1e-5, 1.25e-5),
                iterations=20_000,
                verification=_ok(4096),
                status=CUT_SHORT,
                stopped_by=STOP_BUDGET,
                blocking_kernel=True,
            ),
            _point(
                1 << 30,
                (0.0625,),
                iterations=1,
                verification=_ok(1 << 30),
                status=ESTIMATED,
                stopped_by=STOP_BUDGET,
            ),
        ),
        status="complete",
        budget_s=12.0,
        requested_target_s=0.25,
        wall_s=11.75,
    )
    return SweepResult(
        tool_version="0.1.0",
        created="2025-01-01T00:00:00+00:00",
        simulated=simulated,
        machine={
            "simulated": simulated,
            "host": {"hostname": "golden-host", "cpu": "Test CPU", "cores": 16},
            "cuda_runtime": "13.0",
            "gpus": [
                {"index": 0, "name": "Test GPU", "pcie_peak_bps": 63015384615.38461},
                {"index": 1, "name": "Test GPU", "pcie_peak_bps": 63015384615.38461},
            ],
        },
        options={
            "directions": ["h2d", "d2h"],
            "sizes": [1, 4096, 1048576, 1073741824],
            "target_s": 0.25,
            "budget_s": 12.0,
        },
        curves=(h2d, d2h),
        interrupted=False,
        wall_s=14.25,
        findings=(
            corrupted(
                "h2d pinned memcpy api",
                "h2d pinned memcpy api: verification FAILED at 1 of 3 sizes",
                1,
            ),
            finding(
                "budget",
                WARNING,
                "d2h pageable async device gpu1",
                "d2h pageable async device gpu1: 2 sizes did not fit the 12 s budget",
                fix="raise --budget",
            ),
        ),
    )


def _check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if UPDATE:
        path.write_text(text)
    assert path.exists(), f"{path} is missing; run with XFERSCOPE_UPDATE_GOLDEN=1 to write it"
    assert text == path.read_text(), f"{name} differs from the golden file"


def simulated_result() -> SweepResult:
    options = SweepOptions(
        sizes=(1, 4096, 1 << 20),
        directions=("h2d", "d2h"),
        memories=("pinned",),
        target_s=0.01,
        budget_s=None,
    )
    return run_sweep(SimulatedEngine(seed=3), options)


# ---- golden files ------------------------------------------------------------------------------


def test_json_matches_golden() -> None:
    _check_golden("sweep.json", export_json.dumps(golden_result()))


def test_csv_matches_golden() -> None:
    _check_golden("sweep.csv", export_csv.dumps(golden_result()))


def test_golden_json_reads_back_as_the_result() -> None:
    assert export_json.read_json(GOLDEN / "sweep.json") == golden_result()


def test_csv_has_a_row_per_point() -> None:
    lines = export_csv.dumps(golden_result()).splitlines()
    assert lines[0].split(",") == list(export_csv.COLUMNS)
    assert len(lines) == 1 + 5
    verified = [line.split(",")[export_csv.COLUMNS.index("verified")] for line in lines[1:]]
    assert verified == ["ok", "skipped", "FAILED", "ok", "ok"]


# ---- files -------------------------------------------------------------------------------------


def test_read_json_round_trip(tmp_path: Path) -> None:
    result = golden_result()
    path = tmp_path / "result.json"
    write_json(result, path)
    assert export_json.read_json(path) == result
    assert json.loads(path.read_text())["schema"] == "xferscope-sweep"


def test_read_json_round_trip_of_a_simulated_sweep(tmp_path: Path) -> None:
    result = simulated_result()
    path = tmp_path / "sim.json"
    write_json(result, path)
    assert export_json.read_json(path) == result


def test_writers_leave_no_temporary_files(tmp_path: Path) -> None:
    result = golden_result()
    write_json(result, tmp_path / "out.json")
    write_csv(result, tmp_path / "out.csv")
    # Overwriting goes through a temporary file too.
    write_json(result, tmp_path / "out.json")
    write_csv(result, tmp_path / "out.csv")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.csv", "out.json"]
    assert (tmp_path / "out.json").read_text() == export_json.dumps(result)
    assert (tmp_path / "out.csv").read_text() == export_csv.dumps(result)


def test_a_failed_write_keeps_the_earlier_file(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "out.json"
    write_json(golden_result(), path)
    before = path.read_text()

    def disk_full(*_args: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("xferscope.documents.files.os.fsync", disk_full)
    with pytest.raises(OSError, match="No space"):
        write_json(replace(golden_result(), wall_s=1.0), path)
    assert path.read_text() == before
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]


def test_a_nan_is_written_as_null_and_the_rest_kept(tmp_path: Path) -> None:
    h2d = golden_result().curves[0]
    broken_point = replace(h2d.points[0], samples_s=(math.nan, 1e-6))
    broken = replace(golden_result(), curves=(replace(h2d, points=(broken_point,)),))
    write_json(broken, tmp_path / "out.json")  # before: ValueError, and nothing kept
    doc = json.loads((tmp_path / "out.json").read_text())
    assert doc["curves"][0]["points"][0]["samples_s"] == [None, 1e-6]


# ---- plots -------------------------------------------------------------------------------------


@pytest.mark.parametrize("simulated", [False, True])
def test_write_plots_writes_two_pngs(tmp_path: Path, simulated: bool) -> None:
    result = simulated_result() if simulated else golden_result()
    paths = write_plots(result, tmp_path / "sweep")
    assert [p.name for p in paths] == ["sweep-bandwidth.png", "sweep-latency.png"]
    for path in paths:
        assert path.parent == tmp_path
        data = path.read_bytes()
        assert len(data) > 1000
        assert data.startswith(PNG_MAGIC)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "sweep-bandwidth.png",
        "sweep-latency.png",
    ]


def test_write_plots_without_points_writes_nothing(tmp_path: Path) -> None:
    empty = replace(golden_result(), curves=())
    assert write_plots(empty, tmp_path / "sweep") == []
    assert list(tmp_path.iterdir()) == []


# ---- printed report ----------------------------------------------------------------------------


def _report(result: SweepResult) -> str:
    console = Console(record=True, width=200, file=io.StringIO())
    print_report(result, console)
    return console.export_text()


def test_report_of_a_simulated_result_says_so() -> None:
    text = _report(simulated_result())
    assert "SIMULATED" in text
    assert text.count(SIMULATED_BANNER) == 2  # above and below the tables
    assert "h2d pinned" in text


def test_report_of_a_real_result_does_not_say_simulated() -> None:
    text = _report(golden_result())
    assert "SIMULATED" not in text
    assert "Summary" in text


def test_report_of_the_same_figures_differs_only_by_the_banner() -> None:
    real = _report(golden_result(simulated=False))
    simulated = _report(golden_result(simulated=True))
    assert "SIMULATED" not in real
    assert "SIMULATED" in simulated
    assert simulated.replace(SIMULATED_BANNER + "\n", "") == real


def test_report_prints_the_findings_with_why_and_fix() -> None:
    result = golden_result()
    text = _report(result)
    for f in result.findings:
        assert f.message in text
    assert "  ERROR h2d pinned memcpy api: verification FAILED" in text
    assert "warning d2h pageable async device gpu1: 2 sizes" in text
    assert "why: a failing GPU, memory or link" in text and "fix: raise --budget" in text


def test_report_flags_points() -> None:
    text = _report(golden_result())
    # Invalid (verification failed), cut short and estimated points carry their flags.
    assert "41.9!" in text  # 1 MiB h2d, verification failed
    assert "0.36*" in text  # 4 KiB d2h, cut short
    assert "17.2~" in text  # 1 GiB d2h, estimated
    assert "0.56 " in text  # 4 KiB h2d, measured: no flag
    assert "FAILED 1" in text


def test_report_prints_simulated_sweep_warnings() -> None:
    result = run_sweep(
        SimulatedEngine(seed=3, corrupt=True),
        SweepOptions(sizes=(4096,), directions=("h2d",), memories=("pinned",), target_s=0.01),
    )
    text = _report(result)
    assert "verification FAILED" in text


def test_report_prints_findings_verbatim() -> None:
    warning = "h2d pinned memcpy api: failed: CUDA error [cudaErrorUnknown] at [/build]/x.cu:1"
    text = _report(replace(golden_result(), findings=(Finding.legacy(warning),)))
    assert f"warning {warning}" in text
