"""Workers that write each batch straight into a ring of shared-memory slots, pinned once in the
program's process and reused: seed 000's rotating buffers, the framework-free half of
`xferscope.torch.DeviceLoader`'s slot path (frameworks/torch_slots.py is the other).

Why: a DataLoader's batch reaches the program as fresh shared memory, a file descriptor passed
over a socket and mapped, then pinned again by its pin-memory thread; on an H100 that work in the
program's process (6-9 ms of CPU a batch, under the GIL) slowed a ResNet-18 step of 12.2 ms to
15-24 ms even with every batch dropped unused. Here a worker collates into a slot (memfd shared
memory the program registered with the GPU once), and the program gets a few hundred bytes
saying where each tensor lies; the copy engine reads the slot directly. Measured on an H200: the
step beside it 12.26 ms against 12.22 resident.

The ring: a task goes out with a free slot, or none while the ring is still growing; a worker
whose batch does not fit answers with the bytes it needs, and the program makes a slot that
size (GROWTH more where it replaces a slot too small: batches that vary) and sends it. So the
ring holds at most one slot per batch in flight (workers x prefetch_factor), each the largest
batch seen: bounded, and flat from one epoch to the next. Workers live as long as the pool
(like a DataLoader's persistent_workers=True), so an epoch starts with no fork and no drain.

A Filler (framework's) makes a batch from its indices, placing its tensors in the slot while
it collates where it can, and places the rest after; the marked structure (InSlot for each
tensor) is what crosses to the program."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import gc
import mmap
import os
import queue
import signal
import sys
import threading
import traceback
from collections.abc import Callable, Iterator
from multiprocessing import reduction
from typing import Any, NoReturn

from ..core.units import format_bytes

ALIGN = 256  # each tensor's offset in a slot: what copy engines read fastest
ROUND = 2 << 20  # slot sizes, rounded up to this
GROWTH = 1.25  # a slot made for a batch its slot was too small for: this much above its need
POLL_S = 0.05  # how often a wait for a worker looks whether one died or the pool closed
JOIN_S = 5.0  # how long close() waits for a worker to leave before it is terminated


class SlotError(RuntimeError):
    """A worker failed or died, or no shared memory could be had."""


@dataclasses.dataclass(frozen=True)
class InSlot:
    """Where a tensor of a batch lies in its slot: offset and bytes, and the framework's words
    for what it is (for torch: dtype and shape)."""

    offset: int
    nbytes: int
    meta: Any


class Placement:
    """Space handed out in one slot's buffer (None: no slot yet), in order, each piece ALIGNed.
    Pieces past its end are still counted: `needed` is what the whole batch takes."""

    def __init__(self, buffer: memoryview | None) -> None:
        self.buffer = buffer
        self.size = 0 if buffer is None else len(buffer)
        self.needed = 0
        self.placed: dict[int, InSlot] = {}  # id(tensor) -> where, for tensors made in place

    def take(self, nbytes: int) -> int | None:
        """The offset of `nbytes` more, or None where they do not fit (counted all the same)."""
        offset = -(-self.needed // ALIGN) * ALIGN
        self.needed = offset + nbytes
        return offset if self.needed <= self.size else None

    @property
    def fits(self) -> bool:
        return self.buffer is not None and self.needed <= self.size


class Filler:
    """What a worker does with a task (a framework implements it; it is pickled to workers
    started by spawn or forkserver). Runs in the worker process."""

    def start(self, worker: int, workers: int) -> None:
        """Once in each worker, first: seeds, the framework's worker info, the user's init."""

    def collate(self, indices: list[Any], into: Placement) -> Any:
        """The batch of these indices, its tensors made in `into` where they fit."""
        raise NotImplementedError

    def place(self, batch: Any, into: Placement) -> Any:
        """`batch` with each tensor replaced by its InSlot, those not made in `into` copied
        there; what it returns is not used where `into.fits` is then false."""
        raise NotImplementedError


@dataclasses.dataclass
class _Slot:
    """A slot in the program's process: its memfd, mapping, and the unpin its pin returned."""

    id: int
    nbytes: int
    fd: int
    map: mmap.mmap
    unpin: Callable[[], None] | None = None
    known: set[int] = dataclasses.field(default_factory=set)  # workers that mapped it

    def close(self) -> None:
        if self.unpin is not None:
            self.unpin()
            self.unpin = None
        with contextlib.suppress(BufferError):  # a view still alive: unmapped with the last
            self.map.close()
        os.close(self.fd)


def _make_slot(ident: int, nbytes: int) -> _Slot:
    nbytes = -(-nbytes // ROUND) * ROUND
    fd = os.memfd_create(f"xferscope-slot-{ident}", os.MFD_CLOEXEC)
    try:
        os.posix_fallocate(fd, 0, nbytes)  # the memory had now, not a SIGBUS in a worker later
        return _Slot(ident, nbytes, fd, mmap.mmap(fd, nbytes, mmap.MAP_SHARED))
    except OSError as exc:
        os.close(fd)
        raise SlotError(
            f"no shared memory for a batch slot of {format_bytes(nbytes)} ({exc.strerror})"
        ) from None


def _worker(
    worker: int, workers: int, filler: Filler, tasks: Any, results: Any
) -> None:  # pragma: no cover - runs in the worker process (tests/unit/test_slots.py runs it)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the program's; it stops us
    # a handler the program set (a benchmark's SIGTERM raising KeyboardInterrupt) is not ours:
    # a worker a group's SIGTERM reaches ends quietly
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    maps: dict[int, mmap.mmap] = {}
    pending: dict[Any, Any] = {}  # batches waiting for a larger slot
    try:
        filler.start(worker, workers)
    except Exception:
        results.put(("failed", None, worker, _failure(worker), None))
        return
    while True:
        message = tasks.get()
        if message is None:
            return
        kind, seq = message[0], message[1]
        if kind == "forget":
            old = maps.pop(seq, None)
            if old is not None:
                with contextlib.suppress(BufferError):  # a view still alive: unmapped with it
                    old.close()
        elif kind == "drop":
            pending.pop(seq, None)
        else:
            results.put(_task(worker, filler, maps, pending, message))


def _task(
    worker: int, filler: Filler, maps: dict[int, mmap.mmap], pending: dict[Any, Any], message: Any
) -> tuple[Any, ...]:
    """A task ("task", seq, indices, slot) or a fill ("fill", seq, slot) done: the answer."""
    kind, seq = message[0], message[1]
    slot = message[3] if kind == "task" else message[2]
    ident = None if slot is None else slot[0]
    try:
        into = Placement(_attach(maps, slot))
        batch = filler.collate(message[2], into) if kind == "task" else pending.pop(seq)
        marked = filler.place(batch, into)
        if into.fits:
            return ("ready", seq, worker, marked, ident)
        pending[seq] = batch
        return ("need", seq, worker, into.needed, ident)
    except Exception:
        pending.pop(seq, None)
        return ("failed", seq, worker, _failure(worker), ident)


def _attach(maps: dict[int, mmap.mmap], slot: Any) -> memoryview | None:
    """The slot's buffer in this worker, mapped from its passed descriptor on first use."""
    if slot is None:
        return None
    ident, nbytes, passed = slot
    if ident not in maps:
        fd = passed.detach()
        maps[ident] = mmap.mmap(fd, nbytes, mmap.MAP_SHARED)
        os.close(fd)
    return memoryview(maps[ident])


def _failure(worker: int) -> tuple[str, str]:
    """(the exception's type name, where and its traceback), of the one being handled."""
    return type(sys.exc_info()[1]).__name__, (
        f"in DeviceLoader worker process {worker}:\n{traceback.format_exc()}"
    )


class SlotPool:
    """`workers` processes (started with multiprocessing `context`) filling slots, at most
    `prefetch` tasks each in flight. `pin(buffer)` registers a new slot with the GPU and
    returns its unpin (None: left pageable). `epoch(index_batches)` yields (marked batch, slot
    buffer, release) in order; call release() once the bytes are copied. `timeout` (seconds,
    0: none) bounds a wait for one batch, as DataLoader's does. close() ends it all."""

    def __init__(
        self,
        filler: Filler,
        workers: int,
        context: Any,
        prefetch: int = 2,
        timeout: float = 0.0,
        pin: Callable[[memoryview], Callable[[], None] | None] | None = None,
    ) -> None:
        self._pin, self._timeout = pin, timeout
        self._slots: dict[int, _Slot] = {}
        self._free: list[int] = []
        self._held: set[int] = set()  # yielded, not yet released
        self._unslotted = 0  # tasks sent without a slot, not yet answered
        self._made = 0
        self._epoch = 0  # the number of the epoch being taken
        self._numbered = 0  # epochs numbered so far (one begun ahead among them)
        self._ahead: _Run | None = None  # the next epoch, begun while the last ended
        self._lock = threading.Lock()  # release() comes from whichever thread copied
        self._results = context.Queue()
        self._tasks = [context.Queue() for _ in range(workers)]
        self._outstanding = [0] * workers
        self._most = max(1, prefetch) * workers
        self._closed = False
        self._procs = [
            context.Process(
                target=_worker,
                args=(w, workers, filler, self._tasks[w], self._results),
                name=f"xferscope-slot-worker-{w}",
                daemon=True,
            )
            for w in range(workers)
        ]
        # What the program holds is frozen out of the collector while the workers fork, so a
        # forked worker never collects it: a CUDA tensor in a reference cycle, freed in a forked
        # worker, aborts it (seen on an H100: record_stream'd batches held by a traceback), and
        # its pages stay shared with the program (Python's gc.freeze advice).
        gc.freeze()
        try:
            for proc in self._procs:
                proc.start()
        finally:
            gc.unfreeze()

    @property
    def slot_bytes(self) -> int:
        """Shared memory the ring holds now (pinned where pin pinned it)."""
        return sum(s.nbytes for s in self._slots.values())

    @property
    def slots(self) -> int:
        return len(self._slots)

    @property
    def pinned(self) -> bool:
        """Every slot registered with the GPU (before the first: whether they will be)."""
        return self._pin is not None and all(s.unpin is not None for s in self._slots.values())

    def begun(self, following: Callable[[], Iterator[Any]] | None) -> bool:
        """Whether the batches an epoch's `following` began are held, for the next epoch()."""
        return self._ahead is not None and self._ahead.following is following

    def epoch(
        self,
        index_batches: Iterator[Any],
        following: Callable[[], Iterator[Any]] | None = None,
        resumes: Callable[[], Iterator[Any]] | None = None,
    ) -> Iterator[tuple[Any, memoryview, Any]]:
        """The batches of these index lists, in their order. `following`: gives the next
        epoch's index lists, drawn ahead (DeviceLoader's Orders); it is called once these are
        all sent, and its first tasks go out while this epoch's last batches are taken. The
        next epoch() whose `resumes` is that `following` takes up what they made (its own
        `index_batches` are then not read), so that epoch starts without waiting for a collate;
        any other call lets them go."""
        ahead, self._ahead = self._ahead, None
        if ahead is not None and resumes is not None and ahead.following is resumes:
            run = ahead
        else:
            if ahead is not None:
                self._let_go(ahead)
            self._numbered += 1
            run = _Run(self._numbered, index_batches)
        self._epoch = run.number
        runs: list[_Run] = [run]  # and the next epoch's, once begun
        try:
            while True:
                if self._epoch != run.number:
                    raise SlotError(
                        "another epoch of this DeviceLoader started while this one ran: its "
                        "workers serve one epoch at a time (as persistent_workers=True does); "
                        "iterate a second DeviceLoader for a second loop"
                    )
                self._send_tasks(runs)
                if not run.more and following is not None and len(runs) == 1:
                    self._numbered += 1
                    runs.append(_Run(self._numbered, following(), following))
                    self._send_tasks(runs)
                if run.done == run.sent and not run.more:
                    self._ahead = runs.pop() if len(runs) > 1 else None
                    return
                while run.done not in run.ready:
                    self._handle(self._receive(), runs)
                    self._send_tasks(runs)  # a slot a dropped batch gave back takes a task
                marked, ident = run.ready.pop(run.done)
                run.done += 1
                if isinstance(marked, _Failed) or ident is None:
                    self._raise(marked.failure)
                yield (
                    marked,
                    memoryview(self._slots[ident].map),
                    functools.partial(self.release, ident),
                )
        finally:  # left early, or failed: what was received and not copied goes back
            kept = {i for _, i in self._ahead.ready.values()} if self._ahead else set()
            for ident in [*self._held, *(i for _, i in run.ready.values() if i is not None)]:
                if ident not in kept:
                    self.release(ident)
            for other in runs[1:]:  # a next epoch begun, not kept
                self._let_go(other)

    def _send_tasks(self, runs: list[_Run]) -> None:
        """Tasks for each run's next index lists, in turn, while there is room."""
        for run in runs:
            while run.more and self._in_flight(runs) < self._most:
                ident = self._slot_for_task(self._in_flight(runs))
                if ident == _WAIT:
                    return
                try:
                    indices = next(run.indices)
                except StopIteration:
                    run.more = False
                    if ident is not None:
                        self.release(ident)
                    break
                self._send(run.number, run.sent, indices, ident)
                run.sent += 1

    def _in_flight(self, runs: list[_Run]) -> int:
        return sum(self._outstanding) + sum(len(r.ready) for r in runs)

    def _let_go(self, run: _Run) -> None:
        """A run no epoch will take: its batches made go back; those still being made are
        dropped as they come (their epoch is no run's)."""
        for _, ident in run.ready.values():
            if ident is not None:
                self.release(ident)
        run.ready.clear()

    def release(self, ident: int) -> None:
        """The slot's bytes are copied: it may take the next task."""
        with self._lock:
            self._held.discard(ident)
            if ident in self._slots and ident not in self._free:
                self._free.append(ident)

    def close(self) -> None:
        """Stops the workers (terminated where they do not leave within JOIN_S) and frees the
        slots; a second call does nothing."""
        if self._closed:
            return
        self._closed = True
        for tasks in self._tasks:
            with contextlib.suppress(OSError, ValueError):
                tasks.put(None)
        for proc in self._procs:
            proc.join(JOIN_S)
            if proc.is_alive():
                proc.terminate()
                proc.join(JOIN_S)
        for q in (*self._tasks, self._results):
            q.cancel_join_thread()
            q.close()
        for slot in self._slots.values():
            slot.close()
        self._slots.clear()
        self._free.clear()

    def _slot_for_task(self, in_flight: int) -> int | None:
        """A free slot for the next task; None: none, the task goes without and the ring grows
        by one; _WAIT: the ring is at its most (one slot a batch in flight), so the next task
        waits for a slot to come back."""
        with self._lock:
            if self._free:
                return self._free.pop()
        if len(self._slots) + self._unslotted >= self._most and in_flight:
            return _WAIT
        return None

    def _send(self, epoch: int, n: int, indices: Any, ident: int | None) -> None:
        worker = min(range(len(self._procs)), key=self._outstanding.__getitem__)
        self._outstanding[worker] += 1
        self._unslotted += ident is None
        self._tasks[worker].put(("task", (epoch, n), list(indices), self._passed(ident, worker)))

    def _passed(self, ident: int | None, worker: int) -> Any:
        """The slot as a task names it: its id, size, and its descriptor the first time."""
        if ident is None:
            return None
        slot = self._slots[ident]
        first = worker not in slot.known
        slot.known.add(worker)
        return ident, slot.nbytes, reduction.DupFd(slot.fd) if first else _Known()

    def _receive(self) -> Any:
        waited = 0.0
        while True:
            try:
                return self._results.get(timeout=POLL_S)
            except queue.Empty:
                waited += POLL_S
            for w, proc in enumerate(self._procs):
                if not proc.is_alive():
                    raise SlotError(
                        f"DeviceLoader worker {w} (pid {proc.pid}) exited unexpectedly with "
                        f"exit code {proc.exitcode}; a worker killed by the system is often out "
                        "of memory"
                    )
            if self._timeout and waited >= self._timeout:
                raise SlotError(f"DataLoader timed out after {self._timeout:g} seconds")

    def _handle(self, message: Any, runs: list[_Run]) -> None:
        kind, seq, worker, what, ident = message
        if seq is None:  # a worker that could not start
            self._raise(what)
        if ident is None:  # a task sent without a slot, answered ("need", or "failed")
            self._unslotted -= 1
        run = next((r for r in runs if r.number == seq[0]), None)
        if kind == "need":
            if ident is not None:  # too small for this batch: made anew, larger
                self._retire(ident)
            if run is None:  # an epoch left early: its batch is not wanted
                self._tasks[worker].put(("drop", seq))
                self._outstanding[worker] -= 1
                return
            made = self._make(what, grown=ident is not None)
            self._tasks[worker].put(("fill", seq, self._passed(made, worker)))
            return
        self._outstanding[worker] -= 1
        if run is None or kind == "failed":
            if ident is not None:
                self.release(ident)
            if run is not None:  # raised when its turn comes, after the batches before it
                run.ready[seq[1]] = (_Failed(what), None)
            return
        self._held.add(ident)
        run.ready[seq[1]] = (what, ident)

    def _make(self, needed: int, grown: bool) -> int:
        """A new slot for `needed` bytes (GROWTH more where it replaces one too small)."""
        self._made += 1
        slot = _make_slot(self._made, int(needed * (GROWTH if grown else 1.0)))
        if self._pin is not None:
            slot.unpin = self._pin(memoryview(slot.map))
        self._slots[slot.id] = slot
        return slot.id

    def _retire(self, ident: int) -> None:
        """A slot too small for a batch: its workers told to unmap it, and it freed."""
        with self._lock:
            slot = self._slots.pop(ident)
            if ident in self._free:
                self._free.remove(ident)
        for worker in slot.known:
            self._tasks[worker].put(("forget", ident))
        slot.close()

    @staticmethod
    def _raise(failure: tuple[str, str]) -> NoReturn:
        kind, text = failure
        raise SlotError(f"{kind} {text}")


@dataclasses.dataclass
class _Run:
    """One epoch's tasks: its number, its index lists (what made them, where begun ahead), how
    many were sent and taken, and the batches made and not yet taken, by their place."""

    number: int
    indices: Iterator[Any]
    following: Callable[[], Iterator[Any]] | None = None
    sent: int = 0
    done: int = 0
    more: bool = True
    ready: dict[int, tuple[Any, int | None]] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class _Failed:
    failure: tuple[str, str]


_WAIT = -1  # no slot for a task yet: it waits


class _Known:
    """A slot the worker has mapped already: no descriptor passed again."""
