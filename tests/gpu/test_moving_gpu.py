"""xferscope.to_device and to_host on a real GPU: a state dict of every kind of tensor (dtypes,
a view, an empty one, tied weights) arrives equal to `.cuda()` of each and comes back equal; a
source still being written by a kernel on the current stream is read after it; NumPy arrays go
up as CuPy arrays. Skipped without a GPU."""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import pytest

import xferscope
from xferscope.transfer import calibration

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")


@pytest.fixture(autouse=True)
def places(tmp_path, monkeypatch):
    monkeypatch.setenv("XFERSCOPE_HISTORY", str(tmp_path / "history.sqlite3"))
    monkeypatch.setenv(calibration.CALIBRATION_ENV, str(tmp_path / "calibration"))


def _state(pinned: bool) -> OrderedDict:
    g = torch.Generator().manual_seed(0)
    weight = torch.rand(300, 257, generator=g).to(torch.float16)
    state = OrderedDict(
        weight=weight,
        tied=weight,
        bias=torch.rand(257, generator=g, dtype=torch.float64).to(torch.bfloat16),
        ids=torch.randint(0, 1 << 40, (1000,), generator=g),
        mask=torch.rand(33, generator=g) > 0.5,
        view=torch.rand(64, 64, generator=g).t(),  # not contiguous
        empty=torch.empty(0, 5),
        big=torch.rand(3 << 20, generator=g),  # 12 MiB: pageable ones go by the staged copy
    )
    if pinned:
        state = OrderedDict((k, v if k == "tied" else v.pin_memory()) for k, v in state.items())
        state["tied"] = state["weight"]
    state._metadata = {"": {"version": 2}}  # type: ignore[attr-defined]
    return state


@pytest.mark.parametrize("pinned", [False, True])
def test_a_state_dict_goes_up_and_comes_back_equal(pinned):
    state = _state(pinned)
    on_gpu = xferscope.to_device(state, "cuda:0")
    assert type(on_gpu) is OrderedDict and on_gpu._metadata == {"": {"version": 2}}
    assert on_gpu["tied"] is on_gpu["weight"]
    for name, t in state.items():
        moved = on_gpu[name]
        assert moved.is_cuda and moved.dtype == t.dtype and moved.shape == t.shape, name
        assert torch.equal(moved.cpu(), t), name
    back = xferscope.to_host(on_gpu, non_blocking=True)
    torch.cuda.current_stream().synchronize()  # queued on it: read once it has run them
    for name, t in state.items():
        assert not back[name].is_cuda and torch.equal(back[name], t), name
        assert back[name].is_pinned() or back[name].numel() == 0, name


def test_a_source_still_being_written_is_read_after_the_kernel():
    x = torch.empty(64 << 20, device="cuda")
    for value in (1.0, 2.0, 3.0):
        x.fill_(value)  # queued on the current stream, not waited for
        y = torch.sin(x) * 0 + value  # more work queued behind it
        back = xferscope.to_host({"y": y})
        assert torch.all(back["y"] == value)


def test_numpy_arrays_go_up_as_cupy_arrays():
    cupy = pytest.importorskip("cupy")
    rng = np.random.default_rng(1)
    batch = {"images": rng.random((64, 3, 32, 32), dtype=np.float32), "labels": np.arange(64)}
    on_gpu = xferscope.to_device(batch, 0)
    assert all(isinstance(v, cupy.ndarray) for v in on_gpu.values())
    assert np.array_equal(cupy.asnumpy(on_gpu["images"]), batch["images"])
    back = xferscope.to_host(on_gpu)
    assert all(np.array_equal(back[k], batch[k]) for k in batch)


FIRST_CALLS = """
import sys, numpy as np, torch, xferscope
from xferscope.transfer import first, setting_up
from xferscope.transfer.choice import MADE_BY_LOOP
torch.zeros(1, device="cuda"); torch.cuda.synchronize()
g = torch.Generator().manual_seed(1)
src = torch.randint(0, 256, (64 << 20,), dtype=torch.uint8, generator=g)
dst = torch.empty(64 << 20, dtype=torch.uint8, device="cuda")
one = xferscope.copy_many([(dst, src)])  # PyTorch's way, and nothing else
assert one.source == "first call" and torch.equal(dst.cpu(), src), one
assert not setting_up._setting_up
dst.zero_()
again = xferscope.copy_many([(dst, src)])  # PyTorch's way; the setting up begins on a thread
assert again.source == "first call" and torch.equal(dst.cpu(), src), again
setting_up._setting_up[0].join()
assert setting_up.ready() and not setting_up._setting_up[0].daemon
dst.zero_()
two = xferscope.copy_many([(dst, src)])  # set up: the staged copy, made on that thread
assert two.method == "staged" and torch.equal(dst.cpu(), src), two
# NumPy's pages: xferscope's way at once; the staged copy of GPU 0's copier is made, so a
# new engine's copier shows the loop while its own is being made
from xferscope.core.engine import NativeEngine
engine = NativeEngine()
host = np.random.default_rng(2).integers(0, 256, 64 << 20, dtype=np.uint8)
three = xferscope.copy_many([(dst, host)], engine=engine)
assert (three.method, three.reason) == ("loop", MADE_BY_LOOP), three
assert np.array_equal(dst.cpu().numpy(), host)
from xferscope.transfer.copy import copies_of
copies_of(engine).copier(0).prepare_staged()
dst.zero_()
four = xferscope.copy_many([(dst, host)], engine=engine)
assert four.method == "staged" and np.array_equal(dst.cpu().numpy(), host), four
print("ok")
"""


def test_first_calls_go_pytorchs_way_then_the_staged_copy_once_set_up():
    """A fresh process: its first PyTorch copies go PyTorch's way, the second beginning the
    setting up on a thread that is no daemon; then the staged copy takes the same copy. A
    copier whose staged copy is being made copies by the loop meanwhile, and says so; every
    copy lands whole."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", FIRST_CALLS], capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]


def test_many_tensors_of_a_dtype_land_in_one_allocation_each_aligned():
    """From SHARE_FROM tensors of a dtype on, their new tensors are views of one allocation
    at 256-byte boundaries: equal to `.cuda()` of each, and back equal (pinned)."""
    from xferscope.transfer.frameworks import torch as adapter

    g = torch.Generator().manual_seed(3)
    n = adapter.SHARE_FROM + 37
    state = OrderedDict(
        (f"w{i}", torch.rand(int(torch.randint(1, 3000, (1,), generator=g)), generator=g).half())
        for i in range(n)
    )
    state["scalar"] = torch.tensor(3.5, dtype=torch.float16)
    state["few"] = torch.arange(5)  # int64: under SHARE_FROM of its dtype, its own allocation
    up = xferscope.to_device(state, "cuda")
    for k, v in state.items():
        assert torch.equal(up[k], v.cuda()) and up[k].shape == v.shape, k
    halves = [up[k] for k in state if up[k].dtype == torch.float16]
    assert len({t.untyped_storage().data_ptr() for t in halves}) == 1
    assert all(t.data_ptr() % 256 == 0 for t in halves)
    back = xferscope.to_host(up, non_blocking=True)
    torch.cuda.current_stream().synchronize()
    assert all(torch.equal(back[k], state[k]) and back[k].is_pinned() for k in state)


def test_a_large_pinned_state_dict_is_queued_run_by_run_and_lands_whole(monkeypatch):
    """Past QUEUE_FROM bytes of pinned memory, to_device and to_host(non_blocking=True) queue
    their copies run by run while the next runs' tensors are made: every tensor lands equal, in
    one aligned allocation per dtype, the copier queried once per run; to_device's copy is
    waited for before the call returns (a kernel reading the result right after sees every
    byte), to_host's runs are queued on the current stream, read once it has run them."""
    from xferscope.transfer import copy as copies
    from xferscope.transfer import structure_copies as moves

    monkeypatch.setattr(moves, "QUEUE_FROM", 1 << 20)
    queued: list[int] = []
    real = copies.queue_pairs

    def counted(pairs: list, gpu: int, engine: object = None) -> object:
        queued.append(len(pairs))
        return real(pairs, gpu, engine)

    monkeypatch.setattr("xferscope.transfer.moving.queue_pairs", counted)
    xferscope.warmup()  # xferscope's way from the first call (not PyTorch's while setting up)
    g = torch.Generator().manual_seed(5)
    state = OrderedDict(
        (f"w{i}", torch.rand(int(torch.randint(1, 40000, (1,), generator=g)), generator=g)
         .half().pin_memory())
        for i in range(150)
    )  # fmt: skip
    up = xferscope.to_device(state, "cuda")
    assert queued == [8, 16, 32, 64, 30]
    total = sum(float(up[k].float().sum()) for k in state)  # read right after: all landed
    assert total == pytest.approx(sum(float(v.float().sum()) for v in state.values()), rel=1e-4)
    for k, v in state.items():
        assert torch.equal(up[k].cpu(), v), k
    assert len({up[k].untyped_storage().data_ptr() for k in state}) == 1
    on_stream: list[int] = []
    real_pairs = copies.copy_pairs

    def counted_pairs(pairs: list, gpu: int, *args: object) -> object:
        on_stream.append(len(pairs))
        return real_pairs(pairs, gpu, *args)  # type: ignore[arg-type]

    monkeypatch.setattr("xferscope.transfer.moving.copy_pairs", counted_pairs)
    back = xferscope.to_host(up, non_blocking=True)
    assert on_stream == [8, 16, 32, 64, 30]
    torch.cuda.current_stream().synchronize()
    assert all(torch.equal(back[k], state[k]) and back[k].is_pinned() for k in state)
