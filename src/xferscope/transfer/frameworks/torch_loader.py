"""`xferscope.torch.DeviceLoader`: any DataLoader, or any iterable of nested batches, with every
batch already on the GPU when the step asks for it.

    loader = torch.utils.data.DataLoader(dataset, batch_size=256, num_workers=8)
    batches = xferscope.torch.DeviceLoader(loader, device="cuda", ahead=2)
    for epoch in range(epochs):
        for images, labels in batches:            # on cuda:0 already
            step(images, labels)
        print(batches.stats.explain())            # what the loop waited for, and the fix

Where the loader is a DataLoader with workers over a map-style dataset, DeviceLoader runs its
workers itself (`slots=True`, the default): each worker collates a batch straight into a slot
of shared memory that was pinned once, and the copy engine reads it there
(frameworks/torch_slots.py: no fresh shared memory a batch, no pin-memory thread, and almost
nothing done per batch in this process). Workers then live until `close()`, like
persistent_workers=True; over a sequential order (shuffle=False) the next epoch's first
batches are collated while this epoch's last ones are taken. `slots=False`, or any other
loader: a thread takes each batch from the loader and moves it with `xferscope.to_device` (one
copy_many for the whole structure: dicts, tuples, lists, namedtuples, dataclasses; from pageable
memory through the staged copy, so `pin_memory=True` is not needed), `ahead` batches before the
one the step holds. The copies run while the step's kernels do; the step's thread never waits
for a copy that has not finished.

Streams: the thread's copies go on a side stream made once per GPU and process, and each
batch's GPU tensors are recorded on the stream current where the step takes them
(`Tensor.record_stream`), so the caching allocator reuses their memory only after the work
queued there has run (clean under TORCH_CUDA_SANITIZER=1). Memory: at most `ahead` + 2 batches
on the GPU at once; the only pinned memory is the slots (one per batch in flight, each the
largest batch's size: bounded, reused, flat over epochs), the staged copy's chunks (the same)
and what the DataLoader pins itself.

Without CUDA the batches come as the loader gives them, with one warning."""

from __future__ import annotations

import warnings
import weakref
from collections.abc import Iterable, Iterator
from typing import Any

from ...core.closing import Closing
from ..moving import to_device
from ..prefetch import LoaderStats, Prefetcher, check_ahead
from ..slots import SlotPool
from ..structure_copies import gpu_index
from ..structures import each_leaf
from .torch_slots import Orders, host_batch, slot_pool

_side_streams: dict[int, Any] = {}  # one per GPU, made once: a stream an epoch grew memory


class DeviceLoader(Closing):
    """`loader`'s batches, each moved to GPU `device` ("cuda", "cuda:N", an index or a
    torch.device) `ahead` batches (1-64) before the step takes it. `stats`: the last epoch's
    LoaderStats (its `explain()` names what the loop waited for). `slots`: a DataLoader's
    workers collate into pinned slots (see above); False iterates the loader as it is.
    Attributes it does not have are the loader's (`dataset`, `sampler`, `batch_size`)."""

    def __init__(
        self, loader: Iterable[Any], device: Any = "cuda", *, ahead: int = 2, slots: bool = True
    ) -> None:
        if not isinstance(slots, bool):
            raise ValueError(f"slots: {slots!r} is not True or False")
        self.loader, self.device, self.ahead = loader, device, check_ahead(ahead)
        self.slots = slots
        self.stats = LoaderStats()
        self._warned = False
        self._pool: SlotPool | None = None
        self._orders = Orders()

    def close(self) -> None:
        """Stops the slot path's workers and frees its slots (also when the DeviceLoader is
        collected, or leaves a `with` block); a later epoch starts them again."""
        pool, self._pool = self.__dict__.get("_pool"), None
        if pool is not None:
            pool.close()

    def __len__(self) -> int:
        return len(self.loader)  # type: ignore[arg-type]

    def __getattr__(self, name: str) -> Any:
        loader = self.__dict__.get("loader")
        if loader is None or name.startswith("_"):
            raise AttributeError(name)
        return getattr(loader, name)

    def __iter__(self) -> Iterator[Any]:
        import torch

        if not torch.cuda.is_available():
            if not self._warned:
                self._warned = True
                warnings.warn(
                    "xferscope.torch.DeviceLoader: CUDA is not available, so batches stay "
                    "where the loader makes them",
                    RuntimeWarning,
                    stacklevel=2,
                )
            yield from self.loader
            return
        index = gpu_index(self.device)
        if index >= torch.cuda.device_count():
            raise ValueError(
                f"device: {self.device!r} names no GPU here (this machine has "
                f"{torch.cuda.device_count()}: cuda:0 to cuda:{torch.cuda.device_count() - 1})"
            )
        side = _side_stream(torch, index)
        self.stats = stats = LoaderStats()
        pool = self._slot_pool()

        def move(batch: Any) -> Any:
            first = next(each_leaf(batch, lambda x: isinstance(x, torch.Tensor)), None)
            if first is not None and not first.is_cuda and first.is_pinned():
                stats.pinned_batches += 1
            return to_device(batch, index)

        def move_slot(item: Any) -> Any:  # the slot path's: the slot back once copied
            marked, buffer, release = item
            try:
                return move(host_batch(marked, buffer))
            finally:
                release()
                if pool is not None:
                    stats.pinned_bytes = pool.slot_bytes if pool.pinned else 0

        source: Any = self.loader
        if pool is not None:
            stats.source = "slots"
            sampler = self.loader.batch_sampler  # type: ignore[attr-defined]
            indices, following, resumes = self._orders.epoch(sampler, pool.begun)
            source = pool.epoch(indices, following, resumes)
        prefetcher = Prefetcher(
            source,
            move if pool is None else move_slot,
            self.ahead,
            stats,
            start=lambda: torch.cuda.set_stream(side),
        )
        try:
            for batch in prefetcher:
                _recorded(torch, batch, torch.cuda.current_stream(index))
                yield batch
        finally:
            prefetcher.close()

    def _slot_pool(self) -> SlotPool | None:
        if self._pool is None and self.slots:
            self._pool = slot_pool(self.loader, pinned=True)
            if self._pool is not None:
                weakref.finalize(self, self._pool.close)
        return self._pool


def _side_stream(torch: Any, index: int) -> Any:
    stream = _side_streams.get(index)
    if stream is None:
        stream = _side_streams[index] = torch.cuda.Stream(device=index)
    return stream


def _recorded(torch: Any, batch: Any, stream: Any) -> None:
    """Each GPU tensor of `batch` recorded on `stream`, where the step will use it."""
    for leaf in each_leaf(batch, lambda x: isinstance(x, torch.Tensor)):
        if leaf.is_cuda:
            leaf.record_stream(stream)
