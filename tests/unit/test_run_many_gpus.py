"""Issue 15's preparation on the CPU: `run --quick` on a simulated 8-GPU node fits a minute of
modelled time (every check on the first GPU, the headline on the others, the whole peer matrix
by copy engines),
and every output holds all eight GPUs."""

from __future__ import annotations

import json

from xferscope import cli
from xferscope.core.engine.simulated import SimulatedEngine
from xferscope.run.investigate import RunOptions, run_investigation, steps
from xferscope.run.records import run_from_dict, run_to_dict


def test_quick_on_eight_gpus_fits_a_minute_of_modelled_time():
    options = RunOptions(devices=tuple(range(8)), quick=True)
    result = run_investigation(SimulatedEngine(devices=8), options)
    assert result.wall_s < 60, result.wall_s
    assert [g.scope for g in result.gpus] == ["full"] + ["headline"] * 7
    assert all(g.status == "complete" for g in result.gpus)
    assert len(result.gpus[0].curves) > len(result.gpus[1].curves) == 5
    one_way = [c for c in result.multi if c.kind == "p2p" and c.label.endswith("one_way")]
    assert len({c.label.split("/")[0] for c in one_way}) == 8 * 7  # every ordered pair
    # every pair by copy engines with peer access; the SM kernel and no-peer copies only for
    # the pairs of the fully checked GPU 0 (14 of the 56)
    assert sum(c.label.endswith("/async/peer/one_way") for c in one_way) == 56
    others = {c.label.split("/")[0] for c in one_way if "/async/peer/" not in c.label}
    assert len(others) == 14 and all("0" in pair.split("-") for pair in others)
    assert sum(c.kind == "p2p" and c.label.endswith("/both") for c in result.multi) == 28
    assert "--quick on 8 GPUs" in result.notes[0]
    back = run_from_dict(json.loads(json.dumps(run_to_dict(result))))
    assert [g.scope for g in back.gpus] == [g.scope for g in result.gpus]
    # without --quick, and on two GPUs, every GPU gets every check
    assert {RunOptions(devices=(0, 1), quick=True).scope(d) for d in (0, 1)} == {"full"}
    assert {RunOptions(devices=tuple(range(8))).scope(d) for d in range(8)} == {"full"}
    assert steps(options) < steps(RunOptions(devices=tuple(range(8))))


def test_the_command_on_a_simulated_eight_gpu_node(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("XFERSCOPE_SIMULATE_GPUS", "8")
    monkeypatch.setenv("XFERSCOPE_HISTORY", str(tmp_path / "h.db"))
    code = cli.main(["run", "--quick", "--simulate", "-o", str(tmp_path / "out")])
    out, err = capsys.readouterr()
    assert code == 0, err
    (doc,) = (tmp_path / "out").rglob("run.json")
    run = json.loads(doc.read_text())
    assert len(run["gpus"]) == 8 and run["wall_s"] < 60
    assert "note: --quick on 8 GPUs" in out
    monkeypatch.setenv("XFERSCOPE_SIMULATE_GPUS", "0")
    assert cli.main(["run", "--quick", "--simulate"]) != 0
    assert "XFERSCOPE_SIMULATE_GPUS" in capsys.readouterr().err
