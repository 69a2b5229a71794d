"""A safetensors checkpoint's layout (xferscope.checkpoint): each tensor's dtype, shape and byte
range read from the header and matching the safetensors package's own reading; one file, a
directory and a sharded index; and every broken file or index refused with one line naming the
file and the tensor or shard."""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from xferscope.transfer.loading import CheckpointError, checkpoint_layouts, read_layout

NUMPY = {"F32": np.float32, "F16": np.float16, "I64": np.int64, "U8": np.uint8, "BOOL": np.bool_}


def write(path: Path, tensors: dict[str, np.ndarray], header: dict[str, Any] | None = None,
          metadata: dict[str, str] | None = None, cut: int = 0, pad: int = 0) -> Path:  # fmt: skip
    """A safetensors file as the format defines it; `header` entries replace the made ones,
    `cut` bytes are cut from its end."""
    made: dict[str, Any] = {}
    data = b""
    codes = {v: k for k, v in NUMPY.items()}
    for name, a in tensors.items():
        made[name] = {"dtype": codes[a.dtype.type], "shape": list(a.shape),
                      "data_offsets": [len(data), len(data) + a.nbytes]}  # fmt: skip
        data += a.tobytes()
    made.update(header or {})
    if metadata is not None:
        made["__metadata__"] = metadata
    text = json.dumps(made).encode() + b" " * pad
    blob = struct.pack("<Q", len(text)) + text + data
    path.write_bytes(blob[: len(blob) - cut])
    return path


def arrays(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "embed.weight": rng.standard_normal((64, 32)).astype(np.float16),
        "layer.0.bias": rng.standard_normal(7).astype(np.float32),
        "steps": np.array([3], dtype=np.int64),
        "mask": rng.random((3, 5)) > 0.5,
        "empty": np.zeros((0, 4), dtype=np.float32),
    }


def test_a_files_layout_is_where_its_bytes_lie(tmp_path):
    tensors = arrays(1)
    path = write(tmp_path / "m.safetensors", tensors, metadata={"format": "pt"}, pad=5)
    layout = read_layout(path)
    blob = path.read_bytes()
    assert layout.metadata == {"format": "pt"} and layout.size == len(blob)
    assert [t.begin for t in layout.tensors] == sorted(t.begin for t in layout.tensors)
    for t in layout.tensors:
        a = tensors[t.name]
        assert (t.shape, t.nbytes) == (a.shape, a.nbytes)
        assert blob[t.begin : t.end] == a.tobytes()


def test_the_layout_matches_the_safetensors_packages_reading(tmp_path):
    numpy_api = pytest.importorskip("safetensors.numpy")
    tensors = {k: v for k, v in arrays(2).items() if v.size}
    path = tmp_path / "p.safetensors"
    numpy_api.save_file(tensors, str(path), metadata={"who": "test"})  # the package's writer
    layout = read_layout(path)
    blob = path.read_bytes()
    assert {t.name for t in layout.tensors} == set(tensors) and layout.metadata == {"who": "test"}
    for t in layout.tensors:
        assert blob[t.begin : t.end] == tensors[t.name].tobytes()
        assert t.shape == tensors[t.name].shape


def test_a_directory_an_index_and_a_list_of_files(tmp_path):
    a, b = arrays(3), {"head.weight": np.ones((4, 4), np.float32)}
    write(tmp_path / "model-00001-of-00002.safetensors", a)
    write(tmp_path / "model-00002-of-00002.safetensors", b)
    index = tmp_path / "model.safetensors.index.json"
    weight_map = {**dict.fromkeys(a, "model-00001-of-00002.safetensors"),
                  "head.weight": "model-00002-of-00002.safetensors"}  # fmt: skip
    index.write_text(json.dumps({"metadata": {"total_size": 1}, "weight_map": weight_map}))
    names = {n for layout in checkpoint_layouts(index) for n in (t.name for t in layout.tensors)}
    assert names == set(a) | set(b)
    assert len(checkpoint_layouts(tmp_path)) == 2  # the directory: its one index
    files = sorted(tmp_path.glob("*.safetensors"))
    assert [la.path for la in checkpoint_layouts(files)] == files


@pytest.mark.parametrize(
    ("case", "fragment"),
    [
        ("truncated", r"tensor 'layer.0.bias' ends at byte \d+, past the file's end .*truncated"),
        ("header too long", r"header length says .* longer than the file allows"),
        ("tiny", r"3 B, too short for a safetensors file"),
        ("not json", r"its header is not JSON"),
        ("a list", r"its header is not a JSON object of tensors"),
        ("unknown dtype", r"tensor 'steps': dtype 'Q7' is not one xferscope loads \(BOOL"),
        ("wrong size", r"tensor 'steps': data_offsets \[\d+, \d+\] hold 4 B, and a I64 .* is 8 B"),
        ("overlap", r"tensors 'embed.weight' and 'layer.0.bias' overlap .*offsets are wrong"),
        ("negative", r"tensor 'steps': data_offsets \[-8, 0\] is not \[begin, end\]"),
        ("bad shape", r"tensor 'steps': shape \[1.5\] is not a list of sizes"),
        ("metadata", r"its __metadata__ is not an object of strings"),
    ],
)
def test_a_broken_file_is_one_line_naming_the_file_and_tensor(tmp_path, case, fragment):
    tensors = {"embed.weight": np.ones((4, 4), np.float16), "layer.0.bias": np.ones(3, np.float32),
               "steps": np.array([1], np.int64)}  # fmt: skip
    path = tmp_path / "bad.safetensors"
    if case == "truncated":
        write(path, {k: tensors[k] for k in ("embed.weight", "layer.0.bias")}, cut=4)
    elif case == "header too long":
        path.write_bytes(struct.pack("<Q", 1 << 20) + b"{}")
    elif case == "tiny":
        path.write_bytes(b"abc")
    elif case in ("not json", "a list"):
        text = b"{not json" if case == "not json" else b"[1, 2]"
        path.write_bytes(struct.pack("<Q", len(text)) + text)
    else:
        entry = {"unknown dtype": {"dtype": "Q7", "shape": [1], "data_offsets": [40, 48]},
                 "wrong size": {"dtype": "I64", "shape": [1], "data_offsets": [40, 44]},
                 "overlap": {"dtype": "F32", "shape": [3], "data_offsets": [8, 20]},
                 "negative": {"dtype": "I64", "shape": [1], "data_offsets": [-8, 0]},
                 "bad shape": {"dtype": "I64", "shape": [1.5], "data_offsets": [40, 48]},
                 "metadata": None}[case]  # fmt: skip
        name = "layer.0.bias" if case == "overlap" else "steps"
        write(path, tensors, header={name: entry} if entry else None,
              metadata={"n": 3} if case == "metadata" else None)  # type: ignore[dict-item]  # fmt: skip
    with pytest.raises(CheckpointError, match=fragment) as caught:
        read_layout(path)
    assert str(path) in str(caught.value) and "\n" not in str(caught.value)


def test_a_broken_set_of_shards_is_one_line(tmp_path):
    write(tmp_path / "a.safetensors", {"x": np.ones(2, np.float32)})
    write(tmp_path / "b.safetensors", {"x": np.ones(2, np.float32), "y": np.ones(1, np.uint8)})
    with pytest.raises(CheckpointError, match=r"tensor 'x' is in both .*a.safetensors and"):
        checkpoint_layouts(tmp_path)
    index = tmp_path / "model.safetensors.index.json"
    index.write_text(json.dumps({"weight_map": {"x": "a.safetensors", "z": "c.safetensors"}}))
    with pytest.raises(CheckpointError, match=r"shard c.safetensors \(1 tensors, 'z' first\) is"):
        checkpoint_layouts(index)
    index.write_text(json.dumps({"weight_map": {"y": "a.safetensors"}}))
    with pytest.raises(CheckpointError, match=r"tensor 'y' is mapped to a.safetensors, which"):
        checkpoint_layouts(index)
    index.write_text(json.dumps({"weight_map": {"y": "../b.safetensors"}}))
    with pytest.raises(CheckpointError, match=r"not a file beside the index"):
        checkpoint_layouts(index)
    index.write_text("[]")
    with pytest.raises(CheckpointError, match=r"not an index of shards"):
        checkpoint_layouts(index)
    with pytest.raises(CheckpointError, match=r"no safetensors file there"):
        checkpoint_layouts([])
    with pytest.raises(CheckpointError, match=r"nothing.safetensors: no such file"):
        checkpoint_layouts(tmp_path / "nothing.safetensors")


def test_a_fifo_a_directory_and_a_symlink_as_the_path(tmp_path):
    """A FIFO (whose open would wait for a writer) and a directory named as a file or index are
    one line each; a symlink to a file is the file."""
    import os

    fifo = tmp_path / "pipe.safetensors"
    os.mkfifo(fifo)
    with pytest.raises(CheckpointError, match=r"pipe.safetensors: not a regular file"):
        checkpoint_layouts(fifo)
    index = tmp_path / "model.safetensors.index.json"
    os.mkfifo(index)
    with pytest.raises(CheckpointError, match=r"index.json: not a regular file"):
        checkpoint_layouts(index)
    folder = tmp_path / "sub"
    (folder / "x.safetensors.index.json").mkdir(parents=True)
    with pytest.raises(CheckpointError, match=r"x.safetensors.index.json: not a regular file"):
        checkpoint_layouts(folder)
    real = write(tmp_path / "real.safetensors", {"w": np.ones(3, np.float32)})
    link = tmp_path / "link.safetensors"
    link.symlink_to(real)
    assert [t.name for t in read_layout(link).tensors] == ["w"]


def test_the_tensors_read_all_at_once_equal_those_read_one_by_one(tmp_path):
    """The header's tensors are made all at once where every entry is well formed; the one by
    one reading (which names a broken entry) is the rule they must equal."""
    from xferscope.transfer.loading.layout import _tensor, _tensors

    rng = np.random.default_rng(5)
    tensors = {f"t{i}": rng.integers(0, 9, size=tuple(rng.integers(0, 4, size=i % 4)))
               .astype(list(NUMPY.values())[i % 5]) for i in range(60)}  # fmt: skip
    path = write(tmp_path / "m.safetensors", tensors, metadata={"format": "pt"})
    layout = read_layout(path)
    blob = path.read_bytes()
    header = json.loads(blob[8 : layout.data_begin])
    at_once = _tensors(path, header, layout.data_begin)
    one_by_one = [_tensor(path, n, e, layout.data_begin) for n, e in header.items()
                  if n != "__metadata__"]  # fmt: skip
    assert at_once == one_by_one and sorted(at_once, key=lambda t: t.begin) == list(layout.tensors)
    header["t7"]["shape"] = [True, 1]  # a bool is not a size: the one-by-one reading names it
    with pytest.raises(CheckpointError, match=r"tensor 't7': shape \[True, 1\] is not a list"):
        _tensors(path, header, layout.data_begin)


def test_a_pt_files_storages_are_found_where_the_zip_stores_them(tmp_path):
    """torch.save's zip, written here without PyTorch: each record under data/ is found at the
    offset its local header gives; a compressed record and a file that is no zip are refused."""
    import zipfile

    from xferscope.transfer.loading.pt import is_pt, pt_layout

    path = tmp_path / "model.pt"
    blobs = {"archive/data/0": os.urandom(1000), "archive/data/1": os.urandom(64),
             "archive/data/10": b""}  # fmt: skip
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        z.writestr("archive/data.pkl", b"\x80\x02}q\x00.")
        for name, blob in blobs.items():
            z.writestr(zipfile.ZipInfo(name), blob)  # an extra field's length is read too
        z.writestr("archive/.data/version", b"3\n")
    layout = pt_layout(path)
    data = path.read_bytes()
    assert [t.name for t in layout.tensors] == list(blobs)
    assert all(data[t.begin : t.end] == blobs[t.name] for t in layout.tensors)
    assert is_pt(path) and not is_pt(tmp_path / "model.safetensors")
    squeezed = tmp_path / "squeezed.pt"
    with zipfile.ZipFile(squeezed, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("archive/data/0", bytes(4096))
    with pytest.raises(CheckpointError, match=r"record archive/data/0 is compressed"):
        pt_layout(squeezed)
    (tmp_path / "junk.pt").write_bytes(b"not a zip")
    with pytest.raises(CheckpointError, match=r"junk.pt: not a zip torch.save wrote"):
        pt_layout(tmp_path / "junk.pt")


def test_a_pt_files_records_found_from_its_central_directory_where_torch_padded_them(
    tmp_path, monkeypatch
):
    """torch.save pads each local header so its record begins at a multiple of 64 bytes: the
    records are then found from the central directory, a sample of local headers read to check;
    a zip whose records lie elsewhere has each local header read."""
    import struct
    import zipfile

    from xferscope.transfer.loading import pt

    path = tmp_path / "model.pt"
    blobs = {f"archive/data/{i}": os.urandom(100 + 7 * i) for i in range(200)}
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        z.writestr("archive/data.pkl", b"\x80\x02}q\x00.")
        for name, blob in blobs.items():
            info = zipfile.ZipInfo(name)
            start = z.fp.tell() + 30 + len(name) + 4
            pad = -start % 64
            info.extra = b"FB" + struct.pack("<H", pad) + b"Z" * pad
            z.writestr(info, blob)
    read = []
    real = pt._local_begin
    monkeypatch.setattr(pt, "_local_begin", lambda *a: read.append(a[2]) or real(*a))
    layout = pt.pt_layout(path)
    data = path.read_bytes()
    assert [t.name for t in layout.tensors] == list(blobs)
    assert all(t.begin % 64 == 0 and data[t.begin : t.end] == blobs[t.name] for t in layout.tensors)
    assert 2 <= len(read) <= pt.SAMPLED + 1  # a sample of the local headers
    read.clear()
    plain = tmp_path / "plain.pt"  # no padding: every local header read
    with zipfile.ZipFile(plain, "w", zipfile.ZIP_STORED) as z:
        for name, blob in blobs.items():
            z.writestr(zipfile.ZipInfo(name), blob)
    layout = pt.pt_layout(plain)
    data = plain.read_bytes()
    assert all(data[t.begin : t.end] == blobs[t.name] for t in layout.tensors)
    assert len(read) > len(blobs)


def test_pt_storages_are_matched_to_records_by_their_distances(tmp_path):
    """torch.load(mmap=True)'s storages are slices of one mapping of the file: in address order
    they meet the records in file order at the same distances, else the file is refused."""
    from types import SimpleNamespace

    from xferscope.transfer.loading.layout import Layout, Tensor
    from xferscope.transfer.loading.pt import _matched

    def tensor(address: int, nbytes: int) -> SimpleNamespace:
        storage = SimpleNamespace(data_ptr=lambda: address, nbytes=lambda: nbytes)
        return SimpleNamespace(untyped_storage=lambda: storage)

    records = (Tensor("a/data/0", "U8", (100,), 128, 100), Tensor("a/data/2", "U8", (0,), 256, 0),
               Tensor("a/data/1", "U8", (8,), 320, 8))  # fmt: skip
    layout = Layout(tmp_path / "m.pt", 400, 128, records, {}, (1, 400, 0))
    base = 0x7F00_0000_0000
    state = {"w": tensor(base + 128, 100), "w.view": tensor(base + 128, 100),
             "b": tensor(base + 320, 8), "empty": tensor(0, 0)}  # fmt: skip
    assert _matched(tmp_path / "m.pt", layout, state) == {base + 128: 128, base + 320: 320}
    state["b"] = tensor(base + 328, 8)  # not where its record lies
    with pytest.raises(CheckpointError, match=r"m.pt: its storages \(2\) do not match its rec"):
        _matched(tmp_path / "m.pt", layout, state)
