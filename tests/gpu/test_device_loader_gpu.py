"""xferscope.torch.DeviceLoader on a real GPU: a DataLoader's batches (dict and tuple, mixed
dtypes, a short last batch) arrive on the GPU equal to the loader's own, with 0 and 2 workers,
persistent or not, through the slots or the loader's own path; the slot path keeps the loader's
worker info, worker_init_fn, collate_fn and a batch that grows, names a failing sample, and holds
its pinned memory flat over 20 epochs; leaving early and starting again works; pinned memory
stays flat over epochs; a loop that frees each batch while its kernels run is clean under
PyTorch's CUDA sanitizer. Skipped without a GPU."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no GPU", allow_module_level=True)

from torch.utils.data import DataLoader, Dataset  # noqa: E402

import xferscope.torch as xt  # noqa: E402
from xferscope.transfer import moving  # noqa: E402


class Samples(Dataset):
    """Mixed dtypes; `as_dict` gives dict samples, else tuples."""

    def __init__(self, n: int, as_dict: bool, image: int = 32) -> None:
        g = torch.Generator().manual_seed(n)
        self.images = torch.rand(n, 3, image, image, generator=g)
        self.ids = torch.randint(0, 1 << 40, (n, 7), generator=g)
        self.masks = torch.rand(n, 5, generator=g) > 0.5
        self.half = torch.rand(n, 9, generator=g).to(torch.bfloat16)
        self.as_dict = as_dict

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, i: int):
        if self.as_dict:
            return {"image": self.images[i], "ids": self.ids[i], "mask": self.masks[i],
                    "half": self.half[i], "label": i}  # fmt: skip
        return self.images[i], self.ids[i], self.half[i]


def _equal(got, want) -> None:
    if isinstance(want, dict):
        assert got.keys() == want.keys()
        for k in want:
            _equal(got[k], want[k])
    elif isinstance(want, (list, tuple)):
        assert type(got) is type(want) and len(got) == len(want)
        for a, b in zip(got, want, strict=True):
            _equal(a, b)
    else:
        assert got.is_cuda and got.dtype == want.dtype and got.shape == want.shape
        assert torch.equal(got.cpu(), want)


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("persistent", [False, True])
@pytest.mark.parametrize("as_dict", [False, True])
@pytest.mark.parametrize("slots", [True, False])
def test_batches_arrive_equal_to_the_loaders_own(workers, persistent, as_dict, slots):
    if persistent and not workers:
        pytest.skip("persistent workers need workers")
    loader = DataLoader(Samples(10, as_dict), batch_size=4, num_workers=workers,
                        persistent_workers=persistent)  # fmt: skip
    want = list(loader)  # 4, 4 and a short last batch of 2
    dl = xt.DeviceLoader(loader, device="cuda", ahead=2, slots=slots)
    for _ in range(2):  # two epochs
        got = list(dl)
        assert len(got) == len(want) == len(dl) == 3
        for g, w in zip(got, want, strict=True):
            _equal(g, w)
        assert dl.stats.batches == 3
        # the slot path's batches arrive pinned: registered memory, read by the copy engine
        assert dl.stats.source == ("slots" if slots and workers else "loader")
        assert dl.stats.pinned_batches == (3 if dl.stats.source == "slots" else 0)
    assert "batches: waited" in dl.stats.explain()
    dl.close()


class Tagged(Dataset):
    """Samples that say which worker made them (get_worker_info) and what worker_init_fn set;
    from index `grow` on, images 8x larger; index `fail` raises."""

    def __init__(self, n: int, grow: int = 1 << 30, fail: int = -1) -> None:
        self.n, self.grow, self.fail, self.init = n, grow, fail, -1

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        if i == self.fail:
            raise ValueError(f"sample {i} is corrupt")
        info = torch.utils.data.get_worker_info()
        side = 64 if i >= self.grow else 8
        g = torch.Generator().manual_seed(i)
        worker = info.id if info else -1
        return torch.rand(3, side, side, generator=g), worker, self.init, f"s{i}"


def _init(worker: int) -> None:
    torch.utils.data.get_worker_info().dataset.init = 100 + worker


def test_slots_keep_the_loaders_worker_info_init_and_a_batch_that_grows():
    loader = DataLoader(Tagged(64, grow=40), batch_size=8, num_workers=2, worker_init_fn=_init)
    dl = xt.DeviceLoader(loader)
    for _ in range(3):
        got = list(dl)
        assert dl.stats.source == "slots" and len(got) == 8
        for k, (images, ids, inits, names) in enumerate(got):
            side = 64 if k >= 5 else 8
            assert images.is_cuda and images.shape == (8, 3, side, side)
            first = k * 8
            want = torch.stack([Tagged(64, grow=40)[i][0] for i in range(first, first + 8)])
            assert torch.equal(images.cpu(), want)
            assert set(ids.tolist()) <= {0, 1} and set(inits.tolist()) <= {100, 101}
            assert names == tuple(f"s{i}" for i in range(first, first + 8))  # as default_collate
    dl.close()


def test_slots_with_a_collate_fn_of_ones_own():
    def collate(samples):
        return {"images": torch.stack([s[0] for s in samples]).half(), "n": len(samples)}

    loader = DataLoader(Tagged(20), batch_size=8, num_workers=2, collate_fn=collate)
    with xt.DeviceLoader(loader) as dl:
        got = list(dl)
    assert dl.stats.source == "slots" and [b["n"] for b in got] == [8, 8, 4]
    assert got[2]["images"].dtype == torch.float16 and got[2]["images"].is_cuda


def test_a_failing_sample_is_raised_with_the_workers_traceback():
    loader = DataLoader(Tagged(40, fail=21), batch_size=8, num_workers=2)
    dl = xt.DeviceLoader(loader)
    seen = 0
    with pytest.raises(
        RuntimeError, match=r"(?s)ValueError .*worker process.*sample 21 is corrupt"
    ):
        for _ in dl:
            seen += 1
    assert seen == 2
    dl.close()


def test_slots_pinned_memory_is_flat_over_20_epochs():
    loader = DataLoader(Samples(48, False, image=256), batch_size=8, num_workers=2)
    dl = xt.DeviceLoader(loader)
    held = []
    for _ in range(20):
        for batch in dl:
            assert batch[0].is_cuda
        held.append((dl.stats.pinned_bytes, moving.pinned_bytes()))
    assert held[0][0] > 0 and held[1] == held[-1], held
    dl.close()


def test_leaving_early_then_starting_again():
    loader = DataLoader(Samples(40, False), batch_size=4, num_workers=2)
    dl = xt.DeviceLoader(loader, device=0, ahead=3)
    for i, _ in enumerate(dl):
        if i == 1:
            break
    got = list(dl)
    assert len(got) == 10
    _equal(got[-1], list(loader)[-1])


def test_pinned_memory_stays_flat_over_epochs():
    """Pageable batches of 12 MiB go by the staged copy, whose pinned chunks are reused."""
    loader = DataLoader(Samples(64, False, image=1024), batch_size=4)
    dl = xt.DeviceLoader(loader)
    held = []
    for _ in range(6):
        for batch in dl:
            assert batch[0].is_cuda
        held.append(moving.pinned_bytes())
    assert held[1] == held[-1], held


SANITIZED = r"""
import torch, xferscope.torch as xt
from torch.utils.data import DataLoader, TensorDataset
data = TensorDataset(torch.rand(64, 1 << 16), torch.randint(0, 9, (64,)))
loader = DataLoader(data, batch_size=8)
total = torch.zeros((), device="cuda")
for epoch in range(3):
    for x, y in xt.DeviceLoader(loader, ahead=2):
        z = (x @ x.t()).sum() + y.sum()  # kernels on the current stream read the batch
        total += z
        del x, y                        # freed while those kernels may still run
print("ok", float(total) > 0)
"""


@pytest.mark.parametrize("workers", [0, 2])
def test_clean_under_pytorchs_cuda_sanitizer(workers):
    """With 2 workers, the slot path, started by spawn: the sanitizer asks for the current
    stream at every operator, which starts CUDA, so a forked worker (DataLoader's or ours)
    cannot run under it."""
    import os

    env = dict(os.environ, TORCH_CUDA_SANITIZER="1")
    options = f"num_workers={workers}" + (", multiprocessing_context='spawn'" if workers else "")
    program = SANITIZED.replace("batch_size=8)", f"batch_size=8, {options})")
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                          timeout=300, env=env)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "ok True" and "CSAN" not in done.stderr, done.stderr[-3000:]


def _taken_up(dl: Any) -> list[bool]:
    """Whether each epoch of `dl` takes up batches begun in the epoch before, as they come."""
    seen: list[bool] = []
    real = dl._orders.epoch

    def epoch(*args: Any) -> Any:
        got = real(*args)
        seen.append(got[2] is not None and dl._pool.begun(got[2]))
        return got

    dl._orders.epoch = epoch
    return seen


@pytest.mark.parametrize("shuffle", [False, True])
def test_epochs_come_in_the_loaders_order_and_the_next_is_begun_ahead(shuffle):
    """Seeded alike, DeviceLoader's epochs come in the order of DataLoader's with persistent
    workers, and the program's draws from torch's generator give the same numbers; the next
    epoch is begun while the last ends, shuffled too (its draw made ahead)."""
    loader = DataLoader(Samples(23, True), batch_size=4, num_workers=2, shuffle=shuffle,
                        persistent_workers=True)  # fmt: skip

    def epochs(batches: Any) -> list[Any]:
        torch.manual_seed(7)
        out = []
        for _ in range(4):
            out.append([b["label"].tolist() for b in batches])
            out.append(torch.rand(1).item())  # the generator after each epoch
        return out

    want = epochs(loader)
    dl = xt.DeviceLoader(loader, device="cuda", ahead=2)
    begun = _taken_up(dl)
    assert epochs(dl) == want
    assert (want[0] != want[2]) == shuffle
    assert dl._pool._ahead is not None
    # sequential: every epoch after the first takes up what was begun; shuffled: none, since
    # the loop drew from torch's generator between epochs (each epoch then drawn afresh)
    assert begun == [False, *[not shuffle] * 3]
    dl.close()


def test_a_shuffled_epoch_drawn_ahead_is_taken_up_and_left_early_safely():
    """A loop that draws nothing from torch's generator between epochs takes up each shuffled
    epoch begun ahead; one left early draws the next afresh; every epoch in DataLoader's order."""
    loader = DataLoader(Samples(23, True), batch_size=4, num_workers=2, shuffle=True,
                        persistent_workers=True)  # fmt: skip

    def epochs(batches: Any) -> list[Any]:
        torch.manual_seed(8)
        out = [[b["label"].tolist() for b in batches] for _ in range(3)]
        out.append([b["label"].tolist() for _, b in zip(range(2), batches, strict=False)])
        out += [[b["label"].tolist() for b in batches] for _ in range(2)]
        return [*out, torch.rand(1).item()]

    want = epochs(loader)
    dl = xt.DeviceLoader(loader, device="cuda", ahead=2)
    begun = _taken_up(dl)
    assert epochs(dl) == want
    assert begun == [False, True, True, True, False, True]  # the epoch after the early exit
    dl.close()
