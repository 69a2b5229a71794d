"""CuPy's arrays, and NumPy's beside them, in `xferscope.to_device` and `to_host`: a NumPy
array goes up as a CuPy array (`cupy.empty` on the GPU), a CuPy array comes down as a NumPy
array; the current stream of each GPU involved is synchronized first, as for PyTorch. CuPy is
never imported here: where the program has not imported it, NumPy arrays are not leaves and
stay as they are (a PyTorch batch's NumPy metadata). NumPy is not imported here either: CuPy
imported it wherever a leaf is CuPy's."""

from __future__ import annotations

import sys
from typing import Any


def is_leaf(x: Any) -> bool:
    cupy = sys.modules.get("cupy")
    return cupy is not None and isinstance(x, sys.modules["numpy"].ndarray | cupy.ndarray)


def synchronize(devices: set[int]) -> None:
    cupy = sys.modules["cupy"]
    for d in sorted(devices):
        with cupy.cuda.Device(d):
            cupy.cuda.get_current_stream().synchronize()


def upload(a: Any, index: int) -> tuple[Any, Any | None]:
    cupy = sys.modules["cupy"]
    with cupy.cuda.Device(index):
        if isinstance(a, cupy.ndarray):
            return (a if a.device.id == index else cupy.asarray(a)), None
        made = cupy.empty(a.shape, dtype=a.dtype)
    return made, sys.modules["numpy"].ascontiguousarray(a) if a.size else None


def download(a: Any, non_blocking: bool) -> tuple[Any, Any | None]:
    """(the NumPy array on the host, pinned where `non_blocking` as for PyTorch, the CuPy array
    to copy from, or None where nothing is to be copied): a NumPy array is itself."""
    np = sys.modules["numpy"]
    if isinstance(a, np.ndarray):
        return a, None
    if non_blocking:
        import cupyx  # CuPy's own, present wherever cupy is

        made = cupyx.empty_pinned(a.shape, dtype=a.dtype)
    else:
        made = np.empty(a.shape, dtype=a.dtype)
    return made, (a if a.flags.c_contiguous else a.copy(order="C")) if a.size else None


def gpu_of(a: Any) -> int | None:
    return None if isinstance(a, sys.modules["numpy"].ndarray) else int(a.device.id)


def upload_many(arrays: list[Any], index: int) -> tuple[list[Any], list[Any]]:
    """upload for each array: (the arrays on GPU `index`, the sources to copy or None)."""
    pairs = [upload(a, index) for a in arrays]
    return [m for m, _ in pairs], [s for _, s in pairs]


def download_many(arrays: list[Any], non_blocking: bool) -> tuple[list[Any], list[Any]]:
    """download for each array: (the arrays on the host, the sources to copy or None)."""
    pairs = [download(a, non_blocking) for a in arrays]
    return [m for m, _ in pairs], [s for _, s in pairs]
