"""`sweep --host-offset/--device-offset` and `sweep --alignment`: misaligned copies as curves of
their own, measured against their aligned twin, in every output."""

from __future__ import annotations

import csv
import io
import json

import pytest

from xferscope import cli
from xferscope.cli.sweep import parse_offsets
from xferscope.core.engine.simulated import SimulatedEngine
from xferscope.core.errors import OptionError
from xferscope.documents import csv as csv_export
from xferscope.sweep.alignment import COSTLY, alignment_findings, misalignments
from xferscope.sweep.measure import run_sweep
from xferscope.sweep.options import SweepOptions
from xferscope.sweep.records import CurveConfig, from_dict, to_dict


def test_offsets_always_include_the_aligned_reference():
    assert parse_offsets("--host-offset", "1,4095") == (0, 1, 4095)
    assert parse_offsets("--host-offset", "0") == (0,)
    for bad in ("4096", "-1", "x", ""):
        with pytest.raises(OptionError, match="--host-offset"):
            parse_offsets("--host-offset", bad)
    with pytest.raises(OptionError, match="--device-offset"):
        SweepOptions(device_offsets=(5000,))


def test_each_offset_pair_is_a_curve_and_device_copies_have_no_host_offset():
    options = SweepOptions(
        directions=("h2d", "d2d"), memories=("pinned",), host_offsets=(0, 1), device_offsets=(0, 3)
    )
    configs, _ = options.configs()
    h2d = {(c.host_offset, c.device_offset) for c in configs if c.direction == "h2d"}
    d2d = {(c.host_offset, c.device_offset) for c in configs if c.direction == "d2d"}
    assert h2d == {(0, 0), (0, 3), (1, 0), (1, 3)}
    assert d2d == {(0, 0), (0, 3)}
    config = CurveConfig(0, "h2d", "pinned", "memcpy", "api", 1, 3)
    assert config.label == "h2d pinned memcpy api host+1 device+3"
    assert config.aligned == CurveConfig(0, "h2d", "pinned", "memcpy", "api")
    assert CurveConfig(0, "h2d", "pinned", "memcpy", "api").offset_label == ""


def _sweep(**kw):
    engine = SimulatedEngine(noise=0.0)
    options = SweepOptions(sizes=(4096, 1 << 20), target_s=0.01, trials=2, **kw)
    return run_sweep(engine, options)


def test_cost_is_time_over_the_aligned_twin():
    result = _sweep(memories=("pageable", "pinned"), host_offsets=(0, 1, 64))
    rows = {(m.case, m.config.host_offset): dict(m.costs) for m in misalignments(result.curves)}
    # the model: pageable copies 12% slower off a 16-byte boundary, 64 aligned costs nothing
    pageable = rows[("h2d pageable memcpy api", 1)]
    assert pageable[1 << 20] == pytest.approx(0.12, abs=0.02)
    assert abs(rows[("h2d pageable memcpy api", 64)][1 << 20]) < 0.02
    found = {(f.figure, f.severity) for f in alignment_findings(result.curves)}
    assert ("h2d pageable memcpy api", "warning") in found
    assert ("h2d pinned memcpy api", "info") in found
    warning = next(f for f in result.findings if f.code == "misaligned" and f.severity == "warning")
    assert warning.value is not None and warning.value > COSTLY and "host+1" in warning.message


def test_offsets_survive_json_and_csv():
    result = _sweep(memories=("pinned",), directions=("h2d",), device_offsets=(0, 7))
    doc = to_dict(result)
    configs = [c["config"] for c in doc["curves"]]
    assert {c.get("device_offset", 0) for c in configs} == {0, 7}
    assert "host_offset" not in configs[0]  # aligned curves keep the old shape
    back = from_dict(json.loads(json.dumps(doc)))
    assert [c.config for c in back.curves] == [c.config for c in result.curves]
    rows = list(csv.DictReader(io.StringIO(csv_export.dumps(result))))
    assert {r["device_offset"] for r in rows} == {"0", "7"}


def test_alignment_preset_end_to_end(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("XFERSCOPE_HISTORY", str(tmp_path / "h.sqlite3"))
    code = cli.main(["sweep", "--simulate", "--alignment", "--quick", "-m", "pageable",
                     "--direction", "h2d", "--device-offset", "0", "-o", str(tmp_path / "out"),
                     "--json", str(tmp_path / "s.json")])  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 0, err
    doc = json.loads((tmp_path / "s.json").read_text())
    hosts = sorted({c["config"].get("host_offset", 0) for c in doc["curves"]})
    assert hosts == [0, 1, 4, 16, 64, 512, 4095]
    assert {p["bytes"] for c in doc["curves"] for p in c["points"]} == {
        4096,
        65536,
        1 << 20,
        16 << 20,
    }
    assert "Misalignment" in out and "host+4095" in out
    assert list((tmp_path / "out").rglob("*-alignment.png"))
    code = cli.main(["sweep", "--simulate", "--host-offset", "4096"])
    _, err = capsys.readouterr()
    assert code != 0 and len(err.strip().splitlines()) == 1 and "--host-offset" in err


def test_rounds_pool_their_trials_in_alternating_order():
    engine = SimulatedEngine(noise=0.0)
    seen = []
    real = engine.open_transfer

    def spy(*args, **kw):
        seen.append((args[1], kw.get("host_offset", 0)))
        return real(*args, **kw)

    engine.open_transfer = spy  # type: ignore[method-assign]
    options = SweepOptions(
        directions=("h2d",), memories=("pinned",), sizes=(4096,), target_s=0.01, trials=2,
        max_trials=2, host_offsets=(0, 1), rounds=2,
    )  # fmt: skip
    result = run_sweep(engine, options)
    assert seen == [("h2d", 0), ("h2d", 1), ("h2d", 1), ("h2d", 0)]
    assert [len(c.points[0].samples_s) for c in result.curves] == [4, 4]
    assert [c.config.host_offset for c in result.curves] == [0, 1]
    with pytest.raises(OptionError, match="--rounds"):
        SweepOptions(rounds=0)


def test_a_cost_within_the_trials_spread_is_not_a_warning():
    from dataclasses import replace

    result = _sweep(directions=("h2d",), memories=("pageable",), host_offsets=(0, 1))
    aligned, misaligned = result.curves
    assert [f.severity for f in alignment_findings(result.curves)] == ["warning"]

    # the same medians, but each curve's trials now reach past the other's
    def spread(curve, low, high):
        points = tuple(
            replace(p, samples_s=(p.median_s * low, p.median_s, p.median_s * high))
            for p in curve.points
        )
        return replace(curve, points=points)

    noisy = [spread(aligned, 0.8, 1.4), spread(misaligned, 0.7, 1.2)]
    (m,) = misalignments(noisy)
    assert m.clear == frozenset() and m.worst[1] > COSTLY
    assert [f.severity for f in alignment_findings(noisy)] == ["info"]
