"""`xferscope overlap cpu|buffers|gpu` on the simulated engine: the drivers' figures against the
model, the records' JSON round trip, and the CLI (outputs, one-line errors, Ctrl-C)."""

from __future__ import annotations

import json

import pytest

from xferscope import cli as cli_module
from xferscope.cli import overlap as cli_overlap
from xferscope.core.engine.simulated import SimulatedEngine
from xferscope.core.errors import OptionError
from xferscope.documents.reader import SchemaError
from xferscope.overlap import (
    BUFFERS_SCHEMA,
    CPU_SCHEMA,
    DEFAULT_WORK_FACTORS,
    GPU_SCHEMA,
    CpuPoint,
    CpuSample,
    GpuOverlapResult,
    OverlapCpuResult,
    RotationResult,
    cpu_verdict,
    gpu_verdict,
    measure_overlap_cpu,
    measure_overlap_gpu,
    measure_rotation,
    rotation_verdict,
)

from .test_cli import ENGINE, assert_one_line_error, run

MIB = 1 << 20


def cpu(engine: SimulatedEngine | None = None, **kw: object) -> OverlapCpuResult:
    args: dict[str, object] = {
        "direction": "d2h",
        "memories": ("pinned", "pageable"),
        "mechanism": "async",
        "size": 256 * MIB,
        "works": None,
        "trials": 3,
    }
    args.update(kw)
    return measure_overlap_cpu(engine or SimulatedEngine(), 0, **args)  # type: ignore[arg-type]


def rotation(engine: SimulatedEngine | None = None, **kw: object) -> RotationResult:
    args: dict[str, object] = {
        "directions": ("d2h", "h2d"),
        "buffers_list": (1, 2, 4),
        "chunk_sizes": (MIB, 8 * MIB),
        "chunks": 64,
        "trials": 2,
    }
    args.update(kw)
    return measure_rotation(engine or SimulatedEngine(), 0, **args)  # type: ignore[arg-type]


def gpu(engine: SimulatedEngine | None = None, **kw: object) -> GpuOverlapResult:
    args: dict[str, object] = {"bytes": 1 << 30, "streams_list": (1, 2, 4, 8), "works": (1,)}
    args.update(kw)
    return measure_overlap_gpu(engine or SimulatedEngine(), 0, **args)  # type: ignore[arg-type]


def messages(result) -> list[str]:
    """The messages of a result's findings."""
    return [f.message for f in result.findings]


# ---- cpu driver --------------------------------------------------------------------------------


def test_pinned_hides_all_work_up_to_the_copy_time_and_pageable_none():
    result = cpu()
    pinned, pageable = result.series
    assert (pinned.memory, pageable.memory) == ("pinned", "pageable")
    assert pinned.t0_s == pytest.approx(256 * MIB / 55.4e9, rel=0.01)  # the model's H200 rate
    assert [p.requested_work_s for p in pinned.points] == pytest.approx(
        [pinned.t0_s * f for f in DEFAULT_WORK_FACTORS]
    )
    assert pinned.efficiency(pinned.points[0]) is None  # the copy alone hides nothing
    for p in pinned.points[1:]:
        efficiency, ideal = pinned.efficiency(p), pinned.ideal(p)
        assert efficiency is not None and ideal is not None
        assert efficiency == pytest.approx(ideal, abs=0.01)
        if p.requested_work_s <= pinned.t0_s:
            assert efficiency == pytest.approx(1.0, abs=0.01)
        assert p.issue_s < 1e-4  # asynchronous: the call returns at once
        assert len(p.samples) == 3
    for p in pageable.points[1:]:
        assert pageable.efficiency(p) == pytest.approx(0.0, abs=0.01)
        assert p.issue_s == pytest.approx(pageable.t0_s, rel=0.01)  # it blocks in the call
    assert pinned.verification is not None and pinned.verification.ok
    assert result.valid and not result.interrupted and not result.findings
    assert result.rate(pinned.points[0]) == pytest.approx(55.4e9, rel=0.01)


def test_cpu_verdict_says_why_pageable_does_not_overlap():
    verdict = cpu_verdict(cpu())
    assert verdict.startswith("d2h 256 MiB async: pinned hides 100% of ")
    assert "pageable hides 0% of" in verdict
    assert "the copy blocks in the issuing call for 13.4" in verdict


def test_explicit_works_start_with_the_copy_alone():
    result = cpu(memories=("pinned",), works=[0.002, 0.001, 0.002], trials=1)
    (series,) = result.series
    assert [p.requested_work_s for p in series.points] == [0.0, 0.001, 0.002]
    assert series.warmup is not None
    assert result.options["works_s"] == [0.002, 0.001, 0.002]


def test_typical_trial_is_the_median_total_and_adds_up():
    samples = tuple(CpuSample(0.1, w, 0.5, 0.6 + w) for w in (0.3, 0.1, 0.2, 0.4))
    point = CpuPoint(0.2, samples)
    assert point.total_s == pytest.approx(0.8)  # lower middle of an even count
    assert point.issue_s + point.work_s + point.wait_s == pytest.approx(point.total_s)


def test_combinations_that_cannot_run_are_skipped_with_a_warning():
    result = cpu(memories=("pinned", "pageable"), mechanism="kernel", trials=1)
    assert [s.memory for s in result.series] == ["pinned"]
    assert any("pageable kernel" in w for w in messages(result))
    with pytest.raises(OptionError, match="--mechanism"):
        cpu(memories=("pageable",), mechanism="kernel")


@pytest.mark.parametrize(
    ("kw", "option"),
    [
        ({"works": [-0.001]}, "--work"),
        ({"works": [float("nan")]}, "--work"),
        ({"trials": 0}, "--trials"),
        ({"direction": "d2d"}, "--direction"),
        ({"size": 1 << 40}, "--size"),
    ],
)
def test_cpu_driver_refuses_bad_values(kw, option):
    with pytest.raises(OptionError, match=option):
        cpu(**kw)


def test_cpu_verification_failure_is_flagged():
    result = cpu(SimulatedEngine(corrupt=True), memories=("pinned",), trials=1)
    assert not result.valid
    assert any("verification FAILED" in w for w in messages(result))


def test_cpu_engine_failure_is_recorded_not_raised():
    result = cpu(SimulatedEngine(failing_devices=(0,)), trials=1)
    assert not result.measured
    assert [f.what for f in result.failures] == ["d2h pinned async", "d2h pageable async"]
    assert all(s.status == "failed" for s in result.series)


def test_cpu_interrupt_keeps_what_was_measured():
    # fill, warm-up, then two trials per W: the 11th engine call is interrupted.
    result = cpu(SimulatedEngine(interrupt_after=10), trials=2)
    assert result.interrupted
    assert [s.status for s in result.series] == ["interrupted"]
    assert len(result.series[0].points) == 4


# ---- buffers driver ----------------------------------------------------------------------------


def test_two_buffers_overlap_what_one_serialises():
    result = rotation()
    assert len(result.points) == 2 * 2 * 3
    for direction in ("d2h", "h2d"):
        for chunk in (MIB, 8 * MIB):
            by_n = {
                p.buffers: p
                for p in result.points
                if p.direction == direction and p.chunk_bytes == chunk
            }
            assert by_n[1].efficiency < 0.9 < by_n[2].efficiency <= by_n[4].efficiency <= 1.0
            assert by_n[1].typical.wait_s > by_n[2].typical.wait_s
    p = result.points[0]
    s = p.typical
    assert p.ideal_s == pytest.approx(64 * max(s.copy_s, s.consume_s) + min(s.copy_s, s.consume_s))
    assert p.rate == pytest.approx(64 * p.chunk_bytes / s.total_s)
    assert p.pinned_bytes == p.buffers * p.chunk_bytes
    assert result.valid


def test_rotation_verdict_and_failures():
    lines = rotation_verdict(rotation())
    assert lines[0].startswith("d2h readback (the CPU checksums): efficiency 0.79-0.8")
    assert "with 2 buffers" in lines[0] and lines[1].startswith("h2d upload")
    bad = rotation(SimulatedEngine(corrupt=True), directions=("d2h",), buffers_list=(2,))
    assert not bad.valid and any("verification FAILED" in w for w in messages(bad))


def test_rotation_refuses_more_pinned_memory_than_allowed(monkeypatch):
    with pytest.raises(OptionError, match="--max-pinned"):
        rotation(buffers_list=(8,), chunk_sizes=(16 * MIB,), max_pinned=64 * MIB)
    monkeypatch.setattr("xferscope.core.machine.host_memory_total", lambda: 200 * MIB)
    with pytest.raises(OptionError, match=r"--buffers.*half of this machine"):
        rotation(buffers_list=(8,), chunk_sizes=(16 * MIB,))


def test_rotation_interrupt_keeps_points():
    result = rotation(SimulatedEngine(interrupt_after=5), trials=1)
    assert result.interrupted and len(result.points) == 5


# ---- gpu driver --------------------------------------------------------------------------------


def test_one_stream_gains_nothing_and_more_come_close_to_the_bound():
    result = gpu()
    by_k = {p.streams: p for p in result.points}
    assert by_k[1].speedup == pytest.approx(1.0, abs=0.01)
    for k in (2, 4, 8):
        assert 0.85 < by_k[k].fraction <= 1.0
    p = by_k[2]
    assert p.chunks == 2 * 4
    assert p.bound == pytest.approx((p.h2d_s + p.kernel_s + p.d2h_s) / max(p.h2d_s, p.d2h_s))
    assert p.limiting_stage in ("h2d", "d2h")
    assert result.valid
    assert "transfer-bound" in gpu_verdict(result)[0]


def test_much_kernel_work_is_compute_bound():
    result = gpu(works=(1, 100_000), streams_list=(1, 4))
    heavy = [p for p in result.points if p.work == 100_000]
    assert all(p.limiting_stage == "kernel" for p in heavy)
    assert heavy[0].bound < 1.2  # little left to hide behind the kernel
    assert "compute-bound" in gpu_verdict(result)[1]


def test_unverified_pipelines_are_invalid_and_warned_about():
    result = gpu(SimulatedEngine(corrupt=True), streams_list=(1, 2))
    assert not result.valid and all(not p.valid for p in result.points)
    assert any("verification FAILED" in w for w in messages(result))
    assert gpu_verdict(result) == []  # no valid row to judge


@pytest.mark.parametrize(
    ("kw", "option"),
    [
        ({"bytes": 1022}, "--size"),
        ({"streams_list": (0, 1)}, "--streams"),
        ({"chunks_per_stream": 0}, "--chunks-per-stream"),
        ({"works": (-1,)}, "--work"),
        ({"bytes": 16, "streams_list": (8,)}, "--chunks-per-stream"),
    ],
)
def test_gpu_driver_refuses_bad_values(kw, option):
    with pytest.raises(OptionError, match=option):
        gpu(**kw)


# ---- records -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("make", "kind", "schema"),
    [
        (lambda: cpu(trials=2), OverlapCpuResult, CPU_SCHEMA),
        (lambda: rotation(SimulatedEngine(corrupt=True)), RotationResult, BUFFERS_SCHEMA),
        (lambda: gpu(), GpuOverlapResult, GPU_SCHEMA),
    ],
)
def test_records_round_trip_through_json(make, kind, schema):
    result = make()
    doc = json.loads(json.dumps(result.to_dict(), allow_nan=False))
    assert doc["schema"] == schema and doc["schema_version"] == 2
    assert doc["simulated"] is True and doc["machine"]["simulated"] is True
    assert kind.from_dict(doc) == result
    with pytest.raises(SchemaError, match="not an"):
        kind.from_dict({**doc, "schema": "xferscope-sweep"})
    with pytest.raises(SchemaError, match="version 3"):
        kind.from_dict({**doc, "schema_version": 3})
    rows = result.to_csv().splitlines()
    assert rows[0].startswith("simulated,device,") and rows[1].startswith("1,0,")


def test_interrupted_and_failed_results_round_trip():
    broken = cpu(SimulatedEngine(failing_devices=(0,)), trials=1)
    assert OverlapCpuResult.from_dict(json.loads(json.dumps(broken.to_dict()))) == broken
    cut = cpu(SimulatedEngine(interrupt_after=10), trials=2)
    assert OverlapCpuResult.from_dict(json.loads(json.dumps(cut.to_dict()))) == cut


# ---- CLI ---------------------------------------------------------------------------------------

CPU = ["overlap", "cpu", "--simulate", "--size", "16MiB", "--trials", "2"]
BUFFERS = [
    "overlap",
    "buffers",
    "--simulate",
    "--buffers",
    "1,2",
    "--chunk-sizes",
    "1MiB",
    "--chunks",
    "16",
    "--trials",
    "1",
]
GPU = ["overlap", "gpu", "--simulate", "--size", "64MiB", "--streams", "1,2,4"]


@pytest.mark.parametrize(
    ("args", "kind", "plot", "text"),
    [
        (CPU, "cpu", "time", "pinned hides 99%"),
        (BUFFERS, "buffers", "efficiency", "with 2 buffers"),
        ([*GPU, "--work", "1,100000"], "gpu", "speedup", "compute-bound"),
    ],
)
def test_each_mode_writes_every_output_and_says_simulated(capsys, tmp_path, args, kind, plot, text):
    code, out, err = run(capsys, *args, "-o", str(tmp_path))
    assert code == 0, err
    assert out.count("SIMULATED") == 2 and "verdict:" in out and text in out
    (path,) = tmp_path.glob(f"overlap-{kind}-*/overlap-{kind}.json")
    doc = json.loads(path.read_text())
    assert doc["schema"] == f"xferscope-overlap-{kind}" and doc["simulated"] is True
    (csv_path,) = tmp_path.glob(f"overlap-{kind}-*/overlap-{kind}.csv")
    assert csv_path.read_text().splitlines()[1].startswith("1,")  # the simulated column
    assert len(list(tmp_path.glob(f"overlap-{kind}-*/overlap-{kind}-{plot}.png"))) == 1
    assert "wrote" in err


def test_cpu_table_has_seed_000_columns(capsys, tmp_path):
    code, out, err = run(capsys, *CPU, "--work", "0,1ms,2ms", "-m", "pinned", "-o", str(tmp_path))
    assert code == 0, err
    for column in (
        "issue (ms)",
        "work (ms)",
        "wait (ms)",
        "total (ms)",
        "bytes",
        "rate (GB/s)",
        "efficiency",
        "ideal",
    ):
        assert column in out
    doc = json.loads(next(tmp_path.glob("*/*.json")).read_text())
    works = [p["requested_work_s"] for p in doc["series"][0]["points"]]
    assert works == [0.0, 0.001, 0.002]


def test_explicit_output_paths(capsys, tmp_path):
    code, _, err = run(
        capsys,
        *GPU,
        "--json",
        str(tmp_path / "j" / "g.json"),
        "--csv",
        str(tmp_path / "g.csv"),
        "--plot",
        str(tmp_path / "p" / "fig"),
    )
    assert code == 0, err
    assert (tmp_path / "j" / "g.json").exists() and (tmp_path / "g.csv").exists()
    assert (tmp_path / "p" / "fig-speedup.png").exists()


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        ([*CPU, "--work=-1ms"], ["--work", "0 or more"]),
        ([*CPU, "--work", "nan"], ["--work", "'nan'", "2ms"]),
        ([*CPU, "--work", "1e999"], ["--work"]),
        ([*CPU, "--work", "3 parsecs"], ["--work", "'3 parsecs'"]),
        ([*CPU, "--work", ","], ["--work", "one or more"]),
        ([*CPU, "--trials", "0"], ["--trials", "from 1 to 1000"]),
        ([*CPU, "--size", "0"], ["--size", "at least 1 byte"]),
        ([*CPU, "--size", "big"], ["--size", "'big'"]),
        ([*CPU, "--size", "1TiB"], ["--size"]),
        ([*CPU, "-d", "d2d"], ["--direction", "h2d, d2h"]),
        ([*CPU, "-d", "h2d,d2h"], ["--direction", "one direction"]),
        ([*CPU, "-m", "shiny"], ["--memory", "'shiny'"]),
        ([*CPU, "--mechanism", "teleport"], ["--mechanism", "'teleport'"]),
        ([*CPU, "-m", "pageable", "--mechanism", "kernel"], ["--mechanism", "nothing can run"]),
        ([*CPU, "--device", "3"], ["--device", "no GPU with index 3"]),
        ([*CPU, "--device", "0,1"], ["--device", "one GPU"]),
        ([*BUFFERS, "--buffers", "0,2"], ["--buffers", "'0'", "at least 1"]),
        ([*BUFFERS, "--buffers", "two"], ["--buffers", "'two'"]),
        ([*BUFFERS, "--chunk-sizes", "0"], ["--chunk-sizes", "at least 1 byte"]),
        ([*BUFFERS, "--chunk-sizes", "4"], ["--chunk-sizes", "at least 8 bytes"]),
        ([*BUFFERS, "--chunk-sizes", "lots"], ["--chunk-sizes", "'lots'"]),
        ([*BUFFERS, "--chunks", "0"], ["--chunks", "from 1 to"]),
        ([*BUFFERS, "--direction", "up"], ["--direction", "'up'"]),
        ([*BUFFERS, "--max-pinned", "1KiB"], ["--max-pinned", "2 buffers of 1 MiB pin 2 MiB"]),
        ([*BUFFERS, "--max-pinned", "x"], ["--max-pinned", "'x'"]),
        ([*GPU, "--size", "1023"], ["--size", "multiple of 4"]),
        ([*GPU, "--streams", "0"], ["--streams", "from 1 to 64"]),
        ([*GPU, "--streams", "1,-2"], ["--streams", "'-2'"]),
        ([*GPU, "--chunks-per-stream", "0"], ["--chunks-per-stream", "from 1 to"]),
        ([*GPU, "--work=-5"], ["--work", "'-5'", "from 0 to"]),
        ([*GPU, "--work", "1.5"], ["--work", "'1.5'"]),
        ([*GPU, "--size", "1TiB"], ["--size", "memory"]),
        (["overlap", "gpu", "--bogus"], ["No such option", "--bogus"]),
        (["overlap", "sideways"], ["No such command", "sideways"]),
    ],
)
def test_bad_input_is_one_line(capsys, tmp_path, args, fragments):
    code, _, err = run(capsys, *args, "-o", str(tmp_path))
    assert_one_line_error(code, err, *fragments)
    assert not list(tmp_path.glob("*.json")), "nothing is measured after a bad option"


def test_more_pinned_memory_than_the_machine_has_is_refused(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr("xferscope.core.machine.host_memory_total", lambda: 1 << 30)
    code, _, err = run(capsys, *BUFFERS, "--chunk-sizes", "512MiB", "-o", str(tmp_path))
    assert_one_line_error(code, err, "--buffers", "1 GiB of pinned host memory", "half")
    code, _, err = run(capsys, *CPU, "--size", "768MiB", "-o", str(tmp_path))
    assert_one_line_error(code, err, "--size", "pinned host memory")
    code, _, err = run(capsys, *GPU, "--size", "256MiB", "-o", str(tmp_path))
    assert_one_line_error(code, err, "--size", "3 pinned copies")


@pytest.mark.parametrize(("args", "calls"), [(CPU, 9), (BUFFERS, 2), ([*GPU, "--work", "1,10"], 4)])
def test_ctrl_c_keeps_what_was_measured(capsys, tmp_path, monkeypatch, args, calls):
    monkeypatch.setattr("xferscope.core.interrupt.GRACE_S", 60.0)  # time enough to draw the plot
    monkeypatch.setattr(ENGINE, lambda simulate: SimulatedEngine(interrupt_after=calls))
    code, _, err = run(capsys, *args, "-o", str(tmp_path))
    assert code == cli_module.EXIT_INTERRUPTED, err
    assert "interrupted" in err and "Traceback" not in err
    (path,) = tmp_path.glob("overlap-*/overlap-*.json")
    doc = json.loads(path.read_text())
    assert doc["interrupted"] is True
    measured = doc["series"][0]["points"] if "series" in doc else doc["points"]
    assert measured
    assert len(list(tmp_path.glob("overlap-*/*.png"))) == 1


def test_ctrl_c_before_anything_is_measured_writes_nothing(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(ENGINE, lambda simulate: SimulatedEngine(interrupt_after=0))
    code, _, err = run(capsys, *CPU, "-o", str(tmp_path))
    assert code == cli_module.EXIT_INTERRUPTED
    assert "nothing written" in err
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("args", [CPU, BUFFERS, GPU])
def test_verification_failure_exits_3(capsys, tmp_path, monkeypatch, args):
    monkeypatch.setattr(ENGINE, lambda simulate: SimulatedEngine(corrupt=True))
    code, out, _ = run(capsys, *args, "-o", str(tmp_path))
    assert code == cli_module.EXIT_VERIFICATION_FAILED
    assert "FAILED" in out
    assert len(list(tmp_path.glob("overlap-*/*.json"))) == 1


def test_engine_failure_is_one_line_and_writes_nothing(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(ENGINE, lambda simulate: SimulatedEngine(failing_devices=(0,)))
    code, _, err = run(capsys, *CPU, "-o", str(tmp_path))
    assert_one_line_error(code, err, "d2h pinned async", "CUDA error")
    assert code == 1
    assert not list(tmp_path.iterdir()), "no file, no directory"


def test_help_lists_every_option(capsys):
    for mode, options in (
        ("cpu", ["--direction", "--memory", "--mechanism", "--size", "--work", "--trials"]),
        ("buffers", ["--direction", "--buffers", "--chunk-sizes", "--chunks", "--max-pinned"]),
        ("gpu", ["--size", "--streams", "--chunks-per-stream", "--work"]),
    ):
        code, out, _ = run(capsys, "overlap", mode, "--help")
        assert code == 0
        for option in [*options, "--device", "--simulate", "--out", "--json", "--csv", "--plot"]:
            assert option in out, (mode, option)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("0", 0.0),
        ("2", 2.0),
        ("1.5ms", 1.5e-3),
        ("500us", 5e-4),
        ("500µs", 5e-4),
        ("10 ns", 1e-8),
        ("0.1s", 0.1),
        ("1e-3", 1e-3),
    ],
)
def test_parse_seconds(text, seconds):
    assert cli_overlap.parse_seconds("--work", text) == pytest.approx(seconds)
