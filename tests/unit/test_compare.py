"""Comparing runs: verdicts against the noise, regressions, machine warnings, loading, output."""

from __future__ import annotations

import copy
import dataclasses
import io
import json
from collections.abc import Callable

import pytest
from rich.console import Console

from xferscope.core.engine.simulated import SimulatedEngine
from xferscope.core.errors import XferscopeError
from xferscope.documents.reader import DocumentError
from xferscope.run.compare import (
    FASTER,
    SAME,
    SLOWER,
    UNCLEAR,
    Incomparable,
    RunLoadError,
    compare,
    compare_metric,
    load_run,
    render,
    summary_line,
    to_dict,
)
from xferscope.run.history import History, HistoryError
from xferscope.run.metrics import Metric, run_metrics
from xferscope.run.records import RunResult, run_to_dict
from xferscope.sweep.measure import run_sweep
from xferscope.sweep.options import SweepOptions
from xferscope.sweep.records import to_dict as sweep_to_dict

from .run_samples import sample_run

BW = "gpu0/h2d/pinned/async/device/bandwidth"
LAT = "gpu0/h2d/pinned/async/device/latency"

Samples = tuple[float, ...]


def map_samples(run: RunResult, fn: Callable[[Samples], Samples]) -> RunResult:
    """The run with every per-copy time tuple (curve points, streams) replaced by fn(times), and
    the single-figure pinning costs scaled as fn scales a one-sample tuple."""

    def scale(seconds: float) -> float:
        return fn((seconds,))[0]

    gpus = []
    for g in run.gpus:
        curves = tuple(
            dataclasses.replace(
                c, points=tuple(dataclasses.replace(p, samples_s=fn(p.samples_s)) for p in c.points)
            )
            for c in g.curves
        )
        concurrent = tuple(
            dataclasses.replace(
                c,
                streams=tuple(dataclasses.replace(s, samples_s=fn(s.samples_s)) for s in c.streams),
            )
            for c in g.concurrent
        )
        pinning = g.pinning and dataclasses.replace(
            g.pinning,
            host_alloc_s=scale(g.pinning.host_alloc_s),
            host_free_s=scale(g.pinning.host_free_s),
            register_s=scale(g.pinning.register_s),
            unregister_s=scale(g.pinning.unregister_s),
        )
        gpus.append(dataclasses.replace(g, curves=curves, concurrent=concurrent, pinning=pinning))
    multi = tuple(
        dataclasses.replace(
            c, streams=tuple(dataclasses.replace(s, samples_s=fn(s.samples_s)) for s in c.streams)
        )
        for c in run.multi
    )
    return dataclasses.replace(run, gpus=tuple(gpus), multi=multi)


def times_scaled(run: RunResult, factor: float) -> RunResult:
    """Every copy takes `factor` times as long: bandwidth / factor, latency * factor."""
    return map_samples(run, lambda t: tuple(x * factor for x in t))


def tight(run: RunResult) -> RunResult:
    """Every trial within 0.1% of the median: tiny noise."""

    def squeeze(t: Samples) -> Samples:
        middle = sorted(t)[len(t) // 2]
        return tuple(middle * (1 + 0.0005 * (i - len(t) // 2)) for i in range(len(t)))

    return map_samples(run, squeeze)


def metric(samples: Samples, higher_is_better: bool = True, unit: str = "B/s") -> Metric:
    import statistics

    return Metric("m", statistics.median(samples), unit, higher_is_better, samples)


# ---- verdicts ---------------------------------------------------------------------------------


def test_identical_runs_are_all_same():
    run = sample_run(gpus=2)
    result = compare(run, run)
    assert len(result.rows) == len(run_metrics(run)) > 50
    assert {r.verdict for r in result.rows} == {SAME}
    assert all(r.change == 0 for r in result.rows)
    assert result.warnings == ()
    assert result.regressions() == []
    assert result.counts() == {SLOWER: 0, FASTER: 0, UNCLEAR: 0, SAME: len(result.rows)}


def test_twenty_percent_slower_bandwidth_is_a_regression():
    a = tight(sample_run(gpus=2))
    b = times_scaled(a, 1.25)  # bandwidth 0.8x
    result = compare(a, b)
    rows = {r.name: r for r in result.rows}
    assert rows[BW].verdict == SLOWER
    assert rows[BW].change == pytest.approx(-0.2)
    assert rows[BW].improvement == pytest.approx(-0.2)
    assert rows[LAT].verdict == SLOWER  # latency 1.25x
    assert rows[LAT].change == pytest.approx(0.25)
    regressions = {r.name for r in result.regressions(0.05)}
    assert BW in regressions and LAT in regressions
    assert result.regressions() == result.regressions(0.05)  # compare's threshold is the default
    assert result.regressions(0.30) == []  # 20% and 25% are under 30%
    # Pinning costs are single measurements: a change in them is never certain.
    assert rows["gpu0/pinning/host_alloc_per_gb"].verdict == UNCLEAR
    assert rows["gpu0/pinning/host_alloc_per_gb"].name not in regressions


def test_threshold_of_compare_sets_the_default():
    a = tight(sample_run(gpus=1))
    b = times_scaled(a, 1.25)
    assert compare(a, b, threshold=0.5).regressions() == []
    assert compare(a, b, threshold=0.1).regressions()


def test_small_change_within_noise_is_same():
    a = sample_run(gpus=2)
    b = times_scaled(a, 1.004)  # 0.4%: below the 1% floor of the noise band
    result = compare(a, b)
    assert {r.verdict for r in result.rows} == {SAME}
    assert result.regressions() == []


def test_change_within_measured_noise_is_same_even_above_floor():
    a = metric((100.0, 94.0, 106.0, 97.0, 103.0))  # rel_noise ~ 4.4%: band ~ 8.9%
    b = metric(tuple(x * 0.95 for x in a.samples))  # 5% lower
    row = compare_metric(a, b)
    assert row.noise > 0.05
    assert row.verdict == SAME


def test_big_median_change_with_overlapping_samples_is_unclear():
    a = metric((100.0, 101.0, 102.0, 103.0, 150.0))
    b = metric((99.0, 130.0, 131.0, 132.0, 133.0))  # median +28%, ranges overlap
    row = compare_metric(a, b)
    assert row.change == pytest.approx((131 - 102) / 102)
    assert abs(row.improvement or 0) > row.noise
    assert row.verdict == UNCLEAR


def test_unclear_within_a_run():
    a = tight(sample_run(gpus=1))
    # Run B: the largest size of H2D pinned async device is 30% slower at the median but one
    # trial is as fast as A's: the ranges overlap.
    gpu = a.gpus[0]
    curve = gpu.curve("h2d", "pinned", "async", "device")
    assert curve is not None
    last = curve.points[-1]
    slow = (*(x * 1.3 for x in last.samples_s[:-1]), min(last.samples_s))
    points = (*curve.points[:-1], dataclasses.replace(last, samples_s=slow))
    curves = tuple(dataclasses.replace(c, points=points) if c is curve else c for c in gpu.curves)
    b = dataclasses.replace(a, gpus=(dataclasses.replace(gpu, curves=curves),))
    rows = {r.name: r for r in compare(a, b).rows}
    assert rows[BW].verdict == UNCLEAR
    assert rows[LAT].verdict == SAME  # the smallest size did not change


def test_lower_latency_is_faster():
    a = metric((10e-6, 10.01e-6, 10.02e-6, 9.99e-6, 9.98e-6), higher_is_better=False, unit="s")
    b = metric(tuple(x * 0.8 for x in a.samples), higher_is_better=False, unit="s")
    row = compare_metric(a, b)
    assert row.verdict == FASTER
    assert row.change == pytest.approx(-0.2)
    assert row.improvement == pytest.approx(0.2)
    assert compare_metric(b, a).verdict == SLOWER


def test_faster_run_has_no_regressions():
    a = tight(sample_run(gpus=2))
    result = compare(a, times_scaled(a, 0.8))
    rows = {r.name: r for r in result.rows}
    assert rows[BW].verdict == FASTER and rows[LAT].verdict == FASTER
    assert result.regressions() == []
    assert result.counts()[FASTER] > 0


def test_too_few_samples_is_unclear():
    assert compare_metric(metric((1.0,)), metric((2.0,))).verdict == UNCLEAR
    assert compare_metric(metric((1.0, 1.0)), metric((2.0, 2.0))).verdict == UNCLEAR
    assert compare_metric(metric((1.0, 1.0, 1.0)), metric((2.0, 2.0, 2.0))).verdict == FASTER


def test_zero_baseline_is_unclear():
    row = compare_metric(metric((0.0, 0.0, 0.0)), metric((1.0, 1.0, 1.0)))
    assert row.verdict == UNCLEAR and row.change is None


def test_metrics_in_one_run_only_are_listed_not_compared():
    result = compare(sample_run(gpus=1), sample_run(gpus=2))
    names = {r.name for r in result.rows}
    assert "gpu1/h2d/pinned/async/device/bandwidth" in result.only_b
    assert not any(n.startswith("gpu1/") for n in names)
    assert result.only_a == ()
    assert any("1 GPUs" in w and "has 2" in w for w in result.warnings)


# ---- machine warnings -------------------------------------------------------------------------


def with_machine(run: RunResult, change: Callable[[dict], None]) -> RunResult:
    machine = copy.deepcopy(run.machine)
    change(machine)
    return dataclasses.replace(run, machine=machine)


def test_different_machine_warnings():
    a = sample_run(gpus=2)

    def other(machine: dict) -> None:
        machine["host"]["hostname"] = "node-17"
        machine["driver"] = "580.65.06"
        machine["cuda_runtime"] = "12.8"
        machine["gpus"][1]["uuid"] = "GPU-11111111-2222-3333-4444-555555555555"

    warnings = compare(a, with_machine(a, other)).warnings
    text = "\n".join(warnings)
    assert "different hosts: simulated (A) and node-17 (B)" in text
    assert "different NVIDIA drivers: unknown (A) and 580.65.06 (B)" in text
    assert "different CUDA runtimes: 13.0 (A) and 12.8 (B)" in text
    assert "GPU 1 is another device of the same model" in text
    assert "GPU-11111111-2222-3333-4444-555555555555" in text
    assert len(warnings) == 4


def test_each_machine_difference_alone():
    a = sample_run(gpus=1)
    cases: list[tuple[Callable[[dict], None], str]] = [
        (lambda m: m["host"].update(hostname="other"), "different hosts"),
        (lambda m: m.update(driver="575.1"), "different NVIDIA drivers"),
        (lambda m: m.update(cuda_runtime="12.0"), "different CUDA runtimes"),
        (lambda m: m["gpus"][0].update(uuid="GPU-x"), "another device of the same model"),
    ]
    for change, expected in cases:
        warnings = compare(a, with_machine(a, change)).warnings
        assert len(warnings) == 1 and expected in warnings[0], expected


def test_a_simulated_run_and_a_measured_one_are_refused_unless_forced():
    a = sample_run(gpus=1)
    b = dataclasses.replace(a, simulated=False)
    with pytest.raises(Incomparable, match="run A is simulated and run B was measured on a GPU"):
        compare(a, b)
    with pytest.raises(Incomparable, match="run B is simulated"):
        compare(b, a)
    forced = compare(a, b, force=True)
    assert forced.forced == "run A is simulated and run B was measured on a GPU"
    assert to_dict(forced)["forced"] == forced.forced
    assert "(forced: run A is simulated" in summary_line(forced)


def test_runs_on_different_gpu_models_are_refused_unless_forced():
    a = sample_run(gpus=1)
    b = with_machine(a, lambda m: m["gpus"][0].update(name="NVIDIA A100"))
    with pytest.raises(
        Incomparable,
        match="different GPU models: Simulated H200-like GPU "
        r"\(A\) and NVIDIA A100 \(B\)",
    ):
        compare(a, b)
    assert compare(a, b, force=True).forced is not None
    assert compare(a, a).forced is None


def test_other_run_differences_warn():
    a = sample_run(gpus=2)
    b = dataclasses.replace(sample_run(gpus=2, failed_gpu=1), mode="default", tool_version="0.2")
    text = "\n".join(compare(a, b).warnings)
    assert "different modes" in text
    assert "different xferscope versions" in text
    assert "run B is incomplete" in text


# ---- loading ----------------------------------------------------------------------------------


def test_load_run_by_id_and_by_file(tmp_path):
    history = tmp_path / "history.sqlite3"
    run = sample_run(gpus=1)
    with History(history) as h:
        h.append(sample_run(gpus=2))
        run_id = h.append(run)
    assert load_run(str(run_id), history) == run
    path = tmp_path / "run.json"
    path.write_text(json.dumps(run_to_dict(run)))
    assert load_run(str(path), history) == run


def test_load_run_unknown_id(tmp_path):
    history = tmp_path / "history.sqlite3"
    with History(history) as h:
        h.append(sample_run(gpus=1))
    with pytest.raises(HistoryError, match="no run 7 in"):
        load_run("7", history)


def test_load_run_id_without_history_creates_nothing(tmp_path):
    history = tmp_path / "nowhere" / "history.sqlite3"
    with pytest.raises(HistoryError, match="no history at"):
        load_run("1", history)
    assert not history.parent.exists()


def test_load_run_missing_file(tmp_path):
    with pytest.raises(DocumentError, match="no such file") as info:
        load_run(str(tmp_path / "gone.json"), tmp_path / "h.sqlite3")
    assert isinstance(info.value, XferscopeError)


def test_load_run_bad_json(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text('{"schema": "xferscope-run",')
    with pytest.raises(DocumentError, match=r"bad.json is not valid JSON: .* line 1"):
        load_run(str(path), tmp_path / "h.sqlite3")


def test_load_run_refuses_a_sweep(tmp_path):
    options = SweepOptions(
        directions=("h2d",),
        memories=("pinned",),
        mechanisms=("async",),
        timings=("device",),
        devices=(0,),
        sizes=(4096,),
        target_s=0.001,
        budget_s=None,
    )
    sweep = run_sweep(SimulatedEngine(seed=1), options)
    path = tmp_path / "sweep.json"
    path.write_text(json.dumps(sweep_to_dict(sweep)))
    with pytest.raises(RunLoadError, match=r"xferscope sweep.*not of `xferscope run`"):
        load_run(str(path), tmp_path / "h.sqlite3")


@pytest.mark.parametrize(
    ("document", "expected"),
    [
        ([1, 2], "not an object"),
        ({"schema": "something-else"}, "not an xferscope-run document"),
        ({"schema": "xferscope-run", "schema_version": 1}, "tool_version is missing"),
    ],
)
def test_load_run_not_a_run(tmp_path, document, expected):
    path = tmp_path / "x.json"
    path.write_text(json.dumps(document))
    with pytest.raises(DocumentError, match=expected):
        load_run(str(path), tmp_path / "h.sqlite3")


@pytest.mark.parametrize(
    ("damage", "expected"),
    [
        (
            lambda d: d["gpus"].__setitem__(0, "gpu"),
            r"gpus\[0\]: expected an object, found a string",
        ),
        (
            lambda d: d["gpus"][0].__setitem__("curves", {}),
            r"gpus\[0\]\.curves: expected a list, found an object",
        ),
        (
            lambda d: d["gpus"][0]["curves"][1]["points"][0].__setitem__("samples_s", "fast"),
            r"gpus\[0\]\.curves\[1\]\.points\[0\]\.samples_s: expected a list, found a string",
        ),
        (lambda d: d.__setitem__("wall_s", "long"), "wall_s: expected a number, found a string"),
        (lambda d: d["gpus"][0].pop("status"), r"gpus\[0\]\.status is missing"),
    ],
)
def test_a_document_of_the_wrong_shape_names_the_field(tmp_path, damage, expected):
    """A hand-edited or truncated file says which field is wrong, never "string indices must
    be integers"."""
    document = run_to_dict(sample_run(gpus=1))
    damage(document)
    path = tmp_path / "x.json"
    path.write_text(json.dumps(document))
    with pytest.raises(RunLoadError, match=expected) as info:
        load_run(str(path), tmp_path / "h.sqlite3")
    assert "indices" not in str(info.value) and str(path) in str(info.value)


# ---- output -----------------------------------------------------------------------------------


def _rendered(result, **kwargs) -> str:
    out = io.StringIO()
    render(result, Console(file=out, width=200, color_system=None), **kwargs)
    return out.getvalue()


def test_render_shows_changes_and_summary():
    a = tight(sample_run(gpus=1))
    b = dataclasses.replace(times_scaled(a, 1.25), simulated=False)
    result = compare(a, b, force=True)
    text = _rendered(result, labels=("run 1", "run 2"))
    assert "FORCED: run A is simulated" in text and "SLOWER (forced)" in text
    assert BW in text and "SLOWER" in text and "-20.0%" in text
    assert "SAME" not in text
    counts = result.counts()
    assert (
        f"{counts[SLOWER]} slower, {counts[FASTER]} faster, {counts[UNCLEAR]} unclear, "
        f"{counts[SAME]} same" in text
    )
    assert "run 2 against run 1" in text


def test_render_all_rows_and_nothing_changed():
    run = sample_run(gpus=1)
    result = compare(run, run)
    quiet = _rendered(result)
    assert "no metric changed beyond its noise" in quiet and BW not in quiet
    loud = _rendered(result, all_rows=True)
    assert BW in loud and "SAME" in loud
    assert f"0 slower, 0 faster, 0 unclear, {len(result.rows)} same" in loud


def test_to_dict_is_json():
    a = tight(sample_run(gpus=1))
    result = compare(a, times_scaled(a, 1.25))
    data = json.loads(json.dumps(to_dict(result), allow_nan=False))
    assert data["schema"] == "xferscope-compare"
    assert BW in data["regressions"]
    row = next(m for m in data["metrics"] if m["name"] == BW)
    assert row["verdict"] == SLOWER and row["change"] == pytest.approx(-0.2)
    assert set(row) >= {"a", "b", "unit", "noise_band", "improvement", "higher_is_better"}
    assert sum(data["counts"].values()) == len(data["metrics"]) == len(result.rows)
