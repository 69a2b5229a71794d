"""Batches moved ahead on a thread while the program's step runs, and what the wait was for:
the framework-free half of `xferscope.torch.DeviceLoader` (frameworks/torch_loader.py).

A Prefetcher takes the next item of an iterator on its own thread, moves it (`move`, for
DeviceLoader `xferscope.to_device`, which, waiting, returns with the bytes arrived) and queues it,
at most `ahead` items before the one the program holds. The program's thread only takes finished
items. A failure on the thread (the dataset's, the copy's) is raised in the program's thread at the
item where it happened, with its own traceback; leaving the loop early (break, an exception, Ctrl-C)
stops the thread and drops what it had made.

LoaderStats says, per epoch, how long the program waited for each item against how long its
own step took, and how long the items took to produce (the iterator's next: a DataLoader's
workers, collate and pin-memory thread) and to move, and names the bound with its fix."""

from __future__ import annotations

import dataclasses
import queue
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from ..core.units import format_bytes, format_seconds

MOST_AHEAD = 64  # items queued beyond the one the program holds
# Below this share of the program's time spent waiting for batches, the step is the bound.
WAIT_SHARE_BOUND = 0.05
POLL_S = 0.05  # how often a blocked put, get or stop looks whether the other side stopped


@dataclasses.dataclass
class LoaderStats:
    """One epoch's times, in seconds, totals over its batches. The first batch's wait (the
    iterator's start: a DataLoader's workers spawned) is first_wait_s, apart from wait_s."""

    batches: int = 0
    first_wait_s: float = 0.0
    wait_s: float = 0.0  # the program blocked for a batch, from the second batch
    step_s: float = 0.0  # the program's own time between taking one batch and asking for the next
    produce_s: float = 0.0  # the iterator's next() on the thread
    copy_s: float = 0.0  # moving the batch to the GPU on the thread
    pinned_batches: int = 0  # batches whose host memory was pinned when they arrived
    source: str = "loader"  # "slots": workers collated into pinned slots (DeviceLoader's own)
    pinned_bytes: int = 0  # the slots' pinned memory at the epoch's end

    def per_batch(self) -> dict[str, float]:
        """Mean seconds a batch of each time (wait and step over the batches after the first)."""
        after = max(self.batches - 1, 1)
        made = max(self.batches, 1)
        return {
            "wait": self.wait_s / after,
            "step": self.step_s / after,
            "produce": self.produce_s / made,
            "copy": self.copy_s / made,
        }

    def bound(self) -> tuple[str, str]:
        """(what bounds the loop: "step", "input", "copy" or "unknown", the advice)."""
        if self.batches < 2:
            return "unknown", "fewer than 2 batches: nothing to tell yet"
        each = self.per_batch()
        share = self.wait_s / max(self.wait_s + self.step_s, 1e-12)
        if share < WAIT_SHARE_BOUND:
            slower = (
                ""
                if self.source == "slots"
                else f"; where a step ({format_seconds(each['step'])}) takes longer than with "
                "its data already on the GPU, the DataLoader's work in this process slows it "
                "(on an H100 a ResNet-18 step of 13 ms took 23-34 ms beside a DataLoader's 4 "
                "workers, nothing copied): DeviceLoader's slots (a DataLoader with workers over "
                "a map-style dataset, slots=True) take that work out"
            )
            return "step", (
                f"the step: it waited {share:.0%} of the time for batches, so the loader keeps "
                f"up{slower}"
            )
        if each["produce"] >= each["copy"]:
            return "input", (
                f"the input pipeline: a batch took {format_seconds(each['produce'])} to produce "
                f"against a step of {format_seconds(each['step'])} ({share:.0%} of the time "
                "waiting); give the DataLoader more workers (num_workers), a lighter collate_fn, "
                "or a faster dataset (decode less, cache decoded samples)"
            )
        pin = (
            "pin_memory=True in the DataLoader lets the copy engine read them directly; "
            if self.pinned_batches < self.batches
            else ""
        )
        return "copy", (
            f"the copy: a batch took {format_seconds(each['copy'])} to reach the GPU against a "
            f"step of {format_seconds(each['step'])} ({share:.0%} of the time waiting); "
            f"{pin}a smaller batch dtype (uint8 images, bf16 features) moves fewer bytes, and "
            "ahead= more batches absorbs uneven steps"
        )

    def as_dict(self) -> dict[str, Any]:
        bound, advice = self.bound()
        each = {f"{k}_s_per_batch": v for k, v in self.per_batch().items()}
        return {**dataclasses.asdict(self), **each, "bound": bound, "advice": advice}

    def explain(self) -> str:
        each = self.per_batch()
        advice = self.bound()[1]
        return (
            f"{self.batches} batches: waited {format_seconds(each['wait'])} a batch for the "
            f"loader, stepped {format_seconds(each['step'])}; a batch took "
            f"{format_seconds(each['produce'])} to produce and {format_seconds(each['copy'])} "
            f"to copy, {self._pinning()} (first batch after "
            f"{format_seconds(self.first_wait_s)}). Bound: {advice}"
        )

    def _pinning(self) -> str:
        """Where the batches were pinned: by the loader (its pin-memory thread, inside
        producing), or while copying (the staged copy packs pageable memory into pinned)."""
        if self.source == "slots" and self.pinned_batches == self.batches:
            return f"collated into pinned slots ({format_bytes(self.pinned_bytes)} in all)"
        if self.pinned_batches == self.batches:
            return "pinned by the loader (part of producing)"
        if not self.pinned_batches:
            return "from pageable memory (pinned while copying)"
        return f"{self.pinned_batches} of {self.batches} arriving pinned"


def check_ahead(ahead: Any) -> int:
    """`ahead` if it is an integer from 1 to MOST_AHEAD; ValueError naming the option if not."""
    if isinstance(ahead, bool) or not isinstance(ahead, int) or not 1 <= ahead <= MOST_AHEAD:
        raise ValueError(f"ahead: {ahead!r} is not an integer from 1 to {MOST_AHEAD}")
    return ahead


class _End:
    """The iterator ran out."""


@dataclasses.dataclass
class _Failed:
    error: BaseException


class Prefetcher:
    """Iterates `source` on a thread, each item through `move`, at most `ahead` items queued;
    `start()` runs first on the thread (DeviceLoader sets its side stream there). Times go to
    `stats`. Use it as an iterator, once; `close()` (also on leaving early) stops the thread."""

    def __init__(
        self,
        source: Iterable[Any],
        move: Callable[[Any], Any],
        ahead: int,
        stats: LoaderStats,
        start: Callable[[], None] | None = None,
    ) -> None:
        self.stats = stats
        ahead = check_ahead(ahead)
        self._iterator = iter(source)  # made here, on the program's thread (a DataLoader forks)
        self._move, self._start = move, start
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=ahead)
        self._stop = threading.Event()
        self._done = False
        self._last: float | None = None  # when the program took its last item
        self._thread = threading.Thread(target=self._run, name="xferscope-prefetch", daemon=True)
        self._thread.start()

    def __iter__(self) -> Iterator[Any]:
        return self

    def __next__(self) -> Any:
        if self._done:
            raise StopIteration
        asked = time.perf_counter()
        if self._last is not None:
            self.stats.step_s += asked - self._last
        item = self._take()
        got = time.perf_counter()
        if self._last is None:
            self.stats.first_wait_s += got - asked
        else:
            self.stats.wait_s += got - asked
        if isinstance(item, _End):
            self.close()
            raise StopIteration
        if isinstance(item, _Failed):
            self.close()
            raise item.error
        self.stats.batches += 1
        self._last = time.perf_counter()
        return item

    def close(self) -> None:
        """Stops the thread and drops what it queued; returns once the thread has ended (it
        finishes the item in hand), so that nothing else uses the iterator: a DataLoader with
        persistent workers hands the same one to the next epoch."""
        self._done = True
        self._stop.set()
        while self._thread.is_alive() and self._thread is not threading.current_thread():
            self._drop()  # a put blocked on a full queue sees the stop at its next poll
            self._thread.join(POLL_S)  # in slices: Ctrl-C still reaches the program
        self._drop()  # what it queued before it saw the stop

    def _drop(self) -> None:
        while True:
            try:
                self._queue.get_nowait()
            except queue.Empty:
                return

    def _take(self) -> Any:
        while True:
            try:
                return self._queue.get(timeout=POLL_S)
            except queue.Empty:
                if not self._thread.is_alive() and self._queue.empty():
                    return _Failed(RuntimeError("the prefetching thread stopped without a word"))

    def _put(self, item: Any) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=POLL_S)
                return True
            except queue.Full:
                continue
        return False

    def _run(self) -> None:
        try:
            if self._start is not None:
                self._start()
            while not self._stop.is_set():
                began = time.perf_counter()
                try:
                    item = next(self._iterator)
                except StopIteration:
                    self._put(_End())
                    return
                made = time.perf_counter()
                moved = self._move(item)
                self.stats.produce_s += made - began
                self.stats.copy_s += time.perf_counter() - made
                if not self._put(moved):
                    return
        except BaseException as exc:  # the program's thread raises it, at this item
            self._put(_Failed(exc))
        finally:
            self._iterator = iter(())  # a DataLoader's workers shut down with their iterator
