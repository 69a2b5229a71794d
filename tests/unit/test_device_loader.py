"""Batches moved ahead on a thread (transfer/prefetch.py) and xferscope.torch.DeviceLoader's
wiring over a stand-in torch, without a GPU: order, the bound on what is made ahead, failures
raised at their batch, leaving early, the stats' bound and advice, the side stream and
record_stream, and the loader without CUDA."""

from __future__ import annotations

import dataclasses
import sys
import threading
import time
import types
import warnings
from typing import Any

import pytest

from xferscope.transfer import prefetch
from xferscope.transfer.prefetch import LoaderStats, Prefetcher, check_ahead


def test_items_come_in_order_each_moved_once():
    moved: list[int] = []

    def move(x: int) -> int:
        moved.append(x)
        return x * 10

    stats = LoaderStats()
    assert list(Prefetcher(range(7), move, 2, stats)) == [0, 10, 20, 30, 40, 50, 60]
    assert moved == list(range(7)) and stats.batches == 7


def test_at_most_ahead_items_are_made_before_the_one_held():
    made = []
    for ahead in (1, 3):
        items = Prefetcher(range(50), lambda x: made.append(x) or x, ahead, LoaderStats())
        held = next(items)
        time.sleep(0.2)  # the thread fills what it may, then waits
        # queued ahead, plus the one in the thread's hand waiting to be queued
        assert len(made) <= held + 1 + ahead + 1
        assert list(items) == list(range(1, 50))
        made.clear()


def test_a_failure_on_the_thread_is_raised_at_its_batch_with_its_type():
    def move(x: int) -> int:
        if x == 3:
            raise KeyError("sample 3 is missing")
        return x

    items = Prefetcher(range(10), move, 2, LoaderStats())
    assert [next(items) for _ in range(3)] == [0, 1, 2]
    with pytest.raises(KeyError, match="sample 3 is missing"):
        next(items)
    with pytest.raises(StopIteration):  # and nothing after it
        next(items)


def test_a_failing_iterator_is_raised_too():
    def source():
        yield 1
        raise OSError("disk went away")

    items = Prefetcher(source(), lambda x: x, 2, LoaderStats())
    assert next(items) == 1
    with pytest.raises(OSError, match="disk went away"):
        next(items)


def test_leaving_early_stops_the_thread_and_drops_the_iterator():
    closed = threading.Event()

    def endless():
        try:
            n = 0
            while True:
                yield n
                n += 1
        finally:
            closed.set()

    items = Prefetcher(endless(), lambda x: x, 4, LoaderStats())
    for x in items:
        if x == 5:
            break
    items.close()
    assert not items._thread.is_alive()
    assert closed.wait(2.0)  # the generator was finished, as a DataLoader's workers would be


def test_stopping_waits_for_an_item_in_the_threads_hand():
    """A DataLoader with persistent workers gives the next epoch the same iterator: no thread of
    the last epoch may still be inside it."""
    inside = threading.Event()

    def slow():
        yield 0
        inside.set()
        time.sleep(0.3)  # the thread is inside next() when the loop leaves
        yield 1

    items = Prefetcher(slow(), lambda x: x, 1, LoaderStats())
    assert next(items) == 0
    assert inside.wait(2.0)
    items.close()
    assert not items._thread.is_alive() and items._queue.empty()


def test_the_stats_count_what_the_thread_and_the_step_spent():
    def slow_source():
        for i in range(4):
            time.sleep(0.02)
            yield i

    def slow_move(x: int) -> int:
        time.sleep(0.01)
        return x

    stats = LoaderStats()
    for _ in Prefetcher(slow_source(), slow_move, 1, stats):
        time.sleep(0.005)
    assert stats.batches == 4
    assert stats.produce_s >= 4 * 0.02 and stats.copy_s >= 4 * 0.01
    assert stats.step_s >= 3 * 0.005  # between taking a batch and asking for the next


@pytest.mark.parametrize("bad", [0, -1, 65, 2.0, True, "2", None])
def test_ahead_outside_1_to_64_is_refused_naming_the_option(bad):
    with pytest.raises(ValueError, match=r"^ahead: .* is not an integer from 1 to 64$"):
        check_ahead(bad)
    started = []
    with pytest.raises(ValueError, match=r"^ahead: "):
        Prefetcher(iter(lambda: started.append(1), None), lambda x: x, bad, LoaderStats())
    assert not started  # refused before the loader was started


@pytest.mark.parametrize(
    ("stats", "bound"),
    [
        (LoaderStats(batches=1), "unknown"),
        # waited 1% of the time: the step bounds the loop
        (LoaderStats(batches=11, wait_s=0.01, step_s=0.99, produce_s=0.5, copy_s=0.1), "step"),
        # waited half the time, producing took longer than copying
        (LoaderStats(batches=11, wait_s=1.0, step_s=1.0, produce_s=2.0, copy_s=0.2), "input"),
        (LoaderStats(batches=11, wait_s=1.0, step_s=1.0, produce_s=0.2, copy_s=2.0), "copy"),
    ],
)
def test_the_bound_is_named_with_its_fix(stats, bound):
    name, advice = stats.bound()
    assert name == bound
    words = {"step": "keeps up", "input": "num_workers", "copy": "the copy", "unknown": "2"}
    assert words[bound] in advice
    as_dict = stats.as_dict()
    assert as_dict["bound"] == bound and as_dict["batches"] == stats.batches
    assert advice in stats.explain()


def test_the_copy_bound_asks_for_pinned_batches_only_where_they_were_not():
    pageable = LoaderStats(batches=11, wait_s=1.0, step_s=1.0, produce_s=0.2, copy_s=2.0)
    pinned = dataclasses.replace(pageable, pinned_batches=11)
    assert "pin_memory=True" in pageable.bound()[1] and "pin_memory=True" not in pinned.bound()[1]
    assert "from pageable memory (pinned while copying)" in pageable.explain()
    assert "pinned by the loader" in pinned.explain()
    assert "3 of 11 arriving pinned" in dataclasses.replace(pageable, pinned_batches=3).explain()


def test_per_batch_times_are_means():
    each = LoaderStats(batches=5, wait_s=0.4, step_s=0.8, produce_s=1.0, copy_s=0.5).per_batch()
    assert each == pytest.approx({"wait": 0.1, "step": 0.2, "produce": 0.2, "copy": 0.1})


# --- DeviceLoader over a stand-in torch ----------------------------------------------------


class _Tensor:
    def __init__(self, value: Any, cuda: bool = False, pinned: bool = False) -> None:
        self.value, self.is_cuda, self.recorded, self.pinned = value, cuda, [], pinned

    def is_pinned(self) -> bool:
        return self.pinned

    def record_stream(self, stream: Any) -> None:
        self.recorded.append(stream)


def _fake_torch(available: bool, devices: int = 1) -> types.SimpleNamespace:
    state = types.SimpleNamespace(streams_made=0, set_in=[], current="main")

    class Stream:
        def __init__(self, device: int) -> None:
            state.streams_made += 1
            self.device = device

    def set_stream(stream: Any) -> None:
        state.set_in.append((threading.current_thread().name, stream))

    cuda = types.SimpleNamespace(
        is_available=lambda: available,
        device_count=lambda: devices,
        current_device=lambda: 0,
        Stream=Stream,
        set_stream=set_stream,
        current_stream=lambda index: f"current:{index}",
    )
    return types.SimpleNamespace(Tensor=_Tensor, cuda=cuda, state=state)


@pytest.fixture
def loader_module(monkeypatch):
    from xferscope.transfer.frameworks import torch_loader as loader

    monkeypatch.setattr(loader, "_side_streams", {})
    moved: list[Any] = []

    def to_device(batch: Any, index: int) -> Any:
        moved.append(index)
        x, y = batch
        return (_Tensor(x.value, cuda=True), _Tensor(y.value, cuda=True))

    monkeypatch.setattr(loader, "to_device", to_device)
    loader.moved = moved  # type: ignore[attr-defined]
    return loader


def _batches(n: int) -> list[tuple[_Tensor, _Tensor]]:
    return [(_Tensor(i), _Tensor(-i)) for i in range(n)]


def test_batches_arrive_moved_and_recorded_on_the_steps_stream(monkeypatch, loader_module):
    torch = _fake_torch(True)
    monkeypatch.setitem(sys.modules, "torch", torch)
    batches = _batches(5)
    dl = loader_module.DeviceLoader(batches, device="cuda:0", ahead=2)
    got = list(dl)
    assert [x.value for x, _ in got] == [0, 1, 2, 3, 4] and loader_module.moved == [0] * 5
    assert all(x.is_cuda and x.recorded == ["current:0"] for pair in got for x in pair)
    assert dl.stats.batches == 5 and len(dl) == 5 and dl.stats.pinned_batches == 0
    # batches that arrive pinned (nested: the first tensor tells) are counted
    monkeypatch.setattr(loader_module, "to_device", lambda batch, index: batch)
    pinned = loader_module.DeviceLoader([{"x": [(_Tensor(i, pinned=True), 1)]} for i in range(3)])
    assert len(list(pinned)) == 3 and pinned.stats.pinned_batches == 3
    # the side stream was set on the prefetching thread, made once over two epochs
    list(dl)
    assert torch.state.streams_made == 1
    assert {name for name, _ in torch.state.set_in} == {"xferscope-prefetch"}


def test_without_cuda_batches_pass_unchanged_with_one_warning(monkeypatch, loader_module):
    monkeypatch.setitem(sys.modules, "torch", _fake_torch(False))
    batches = _batches(3)
    dl = loader_module.DeviceLoader(batches)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = list(dl)
        second = list(dl)
    assert first == batches and second == batches  # the same objects
    assert len(caught) == 1 and "CUDA is not available" in str(caught[0].message)
    assert not loader_module.moved


@pytest.mark.parametrize(
    ("device", "words"),
    [("cpu", "is not a CUDA device"), ("cuda:3", "names no GPU here"), (-1, "not a CUDA")],
)
def test_a_device_that_is_no_gpu_here_is_refused(monkeypatch, loader_module, device, words):
    monkeypatch.setitem(sys.modules, "torch", _fake_torch(True, devices=2))
    with pytest.raises(ValueError, match=rf"^device: .*{words}"):
        next(iter(loader_module.DeviceLoader(_batches(2), device=device)))


def test_the_loaders_own_attributes_show_through(loader_module):
    class Loader(list):
        batch_size = 32

    dl = loader_module.DeviceLoader(Loader(), ahead=3)
    assert dl.batch_size == 32 and dl.ahead == 3
    with pytest.raises(AttributeError):
        _ = dl.no_such_thing
    with pytest.raises(ValueError, match=r"^ahead: 0 is not"):
        loader_module.DeviceLoader([], ahead=0)


def test_the_module_needs_no_torch_to_import():
    import xferscope.torch as xt

    assert xt.DeviceLoader.__module__ == "xferscope.transfer.frameworks.torch_loader"
    assert prefetch.MOST_AHEAD == 64


def test_a_step_bound_loop_on_the_loaders_path_is_pointed_to_the_slots():
    kept_up = {"batches": 11, "wait_s": 0.01, "step_s": 0.99, "produce_s": 0.5, "copy_s": 0.1}
    loader = LoaderStats(**kept_up)
    slots = LoaderStats(**kept_up, source="slots", pinned_batches=11, pinned_bytes=3 << 20)
    assert "slots=True" in loader.bound()[1]
    assert slots.bound() == ("step", "the step: it waited 1% of the time for batches, so the "
                             "loader keeps up")  # fmt: skip
    assert "collated into pinned slots (3 MiB in all)" in slots.explain()
