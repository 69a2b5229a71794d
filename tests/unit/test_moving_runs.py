"""A structure's destinations made run by run while the copy engine moves the runs before
(structure_copies.Queue; frameworks/torch.py's upload_runs and download_runs), without a GPU:
the PyTorch adapter over a stand-in torch of NumPy arrays, and the queued move over the
simulated engine."""

from __future__ import annotations

import sys
import types
from typing import Any

import numpy as np
import pytest

from xferscope.core.engine.simulated import SimulatedEngine
from xferscope.core.engine.simulated_batch import SimulatedManyCopier
from xferscope.transfer import copy, moving
from xferscope.transfer import structure_copies as moves
from xferscope.transfer.frameworks import torch as adapter

from .test_moving import FakeGpuArray


class Device:
    def __init__(self, kind: str, index: int | None):
        self.type, self.index = kind, index


class T:
    """A stand-in tensor: a NumPy array on the host (gpu None) or on GPU `gpu`."""

    def __init__(self, data: np.ndarray, gpu: int | None = None):
        self.data, self.gpu = data, gpu

    is_cuda = property(lambda self: self.gpu is not None)
    shape = property(lambda self: self.data.shape)
    dtype = property(lambda self: self.data.dtype)
    nbytes = property(lambda self: self.data.nbytes)
    device = property(lambda self: Device("cuda" if self.is_cuda else "cpu", self.gpu))

    def numel(self) -> int:
        return int(self.data.size)

    def is_contiguous(self) -> bool:
        return bool(self.data.flags.c_contiguous)

    def narrow(self, dim: int, start: int, n: int) -> T:
        assert dim == 0
        return T(self.data[start : start + n], self.gpu)


def _unflatten(flat: T, templates: list[T]) -> list[T]:
    out, at = [], 0
    for t in templates:
        out.append(T(flat.data[at : at + t.numel()].reshape(t.shape), flat.gpu))
        at += t.numel()
    assert at == flat.numel()  # the templates cover the slice exactly
    return out


@pytest.fixture
def torch(monkeypatch) -> types.SimpleNamespace:
    made: list[T] = []  # every allocation

    def empty(shape: Any, dtype: Any, device: Any = None, pin_memory: bool = False) -> T:
        gpu = None if device is None or device.type == "cpu" else device.index
        t = T(np.empty(shape, dtype=dtype), gpu)
        made.append(t)
        return t

    fake = types.SimpleNamespace(
        empty=empty, made=made, device=lambda kind, i=None: Device(kind, i),
        _utils=types.SimpleNamespace(_unflatten_dense_tensors=_unflatten),
    )  # fmt: skip
    monkeypatch.setitem(sys.modules, "torch", fake)
    monkeypatch.setattr(adapter, "_devices", {})
    monkeypatch.setattr(adapter, "_pads", {})
    return fake


def _state(n16: int, n32: int) -> list[T]:
    rng = np.random.default_rng(1)
    ts = [T(rng.random(int(rng.integers(1, 300))).astype(np.float16)) for _ in range(n16)]
    ts[3:3] = [T(rng.random((3, 5)).astype(np.float32)) for _ in range(n32)]
    return ts


def test_runs_grow_from_the_first_and_make_what_one_run_makes(torch):
    ts = _state(200, 3)
    runs = list(adapter.upload_runs(ts, 1, True))
    sizes = [len(places) for places, _, _ in runs]
    assert sizes == [8, 16, 32, 64, 83]  # FIRST_RUN, then twice the one before, to the end
    assert [p for places, _, _ in runs for p in places] == list(range(len(ts)))
    made = [m for _, ms, _ in runs for m in ms]
    sources = [s for _, _, ss in runs for s in ss]
    assert sources == ts  # each host tensor is its own source
    flat = next(t for t in torch.made if t.dtype == np.float16 and t.data.ndim == 1 and
                t.numel() > 1000)  # fmt: skip
    for t, m in zip(ts, made, strict=True):
        assert m.shape == t.shape and m.dtype == t.dtype and m.gpu == 1
        if t.dtype == np.float16:  # views of one allocation, each at a 256-byte boundary
            assert np.shares_memory(m.data, flat.data)
            offset = (
                m.data.__array_interface__["data"][0] - flat.data.__array_interface__["data"][0]
            )
            assert offset % adapter.ALIGN == 0
        else:  # fewer than SHARE_FROM of a dtype: each its own
            assert not np.shares_memory(m.data, flat.data)
    whole, _ = adapter.upload_many(ts, 1)  # one run: the same layout
    assert [w.shape for w in whole] == [m.shape for m in made]


def test_a_structure_large_and_pinned_is_queued_run_by_run_and_finished(torch, monkeypatch):
    engine = SimulatedEngine(devices=1)
    queued: list[int] = []
    finished: list[int] = []

    class Queue:
        def __call__(self, pairs: list, gpu: int) -> None:
            queued.append(len(pairs))
            for d, s in pairs:
                d.data[...] = s.data

        def finish(self, gpu: int) -> None:
            finished.append(gpu)

    framework = types.SimpleNamespace(**{k: getattr(adapter, k) for k in (
        "upload_many", "upload_runs", "download_many", "download_runs", "nbytes", "gpu_of")},
        is_leaf=lambda x: isinstance(x, T), pinned=lambda t: True,
        synchronize=lambda gpus: None)  # fmt: skip
    monkeypatch.setattr(moves, "FRAMEWORKS", (framework,))
    monkeypatch.setattr(moves, "QUEUE_FROM", 1000)
    ts = _state(100, 0)
    state = {f"w{i}": t for i, t in enumerate(ts)}
    moved = moves.up(state, 0, lambda pairs, gpu: pytest.fail("copied at once"), Queue())
    assert queued == [8, 16, 32, 44] and finished == [0]
    for k, t in state.items():
        assert np.array_equal(moved[k].data, t.data) and moved[k].gpu == 0
    # below QUEUE_FROM, or not pinned: one copy, as before
    monkeypatch.setattr(moves, "QUEUE_FROM", 1 << 40)
    copied: list[int] = []
    moves.up(state, 0, lambda pairs, gpu: copied.append(len(pairs)), Queue())
    assert copied == [100] and queued == [8, 16, 32, 44]
    del engine


def test_a_failure_while_queued_waits_for_the_queued_copies_then_raises(torch, monkeypatch):
    finished: list[int] = []

    class Queue:
        calls = 0

        def __call__(self, pairs: list, gpu: int) -> None:
            Queue.calls += 1
            if Queue.calls == 2:
                raise RuntimeError("the second run failed")

        def finish(self, gpu: int) -> None:
            finished.append(gpu)

    framework = types.SimpleNamespace(**{k: getattr(adapter, k) for k in (
        "upload_many", "upload_runs", "nbytes", "gpu_of")},
        is_leaf=lambda x: isinstance(x, T), pinned=lambda t: True,
        synchronize=lambda gpus: None)  # fmt: skip
    monkeypatch.setattr(moves, "FRAMEWORKS", (framework,))
    monkeypatch.setattr(moves, "QUEUE_FROM", 1)
    with pytest.raises(RuntimeError, match="second run"):
        moves.up({"x": _state(40, 0)}, 0, lambda pairs, gpu: None, Queue())
    assert finished == [0]  # the first run's copies waited for before the error went on


def test_queued_copies_go_by_copy_many_and_finish_asks_the_gpus_copier(monkeypatch):
    base = 0x2000_0000_0000
    engine = SimulatedEngine(devices=1)
    engine.register_memory(base, 1 << 30, "device", 0)
    finished: list[int] = []
    monkeypatch.setattr(SimulatedManyCopier, "finish", lambda self: finished.append(self.device))
    host = [np.ones(4096, dtype=np.uint8) for _ in range(3)]
    pairs = [(FakeGpuArray(base + i * 4096, 4096), h) for i, h in enumerate(host)]
    choice = copy.queue_pairs(pairs, 0, engine)
    assert choice.count == 3 and choice.direction == "h2d"
    assert finished == []
    moving.to_device({}, 0, engine=engine)  # nothing queued: no finish asked
    copy.finish(0, engine)
    assert finished == [0]
