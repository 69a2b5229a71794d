"""Prometheus textfile output: parsed back with a small parser that follows the exposition
format (and with prometheus_client's, where that is installed)."""

from __future__ import annotations

import copy
import dataclasses
import os
import re
import stat

import pytest

from xferscope.documents.prometheus import escape_label_value, render_prometheus, write_prometheus
from xferscope.run.metrics import run_metrics

from .run_samples import sample_run

_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)"\s*(,|$)')
_SAMPLE = re.compile(rf"^({_NAME})(?:\{{(.*)\}})? (\S+)$")
_COMMENT = re.compile(rf"^# (HELP|TYPE) ({_NAME}) (.*)$")


def _unescape(value: str) -> str:
    return re.sub(r"\\(.)", lambda m: {"n": "\n", "\\": "\\", '"': '"'}[m.group(1)], value)


def _parse_labels(text: str) -> dict[str, str]:
    labels: dict[str, str] = {}
    position = 0
    while position < len(text):
        match = _LABEL.match(text, position)
        assert match, f"bad labels at {text[position:]!r}"
        assert match.group(1) not in labels, "duplicate label"
        labels[match.group(1)] = _unescape(match.group(2))
        position = match.end()
    return labels


Sample = tuple[dict[str, str], float]


def parse(text: str) -> dict[str, tuple[str, str, list[Sample]]]:
    """family -> (help, type, samples). Asserts the rules node_exporter enforces: HELP and TYPE
    before a family's samples, every family's samples together, no sample seen twice."""
    assert text.endswith("\n") and not text.endswith("\n\n")
    families: dict[str, tuple[str, str, list[Sample]]] = {}
    helps: dict[str, str] = {}
    types: dict[str, str] = {}
    current: str | None = None
    seen: set[tuple[str, tuple[tuple[str, str], ...]]] = set()
    for line in text[:-1].split("\n"):
        comment = _COMMENT.match(line)
        if comment:
            kind, name, rest = comment.groups()
            assert name not in families, f"{kind} of {name} after its samples"
            (helps if kind == "HELP" else types)[name] = rest
            continue
        assert not line.startswith("#"), line
        sample = _SAMPLE.match(line)
        assert sample, f"not a sample line: {line!r}"
        name, label_text, value = sample.groups()
        if name != current:
            assert name not in families, f"samples of {name} are not together"
            assert name in helps and types.get(name) == "gauge", f"{name} lacks HELP or TYPE"
            families[name] = (helps[name], types[name], [])
            current = name
        labels = _parse_labels(label_text or "")
        key = (name, tuple(sorted(labels.items())))
        assert key not in seen, f"duplicate sample {key}"
        seen.add(key)
        families[name][2].append((labels, float(value)))
    return families


def _value(families, family: str, **labels: str) -> float:
    matches = [v for ls, v in families[family][2] if all(ls.get(k) == x for k, x in labels.items())]
    assert len(matches) == 1, (family, labels, matches)
    return matches[0]


def test_headline_metrics_with_labels():
    run = sample_run(gpus=2)
    families = parse(render_prometheus(run))
    headline = [m for m in run_metrics(run).values() if m.headline]
    bandwidth = families["xferscope_bandwidth_bytes_per_second"][2]
    latency = families["xferscope_latency_seconds"][2]
    assert len(bandwidth) + len(latency) == len(headline) == 20
    uuid = run.machine["gpus"][0]["uuid"]
    for labels, _ in bandwidth + latency:
        assert set(labels) == {"gpu", "uuid", "direction", "memory", "mechanism", "timing"}
        assert labels["uuid"] == uuid
    expected = run_metrics(run)["gpu1/h2d/pinned/async/device/bandwidth"].value
    assert (
        _value(
            families,
            "xferscope_bandwidth_bytes_per_second",
            gpu="1",
            direction="h2d",
            memory="pinned",
            mechanism="async",
            timing="device",
        )
        == expected
    )
    expected = run_metrics(run)["gpu0/d2h/pageable/memcpy/api/latency"].value
    assert (
        _value(
            families,
            "xferscope_latency_seconds",
            gpu="0",
            direction="d2h",
            memory="pageable",
            mechanism="memcpy",
            timing="api",
        )
        == expected
    )
    # Only headline figures: no api-timed pinned curve.
    assert not any(ls["memory"] == "pinned" and ls["timing"] == "api" for ls, _ in bandwidth)


def test_run_gauges():
    run = sample_run(gpus=2, failed_gpu=1)
    families = parse(render_prometheus(run))
    assert _value(families, "xferscope_run_complete") == 0
    assert _value(families, "xferscope_run_simulated") == 1
    assert _value(families, "xferscope_run_wall_seconds") == 12.5
    # created 2026-11-21T06:00:00+00:00
    assert _value(families, "xferscope_run_timestamp_seconds") == 1795240800
    assert _value(families, "xferscope_gpu_complete", gpu="0") == 1
    assert _value(families, "xferscope_gpu_complete", gpu="1") == 0
    assert _value(families, "xferscope_run_info", mode="quick", version="0.1.0") == 1
    findings = {ls["severity"]: v for ls, v in families["xferscope_findings"][2]}
    assert findings == {"ok": 1, "info": 0, "warning": 1, "error": 1}
    # The failed GPU has no curves, so no headline figures.
    assert all(ls["gpu"] == "0" for ls, _ in families["xferscope_latency_seconds"][2])
    real = parse(render_prometheus(dataclasses.replace(sample_run(gpus=1), simulated=False)))
    assert _value(real, "xferscope_run_simulated") == 0
    assert _value(real, "xferscope_run_complete") == 1


def test_timestamp_forms():
    run = sample_run(gpus=1)
    for created in ("2026-11-21T06:00:00Z", "2026-11-21T06:00:00", "2026-11-21T07:00:00+01:00"):
        families = parse(render_prometheus(dataclasses.replace(run, created=created)))
        assert _value(families, "xferscope_run_timestamp_seconds") == 1795240800, created
    families = parse(render_prometheus(dataclasses.replace(run, created="yesterday")))
    assert "xferscope_run_timestamp_seconds" not in families


def test_label_values_are_escaped():
    assert escape_label_value('a\\b"c\nd') == 'a\\\\b\\"c\\nd'
    odd = 'GPU-"quoted"\\back\nslash'
    run = sample_run(gpus=1)
    machine = copy.deepcopy(run.machine)
    machine["gpus"][0]["uuid"] = odd
    machine["driver"] = 'x"y'
    text = render_prometheus(dataclasses.replace(run, machine=machine))
    families = parse(text)
    labels, _ = families["xferscope_bandwidth_bytes_per_second"][2][0]
    assert labels["uuid"] == odd
    assert _value(families, "xferscope_run_info", driver='x"y') == 1
    assert "\nslash" not in text  # the newline is escaped, not written


def test_values_round_trip_exactly():
    run = sample_run(gpus=1)
    families = parse(render_prometheus(run))
    values = {v for _, v in families["xferscope_bandwidth_bytes_per_second"][2]}
    expected = {
        m.value for m in run_metrics(run).values() if m.headline and m.name.endswith("bandwidth")
    }
    assert values == expected


def test_special_values():
    run = sample_run(gpus=1)
    text = render_prometheus(dataclasses.replace(run, wall_s=float("inf")))
    assert "xferscope_run_wall_seconds +Inf\n" in text
    text = render_prometheus(dataclasses.replace(run, wall_s=float("nan")))
    assert "xferscope_run_wall_seconds NaN\n" in text


def test_prometheus_client_reads_it():
    parser = pytest.importorskip("prometheus_client.parser")
    run = sample_run(gpus=2)
    families = {f.name: f for f in parser.text_string_to_metric_families(render_prometheus(run))}
    assert families["xferscope_bandwidth_bytes_per_second"].type == "gauge"
    assert len(families["xferscope_bandwidth_bytes_per_second"].samples) == 10
    assert len(families["xferscope_findings"].samples) == 4


def test_write_is_atomic_and_readable(tmp_path):
    path = tmp_path / "xferscope.prom"
    run = sample_run(gpus=1)
    write_prometheus(run, path)
    assert path.read_text() == render_prometheus(run)
    assert os.listdir(tmp_path) == ["xferscope.prom"]  # no temporary file left
    assert stat.S_IMODE(path.stat().st_mode) == 0o644  # node_exporter runs as another user
    path.chmod(0o640)
    write_prometheus(dataclasses.replace(run, wall_s=3.0), path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o640  # the replaced file's mode is kept
    assert "xferscope_run_wall_seconds 3.0\n" in path.read_text()


def test_failed_write_keeps_the_earlier_file(tmp_path, monkeypatch):
    path = tmp_path / "xferscope.prom"
    run = sample_run(gpus=1)
    write_prometheus(run, path)
    before = path.read_text()

    def refuse(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(OSError, match="No space"):
        write_prometheus(dataclasses.replace(run, wall_s=99.0), path)
    monkeypatch.undo()
    assert path.read_text() == before
    assert os.listdir(tmp_path) == ["xferscope.prom"]
