"""`xferscope.load`: a safetensors checkpoint's tensors on the GPU, read from the files with
pread straight into the staged copier's pinned chunks while the copy engine moves the chunks
before. No page of the file is mapped, so none is faulted in a DMA (the 85 MB/s of
safetensors#729), and the page cache is read by several threads at once.

    state = xferscope.load("model.safetensors", device="cuda")   # a file, a directory, an index
    model.load_state_dict(state)

Each file's tensors come as views of one GPU buffer holding that file's data (a tensor whose
offset does not suit its dtype is copied out on the GPU); `dtype=` casts the floating-point ones
on the GPU. A file that is not what its header says, or that changes while it is read, is one
CheckpointError naming it, and no GPU memory is left held by the load."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from ..moves import gpu_index
from ..staged import shared_copier
from .layout import CheckpointError, Layout, version_of
from .shards import checkpoint_layouts

# safetensors' dtypes as PyTorch names them
TORCH_DTYPES = {
    "F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16",
    "I64": "int64", "I32": "int32", "I16": "int16", "I8": "int8", "U8": "uint8", "BOOL": "bool",
    "U16": "uint16", "U32": "uint32", "U64": "uint64", "C64": "complex64",
    "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2", "F8_E8M0": "float8_e8m0fnu",
}  # fmt: skip


def runs(layout: Layout) -> tuple[int, list[int], list[int], list[int]]:
    """What to read of `layout`'s file: (the first tensor's offset, then the file offsets, sizes
    and buffer offsets of its ranges), tensors that lie end to end joined into one range."""
    first = _first(layout)
    starts: list[int] = []
    sizes: list[int] = []
    for t in layout.tensors:
        if t.nbytes == 0:
            continue
        if starts and starts[-1] + sizes[-1] == t.begin:
            sizes[-1] += t.nbytes
        else:
            starts.append(t.begin)
            sizes.append(t.nbytes)
    return first, starts, sizes, [s - first for s in starts]


def _first(layout: Layout) -> int:
    """The file offset the GPU buffer of `layout`'s tensors begins at: its first tensor's."""
    return layout.tensors[0].begin if layout.tensors else layout.data_begin


def read_file(layout: Layout, copier: Any, device_ptr: int) -> None:
    """`layout`'s tensors' bytes into the GPU range at `device_ptr` (from its first tensor's
    offset on) by `copier` (a staged copier); CheckpointError where the file has changed since
    its layout was read, during the read, or cannot be read."""
    _, starts, sizes, offsets = runs(layout)
    try:
        fd = os.open(layout.path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise CheckpointError(f"{layout.path}: {exc.strerror or exc}") from None
    try:
        _unchanged(layout, fd, "since its header was read")
        if starts:
            copier.read_to_device(fd, device_ptr, starts, sizes, offsets)
        _unchanged(layout, fd, "while it was read")
    except OSError as exc:
        raise CheckpointError(f"{layout.path}: {exc}") from None
    finally:
        os.close(fd)


def _unchanged(layout: Layout, fd: int, when: str) -> None:
    if version_of(os.fstat(fd)) != layout.version:
        raise CheckpointError(
            f"{layout.path}: the file changed {when} (its size, time or inode differ); "
            "load it again once it is written"
        )


def load(
    paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    device: Any = "cuda",
    *,
    dtype: Any = None,
) -> dict[str, Any]:
    """The tensors of the safetensors checkpoint at `paths` (a file, a directory, a sharded
    set's `*.safetensors.index.json`, or a list of files) on GPU `device`, by name: PyTorch
    tensors. `dtype`: a floating-point torch.dtype the floating-point tensors are cast to on
    the GPU. CheckpointError for a checkpoint it will not load, naming the file."""
    import torch

    index = gpu_index(device)
    if dtype is not None and not (isinstance(dtype, torch.dtype) and dtype.is_floating_point):
        raise ValueError(f"dtype: {dtype!r} is not a floating-point torch.dtype (or None)")
    layouts = checkpoint_layouts(paths)
    copier = shared_copier(index)
    out: dict[str, Any] = {}
    try:
        for layout in layouts:
            out.update(_tensors(torch, layout, index, copier, dtype))
    except BaseException:
        out.clear()  # the traceback keeps this frame: what was loaded goes now
        raise
    return out


def _tensors(torch: Any, layout: Layout, index: int, copier: Any, dtype: Any) -> dict[str, Any]:
    first = _first(layout)
    span = max((t.end for t in layout.tensors), default=first) - first
    kinds = {}
    for t in layout.tensors:
        kind = getattr(torch, TORCH_DTYPES[t.dtype], None)
        if kind is None:
            raise CheckpointError(
                f"{layout.path}: tensor {t.name!r} is {t.dtype}, which this PyTorch "
                f"({torch.__version__}) has no dtype for (torch.{TORCH_DTYPES[t.dtype]})"
            )
        kinds[t.name] = kind
    buffer = torch.empty(span, dtype=torch.uint8, device=f"cuda:{index}")
    # the copier's streams are not ordered after PyTorch's: what the memory held before is done
    torch.cuda.current_stream(index).synchronize()
    try:
        read_file(layout, copier, buffer.data_ptr())
    except BaseException:
        del buffer  # the traceback keeps this frame: the GPU memory goes now
        raise
    out = {}
    for t in layout.tensors:
        kind = kinds[t.name]
        view = buffer[t.begin - first : t.end - first]
        if (t.begin - first) % kind.itemsize:
            view = view.clone()  # a fresh, aligned block
        tensor = view.view(kind).reshape(t.shape)
        if dtype is not None and tensor.is_floating_point():
            tensor = tensor.to(dtype)
        out[t.name] = tensor
    return out
