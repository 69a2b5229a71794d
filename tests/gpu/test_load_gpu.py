"""xferscope.load on a real GPU: every tensor of a checkpoint written by the safetensors
package equals the package's own loading, bit for bit, for one file and a sharded set; a
tensor at an offset its dtype does not suit, a cast to another dtype, and a broken file that
leaves no GPU memory held. Skipped without a GPU."""

from __future__ import annotations

import json
import struct

import pytest

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")
st = pytest.importorskip("safetensors.torch")

import xferscope  # noqa: E402
from xferscope.transfer.loading import CheckpointError  # noqa: E402


@pytest.fixture
def gpu(native_engine):
    if not torch.cuda.is_available():
        pytest.skip("PyTorch sees no GPU")


def tensors(seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {
        "embed.weight": torch.randn(1000, 256, generator=g).to(torch.bfloat16),
        "layers.0.attn.qkv": torch.randn(256, 768, generator=g).to(torch.float16),
        "layers.0.norm": torch.randn(256, generator=g),
        "step": torch.tensor(12345, dtype=torch.int64),
        "mask": torch.rand(17, 3, generator=g) > 0.5,
        "ids": torch.randint(0, 255, (333,), dtype=torch.uint8, generator=g),
        "empty": torch.zeros(0, 8),
        "big": torch.randn(3 << 20, generator=g),  # 12 MiB: several chunks
    }


def same(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor]) -> None:
    assert got.keys() == want.keys()
    for name, w in want.items():
        g = got[name]
        assert g.is_cuda and g.dtype == w.dtype and g.shape == w.shape, name
        raw = [t.cpu().reshape(-1).view(torch.uint8) for t in (g, w)]  # NaNs and scalars
        assert torch.equal(*raw), name


def test_one_file_and_a_sharded_set_equal_the_packages_loading(gpu, tmp_path):
    one = tensors(1)
    st.save_file(one, str(tmp_path / "model.safetensors"))
    same(
        xferscope.load(tmp_path / "model.safetensors"), st.load_file(tmp_path / "model.safetensors")
    )
    shards = tmp_path / "sharded"
    shards.mkdir()
    names = sorted(one)
    weight_map = {}
    for k, part in enumerate((names[:4], names[4:])):
        file = f"model-0000{k + 1}-of-00002.safetensors"
        st.save_file({n: one[n] for n in part}, str(shards / file))
        weight_map.update(dict.fromkeys(part, file))
    (shards / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    same(xferscope.load(shards, device="cuda:0"), one)


def test_a_misaligned_tensor_and_a_cast(gpu, tmp_path):
    data = bytes([7, 8, 9]) + torch.arange(6, dtype=torch.float32).numpy().tobytes()
    header = json.dumps({
        "odd": {"dtype": "U8", "shape": [3], "data_offsets": [0, 3]},
        "floats": {"dtype": "F32", "shape": [2, 3], "data_offsets": [3, 27]},
    }).encode()  # fmt: skip
    path = tmp_path / "odd.safetensors"
    path.write_bytes(struct.pack("<Q", len(header)) + header + data)
    got = xferscope.load(path)
    assert got["odd"].tolist() == [7, 8, 9]
    assert got["floats"].tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
    cast = xferscope.load(path, dtype=torch.float16)
    assert cast["floats"].dtype == torch.float16 and cast["odd"].dtype == torch.uint8


def test_a_broken_file_is_one_error_and_no_gpu_memory_is_left_held(gpu, tmp_path):
    path = tmp_path / "cut.safetensors"
    st.save_file(tensors(2), str(path))
    blob = path.read_bytes()
    path.write_bytes(blob[:-1000])
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    with pytest.raises(CheckpointError, match=r"cut.safetensors: tensor .* past the file's end"):
        xferscope.load(path)
    assert torch.cuda.memory_allocated() == before


def test_a_file_changed_after_its_header_leaves_no_gpu_memory_held(gpu, tmp_path, monkeypatch):
    """The file changes after its layout was read and before its bytes are: refused once its
    GPU buffer is made, which is given back while the caller still holds the error."""
    import os

    from xferscope.transfer.loading import load as loading
    from xferscope.transfer.loading import read_layout

    path = tmp_path / "m.safetensors"
    st.save_file(tensors(3), str(path))
    layout = read_layout(path)
    monkeypatch.setattr(loading, "checkpoint_layouts", lambda paths, files=None: [layout])
    stamp = layout.version[2] + 10**9
    os.utime(path, ns=(stamp, stamp))
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    with pytest.raises(CheckpointError, match=r"the file changed since its header was read") as e:
        xferscope.load(path)
    assert e.value is not None and torch.cuda.memory_allocated() == before


def test_a_device_map_puts_each_tensor_on_its_gpu(gpu, tmp_path):
    """accelerate's device_map (prefixes to GPUs), each GPU's tensors read by its own thread."""
    one = tensors(4)
    st.save_file(one, str(tmp_path / "model.safetensors"))
    gpus = torch.cuda.device_count()
    device_map = {"": 0, "layers.0": gpus - 1, "big": gpus - 1}
    got = xferscope.load(tmp_path / "model.safetensors", device=device_map)
    same(got, one)
    assert got["layers.0.norm"].device.index == gpus - 1 and got["embed.weight"].device.index == 0
    assert xferscope.load(tmp_path, device=lambda name: 0)["big"].device.index == 0


def test_an_moes_interleaved_experts_equal_the_packages_loading(gpu, tmp_path):
    """Experts' gate and up (one shape, interleaved) and down (another) are made as strided
    blocks unbound; a kind whose offsets step unevenly, and scalars, one by one."""
    g = torch.Generator().manual_seed(6)
    experts = {f"layers.{i}.experts.{e}.{w}": torch.randn(*((6, 4) if w == "down" else (4, 6)),
                                                          generator=g).to(torch.bfloat16)
               for i in range(3) for e in range(12) for w in ("gate", "up", "down")}  # fmt: skip
    experts.update({f"bias.{i}": torch.randn(i % 3 + 1, 4, generator=g) for i in range(7)})
    experts.update({f"scale.{i}": torch.tensor(float(i)) for i in range(5)})
    st.save_file(experts, str(tmp_path / "moe.safetensors"))
    got = xferscope.load(tmp_path / "moe.safetensors")
    same(got, st.load_file(tmp_path / "moe.safetensors"))
    assert all(t.is_contiguous() for t in got.values())
    assert list(got) == list(st.load_file(tmp_path / "moe.safetensors"))  # the file's order


def test_a_pt_file_equals_torch_load(gpu, tmp_path):
    """torch.save's zip: storages read into one GPU buffer, tensors as strided views of it, a
    view of another tensor's storage and a transposed one kept as torch.load gives them."""
    one = tensors(7)
    one["embed.rows"] = one["embed.weight"][10:20]  # shares embed.weight's storage
    one["transposed"] = torch.randn(64, 32).t()
    torch.save(one, tmp_path / "model.pt")
    got = xferscope.load(tmp_path / "model.pt")
    want = torch.load(tmp_path / "model.pt", weights_only=True)
    same(got, want)
    assert got["transposed"].stride() == want["transposed"].stride()
    assert got["embed.rows"].untyped_storage().data_ptr() == (
        got["embed.weight"].untyped_storage().data_ptr()
    )
    (tmp_path / "list.pt").write_bytes(b"")
    torch.save([torch.ones(3)], tmp_path / "list.pt")
    with pytest.raises(CheckpointError, match=r"list.pt: not a state dict of names to tensors"):
        xferscope.load(tmp_path / "list.pt")


def test_cupy_arrays_equal_the_packages_reading(gpu, tmp_path):
    """framework="cupy": the same reading, CuPy arrays on the GPU; bfloat16, which CuPy lacks,
    refused in one line."""
    cupy = pytest.importorskip("cupy")
    import numpy as np
    from safetensors.numpy import load_file, save_file

    rng = np.random.default_rng(10)
    arrays = {f"e.{e}.{w}": rng.random((4, 6) if w != "down" else (6, 4)).astype(np.float16)
              for e in range(9) for w in ("gate", "up", "down")}  # fmt: skip
    arrays["ids"] = np.arange(5, dtype=np.int64)
    save_file(arrays, str(tmp_path / "m.safetensors"))
    got = xferscope.load(tmp_path / "m.safetensors", framework="cupy")
    want = load_file(str(tmp_path / "m.safetensors"))
    assert all(isinstance(v, cupy.ndarray) and np.array_equal(v.get(), want[k])
               for k, v in got.items()) and got.keys() == want.keys()  # fmt: skip
    st.save_file({"w": torch.ones(3, dtype=torch.bfloat16)}, str(tmp_path / "bf16.safetensors"))
    with pytest.raises(CheckpointError, match=r"is BF16, which CuPy has no dtype for"):
        xferscope.load(tmp_path / "bf16.safetensors", framework="cupy")


@pytest.mark.parametrize("readers", [1, 2, 3, 0])
def test_a_cold_file_read_by_a_few_readers_equals_the_packages_loading(
    gpu, tmp_path, monkeypatch, readers
):
    """A file taken for cold (tmp_path may be in memory, where pages cannot be dropped) is
    read by reads.COLD_READERS threads in large chunks (0: every thread, small ones); its data
    (about 45 MiB, no multiple of a chunk) lands whole."""
    from xferscope.transfer.loading import reads, storage

    g = torch.Generator().manual_seed(readers)
    want = tensors(readers) | {"large": torch.randn((11 << 20) + 777, generator=g)}
    path = tmp_path / "cold.safetensors"
    st.save_file(want, str(path))
    monkeypatch.setattr(reads, "COLD_READERS", readers)
    monkeypatch.setattr(storage, "resident_share", lambda p, samples=0: 0.0)
    assert reads.is_cold(path)
    same(xferscope.load(path), st.load_file(path))
