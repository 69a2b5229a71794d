"""xferscope.torch.DeviceLoader on a real GPU: a DataLoader's batches (dict and tuple, mixed
dtypes, a short last batch) arrive on the GPU equal to the loader's own, with 0 and 2 workers,
persistent or not; leaving early and starting again works; pinned memory stays flat over
epochs; a loop that frees each batch while its kernels run is clean under PyTorch's CUDA
sanitizer. Skipped without a GPU."""

from __future__ import annotations

import subprocess
import sys

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
def test_batches_arrive_equal_to_the_loaders_own(workers, persistent, as_dict):
    if persistent and not workers:
        pytest.skip("persistent workers need workers")
    loader = DataLoader(Samples(10, as_dict), batch_size=4, num_workers=workers,
                        persistent_workers=persistent)  # fmt: skip
    want = list(loader)  # 4, 4 and a short last batch of 2
    dl = xt.DeviceLoader(loader, device="cuda", ahead=2)
    for _ in range(2):  # two epochs
        got = list(dl)
        assert len(got) == len(want) == len(dl) == 3
        for g, w in zip(got, want, strict=True):
            _equal(g, w)
        assert dl.stats.batches == 3
    assert "batches: waited" in dl.stats.explain()


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
loader = DataLoader(data, batch_size=8)  # a worker under the sanitizer would start CUDA
total = torch.zeros((), device="cuda")
for epoch in range(3):
    for x, y in xt.DeviceLoader(loader, ahead=2):
        z = (x @ x.t()).sum() + y.sum()  # kernels on the current stream read the batch
        total += z
        del x, y                        # freed while those kernels may still run
print("ok", float(total) > 0)
"""


def test_clean_under_pytorchs_cuda_sanitizer():
    import os

    env = dict(os.environ, TORCH_CUDA_SANITIZER="1")
    done = subprocess.run([sys.executable, "-c", SANITIZED], capture_output=True, text=True,
                          timeout=300, env=env)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "ok True" and "CSAN" not in done.stderr, done.stderr[-3000:]
