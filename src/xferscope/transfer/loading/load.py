"""`xferscope.load`: a safetensors checkpoint's tensors on the GPU, read from the files with
pread straight into the pinned chunks of copy_many's staged copy (the same pool and threads,
made by `xferscope.warmup()`) while the copy engine moves the chunks before. No page of the
file is mapped, so none is faulted in a DMA (the 85 MB/s of safetensors#729), and the page
cache is read by several threads at once.

    state = xferscope.load("model.safetensors", device="cuda")   # a file, a directory, an index
    model.load_state_dict(state)

Each file's tensors come as views of one GPU buffer holding that file's data (a tensor whose
offset does not suit its dtype is copied out on the GPU); `dtype=` casts the floating-point ones
on the GPU. A file that is not what its header says, or that changes while it is read, is one
CheckpointError naming it, and no GPU memory is left held by the load."""

from __future__ import annotations

import os
import threading
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ...core.frameworks import CUPY, PYTORCH
from ..copy import copies_of
from ..engine import default_engine
from ..structure_copies import gpu_index
from .kits import ArrayKit, TorchKit
from .layout import Layout, Tensor
from .pt import is_pt, load_pt
from .reads import DataReads, chosen, read_file
from .shards import checkpoint_files, checkpoint_layouts
from .views import views


def placed(names: Sequence[str], device: Any) -> dict[int, list[str]]:
    """The tensors `names` by the GPU each goes to: `device` one GPU for all, a callable of the
    name, or a device map as accelerate's (a dict of names or their prefixes, "model.layers.3"
    covering "model.layers.3.mlp.weight", "" every name, to GPUs; the longest key that covers
    a name decides). ValueError naming the tensor without a GPU."""
    if not isinstance(device, dict) and not callable(device):
        return {gpu_index(device): list(names)}
    by: dict[int, list[str]] = {}
    for name in names:
        if callable(device):
            to = device(name)
        else:
            keys = [k for k in device if k == "" or name == k or name.startswith(k + ".")]
            if not keys:
                raise ValueError(f"device: the map names no GPU for tensor {name!r} (nor a prefix)")
            to = device[max(keys, key=len)]
        by.setdefault(gpu_index(to), []).append(name)
    return by


def _torch_kit() -> Any:
    import torch

    return TorchKit(torch)


def _cupy_kit() -> Any:
    import cupy

    return ArrayKit(cupy)


# the frameworks whose tensors load makes, by their option's word (core/frameworks.py), each
# with its kit (kits.py), imported only when asked for
KITS: dict[str, Callable[[], Any]] = {
    f.option: kit for f, kit in ((PYTORCH, _torch_kit), (CUPY, _cupy_kit)) if f.option
}


def load(
    paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    device: Any = "cuda",
    *,
    dtype: Any = None,
    framework: str = "torch",
) -> dict[str, Any]:
    """The tensors of the safetensors checkpoint at `paths` (a file, a directory, a sharded
    set's `*.safetensors.index.json`, or a list of files) on the GPU, by name: PyTorch tensors,
    or CuPy arrays where `framework="cupy"` (both DLPack's). `device`: one GPU ("cuda",
    "cuda:1", 1, a torch.device), or where each tensor goes (a callable of its name, or
    accelerate's device_map: names or prefixes to GPUs); each GPU's tensors are read by a
    thread of their own, all at once. `dtype`: a floating-point dtype the floating-point
    tensors are cast to on the GPU. A `.pt` file torch.save wrote (a state dict) loads too,
    into PyTorch on one GPU (pt.py). CheckpointError for a checkpoint it will not load, naming
    the file."""
    kit = _kit(framework)
    if dtype is not None and not kit.floating(dtype):
        raise ValueError(f"dtype: {dtype!r} is not a floating-point dtype of {framework} (or None)")
    out: dict[str, Any] = {}
    try:
        if isinstance(paths, (str, os.PathLike)) and is_pt(Path(paths)):
            if isinstance(device, dict) or callable(device) or framework != "torch":
                raise ValueError(
                    "device: a .pt file loads into PyTorch on one GPU; give one, and "
                    "framework='torch'"
                )
            index = gpu_index(device)
            load_pt(kit.torch, Path(paths), index, copies_of(default_engine()).copier(index), out)
        elif isinstance(device, dict) or callable(device):
            _placed_load(kit, paths, device, out)
        else:
            _one_gpu_load(kit, paths, gpu_index(device), out)
        if dtype is not None:
            for name, tensor in out.items():
                out[name] = kit.cast(tensor, dtype)
    except BaseException as exc:
        out.clear()  # what was loaded goes now, and with the frames' locals, every buffer
        traceback.clear_frames(exc.__traceback__)
        raise
    return out


def _kit(framework: str) -> Any:
    """The framework's kit (kits.py); ValueError naming the option for one it does not know."""
    make = KITS.get(framework)
    if make is None:
        raise ValueError(f"framework: {framework!r} is not one of {', '.join(KITS)}")
    return make()


def _one_gpu_load(kit: Any, paths: Any, index: int, out: dict[str, Any]) -> None:
    """Every file's data read into a buffer of its own on GPU `index` from the start, while
    the headers are parsed and the tensors made as views of the buffers."""
    files = checkpoint_files(paths)
    copier = copies_of(default_engine()).copier(index)  # copy_many's: one pinned pool
    reads = DataReads(
        copier,
        [f.path for f in files],
        lambda n: kit.empty(n, index),
        lambda: kit.settle(index),
        kit.address,
    )
    try:
        later = []
        for k, layout in enumerate(checkpoint_layouts(paths, files)):
            later += views(kit, layout, reads.buffer(k, layout), layout.data_begin,
                           layout.tensors, out)  # fmt: skip
        reads.finish()
        for fix in later:
            fix()
    except BaseException:
        reads.close()
        raise


def _placed_load(kit: Any, paths: Any, device: Any, out: dict[str, Any]) -> None:
    """The tensors of each GPU the map or callable `device` names read by a thread of its
    own, the first GPU's on this one."""
    layouts = checkpoint_layouts(paths)
    by_gpu = placed([t.name for layout in layouts for t in layout.tensors], device)
    failed: list[BaseException] = []

    def one_gpu(index: int, names: set[str]) -> None:
        copier = copies_of(default_engine()).copier(index)
        try:
            for layout in layouts:
                tensors = chosen(layout, names)
                if tensors:
                    _read_views(kit, layout, index, copier, tensors, out)
        except BaseException as exc:
            failed.append(exc)

    gpus = [(i, set(n)) for i, n in by_gpu.items()]
    threads = [threading.Thread(target=one_gpu, args=g, name=f"xferscope-load-{g[0]}")
               for g in gpus[1:]]  # fmt: skip
    for thread in threads:
        thread.start()
    for g in gpus[:1]:
        one_gpu(*g)
    for thread in threads:
        thread.join()
    if failed:
        raise failed[0]


def _read_views(
    kit: Any, layout: Layout, index: int, copier: Any, tensors: list[Tensor], out: dict[str, Any]
) -> None:
    """`tensors` of `layout` read into one buffer on GPU `index`, then made its views."""
    first = tensors[0].begin
    buffer = kit.empty(max(t.end for t in tensors) - first, index)
    kit.settle(index)
    later = views(kit, layout, buffer, first, tensors, out)
    read_file(layout, copier, kit.address(buffer), {t.name for t in tensors})
    for fix in later:
        fix()
