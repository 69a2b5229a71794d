"""Golden files for every document a command writes: run (JSON, points and metrics CSV,
Prometheus textfile), overlap cpu, buffers and gpu, pageable, gl, gemm, batch, pitch, trace
(JSON, CSV), fleet (JSON, CSV, a node's Prometheus textfile) and compare (JSON); the sweep's are
in test_export.py. Each is made by the simulated engine with a fixed seed, on the fixed host of
conftest.py, with the creation time fixed: any change to a format shows here. Set
XFERSCOPE_UPDATE_GOLDEN=1 to rewrite them after an intended change."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from xferscope.core.engine.simulated import SimulatedEngine
from xferscope.documents.csv import run_metrics_csv, run_points_csv
from xferscope.documents.prometheus import render_prometheus
from xferscope.overlap import measure_overlap_cpu, measure_overlap_gpu, measure_rotation
from xferscope.pageable.measure import dumps_csv, dumps_json
from xferscope.pageable.measure import measure as measure_pageable
from xferscope.run.compare import compare, to_dict
from xferscope.run.investigate import RunOptions, run_investigation
from xferscope.run.records import run_to_dict

from .test_export import _check_golden

CREATED = "2026-11-22T12:00:00+00:00"
MIB = 1 << 20


def _fixed(result: Any) -> Any:
    """The result with the fields that depend on the moment it was made fixed."""
    fields = {"created": CREATED}
    if hasattr(result, "elapsed_s"):
        fields["elapsed_s"] = None
    return dataclasses.replace(result, **fields)


def _json(document: dict[str, Any]) -> str:
    return json.dumps(document, indent=2, allow_nan=False) + "\n"


@pytest.fixture(scope="module")
def quick_run():
    return _fixed(run_investigation(SimulatedEngine(seed=11), RunOptions(devices=(0,), quick=True)))


def test_run_documents_match_golden(quick_run):
    _check_golden("run.json", _json(run_to_dict(quick_run)))
    _check_golden("run-points.csv", run_points_csv(quick_run))
    _check_golden("run-metrics.csv", run_metrics_csv(quick_run))
    _check_golden("run.prom", render_prometheus(quick_run))


def test_compare_document_matches_golden(quick_run):
    other = _fixed(
        run_investigation(SimulatedEngine(seed=12), RunOptions(devices=(0,), quick=True))
    )
    _check_golden("compare.json", _json(to_dict(compare(quick_run, other))))


@pytest.mark.parametrize(
    ("name", "make"),
    [
        (
            "overlap-cpu",
            lambda e: measure_overlap_cpu(
                e, 0, "d2h", ("pinned", "pageable"), "async", 64 * MIB, (0.0, 1e-3), 2
            ),
        ),
        ("overlap-buffers", lambda e: measure_rotation(e, 0, ("d2h", "h2d"), (1, 2), (MIB,), 8, 2)),
        ("overlap-gpu", lambda e: measure_overlap_gpu(e, 0, 64 * MIB, (1, 2), 2, (1,))),
    ],
)
def test_overlap_documents_match_golden(name, make):
    result = _fixed(make(SimulatedEngine(seed=11)))
    _check_golden(f"{name}.json", _json(result.to_dict()))
    _check_golden(f"{name}.csv", result.to_csv())


def test_pageable_documents_match_golden():
    result = _fixed(measure_pageable(SimulatedEngine(seed=11), (MIB, 16 * MIB), (1, 10), 0, 2))
    _check_golden("pageable.json", dumps_json(result))
    _check_golden("pageable.csv", dumps_csv(result))


def test_checkpoint_documents_match_golden():
    """Made by hand: its stages' rates are the files' real reads, which no seed fixes."""
    from xferscope.checkpoint.records import CheckpointFile, CheckpointResult, Samples
    from xferscope.checkpoint.records import dumps_csv as checkpoint_csv
    from xferscope.checkpoint.records import dumps_json as checkpoint_json
    from xferscope.core import machine

    result = CheckpointResult(
        created=CREATED, simulated=True, interrupted=False, wall_s=42.0, device=0,
        machine=machine.collect(SimulatedEngine(seed=11), [0]),
        options={"paths": ["ckpt/model.safetensors.index.json"], "device": 0, "repeats": 2,
                 "cold": True},
        files=(CheckpointFile("ckpt/model-00001-of-00002.safetensors", 8_000_123_456,
                              8_000_000_000, 150),
               CheckpointFile("ckpt/model-00002-of-00002.safetensors", 7_000_120_000,
                              7_000_000_000, 150)),
        samples=Samples(disk_bps=(1.9e9, 1.7e9), page_cache_bps=(41e9, 43e9),
                        headers_bps=(1.2e12, 1.3e12),
                        host_memory_bps=(30e9, 31e9), link_bps=(55.4e9, 55.5e9),
                        load_cold_s=(10.1, 9.9), load_warm_s=(0.41, 0.40),
                        resident_after_drop=(0.0, 0.0)),
        verified=True)  # fmt: skip
    _check_golden("checkpoint.json", checkpoint_json(result))
    _check_golden("checkpoint.csv", checkpoint_csv(result))


def test_the_golden_documents_read_back():
    """Every golden JSON is what its reader expects, at the current schema version."""
    from xferscope.cli.measured import document_kinds
    from xferscope.documents.reader import read_document

    from .test_export import GOLDEN

    names = ["run", "sweep", "overlap-cpu", "overlap-buffers", "overlap-gpu", "pageable", "gl",
             "gemm", "batch", "pitch", "trace", "fleet", "checkpoint"]  # fmt: skip
    for name in names:
        document = read_document(GOLDEN / f"{name}.json")
        kind = document_kinds()[document["schema"]]
        assert kind.name == name
        assert kind.load(document) is not None


def test_gl_documents_match_golden():
    from xferscope.gl import measure as gl_measure
    from xferscope.gl import records as gl_records
    from xferscope.gl.states import GlOptions

    options = GlOptions(
        sizes=((256, 256),),
        types=("ubyte", "float"),
        internal_formats=("rgba8", "rgba32f"),
        pbos=(0, 2),
        work="auto",
        bytes=1 << 24,
    )
    result = _fixed(gl_measure.measure(SimulatedEngine(seed=11), options))
    _check_golden("gl.json", gl_records.dumps_json(result))
    _check_golden("gl.csv", gl_records.dumps_csv(result))


# ---- gemm, batch, pitch, trace, fleet ------------------------------------------------------------


def test_gemm_documents_match_golden():
    from xferscope.gemm.measure import measure
    from xferscope.gemm.records import GemmOptions, dumps_csv, dumps_json
    from xferscope.gemm.shapes import Shape

    options = GemmOptions(
        precisions=("fp32", "bf16"),
        shapes=(Shape(256, 256, 256), Shape(1000, 1000, 1000), Shape(128, 512, 64)),
        target_s=0.01,
        trials=3,
        samples=16,
        transfers=("pinned",),
    )
    result = _fixed(measure(SimulatedEngine(seed=11), options))
    _check_golden("gemm.json", dumps_json(result))
    _check_golden("gemm.csv", dumps_csv(result))


def test_batch_documents_match_golden():
    from xferscope.batch.measure import BatchOptions, dumps_csv, dumps_json, measure

    options = BatchOptions(counts=(1, 16), sizes=(4096, 1 << 20), target_s=0.002, trials=3)
    result = _fixed(measure(SimulatedEngine(seed=11), options))
    _check_golden("batch.json", dumps_json(result))
    _check_golden("batch.csv", dumps_csv(result))


def test_pitch_documents_match_golden():
    from xferscope.pitch.measure import PitchOptions, dumps_csv, dumps_json, measure

    options = PitchOptions(
        total=1 << 20, widths=(64, 4096, 1 << 20), target_s=0.002, trials=3, memories=("pinned",)
    )
    result = _fixed(measure(SimulatedEngine(seed=11), options))
    _check_golden("pitch.json", dumps_json(result))
    _check_golden("pitch.csv", dumps_csv(result))


def test_fleet_documents_match_golden():
    from xferscope.fleet.records import dumps_csv, dumps_json, prometheus_text
    from xferscope.fleet.run import FleetOptions, assemble

    from .test_fleet import GPU, report

    reports = [report(r, 55e9 * (1 + 0.001 * r)) for r in range(6)]
    reports[4] = report(4, 27e9, pcie_width=8)
    result = assemble(reports, FleetOptions(), True, CREATED, 0.1, 2.0)
    _check_golden("fleet.json", dumps_json(result))
    _check_golden("fleet.csv", dumps_csv(result))
    _check_golden("fleet-node1.prom", prometheus_text(result, "node1"))
    assert GPU["uuid"] in dumps_json(result)


def test_trace_documents_match_golden(capsys, tmp_path, monkeypatch):
    import datetime as dt
    import types

    from xferscope import cli
    from xferscope.trace import pipeline

    from .test_trace import _fake_run

    fixed = dt.datetime(2026, 11, 22, 12, 0, 0, tzinfo=dt.timezone.utc)
    clock = types.SimpleNamespace(
        datetime=types.SimpleNamespace(now=lambda *a: fixed), timezone=dt.timezone
    )
    monkeypatch.setattr("xferscope.documents.envelope.dt", clock)
    monkeypatch.setattr(pipeline, "run_traced", _fake_run(tmp_path))
    args = ["trace", "--reference", "none", "--no-history", "-o", str(tmp_path), "--", "x"]
    assert cli.main(args) == 0, capsys.readouterr().err
    (directory,) = tmp_path.glob("trace-*")
    _check_golden("trace.json", (directory / "trace-summary.json").read_text())
    _check_golden("trace.csv", (directory / "copies.csv").read_text())
