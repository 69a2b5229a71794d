"""The slot ring (transfer/slots.py) with real worker processes and a numpy Filler, no torch and
no GPU: batches in order with their bytes intact through the slots, the ring bounded and flat
over epochs, a batch larger than its slot, failures and dead workers named, leaving early,
the loader's timeout, and close."""

from __future__ import annotations

import functools
import multiprocessing
import os
import signal
import sys
import time
from typing import Any

import numpy as np
import pytest

from xferscope.transfer import slots
from xferscope.transfer.slots import ALIGN, Filler, InSlot, Placement, SlotError, SlotPool
from xferscope.transfer.structures import flatten

pytestmark = pytest.mark.skipif(
    not hasattr(os, "memfd_create") or sys.platform != "linux", reason="memfd: Linux only"
)
FORK = multiprocessing.get_context("fork")
ROW = 1000  # float32s a sample: 4 kB


class Numbers(Filler):
    """Sample i is ROW float32s equal to i (`grow`: samples from index `grow` on are `wide` times
    longer);
    a batch is {"x": stacked, "i": the indices, "tag": a string}."""

    def __init__(
        self, fail_at: int = -1, grow: int = 1 << 30, sleep: float = 0.0, wide: int = 40
    ) -> None:
        self.fail_at, self.grow, self.sleep, self.wide = fail_at, grow, sleep, wide
        self.fail_start = False

    def start(self, worker: int, workers: int) -> None:
        if self.fail_start:
            raise OSError("no such dataset file")
        self.worker = worker

    def collate(self, indices: list[Any], into: Placement) -> Any:
        if self.fail_at in indices:
            raise KeyError(f"sample {self.fail_at} is missing")
        time.sleep(self.sleep)
        width = ROW * (self.wide if indices[0] >= self.grow else 1)
        rows = np.stack([np.full(width, i, dtype=np.float32) for i in indices])
        return {"x": rows, "i": np.array(indices, dtype=np.int64), "tag": f"w{self.worker}"}

    def place(self, batch: Any, into: Placement) -> Any:
        flat = flatten(batch, lambda x: isinstance(x, np.ndarray))
        marks = []
        for leaf in flat.leaves:
            offset = into.take(leaf.nbytes)
            if offset is not None and into.buffer is not None:
                at = np.frombuffer(into.buffer, np.uint8, leaf.nbytes, offset)
                at[:] = leaf.reshape(-1).view(np.uint8)
            marks.append(InSlot(offset or 0, leaf.nbytes, (leaf.dtype.str, leaf.shape)))
        return flat.rebuild(marks)


def _read(marked: Any, buffer: memoryview) -> Any:
    flat = flatten(marked, lambda x: isinstance(x, InSlot))
    return flat.rebuild(
        [
            np.frombuffer(buffer, np.uint8, m.nbytes, m.offset).view(m.meta[0]).reshape(m.meta[1])
            for m in flat.leaves
        ]
    )


def _batches(n: int, size: int) -> list[list[int]]:
    return [list(range(b * size, min((b + 1) * size, n))) for b in range(-(-n // size))]


def _epoch(pool: SlotPool, n: int = 50, size: int = 8) -> list[dict[str, Any]]:
    got = []
    for marked, buffer, release in pool.epoch(iter(_batches(n, size))):
        batch = _read(marked, buffer)
        got.append({"x": batch["x"].copy(), "i": batch["i"].copy(), "tag": batch["tag"]})
        del batch
        release()
    return got


def _check(got: list[dict[str, Any]], n: int = 50, size: int = 8) -> None:
    assert [list(b["i"]) for b in got] == _batches(n, size)  # in order, short last batch
    for b in got:
        assert (b["x"] == b["i"][:, None].astype(np.float32)).all()


@pytest.fixture
def pools():
    made: list[SlotPool] = []

    def make(filler: Filler, workers: int = 2, **kw: Any) -> SlotPool:
        made.append(SlotPool(filler, workers, FORK, **kw))
        return made[-1]

    yield make
    for pool in made:
        pool.close()


def test_placement_aligns_each_piece_and_counts_what_does_not_fit():
    into = Placement(memoryview(bytearray(1000)))
    assert into.take(10) == 0 and into.take(5) == ALIGN and into.fits
    assert into.take(800) is None and not into.fits
    assert into.needed == 2 * ALIGN + 800
    none = Placement(None)
    assert none.take(1) is None and none.needed == 1 and not none.fits


def test_batches_come_in_order_through_a_ring_that_stays_flat(pools):
    pool = pools(Numbers(), workers=2, prefetch=2)
    sizes = []
    for _ in range(6):
        got = _epoch(pool)
        _check(got)
        sizes.append((pool.slots, pool.slot_bytes))
    assert {b["tag"] for b in got} == {"w0", "w1"}  # both workers worked
    # at most one slot a batch in flight (the one copied is back first); each the same size
    assert all(1 <= n <= 2 * 2 for n, _ in sizes)
    assert all(held == n * slots.ROUND for n, held in sizes)


def test_a_batch_larger_than_its_slot_gets_a_larger_one(pools):
    pinned: list[int] = []
    unpinned: list[int] = []

    def pin(buffer: memoryview) -> Any:
        pinned.append(len(buffer))
        return lambda: unpinned.append(1)

    pool = pools(Numbers(grow=200, wide=110), workers=2, pin=pin)
    _check(_epoch(pool, n=400), n=400)
    big = 8 * ROW * 110 * 4  # 3.52 MB: 4 MiB made exactly, 6 MiB made 1.25x larger
    assert pool.pinned and all(s >= big for s in _sizes(pool))
    # the first slots are made the size their batch needed (2 MiB rounded); a batch too large
    # for its slot gets one 1.25x what it needed (batches that vary), rounded to 2 MiB
    assert set(_sizes(pool)) == {6 * slots.ROUND // 2}
    assert len(pinned) == len(unpinned) + pool.slots  # each small slot unpinned once retired
    pool.close()
    assert len(unpinned) == len(pinned) and pool.slots == 0


def _sizes(pool: SlotPool) -> list[int]:
    return [s.nbytes for s in pool._slots.values()]


def test_a_failing_sample_is_raised_at_its_batch_and_the_next_epoch_runs(pools):
    pool = pools(Numbers(fail_at=27))
    seen = []
    with pytest.raises(SlotError, match=r"(?s)KeyError .*worker process \d.*sample 27 is missing"):
        for marked, buffer, release in pool.epoch(iter(_batches(50, 8))):
            seen.append(list(_read(marked, buffer)["i"]))
            release()
    assert seen == _batches(50, 8)[:3]
    _check(_epoch(pool, n=24), n=24)


def test_leaving_an_epoch_early_loses_no_slot(pools):
    pool = pools(Numbers(), workers=2)
    for _ in range(3):
        for k, (_marked, _buffer, release) in enumerate(pool.epoch(iter(_batches(400, 8)))):
            release()
            if k == 2:
                break
    _check(_epoch(pool))
    assert pool.slots <= 2 * 2


def test_a_dead_worker_is_named(pools):
    pool = pools(Numbers(sleep=0.2), workers=2)
    batches = pool.epoch(iter(_batches(50, 8)))
    next(batches)[2]()
    os.kill(pool._procs[1].pid, signal.SIGKILL)
    with pytest.raises(SlotError, match=r"worker 1 \(pid \d+\) exited unexpectedly .* -9"):
        for _marked, _buffer, release in batches:
            release()


def test_the_loaders_timeout_bounds_a_wait(pools):
    pool = pools(Numbers(sleep=2.0), workers=1, timeout=0.3)
    began = time.monotonic()
    with pytest.raises(SlotError, match=r"timed out after 0\.3 seconds"):
        next(pool.epoch(iter(_batches(8, 8))))
    assert time.monotonic() - began < 1.9


def test_a_worker_that_cannot_start_is_named(pools):
    filler = Numbers()
    filler.fail_start = True
    pool = pools(filler, workers=1)
    with pytest.raises(SlotError, match=r"(?s)OSError .*no such dataset file"):
        next(pool.epoch(iter(_batches(8, 8))))


def test_close_ends_the_workers_and_a_second_close_does_nothing(pools):
    pool = pools(Numbers(), workers=2)
    _check(_epoch(pool, n=16), n=16)
    procs = list(pool._procs)
    pool.close()
    pool.close()
    assert not any(p.is_alive() for p in procs) and pool.slot_bytes == 0


def test_a_second_epoch_begun_while_one_runs_stops_the_first_with_a_word(pools):
    pool = pools(Numbers(), workers=2)
    first = pool.epoch(iter(_batches(400, 8)))
    next(first)[2]()
    second = pool.epoch(iter(_batches(40, 8)))
    got = []
    for marked, buffer, release in second:
        got.append(list(_read(marked, buffer)["i"]))
        release()
    assert got == _batches(40, 8)
    with pytest.raises(SlotError, match="another epoch of this DeviceLoader started"):
        for _marked, _buffer, release in first:
            release()


def _untouched() -> Any:
    """Index lists that must not be read (the epoch was begun ahead)."""

    def never() -> Any:
        raise AssertionError("the epoch begun ahead read its own index lists")
        yield

    return never()


def test_the_next_epoch_of_a_sequential_order_is_begun_while_the_last_ends(pools):
    pool = pools(Numbers(sleep=0.01), workers=2, prefetch=2)
    following = functools.partial(iter, _batches(50, 8))
    sizes = []
    for e in range(4):
        got = []
        source = iter(_batches(50, 8)) if e == 0 else _untouched()
        for marked, buffer, release in pool.epoch(source, following, following):
            batch = _read(marked, buffer)
            got.append({"x": batch["x"].copy(), "i": batch["i"].copy(), "tag": batch["tag"]})
            release()
        _check(got)
        assert pool._ahead is not None and pool._ahead.sent > 0  # tasks out before it begins
        sizes.append(pool.slots)
    assert max(sizes) <= 2 * 2 + 2  # the ring: this epoch's tasks in flight, then the next's


def test_an_epoch_begun_ahead_is_let_go_by_another_order_and_by_leaving_early(pools):
    pool = pools(Numbers(), workers=2)
    following = functools.partial(iter, _batches(50, 8))
    _check([*_taken(pool.epoch(iter(_batches(50, 8)), following, following))])
    assert pool._ahead is not None
    _check(_epoch(pool, n=24), n=24)  # another order: what was begun goes back
    assert pool._ahead is None and not pool._held
    began = pool.epoch(iter(_batches(400, 8)), following, following)
    for k, (_m, _b, release) in enumerate(began):
        release()
        if k == 2:
            break
    assert pool._ahead is None  # left early: the next epoch is not kept
    _check([*_taken(pool.epoch(iter(_batches(50, 8)), following, following))])
    _check([*_taken(pool.epoch(_untouched(), following, following))])
    assert pool.slots <= 2 * 2 + 2


def test_an_epoch_takes_up_what_the_following_it_resumes_began(pools):
    """A shuffled order's next epoch is drawn ahead, a new one each epoch: the epoch given
    `resumes` = the last epoch's `following` takes up its batches; a stale one lets them go."""
    pool = pools(Numbers(), workers=2)
    first, second = (functools.partial(iter, _batches(50, 8)) for _ in range(2))
    _check([*_taken(pool.epoch(iter(_batches(50, 8)), first))])
    _check([*_taken(pool.epoch(_untouched(), second, first))])  # first's began: taken up
    assert pool._ahead is not None and pool._ahead.following is second
    _check([*_taken(pool.epoch(iter(_batches(50, 8)), None, first))])  # stale: let go
    assert pool._ahead is None and not pool._held


def _taken(batches: Any) -> Any:
    for marked, buffer, release in batches:
        batch = _read(marked, buffer)
        yield {"x": batch["x"].copy(), "i": batch["i"].copy(), "tag": batch["tag"]}
        release()
