"""xferscope.load's reading without a GPU or PyTorch: which ranges of a file it reads (tensors
end to end joined, from the first tensor's offset), the reads themselves through the simulated
engine's copy_many copier (the native copier's pread loop and its errors), and a file that changed
since its header was read refused with one line."""

from __future__ import annotations

import json
import os
from typing import Any, ClassVar

import numpy as np
import pytest

import xferscope
from xferscope.core.compiled import engine_module
from xferscope.core.engine.simulated import SimulatedEngine
from xferscope.transfer.loading import CheckpointError, read_layout
from xferscope.transfer.loading.load import load, placed
from xferscope.transfer.loading.reads import JOIN_GAP, read_file, runs

from .test_checkpoint_layout import write


def test_ranges_join_tensors_end_to_end_or_near_from_the_first(tmp_path):
    tensors = {"a": np.ones(5, np.float32), "b": np.zeros(3, np.float16),
               "empty": np.zeros(0, np.float32), "c": np.ones(2, np.int64)}  # fmt: skip
    layout = read_layout(write(tmp_path / "m.safetensors", tensors))
    first, starts, sizes, offsets = runs(layout)
    assert first == layout.data_begin and starts == [first] and sizes == [20 + 6 + 16]
    assert offsets == [0]
    gap = {"a": {"dtype": "F32", "shape": [5], "data_offsets": [8, 28]},
           "b": {"dtype": "F16", "shape": [3], "data_offsets": [40, 46]}}  # fmt: skip
    path = write(tmp_path / "gaps.safetensors", {"x": np.zeros(48, np.uint8)},
                 header={"x": gap["a"], "y": gap["b"]})  # fmt: skip
    first, starts, sizes, offsets = runs(read_layout(path))
    assert starts == [first] and offsets == [0] and sizes == [38]  # the 12 bytes between read
    far = {
        "x": gap["a"],
        "y": {"dtype": "U8", "shape": [3], "data_offsets": [JOIN_GAP + 28, JOIN_GAP + 31]},
    }
    path = write(tmp_path / "far.safetensors", {"x": np.zeros(JOIN_GAP + 31, np.uint8)},
                 header=far)  # fmt: skip
    first, starts, sizes, offsets = runs(read_layout(path))
    assert offsets == [0, JOIN_GAP + 20] and sizes == [20, 3]


def test_a_file_is_read_through_the_copier_and_a_changed_one_refused(tmp_path):
    engine = SimulatedEngine()
    copier = engine.many_copier(0)
    path = write(tmp_path / "m.safetensors", {"w": np.arange(1000, dtype=np.float32)})
    layout = read_layout(path)
    before = engine.now()
    read_file(layout, copier, 0x7F00_0000_0000)
    assert engine.now() > before  # the staged copy of its bytes, on the simulated clock
    os.utime(path, ns=(layout.version[2] + 10**9, layout.version[2] + 10**9))
    with pytest.raises(CheckpointError, match=r"m.safetensors: the file changed since its header"):
        read_file(layout, copier, 0x7F00_0000_0000)
    path.unlink()
    with pytest.raises(CheckpointError, match=r"m.safetensors: No such file"):
        read_file(layout, copier, 0x7F00_0000_0000)


def test_the_reads_name_a_file_that_ends_early_and_a_failed_read(tmp_path):
    e = engine_module()
    path = tmp_path / "short.bin"
    path.write_bytes(bytes(100))
    fd = os.open(path, os.O_RDONLY)
    try:
        e.read_ranges(fd, np.array([0, 90], np.uint64), np.array([50, 20], np.uint64))
    except e.ReadError as exc:
        assert "ends before byte 110: it is shorter than when its layout was read" in str(exc)
        assert isinstance(exc, OSError)
    else:
        raise AssertionError("a read past the end went unnoticed")
    finally:
        os.close(fd)
    with pytest.raises(OSError, match=r"reading 1 MiB at byte 0: Bad file descriptor"):
        e.read_ranges(fd, np.array([0], np.uint64), np.array([1 << 20], np.uint64))


def test_load_is_xferscopes_and_refuses_a_dtype_to_cast_to_that_is_not_floating():
    assert xferscope.load is load
    torch = pytest.importorskip("torch")
    with pytest.raises(ValueError, match=r"dtype: torch.int32 is not a floating-point"):
        load([], dtype=torch.int32)


def test_tensors_are_placed_by_one_gpu_a_callable_or_a_device_map():
    names = ["embed", "model.layers.1.w", "model.layers.10.w", "model.layers.1", "head"]
    assert placed(names, "cuda:1") == {1: names}
    layers = ["model.layers.1.w", "model.layers.10.w", "model.layers.1"]
    assert placed(names, lambda n: 2 if "layers" in n else 0) == {0: ["embed", "head"], 2: layers}
    device_map = {"": 0, "model.layers.1": 1, "model.layers": "cuda:3", "head": "cuda:2"}
    assert placed(names, device_map) == {
        0: ["embed"], 1: ["model.layers.1.w", "model.layers.1"], 3: ["model.layers.10.w"],
        2: ["head"]}  # fmt: skip
    with pytest.raises(ValueError, match=r"device: the map names no GPU for tensor 'embed'"):
        placed(names, {"model": 0, "head": 1})
    with pytest.raises(ValueError, match=r"device: 'tpu' is not a CUDA device"):
        placed(names, {"": "tpu"})


def test_the_ranges_of_some_tensors_of_a_file(tmp_path):
    tensors = {"a": np.ones(5, np.float32), "b": np.zeros(3, np.float16), "c": np.ones(2, np.int64)}
    layout = read_layout(write(tmp_path / "m.safetensors", tensors))
    first, starts, sizes, offsets = runs(layout, {"a", "c"})
    assert starts == [first, first + 26] and sizes == [20, 16] and offsets == [0, 26]
    first, _, sizes, offsets = runs(layout, {"b"})
    assert first == layout.data_begin + 20 and sizes == [6] and offsets == [0]


def _allocate(nbytes: int) -> Any:
    """A buffer as DataReads asks for one, without a GPU: the simulated engine's."""
    return SimulatedEngine().device_buffer(0, nbytes)


def test_each_files_data_is_read_while_its_header_is_parsed(tmp_path):
    """DataReads reads each file's data (from the header's end) on a thread of its own: the
    simulated copier's reads are the native pread loop's, so a file cut after the reads were
    begun is told as the read's error, and a layout of another version is refused."""
    from xferscope.transfer.loading.reads import DataReads

    engine = SimulatedEngine()
    one = write(tmp_path / "a.safetensors", {"w": np.arange(1000, dtype=np.float32)})
    two = write(tmp_path / "b.safetensors", {"v": np.ones(10, dtype=np.float16)})
    reads = DataReads(engine.many_copier(0), [one, two], _allocate)
    layouts = [read_layout(one), read_layout(two)]
    assert [b.bytes for b in reads.buffers] == [4000, 20]
    assert reads.buffer(1, layouts[1]) is reads.buffers[1]
    reads.finish()
    before = engine.now()
    reads = DataReads(engine.many_copier(0), [one], _allocate)
    reads.finish()
    assert engine.now() > before  # the staged copy of its bytes, on the simulated clock
    stale = layouts[0]
    os.utime(one, ns=(stale.version[2] + 10**9, stale.version[2] + 10**9))
    reads = DataReads(engine.many_copier(0), [one], _allocate)
    with pytest.raises(CheckpointError, match=r"a.safetensors: the file changed since its header"):
        reads.buffer(0, stale)
    held = list(reads.buffers)
    reads.close()
    assert reads.buffers == [] and all(b.closed for b in held)


def test_a_read_that_fails_is_one_error_naming_the_file(tmp_path, monkeypatch):
    from xferscope.transfer.loading import reads as module

    engine = SimulatedEngine()
    path = write(tmp_path / "a.safetensors", {"w": np.arange(1000, dtype=np.float32)})
    real = module.version_of
    calls = []

    def later(stat: os.stat_result) -> tuple[int, int, int]:  # the file's size shrinks
        calls.append(stat)
        v = real(stat)
        return v if len(calls) == 1 else (v[0], v[1] - 1, v[2])

    monkeypatch.setattr(module, "version_of", later)
    reads = module.DataReads(engine.many_copier(0), [path], _allocate)
    with pytest.raises(CheckpointError, match=r"a.safetensors: the file changed while it was read"):
        reads.finish()
    path.write_bytes(b"\x10\x00")
    with pytest.raises(CheckpointError, match=r"a.safetensors: 2 B, too short"):
        module.DataReads(engine.many_copier(0), [path], _allocate)
    with pytest.raises(CheckpointError, match=r"nothing.safetensors: No such file"):
        module.DataReads(engine.many_copier(0), [tmp_path / "nothing.safetensors"], _allocate)


def test_tensors_of_a_kind_whose_offsets_step_evenly_become_runs():
    """An MoE's experts (gate and up of one shape interleaved, down of another): one run per
    period's member; offsets that step unevenly: the longest runs of consecutive ones."""
    from xferscope.transfer.loading.layout import Tensor
    from xferscope.transfer.loading.views import _progressions

    def at(*begins: int, nbytes: int = 8) -> list[Tensor]:
        return [Tensor(f"t{b}", "F32", (2,), b, nbytes) for b in begins]

    assert _progressions(at(0, 8, 16, 24)) == [(at(0, 8, 16, 24), 8)]
    gate_up = at(0, 8, 24, 32, 48, 56)  # down (another shape) at 16, 40, 64
    assert _progressions(gate_up) == [(at(0, 24, 48), 24), (at(8, 32, 56), 24)]
    assert _progressions(at(0, 8, 16, 40, 48, 100)) == [
        (at(0, 8, 16), 8), (at(40, 48), 8), (at(100), 0)]  # fmt: skip
    assert _progressions(at(5)) == [(at(5), 0)]
    empty = at(3, 3, 3, nbytes=0)
    assert _progressions(empty) == [([t], 0) for t in empty]


class _HostCopier:
    """A copier whose read_to_device reads into host memory (NumPy's arrays), as the native one
    reads into the GPU's: xferscope.load end to end without a GPU. `asked`: each read's readers."""

    asked: ClassVar[list[int]] = []

    def read_to_device(
        self, fd: int, address: int, starts: Any, sizes: Any, offsets: Any, readers: int = 0
    ) -> None:
        import ctypes

        _HostCopier.asked.append(readers)

        for start, size, offset in zip(starts, sizes, offsets, strict=True):
            data = os.pread(fd, int(size), int(start))
            if len(data) != int(size):
                raise OSError(0, f"the file ends before byte {int(start) + int(size)}")
            ctypes.memmove(address + int(offset), data, len(data))


@pytest.fixture
def host_load(monkeypatch):
    from types import SimpleNamespace

    from xferscope.transfer.loading import load as module
    from xferscope.transfer.loading.kits import ArrayKit

    monkeypatch.setattr(module, "_kit", lambda framework: ArrayKit(np))
    copies = SimpleNamespace(copier=lambda index: _HostCopier())
    monkeypatch.setattr(module, "copies_of", lambda engine: copies)
    return module.load


def test_an_moes_tensors_and_a_sharded_set_equal_the_packages_reading(tmp_path, host_load):
    """Interleaved experts (strided blocks), scalars, empty and misaligned tensors, a sharded
    set, a cast: what load makes of the bytes read equals what the safetensors package reads."""
    from safetensors.numpy import load_file, save_file

    rng = np.random.default_rng(8)
    tensors = {f"layers.{i}.experts.{e}.{w}": rng.random((6, 4) if w == "down" else (4, 6))
               .astype(np.float16) for i in range(2) for e in range(11)
               for w in ("gate", "up", "down")}  # fmt: skip
    tensors |= {f"scale.{i}": np.array(float(i), np.float32) for i in range(4)}
    tensors |= {"empty": np.zeros((0, 8), np.float32), "ids": np.arange(7, dtype=np.int64)}
    save_file(tensors, str(tmp_path / "moe.safetensors"))
    got = host_load(tmp_path / "moe.safetensors")
    want = load_file(str(tmp_path / "moe.safetensors"))
    assert list(got) == list(want)
    assert all(np.array_equal(got[k], want[k]) and got[k].shape == want[k].shape for k in want)
    odd = write(tmp_path / "odd.safetensors", {"x": np.zeros(11, np.uint8)}, header={
        "x": {"dtype": "U8", "shape": [3], "data_offsets": [0, 3]},
        "f": {"dtype": "F32", "shape": [2], "data_offsets": [3, 11]}})  # fmt: skip
    blob = bytearray(odd.read_bytes())
    blob[-11:] = bytes([7, 8, 9]) + np.array([1.5, -2.0], np.float32).tobytes()
    odd.write_bytes(bytes(blob))
    cast = host_load(odd, dtype=np.float64)
    assert cast["x"].tolist() == [7, 8, 9] and cast["f"].tolist() == [1.5, -2.0]
    assert cast["f"].dtype == np.float64 and cast["x"].dtype == np.uint8
    shards = tmp_path / "sharded"
    shards.mkdir()
    names, weight_map = sorted(tensors), {}
    for k, part in enumerate((names[:30], names[30:])):
        save_file({n: tensors[n] for n in part}, str(shards / f"m-{k}.safetensors"))
        weight_map |= dict.fromkeys(part, f"m-{k}.safetensors")
    (shards / "m.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    got = host_load(shards)
    assert all(np.array_equal(got[k], tensors[k]) for k in tensors) and len(got) == len(tensors)


@pytest.mark.parametrize("share", [0.0, 0.49, 0.5, 1.0])
def test_a_cold_file_is_read_by_cold_readers_a_warm_one_by_every_thread(
    tmp_path, host_load, monkeypatch, share
):
    from xferscope.transfer.loading import reads, storage

    path = write(tmp_path / "m.safetensors", {"x": np.arange(9, dtype=np.uint8)})
    monkeypatch.setattr(storage, "resident_share", lambda p, samples=0: share)
    _HostCopier.asked.clear()
    assert host_load(path)["x"].tolist() == list(range(9))
    assert _HostCopier.asked == [reads.COLD_READERS if share < reads.COLD_SHARE else 0]


def test_a_dtype_the_framework_lacks_and_a_truncated_file_are_one_error(tmp_path, host_load):
    bf16 = write(tmp_path / "bf16.safetensors", {"w": np.zeros(4, np.uint8)},
                 header={"w": {"dtype": "BF16", "shape": [2], "data_offsets": [0, 4]}})  # fmt: skip
    with pytest.raises(CheckpointError, match=r"'w' is BF16, which NumPy has no dtype for"):
        host_load(bf16)
    cut = write(tmp_path / "cut.safetensors", {"w": np.arange(100, dtype=np.float32)}, cut=40)
    with pytest.raises(CheckpointError, match=r"cut.safetensors: tensor 'w' ends at byte"):
        host_load(cut)
    with pytest.raises(ValueError, match=r"dtype: 'int8' is not a floating-point dtype of torch"):
        host_load(cut, dtype="int8")


def test_a_device_maps_share_of_each_file_is_read_and_made(tmp_path, host_load, monkeypatch):
    """A device map splits a file's tensors between GPUs: each GPU's share of each file read
    (its ranges only) into a buffer of its own on a thread of its own, then made as views."""
    from safetensors.numpy import save_file

    rng = np.random.default_rng(4)
    tensors = {f"layers.{i}.{w}": rng.random((8, 3 + i)).astype(np.float32)
               for i in range(4) for w in ("q", "k")}  # fmt: skip
    tensors["head"] = np.arange(6, dtype=np.int16)
    save_file(tensors, str(tmp_path / "m.safetensors"))
    reads = []
    real = _HostCopier.read_to_device

    def counted(self: _HostCopier, fd: int, address: int, *ranges: Any) -> None:
        reads.append(int(sum(ranges[1])))
        real(self, fd, address, *ranges)

    monkeypatch.setattr(_HostCopier, "read_to_device", counted)
    got = host_load(tmp_path / "m.safetensors", device={"": 0, "layers.1": 1, "head": 1})
    assert got.keys() == tensors.keys()
    assert all(np.array_equal(got[k], v) for k, v in tensors.items())
    second = tensors["layers.1.q"].nbytes + tensors["layers.1.k"].nbytes + tensors["head"].nbytes
    assert sorted(reads) == sorted([sum(v.nbytes for v in tensors.values()) - second, second])
