"""Model checkpoints to the GPU: where a safetensors checkpoint's tensors lie (layout.py,
shards.py), checked against the files; their data read while the headers are parsed
(reads.py); the tensors made of the buffers (views.py); torch.save's .pt files (pt.py);
xferscope.load (load.py); what the files cost to read apart from the GPU (storage.py)."""

from .layout import CheckpointError, Layout, Tensor, read_layout
from .shards import checkpoint_layouts

__all__ = ["CheckpointError", "Layout", "Tensor", "checkpoint_layouts", "read_layout"]
