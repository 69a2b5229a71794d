"""DeviceLoader's slot path for a torch DataLoader (transfer/slots.py is the framework-free
half): its workers, made from the loader's own dataset, batch sampler, collate_fn,
worker_init_fn, generator, multiprocessing_context, prefetch_factor and timeout, collate each
batch straight into a pinned shared-memory slot.

With the default collate_fn each tensor is stacked in the slot (`torch.stack(..., out=)`, the
way DataLoader's workers stack into fresh shared memory); another collate_fn's tensors are
copied there after it returns. Workers are seeded as DataLoader's are (random and torch with
base_seed + id, base_seed drawn from the loader's generator) and
`torch.utils.data.get_worker_info()` answers in them. They live until the DeviceLoader is
closed, like persistent_workers=True: what a worker's dataset holds stays between epochs."""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
import os
import random
import sys
from collections.abc import Callable, Iterator
from typing import Any

from ..slots import Filler, InSlot, Placement, SlotPool
from ..structures import flatten

# cudaHostRegisterPortable: the slot counts as pinned for every GPU's context, not only the one
# current where it was registered (DeviceLoader(device="cuda:1") from a thread on cuda:0)
PORTABLE = 1


def drawn(indices: Iterator[Any]) -> Iterator[Any]:
    """`indices` with its first list drawn now, on the program's thread: a sampler draws its
    randomness at its first list (RandomSampler its seed from torch's generator), and
    DataLoader draws it there, in iter(); the rest are taken on DeviceLoader's thread."""
    first = next(indices, _NONE)
    return iter(()) if first is _NONE else itertools.chain((first,), indices)


_NONE = object()


class Orders:
    """Each epoch's index lists, and the next epoch's drawn before that epoch begins where that
    cannot change them (SlotPool.epoch begins its tasks while this epoch ends):

    - a BatchSampler over a SequentialSampler (shuffle=False): the same whenever drawn; one
      `following` while the number of batches stays;
    - over a RandomSampler of its own randomness (shuffle=True, no generator given, no
      replacement): its one draw from torch's generator is made ahead, at this epoch's start,
      and torch's generator put back as it was. At the next epoch's start the batches begun are
      kept only where the generator is still as it was, and the generator then set as the draw
      left it: the program sees the same numbers as with DataLoader. A program that drew from
      torch's generator meanwhile gets the order drawn then, and waits for its first batch.

    Any other sampler is drawn when its epoch begins: it may draw randomness elsewhere or hang
    on set_epoch (DistributedSampler), so that drawing it early would change it."""

    def __init__(self) -> None:
        self._made: tuple[int, Callable[[], Iterator[Any]]] | None = None
        self._ahead: _DrawnAhead | None = None

    def epoch(
        self, batch_sampler: Any, begun: Callable[[Following], bool]
    ) -> tuple[Iterator[Any], Following, Following]:
        """(this epoch's index lists, its first drawn now; what gives the next epoch's
        (SlotPool.epoch's `following`); the `following` whose batches this epoch takes up).
        `begun(following)`: whether the batches that `following` began are still held."""
        import torch
        from torch.utils.data import BatchSampler, RandomSampler, SequentialSampler

        ahead, self._ahead = self._ahead, None
        if type(batch_sampler) is not BatchSampler:
            return drawn(iter(batch_sampler)), None, None
        inner = batch_sampler.sampler
        if type(inner) is SequentialSampler:
            n = len(batch_sampler)
            if self._made is None or self._made[0] != n:
                self._made = (n, functools.partial(iter, batch_sampler))
            return drawn(iter(batch_sampler)), self._made[1], self._made[1]
        if not (
            type(inner) is RandomSampler
            and inner.generator is None
            and not inner.replacement
            and inner.num_samples == len(inner.data_source)
        ):
            return drawn(iter(batch_sampler)), None, None
        indices: Iterator[Any] = iter(())  # not read: the batches begun are taken up
        resumes: Following = None
        if (
            ahead is not None
            and begun(ahead.following)
            and torch.equal(torch.get_rng_state(), ahead.before)
        ):
            torch.set_rng_state(ahead.after)
            resumes = ahead.following
        else:  # drawn now (where the generator is as it was, the same order again)
            indices = drawn(iter(batch_sampler))
        before = torch.get_rng_state()
        following = functools.partial(next, iter([drawn(iter(batch_sampler))]))
        self._ahead = _DrawnAhead(before, torch.get_rng_state(), following)
        torch.set_rng_state(before)
        return indices, following, resumes


Following = Callable[[], Iterator[Any]] | None


@dataclasses.dataclass
class _DrawnAhead:
    """A shuffled epoch's order drawn ahead: torch's generator before and after the draw, and
    what gives its index lists (once)."""

    before: Any
    after: Any
    following: Callable[[], Iterator[Any]]


def slot_pool(loader: Any, pinned: bool) -> SlotPool | None:
    """A SlotPool for `loader` where it can have one: a torch DataLoader with workers over a
    map-style dataset that batches by itself, on a system with memfd. None where not."""
    import multiprocessing

    data = sys.modules.get("torch.utils.data")  # a DataLoader has imported it
    if data is None or not isinstance(loader, data.DataLoader):
        return None
    import torch
    from torch.utils.data import DataLoader, IterableDataset

    if (
        type(loader).__iter__ is not DataLoader.__iter__
        or loader.num_workers < 1
        or loader.batch_sampler is None
        or isinstance(loader.dataset, IterableDataset)
        or not hasattr(os, "memfd_create")
    ):
        return None
    seed = int(torch.empty((), dtype=torch.int64).random_(generator=loader.generator).item())
    filler = TorchFiller(loader.dataset, loader.collate_fn, loader.worker_init_fn, seed)
    # DataLoader keeps a context given by name as the context itself
    context = loader.multiprocessing_context or multiprocessing.get_context()
    return SlotPool(
        filler,
        loader.num_workers,
        context,
        prefetch=loader.prefetch_factor or 2,
        timeout=float(loader.timeout or 0),
        pin=_pin if pinned else None,
    )


def host_batch(marked: Any, buffer: memoryview) -> Any:
    """The batch a worker marked, its tensors views of the slot `buffer`."""
    flat = flatten(marked, lambda x: isinstance(x, InSlot))
    return flat.rebuild([_view(buffer, m.offset, m.nbytes, *m.meta) for m in flat.leaves])


class TorchFiller(Filler):
    """A DataLoader worker's work, into a slot (runs in the worker processes)."""

    def __init__(self, dataset: Any, collate_fn: Any, worker_init_fn: Any, seed: int) -> None:
        import torch.utils.data

        self.dataset, self.collate_fn, self.worker_init_fn = dataset, collate_fn, worker_init_fn
        self.seed = seed
        self.default = collate_fn is torch.utils.data.default_collate

    def start(self, worker: int, workers: int) -> None:
        import torch
        from torch.utils.data._utils import worker as worker_state

        torch.set_num_threads(1)
        seed = self.seed + worker
        random.seed(seed)
        torch.manual_seed(seed)
        # what torch.utils.data.get_worker_info() answers, as in a DataLoader's worker
        worker_state._worker_info = worker_state.WorkerInfo(
            id=worker, num_workers=workers, seed=seed, dataset=self.dataset
        )
        if self.worker_init_fn is not None:
            self.worker_init_fn(worker)

    def collate(self, indices: list[Any], into: Placement) -> Any:
        import torch
        from torch.utils.data._utils.collate import collate, default_collate_fn_map

        items = getattr(self.dataset, "__getitems__", None)
        samples = items(indices) if items else [self.dataset[i] for i in indices]
        if not self.default or into.buffer is None:
            return self.collate_fn(samples)
        stack = functools.partial(_stack_into, into)
        return collate(samples, collate_fn_map={**default_collate_fn_map, torch.Tensor: stack})

    def place(self, batch: Any, into: Placement) -> Any:
        import torch

        flat = flatten(batch, lambda x: isinstance(x, torch.Tensor))
        marks = []
        for leaf in flat.leaves:
            mark = into.placed.get(id(leaf))
            if mark is None:
                mark = _copied_into(into, leaf)
            marks.append(mark)
        return flat.rebuild(marks)


def _stack_into(into: Placement, batch: Any, *, collate_fn_map: Any = None) -> Any:
    """default_collate's stack of one tensor per sample, made in the slot where it fits."""
    import torch
    from torch.utils.data._utils.collate import collate_tensor_fn

    elem = batch[0]
    if elem.layout != torch.strided or elem.is_nested or into.buffer is None:
        return collate_tensor_fn(batch, collate_fn_map=collate_fn_map)
    room, mark = _room(into, elem, (len(batch), *elem.shape))
    if room is None:
        return torch.stack(batch, 0)  # counted: it goes in the larger slot asked for
    out = torch.stack(batch, 0, out=room)
    into.placed[id(out)] = mark
    return out


def _copied_into(into: Placement, tensor: Any) -> InSlot:
    """`tensor` copied into the slot where it fits (its InSlot all the same: the batch goes to
    a larger slot where any does not)."""
    room, mark = _room(into, tensor, tuple(tensor.shape))
    if room is not None:
        room.copy_(tensor)
    return mark


def _room(into: Placement, like: Any, shape: tuple[int, ...]) -> tuple[Any, InSlot]:
    """Space in the slot for a tensor of `like`'s dtype and `shape`: its view there (None where
    it does not fit, counted all the same), and its InSlot."""
    dtype = like.dtype
    nbytes = math.prod(shape) * like.element_size()
    offset = into.take(nbytes)
    mark = InSlot(offset or 0, nbytes, (dtype, shape))
    if offset is None or into.buffer is None:
        return None, mark
    return _view(into.buffer, offset, nbytes, dtype, shape), mark


def _view(buffer: memoryview, offset: int, nbytes: int, dtype: Any, shape: Any) -> Any:
    import torch

    if not nbytes:
        return torch.empty(shape, dtype=dtype)
    raw = torch.frombuffer(buffer, dtype=torch.uint8, count=nbytes, offset=offset)
    return raw.view(dtype).view(shape)


def _pin(buffer: memoryview) -> Any:
    """The slot registered with the GPUs (cudaHostRegister, portable) once; its unregister, or
    None where registering failed (the slot then works as pageable memory)."""
    import torch

    cudart = torch.cuda.cudart()
    whole = torch.frombuffer(buffer, dtype=torch.uint8)
    pointer, size = whole.data_ptr(), whole.numel()
    del whole
    if int(cudart.cudaHostRegister(pointer, size, PORTABLE)) != 0:
        return None
    return lambda: cudart.cudaHostUnregister(pointer)
