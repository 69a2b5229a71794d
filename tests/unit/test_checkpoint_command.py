"""`xferscope checkpoint` on the simulated engine (its reads of the files are real): the stages
and loads measured each repeat, the bound named from made-up rates, the documents read back,
a cache that would not drop told, and every bad input one line before anything is measured."""

from __future__ import annotations

import csv
import io
import json
import os

import numpy as np
import pytest

from tests.unit.test_cli import assert_one_line_error, run
from xferscope.checkpoint import measure as module
from xferscope.checkpoint.measure import measure, steps
from xferscope.checkpoint.records import (
    CheckpointFile,
    CheckpointResult,
    Samples,
    dumps_csv,
    dumps_json,
    from_dict,
    to_dict,
)
from xferscope.core.engine.simulated import SimulatedEngine
from xferscope.core.errors import OptionError

from .test_checkpoint_layout import write


@pytest.fixture
def checkpoint(tmp_path):
    rng = np.random.default_rng(3)
    return write(tmp_path / "model.safetensors",
                 {f"w{i}": rng.random((64, 32), dtype=np.float32) for i in range(6)})  # fmt: skip


def made(**samples: tuple[float, ...]) -> CheckpointResult:
    return CheckpointResult(
        created="2026-11-27T12:00:00+00:00", simulated=True, machine={}, options={},
        interrupted=False, wall_s=1.0, device=0,
        files=(CheckpointFile("m.safetensors", 1_000_100, 1_000_000, 3),),
        samples=Samples(**samples), verified=None)  # fmt: skip


def test_each_repeat_measures_every_stage_and_both_loads(checkpoint):
    engine = SimulatedEngine(seed=2)
    result = measure(engine, [str(checkpoint)], repeats=2)
    s = result.samples
    assert [len(v) for v in (s.disk_bps, s.page_cache_bps, s.headers_bps, s.host_memory_bps,
                             s.link_bps, s.load_cold_s, s.load_warm_s)] == [2] * 7  # fmt: skip
    assert min(s.disk_bps + s.page_cache_bps + s.host_memory_bps + s.link_bps) > 0
    assert result.data_bytes == 6 * 64 * 32 * 4 and result.files[0].tensors == 6
    assert result.verified is None  # the simulated engine moves no bytes to check
    assert {b.state for b in result.bounds()} == {"cold", "warm"}
    warm = measure(engine, [str(checkpoint)], repeats=1, cold=False).samples
    assert warm.disk_bps == warm.load_cold_s == () and len(warm.load_warm_s) == 1
    assert steps(2, True) == 14 and steps(2, False) == 10


def test_the_bound_is_the_slowest_stage_of_each_states_path():
    result = made(disk_bps=(2e9, 1e9, 3e9), page_cache_bps=(40e9,), host_memory_bps=(30e9,),
                  headers_bps=(35e9,), link_bps=(55e9,), load_cold_s=(1.0,),
                  load_warm_s=(0.04,))  # fmt: skip
    cold, warm = result.bounds()
    assert (cold.state, cold.stage, cold.stage_bps) == ("cold", "disk", 2e9)
    assert cold.load_bps == pytest.approx(1e6) and cold.share == pytest.approx(5e-4)
    assert (warm.stage, warm.stage_bps, warm.load_bps) == ("host memory", 30e9, 25e6)
    only_warm = made(page_cache_bps=(10e9,), link_bps=(5e9,), load_warm_s=(1e-3,))
    (bound,) = only_warm.bounds()
    assert (bound.state, bound.stage, bound.share) == ("warm", "link", pytest.approx(0.2))
    moe = made(page_cache_bps=(40e9,), headers_bps=(9e9,), link_bps=(55e9,), load_warm_s=(1e-3,))
    assert moe.bounds()[0].stage == "headers"  # an MoE's 18,000 tensors: Python's parse


def test_the_documents_read_back_and_list_each_repeat():
    result = made(disk_bps=(2e9, 1e9), page_cache_bps=(40e9, 41e9), host_memory_bps=(30e9,),
                  link_bps=(55e9,), load_cold_s=(1.0, 0.9), load_warm_s=(0.04,),
                  resident_after_drop=(0.0, 0.0))  # fmt: skip
    document = json.loads(dumps_json(result))
    assert document["schema"] == "xferscope-checkpoint" and document["data_bytes"] == 1_000_000
    assert document["bounds"][0]["stage"] == "disk" and document["medians"]["disk_bps"] == 1.5e9
    assert from_dict(document) == result
    assert from_dict(to_dict(result)).bounds() == result.bounds()
    rows = list(csv.DictReader(io.StringIO(dumps_csv(result))))
    assert len(rows) == 11 and rows[0] == {"simulated": "1", "device": "0",
                                           "data_bytes": "1000000", "figure": "disk_bps",
                                           "repeat": "0", "value": "2e+09"}  # fmt: skip


def test_files_the_cache_kept_are_told(checkpoint, monkeypatch):
    monkeypatch.setattr(module.storage, "cached", lambda paths, warm: 1.0)
    result = measure(SimulatedEngine(seed=2), [str(checkpoint)], repeats=1)
    (found,) = result.findings
    assert found.code == "cache_not_dropped" and "100% of the files stayed" in found.message


def test_the_command_writes_its_files(capsys, tmp_path, checkpoint):
    code, out, err = run(capsys, "checkpoint", str(checkpoint), "--simulate", "--repeats", "1",
                         "-o", str(tmp_path / "out"), "--no-history")  # fmt: skip
    assert code == 0, err
    assert "bound by the" in out and "xferscope.load" in out
    names = sorted(p.name for p in (tmp_path / "out").glob("checkpoint-*/*"))
    assert names == ["checkpoint.csv", "checkpoint.json", "checkpoint.png"]


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (["nothing.safetensors"], ("Error: /", "nothing.safetensors: no such file")),
        (["short.safetensors"], ("Error: /", "too short for a safetensors file")),
        (["legacy.pt"], ("Error: /", "legacy.pt: not a zip archive", "torch.save")),
        (["model.safetensors", "--repeats", "0"], ("--repeats", "'0'")),
        (["model.safetensors", "-g", "7"], ("--device",)),
        ([], ("PATH",)),
        ([""], ("PATH", "an empty path names no file")),
    ],
)
def test_bad_input_is_one_line_and_nothing_is_written(capsys, tmp_path, checkpoint, args,
                                                      fragments):  # fmt: skip
    (tmp_path / "short.safetensors").write_bytes(b"\x01")
    # torch.save's legacy format: a pickle's protocol bytes, then its magic number, no zip
    (tmp_path / "legacy.pt").write_bytes(b"\x80\x02\x8a\nl\xfc\x9cF\xf9 j\xa8P\x19." * 64)
    paths = [str(tmp_path / a) if a.endswith((".safetensors", ".pt")) else a for a in args]
    code, _, err = run(capsys, "checkpoint", *paths, "--simulate", "-o", str(tmp_path / "out"),
                       "--no-history")  # fmt: skip
    assert_one_line_error(code, err, *fragments)
    assert code == 2 and not (tmp_path / "out").exists()


def test_a_checkpoint_larger_than_the_gpus_free_memory_is_refused(checkpoint, monkeypatch):
    engine = SimulatedEngine(seed=2)
    monkeypatch.setattr(engine, "memory_info", lambda index: (1000, 2000))
    with pytest.raises(OptionError, match=r"PATH: the checkpoint's data .* do not fit GPU 0"):
        measure(engine, [str(checkpoint)], repeats=1)


def test_ctrl_c_keeps_the_repeats_measured_and_frees_the_buffers(checkpoint, monkeypatch):
    engine = SimulatedEngine(seed=2)
    made_buffers = []
    real = engine.device_buffer

    def device_buffer(device: int, nbytes: int):
        made_buffers.append(real(device, nbytes))
        return made_buffers[-1]

    calls = []

    def memcpy() -> float:
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return 1e10

    monkeypatch.setattr(engine, "device_buffer", device_buffer)
    monkeypatch.setattr(module, "memcpy_bps", memcpy)
    result = measure(engine, [str(checkpoint)], repeats=2)
    assert result.interrupted and result.samples.host_memory_bps == (1e10,)
    assert len(result.samples.load_warm_s) == 2 and len(result.samples.link_bps) == 1
    assert made_buffers and all(b.closed for b in made_buffers)


class _HostBuffer:
    """Device memory as the check reads it back, in host memory: a NumPy array."""

    def __init__(self, data: bytes) -> None:
        self.array = np.frombuffer(bytearray(data), dtype=np.uint8)

    def data_ptr(self) -> int:
        return int(self.array.ctypes.data)


class _HostEngine:
    """An engine whose staged copier copies host memory, so the check's reading runs."""

    def staged_copier(self, device: int):
        import ctypes
        from types import SimpleNamespace

        return SimpleNamespace(to_host=ctypes.memmove, close=lambda: None)


def _pt(path, blobs: dict[str, bytes]):
    import zipfile

    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        z.writestr("archive/data.pkl", b"\x80\x02}q\x00.")
        for name, blob in blobs.items():
            z.writestr(name, blob)
    return path


def test_the_check_reads_back_tensors_spread_over_each_file(checkpoint, tmp_path):
    """Safetensors (its data from the header's end) and a .pt file (its records, with zip
    headers between them): the bytes as read pass, one byte changed in any sampled tensor
    fails."""
    from xferscope.transfer.loading import read_layout
    from xferscope.transfer.loading.pt import pt_layout

    layout = read_layout(checkpoint)
    data = checkpoint.read_bytes()[layout.data_begin :]
    pt = _pt(tmp_path / "m.pt", {f"archive/data/{i}": os.urandom(1000 + i) for i in range(20)})
    records = pt_layout(pt)
    blob = pt.read_bytes()
    as_read = bytearray(len(blob) - records.data_begin)  # the records at their offsets only
    for t in records.tensors:
        as_read[t.begin - records.data_begin : t.end - records.data_begin] = blob[t.begin : t.end]
    engine = _HostEngine()
    assert module.checked(engine, 0, [layout, records],
                          [_HostBuffer(data), _HostBuffer(bytes(as_read))])  # fmt: skip
    last = records.tensors[-1]
    as_read[last.end - records.data_begin - 1] ^= 0xFF
    assert not module.checked(engine, 0, [records], [_HostBuffer(bytes(as_read))])


def test_a_pt_file_is_measured_as_its_records(tmp_path):
    pt = _pt(tmp_path / "m.pt", {f"archive/data/{i}": os.urandom(4096) for i in range(8)})
    result = measure(SimulatedEngine(seed=2), [str(pt)], repeats=1)
    (f,) = result.files
    assert f.tensors == 8 and len(result.samples.load_warm_s) == len(result.samples.headers_bps)
