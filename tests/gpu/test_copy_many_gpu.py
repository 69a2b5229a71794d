"""xferscope.copy_many on a real GPU: every method delivers every byte both ways with PyTorch
tensors, CuPy arrays, DLPack and raw addresses, pinned and pageable; the driver's pointer kinds
are read right; a calibration made by `batch --calibrate` is used; the staged copy's small copies
are the plain call. Skipped without a GPU."""

from __future__ import annotations

import numpy as np
import pytest

from xferscope import StagedCopier, cli, copy_many
from xferscope.transfer import batch_document
from xferscope.transfer import calibration as choose
from xferscope.transfer.policy import COPY_MANY_METHODS

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")

SIZES = [1, 7, 4096, 65536 + 3, 300000] * 8


@pytest.fixture(autouse=True)
def places(tmp_path, monkeypatch):
    monkeypatch.setenv("XFERSCOPE_HISTORY", str(tmp_path / "history.sqlite3"))
    monkeypatch.setenv(choose.CALIBRATION_ENV, str(tmp_path / "calibration"))
    return tmp_path / "calibration"


def host_pieces(pinned: bool, seed: int = 1) -> list:
    rng = np.random.default_rng(seed)
    pieces = []
    for n in SIZES:
        data = torch.from_numpy(rng.integers(1, 255, n, dtype=np.uint8))
        pieces.append(data.pin_memory() if pinned else data.clone())
    return pieces


@pytest.mark.parametrize("pinned", [True, False])
@pytest.mark.parametrize("method", [None, *COPY_MANY_METHODS])
def test_every_method_delivers_every_byte_both_ways(native_engine, pinned, method):
    if method == "kernel" and not pinned:
        pytest.skip("the kernel needs pinned memory")
    if method == "staged" and pinned:
        pytest.skip("the staged copy is for pageable memory")
    up = host_pieces(pinned)
    gpu = [torch.zeros(n, dtype=torch.uint8, device="cuda") for n in SIZES]
    torch.cuda.synchronize()
    choice = copy_many(list(zip(gpu, up, strict=True)), method=method)
    assert choice.direction == "h2d" and choice.memory == ("pinned" if pinned else "pageable")
    for g, h in zip(gpu, up, strict=True):
        assert torch.equal(g.cpu(), h)
    down = [h.clone().zero_() for h in host_pieces(pinned, seed=2)]
    if pinned:
        down = [d.pin_memory() for d in down]
    choice = copy_many(list(zip(down, gpu, strict=True)), method=method)
    assert choice.direction == "d2h"
    for g, h in zip(gpu, down, strict=True):
        assert torch.equal(g.cpu(), h)


def test_staged_batches_cross_chunks_and_pieces(native_engine):
    # pieces of odd sizes, so chunks (4 MiB and their smaller first ones) start and end inside
    # pieces and span many of them; about 96 MiB each way, every byte checked
    rng = np.random.default_rng(5)
    sizes = [int(n) for n in rng.integers(1, 2 << 20, 96)]
    up = [torch.from_numpy(rng.integers(0, 256, n, dtype=np.uint8)) for n in sizes]
    gpu = [torch.zeros(n, dtype=torch.uint8, device="cuda") for n in sizes]
    torch.cuda.synchronize()
    assert copy_many(list(zip(gpu, up, strict=True))).method == "staged"  # the rule's choice
    assert all(torch.equal(g.cpu(), h) for g, h in zip(gpu, up, strict=True))
    down = [torch.zeros(n, dtype=torch.uint8) for n in sizes]
    copy_many(list(zip(down, gpu, strict=True)), method="staged")
    assert all(torch.equal(g.cpu(), h) for g, h in zip(gpu, down, strict=True))


def test_numpy_cupy_dlpack_and_addresses(native_engine):
    cupy = pytest.importorskip("cupy")
    host = np.random.default_rng(3).integers(1, 255, 64 * 1024, dtype=np.uint8)
    gpu = [cupy.zeros(1024, dtype=cupy.uint8) for _ in range(64)]

    class OnlyDlpack:  # a GPU array known only through DLPack (as JAX offers)
        def __init__(self, a):
            self.a = a

        def __dlpack__(self, **kw):
            return self.a.__dlpack__(**kw)

        def __dlpack_device__(self):
            return self.a.__dlpack_device__()

    pairs = [
        (OnlyDlpack(g) if i % 2 else g, host[i * 1024 : (i + 1) * 1024]) for i, g in enumerate(gpu)
    ]
    copy_many(pairs)
    assert all(np.array_equal(cupy.asnumpy(g), host[i * 1024 : (i + 1) * 1024])
               for i, g in enumerate(gpu))  # fmt: skip
    back = np.zeros_like(host)
    copy_many(
        destinations=[back.ctypes.data + i * 1024 for i in range(64)],
        sources=[g.data.ptr for g in gpu],
        sizes=[1024] * 64,
    )
    assert np.array_equal(back, host)


def test_pointer_kinds_as_the_driver_sees_them(native_engine):
    pinned = torch.empty(1 << 20, dtype=torch.uint8).pin_memory()
    device = torch.empty(1 << 20, dtype=torch.uint8, device="cuda")
    pageable = np.empty(1 << 20, dtype=np.uint8)
    addresses = np.array(
        [pinned.data_ptr(), pinned.data_ptr() + 4096, device.data_ptr() + 100,
         pageable.ctypes.data],
        dtype=np.uint64,
    )  # fmt: skip
    kind, gpu, mapped = native_engine.classify_pointers(addresses)
    assert list(kind) == [1, 1, 2, 0]
    assert gpu[2] == torch.cuda.current_device()
    assert mapped[0] != 0 and mapped[1] == mapped[0] + 4096


def test_batch_calibrate_then_copy_many_uses_it(
    native_engine, places, tmp_path, capsys, monkeypatch
):
    # A whole calibration takes minutes: this one's grid is made the whole grid, so that it
    # is stored (a part of the real grid never is).
    monkeypatch.setattr(batch_document, "CALIBRATION_COUNTS", (1, 256))
    monkeypatch.setattr(batch_document, "CALIBRATION_SIZES", (4096,))
    monkeypatch.setattr(batch_document, "CALIBRATION_MEMORIES", ("pinned",))
    code = cli.main(["batch", "--calibrate", "--counts", "1,256", "--sizes", "4KiB",
                     "--memory", "pinned", "-o", str(tmp_path / "out")])  # fmt: skip
    _, err = capsys.readouterr()
    assert code == 0, err
    assert list(places.glob("copy-many-*.json"))
    host = torch.ones(256 * 4096, dtype=torch.uint8).pin_memory()
    gpu = torch.zeros(256 * 4096, dtype=torch.uint8, device="cuda")
    pairs = [(gpu[i * 4096 : (i + 1) * 4096], host[i * 4096 : (i + 1) * 4096])
             for i in range(256)]  # fmt: skip
    choice = copy_many(pairs)
    assert choice.source == "calibration" and choice.cell == (256, 4096)
    assert choice.method != "loop"  # 256 small pinned copies: a loop never wins on an H200
    assert torch.equal(gpu.cpu(), host)
    # the staged copy's plain-call threshold, measured in the same calibration
    calibration = choose.load(choose.gpu_key(native_engine.device_info(0)))
    assert calibration is not None and calibration.direct_below is not None
    with StagedCopier() as copier:
        assert copier.plan.direct_below == calibration.direct_below
        assert "measured on this GPU" in copier.explain()
        print(f"calibrated: plain cudaMemcpy below {calibration.direct_below} B")
        data = np.random.default_rng(9).integers(1, 255, 24 << 20, dtype=np.uint8)
        big = torch.zeros(24 << 20, dtype=torch.uint8, device="cuda")
        copier.to_device(big.data_ptr(), data)
        assert np.array_equal(big.cpu().numpy(), data)


def test_staged_small_copies_are_the_plain_call_and_correct(native_engine):
    host = np.random.default_rng(4).integers(1, 255, 8 << 20, dtype=np.uint8)
    gpu = torch.zeros(8 << 20, dtype=torch.uint8, device="cuda")
    back = np.zeros_like(host)
    with StagedCopier() as copier:
        assert copier.plan.direct_below == 1 << 20
        assert "plain cudaMemcpy" in copier.explain()
        for n in (1, 4096, (1 << 20) - 1, 1 << 20, 8 << 20):
            back[:] = 0
            copier.to_device(gpu, host, n)
            copier.to_host(back, gpu, n)
            assert np.array_equal(back[:n], host[:n]) and not back[n:].any()


@pytest.mark.parametrize("method", COPY_MANY_METHODS)
def test_misaligned_device_pieces_and_large_ones(native_engine, method):
    # device pieces at odd places of one buffer (each misaligned differently), two longer than a
    # kernel table's 1 MiB part; every byte arrives and the bytes between them stay untouched
    pinned = method != "staged"
    rng = np.random.default_rng(9)
    sizes = [3, 17, (1 << 20) + 5, 4096 + 9, (3 << 20) + 1, 33, 64]
    offsets, at = [], 1
    for n in sizes:
        offsets.append(at)
        at += n + 7
    whole = torch.full((at,), 0xAB, dtype=torch.uint8, device="cuda")
    views = [whole[o : o + n] for o, n in zip(offsets, sizes, strict=True)]
    up = [torch.from_numpy(rng.integers(0, 256, n, dtype=np.uint8)) for n in sizes]
    if pinned:
        up = [u.pin_memory() for u in up]
    torch.cuda.synchronize()
    copy_many(list(zip(views, up, strict=True)), method=method)
    expected = np.full(at, 0xAB, dtype=np.uint8)
    for o, n, u in zip(offsets, sizes, up, strict=True):
        expected[o : o + n] = u.numpy()
    assert np.array_equal(whole.cpu().numpy(), expected)
    down = [torch.zeros(n, dtype=torch.uint8) for n in sizes]
    if pinned:
        down = [d.pin_memory() for d in down]
    copy_many(list(zip(down, views, strict=True)), method=method)
    assert all(torch.equal(d, u) for d, u in zip(down, up, strict=True))


def test_remembered_kinds_follow_a_tensor_whose_memory_changes(native_engine):
    """The memory kind is remembered per live tensor: the same tensors copied again by the
    kernel (pinned) use it; a tensor given new memory of another kind (set_) is asked about
    again, so the kernel is not used on pageable memory; forget_memory_kinds forgets all."""
    from xferscope.transfer.copy import forget_memory_kinds

    hosts = host_pieces(True)[:8]
    gpu = [torch.zeros(h.numel(), dtype=torch.uint8, device="cuda") for h in hosts]
    pairs = list(zip(gpu, hosts, strict=True))
    for _ in range(3):  # asked once, then remembered
        assert copy_many(pairs).memory == "pinned"
    hosts[3].set_(hosts[3].clone())  # pageable memory now, the same tensor object
    assert copy_many(pairs).memory == "pageable"
    forget_memory_kinds()
    for g in gpu:
        g.zero_()
    torch.cuda.synchronize()
    assert copy_many(pairs).memory == "pageable"
    for g, h in zip(gpu, hosts, strict=True):
        assert torch.equal(g.cpu(), h)


@pytest.mark.parametrize("pinned", [True, False])
def test_copy_to_device_and_back_take_tensors(native_engine, pinned):
    """copy_to_device / copy_to_host with PyTorch tensors, below and above where the rule stages
    pageable copies (8 MiB up, 4 MiB down); buffers given the wrong way round are refused before
    anything is copied."""
    from xferscope import copy_to_device, copy_to_host

    for n in (64, 9 << 20):
        host = torch.randint(0, 255, (n,), dtype=torch.uint8)
        host = host.pin_memory() if pinned else host
        gpu = torch.zeros(n, dtype=torch.uint8, device="cuda")
        torch.cuda.synchronize()
        copy_to_device(gpu, host)
        assert torch.equal(gpu.cpu(), host)
        back = torch.zeros_like(host)
        back = back.pin_memory() if pinned else back
        copy_to_host(back, gpu)
        assert torch.equal(back, host)
        with pytest.raises(ValueError, match="copy_to_device copies host to GPU"):
            copy_to_device(back, gpu)
        assert torch.equal(back, host)


def test_tensors_are_read_through_dlpacks_exchange_api_where_torch_has_it(native_engine):
    """Where PyTorch's tensor class has DLPack's exchange API, tensors are read through it: views
    at an offset, of several dimensions and element types, and tensors that require grad copy
    every byte; a transposed view is refused with PyTorch's words; a subclass is never read
    through it."""
    from xferscope.transfer.copy import _e

    base = torch.randint(0, 255, (1 << 16,), dtype=torch.uint8).pin_memory()
    floats = base.view(torch.float32).view(128, 128)
    gpu_rows = torch.zeros(32, 128, dtype=torch.float32, device="cuda")
    gpu_bytes = torch.zeros(4093, dtype=torch.uint8, device="cuda")
    weight = torch.nn.Parameter(torch.zeros(64, dtype=torch.float32, device="cuda"))
    pairs = [(gpu_rows, floats[5:37]), (gpu_bytes, base[3:4096]), (weight, floats[0, :64])]
    with torch.no_grad():
        assert copy_many(pairs).memory == "pinned"
    torch.cuda.synchronize()

    def same(a, b) -> bool:  # bit for bit (random bytes as floats hold NaNs)
        return torch.equal(a.detach().cpu().view(torch.int32), b.view(torch.int32))

    assert same(gpu_rows, floats[5:37])
    assert torch.equal(gpu_bytes.cpu(), base[3:4096])
    assert same(weight, floats[0, :64])
    readers = {r[0]: r[2] for r in _e.native_readers()}
    if hasattr(torch.Tensor, "__dlpack_c_exchange_api__"):
        assert readers[torch.Tensor] is True and readers[torch.nn.Parameter] is True
    with pytest.raises(ValueError, match="pair 0 source is a non-contiguous tensor"):
        copy_many([(torch.zeros(128, 32, device="cuda"), floats[:32].t())])

    class Marked(torch.Tensor):
        pass

    marked = base[:256].as_subclass(Marked)
    into = torch.zeros(256, dtype=torch.uint8, device="cuda")
    copy_many([(into, marked)])
    assert torch.equal(into.cpu(), base[:256])
    assert {r[0]: r[2] for r in _e.native_readers()}.get(Marked) is not True
