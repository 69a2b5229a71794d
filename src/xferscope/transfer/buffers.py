"""The caller's buffers as addresses and sizes, for copy_many: NumPy arrays and other objects with
the buffer protocol, PyTorch tensors, CuPy arrays, objects with __cuda_array_interface__ or
DLPack (__dlpack__), and raw integer addresses. Each bad buffer is one clear exception that
names the pair and the side."""

from __future__ import annotations

import ctypes
import math
import sys
from typing import Any, NamedTuple

import numpy as np

# DLPack's device types
_DL_CPU, _DL_CUDA, _DL_CUDA_HOST = 1, 2, 3


class Side(NamedTuple):
    """One end of a copy: its address, the bytes behind it (None: a raw address), and the object
    that owns the memory, held while the copy runs. (Which memory it is, the driver says.)"""

    address: int
    nbytes: int | None
    keep: object = None


_torch_types: set[type] = set()  # tensor classes seen: the first check of every object
# the native reader's codes (bindings/buffers.cpp): types it reads from then on without Python;
# with _READ_EXCHANGE, through the type's DLPack exchange API (__dlpack_c_exchange_api__) where
# it has one: given only for the frameworks' own array types, whose DLPack view is their memory
# (a subclass, such as a distributed or fake tensor, may describe other memory)
_READ_TORCH, _READ_CUPY, _READ_EXCHANGE = 1, 2, 4


def _read_natively(kind: type, reader: int) -> None:
    from ..core.compiled import engine_module

    framework = sys.modules.get("torch" if reader == _READ_TORCH else "cupy")
    own = (
        (
            getattr(framework, "Tensor", None),
            getattr(getattr(framework, "nn", None), "Parameter", None),
        )
        if reader == _READ_TORCH
        else (getattr(framework, "ndarray", None),)
    )
    engine_module().read_natively(kind, reader | (_READ_EXCHANGE if kind in own else 0))


class _DLDevice(ctypes.Structure):
    _fields_ = (("device_type", ctypes.c_int), ("device_id", ctypes.c_int))


class _DLDataType(ctypes.Structure):
    _fields_ = (("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16))


class _DLTensor(ctypes.Structure):
    _fields_ = (
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    )


_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = (ctypes.py_object, ctypes.c_char_p)


def _compact(shape: tuple[int, ...], strides: tuple[int, ...] | None, unit: int) -> bool:
    """Whether `strides` (in units of `unit` bytes, None: compact) lay `shape` out row-major
    without gaps."""
    if strides is None or math.prod(shape) <= 1:
        return True
    step = unit
    for n, s in zip(reversed(shape), reversed(strides), strict=True):
        if n > 1 and s != step:
            return False
        step *= n
    return True


def _dlpack(obj: Any, where: str) -> Side:
    device_type, _ = obj.__dlpack_device__()
    if device_type == _DL_CPU:
        return _host(np.from_dlpack(obj), where)
    if device_type not in (_DL_CUDA, _DL_CUDA_HOST):
        raise TypeError(f"{where} is DLPack memory of device type {device_type}, not CPU or CUDA")
    capsule = obj.__dlpack__()
    tensor = _DLTensor.from_address(_capsule_pointer(capsule, b"dltensor"))
    shape = tuple(tensor.shape[i] for i in range(tensor.ndim))
    strides = tuple(tensor.strides[i] for i in range(tensor.ndim)) if tensor.strides else None
    itemsize = max(1, tensor.dtype.bits * tensor.dtype.lanes // 8)
    if not _compact(shape, strides, 1):
        raise ValueError(f"{where} is not contiguous (shape {shape}, strides {strides})")
    address = int(tensor.data or 0) + int(tensor.byte_offset)
    return Side(address, math.prod(shape) * itemsize, capsule)


def _host(array: np.ndarray, where: str) -> Side:
    if not array.flags.c_contiguous:
        raise ValueError(
            f"{where} is not C-contiguous (shape {array.shape}, strides {array.strides}); pass "
            "np.ascontiguousarray(...)"
        )
    return Side(int(array.__array_interface__["data"][0]), int(array.nbytes), array)


def _tensor(obj: Any, index: int, role: str) -> Side:
    if not obj.is_contiguous():
        raise ValueError(
            f"pair {index} {role} is a non-contiguous tensor (shape {tuple(obj.shape)}, strides "
            f"{tuple(obj.stride())}); pass t.contiguous()"
        )
    return Side(obj.data_ptr(), obj.nbytes, obj)


def is_address(obj: Any) -> bool:
    """Whether `obj` is given as a raw address: an int or NumPy integer, never a bool."""
    return isinstance(obj, (int, np.integer)) and not isinstance(obj, bool)


def side(obj: Any, index: int, role: str) -> Side:
    """`obj` as one end of a copy, the `role` (destination, source) of pair `index`."""
    kind = type(obj)
    if kind in _torch_types:  # the common case first: tensors, a set lookup
        return _tensor(obj, index, role)
    where = f"pair {index} {role}"
    if is_address(obj):
        address = int(obj)
        if address <= 0:
            raise ValueError(f"{where} address {address} is not a valid address")
        return Side(address, None)
    if isinstance(obj, np.ndarray):
        return _host(obj, where)
    module = kind.__module__
    if module.startswith("torch") and hasattr(obj, "data_ptr") and hasattr(obj, "nbytes"):
        _torch_types.add(kind)
        _read_natively(kind, _READ_TORCH)
        return _tensor(obj, index, role)
    if module.startswith("cupy") and hasattr(obj, "data") and hasattr(obj, "flags"):
        _read_natively(kind, _READ_CUPY)
        if not obj.flags.c_contiguous:
            raise ValueError(
                f"{where} is a non-contiguous CuPy array (shape {obj.shape}, strides "
                f"{obj.strides}); pass cupy.ascontiguousarray(...)"
            )
        return Side(int(obj.data.ptr), int(obj.nbytes), obj)
    if hasattr(obj, "__cuda_array_interface__"):
        face = obj.__cuda_array_interface__
        shape = tuple(int(n) for n in face["shape"])
        itemsize = np.dtype(face["typestr"]).itemsize
        strides = face.get("strides")
        if not _compact(shape, None if strides is None else tuple(strides), itemsize):
            raise ValueError(f"{where} is not contiguous (shape {shape}, strides {strides})")
        return Side(int(face["data"][0] or 0), math.prod(shape) * itemsize, obj)
    if hasattr(obj, "__dlpack_device__") and hasattr(obj, "__dlpack__"):
        return _dlpack(obj, where)
    if hasattr(obj, "__array_interface__"):
        return _host(np.asarray(obj), where)
    try:
        view = memoryview(obj)
    except TypeError:
        raise TypeError(
            f"{where} must be a NumPy array, a PyTorch tensor, a CuPy array, an object with "
            "__cuda_array_interface__, __dlpack__ or the buffer protocol, or an integer "
            f"address, not {type(obj).__name__}"
        ) from None
    if not view.c_contiguous:
        raise ValueError(f"{where} is not C-contiguous")
    if view.nbytes == 0:
        return Side(0, 0, view)
    return _host(np.frombuffer(view, dtype=np.uint8), where)


def read_pair(pair: Any, i: int) -> tuple[int, int, int, bool, tuple[object, object]]:
    """Pair `i` of copy_many as the Python reader reads it (what the native reader leaves: other
    objects, a third item, and every error): (destination address, source address, nbytes,
    whether the destination is read-only, what to keep while the copy runs)."""
    if not isinstance(pair, (tuple, list)) or len(pair) not in (2, 3):
        raise TypeError(
            f"pair {i} must be (destination, source) or (destination, source, nbytes), not "
            f"{type(pair).__name__}"
        )
    d = side(pair[0], i, "destination")
    s = side(pair[1], i, "source")
    if len(pair) == 3:
        n = pair[2]
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            raise ValueError(f"pair {i} nbytes {n!r} is not a size of at least 1 byte")
        n = int(n)
        for end, name in ((d, "destination"), (s, "source")):
            if end.nbytes is not None and end.nbytes < n:
                raise ValueError(
                    f"pair {i}: nbytes {n} is more than the {name} holds ({end.nbytes} bytes)"
                )
    else:
        if d.nbytes is None or s.nbytes is None:
            raise TypeError(f"pair {i}: give nbytes as a third item for a raw address")
        if d.nbytes != s.nbytes:
            raise ValueError(
                f"pair {i}: the destination holds {d.nbytes} bytes and the source "
                f"{s.nbytes}; give nbytes as a third item to copy part of one"
            )
        n = s.nbytes
        if n == 0:
            raise ValueError(f"pair {i} is empty (0 bytes)")
    owner = d.keep
    read_only = (isinstance(owner, np.ndarray) and not owner.flags.writeable) or (
        isinstance(owner, memoryview) and owner.readonly
    )
    return d.address, s.address, n, read_only, (d.keep, s.keep)
