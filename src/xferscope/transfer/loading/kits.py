"""What a load asks of the framework its tensors are made in, written once for each: PyTorch
(TorchKit), and CuPy or NumPy (ArrayKit: NumPy's arrays are host memory, for tests). A GPU
buffer of bytes, the buffer as a dtype, a strided view of it, a block's parts, a fresh copy, a
cast; `xferscope.load(..., framework="cupy")` makes CuPy arrays (DLPack either way)."""

from __future__ import annotations

from typing import Any

# safetensors' dtypes as PyTorch names them
TORCH_DTYPES = {
    "F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16",
    "I64": "int64", "I32": "int32", "I16": "int16", "I8": "int8", "U8": "uint8", "BOOL": "bool",
    "U16": "uint16", "U32": "uint32", "U64": "uint64", "C64": "complex64",
    "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2", "F8_E8M0": "float8_e8m0fnu",
}  # fmt: skip
# and as NumPy and CuPy do: no bfloat16 or float8 there
ARRAY_DTYPES = {
    code: name
    for code, name in TORCH_DTYPES.items()
    if code != "BF16" and not code.startswith("F8")
}


class TorchKit:
    """PyTorch's tensors."""

    def __init__(self, torch: Any) -> None:
        self.torch = torch
        self.name = f"this PyTorch ({torch.__version__})"

    def empty(self, nbytes: int, index: int) -> Any:
        return self.torch.empty(nbytes, dtype=self.torch.uint8, device=f"cuda:{index}")

    def settle(self, index: int) -> None:
        # the copier's streams are not ordered after PyTorch's: what the memory held is done
        self.torch.cuda.current_stream(index).synchronize()

    def address(self, buffer: Any) -> int:
        return int(buffer.data_ptr())

    def kind(self, code: str) -> Any:
        return getattr(self.torch, TORCH_DTYPES[code], None)

    def kind_name(self, code: str) -> str:
        return f"torch.{TORCH_DTYPES[code]}"

    def typed(self, buffer: Any, kind: Any) -> Any:
        size = kind.itemsize
        return buffer[: buffer.numel() // size * size].view(kind)

    def strided(self, typed: Any, shape: tuple[int, ...], strides: tuple[int, ...], at: int) -> Any:
        return typed.as_strided(shape, strides, at)

    def parts(self, block: Any) -> list[Any]:
        return list(block.unbind(0))

    def copied(self, raw: Any, kind: Any, shape: tuple[int, ...]) -> Any:
        return raw.clone().view(kind).reshape(shape)

    def floating(self, dtype: Any) -> bool:
        return isinstance(dtype, self.torch.dtype) and bool(dtype.is_floating_point)

    def cast(self, x: Any, dtype: Any) -> Any:
        return x.to(dtype) if x.is_floating_point() else x


class ArrayKit:
    """CuPy's arrays (`xp` the cupy module), or NumPy's in host memory (`xp` numpy: tests)."""

    def __init__(self, xp: Any) -> None:
        self.xp = xp
        self.name = "CuPy" if xp.__name__ == "cupy" else "NumPy"

    def empty(self, nbytes: int, index: int) -> Any:
        if self.name == "NumPy":
            return self.xp.empty(nbytes, dtype=self.xp.uint8)
        with self.xp.cuda.Device(index):
            return self.xp.empty(nbytes, dtype=self.xp.uint8)

    def settle(self, index: int) -> None:
        if self.name == "CuPy":
            with self.xp.cuda.Device(index):
                self.xp.cuda.get_current_stream().synchronize()

    def address(self, buffer: Any) -> int:
        return int(buffer.data.ptr if self.name == "CuPy" else buffer.ctypes.data)

    def kind(self, code: str) -> Any:
        name = ARRAY_DTYPES.get(code)
        return None if name is None else self.xp.dtype(name)

    def kind_name(self, code: str) -> str:
        return f"a {TORCH_DTYPES[code]} dtype"

    def typed(self, buffer: Any, kind: Any) -> Any:
        size = kind.itemsize
        return buffer[: buffer.size // size * size].view(kind)

    def strided(self, typed: Any, shape: tuple[int, ...], strides: tuple[int, ...], at: int) -> Any:
        size = typed.dtype.itemsize
        return self.xp.lib.stride_tricks.as_strided(
            typed[at:], shape, tuple(s * size for s in strides)
        )

    def parts(self, block: Any) -> list[Any]:
        # block[i, ...]: a view even of a 1-D block's items (NumPy's list() gives scalars, read
        # at once: before the bytes are there, seen under load on a 2-core machine)
        return [block[i, ...] for i in range(len(block))]

    def copied(self, raw: Any, kind: Any, shape: tuple[int, ...]) -> Any:
        return raw.copy().view(kind).reshape(shape)

    def floating(self, dtype: Any) -> bool:
        try:
            return bool(self.xp.dtype(dtype).kind == "f")
        except TypeError:
            return False

    def cast(self, x: Any, dtype: Any) -> Any:
        return x.astype(dtype) if x.dtype.kind == "f" else x
