"""Run records: JSON round trip and derived figures."""

from __future__ import annotations

import json

import pytest

from xferscope.documents.reader import SchemaError
from xferscope.run.metrics import run_metrics
from xferscope.run.records import run_from_dict, run_to_dict

from .run_samples import sample_run


def test_run_round_trips_through_json():
    result = sample_run(gpus=2, failed_gpu=1)
    assert run_from_dict(json.loads(json.dumps(run_to_dict(result)))) == result


def test_run_schema_is_checked():
    doc = run_to_dict(sample_run(gpus=1))
    with pytest.raises(SchemaError):
        run_from_dict(doc | {"schema": "xferscope-sweep"})
    with pytest.raises(SchemaError):
        run_from_dict(doc | {"schema_version": 99})


def test_pinning_break_even():
    pinning = sample_run(gpus=1).gpus[0].pinning
    assert pinning is not None
    # (0.339 + 0.067) / (0.104 - 0.0194) = 4.8 transfers
    assert pinning.alloc_break_even == pytest.approx(0.406 / 0.0846)
    assert pinning.register_break_even == pytest.approx(0.0542 / 0.0842)


def test_complete_only_when_every_gpu_completed():
    assert sample_run(gpus=2).complete
    assert not sample_run(gpus=2, failed_gpu=1).complete
    assert not sample_run(gpus=1, interrupted=True).complete


def test_metrics_name_every_figure_once():
    metrics = run_metrics(sample_run(gpus=2))
    bw = metrics["gpu0/h2d/pinned/async/device/bandwidth"]
    assert bw.headline and bw.unit == "B/s" and bw.higher_is_better
    assert bw.value == pytest.approx(55.4e9, rel=0.05)
    lat = metrics["gpu1/h2d/pinned/memcpy/api/latency"]
    assert lat.unit == "s" and not lat.higher_is_better
    assert metrics["gpu0/concurrent/bidirectional/total_bandwidth"].value == pytest.approx(
        102.4e9, rel=0.01
    )
    assert "multi/0-1/async/peer/one_way/total_bandwidth" in metrics
    assert metrics["gpu0/pinning/host_alloc_per_gb"].value == pytest.approx(0.339 / 1.073741824)
