"""`xferscope.torch.DeviceLoader`: any DataLoader, or any iterable of nested batches, with every
batch already on the GPU when the step asks for it.

    loader = torch.utils.data.DataLoader(dataset, batch_size=256, num_workers=8)
    batches = xferscope.torch.DeviceLoader(loader, device="cuda", ahead=2)
    for epoch in range(epochs):
        for images, labels in batches:            # on cuda:0 already
            step(images, labels)
        print(batches.stats.explain())            # what the loop waited for, and the fix

A thread takes each batch from the loader and moves it with `xferscope.to_device` (one
copy_many for the whole structure: dicts, tuples, lists, namedtuples, dataclasses; from pageable
memory through the staged copy, so `pin_memory=True` is not needed), `ahead` batches before the
one the step holds. The copies run while the step's kernels do; the step's thread never waits
for a copy that has not finished.

Streams: the thread's copies go on a side stream made once per GPU and process, and each
batch's GPU tensors are recorded on the stream current where the step takes them
(`Tensor.record_stream`), so the caching allocator reuses their memory only after the work
queued there has run (clean under TORCH_CUDA_SANITIZER=1). Memory: at most `ahead` + 2 batches
on the GPU at once; the only pinned memory is the staged copy's chunks (bounded, reused; flat
over epochs) and what the DataLoader pins itself.

Without CUDA the batches come as the loader gives them, with one warning."""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Iterator
from typing import Any

from ..moves import gpu_index
from ..moving import to_device
from ..prefetch import LoaderStats, Prefetcher, check_ahead
from ..structures import each_leaf

_side_streams: dict[int, Any] = {}  # one per GPU, made once: a stream an epoch grew memory


class DeviceLoader:
    """`loader`'s batches, each moved to GPU `device` ("cuda", "cuda:N", an index or a
    torch.device) `ahead` batches (1-64) before the step takes it. `stats`: the last epoch's
    LoaderStats (its `explain()` names what the loop waited for). Attributes it does not have
    are the loader's (`dataset`, `sampler`, `batch_size`)."""

    def __init__(self, loader: Iterable[Any], device: Any = "cuda", *, ahead: int = 2) -> None:
        self.loader, self.device, self.ahead = loader, device, check_ahead(ahead)
        self.stats = LoaderStats()
        self._warned = False

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

        def move(batch: Any) -> Any:
            first = next(each_leaf(batch, lambda x: isinstance(x, torch.Tensor)), None)
            if first is not None and not first.is_cuda and first.is_pinned():
                stats.pinned_batches += 1
            return to_device(batch, index)

        prefetcher = Prefetcher(
            self.loader,
            move,
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
