"""xferscope for PyTorch programs: `DeviceLoader`, batches on the GPU before the step asks
(transfer/frameworks/torch_loader.py), and the LoaderStats it keeps.

    import xferscope.torch
    for x, y in xferscope.torch.DeviceLoader(loader, device="cuda"):
        loss = model(x).float().softmax(-1)[range(len(y)), y].mean()

PyTorch is imported when a loader is iterated, not with this module."""

from __future__ import annotations

from .transfer.frameworks.torch_loader import DeviceLoader
from .transfer.prefetch import LoaderStats

__all__ = ["DeviceLoader", "LoaderStats"]
