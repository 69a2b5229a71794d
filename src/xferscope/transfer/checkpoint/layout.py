"""Where a safetensors file's tensors lie: each tensor's name, dtype, shape and byte range in the
file, read from the file's header and checked against the file, so that a load reads each range
at its offset (pread, never a mapped page) and nothing else.

The format (safetensors' own definition): 8 bytes, a little-endian header length N; N bytes of a
UTF-8 JSON object mapping each tensor's name to {"dtype", "shape", "data_offsets": [begin,
end]}, offsets counted from the end of the header, plus an optional "__metadata__" of strings;
then the data. The `safetensors` package reads a file into tensors but tells no offsets, so the
header is read here; its checks are the package's (a dtype it knows, offsets inside the data
that match the shape, no two tensors overlapping), each broken one a CheckpointError naming the
file and the tensor.

    layout = read_layout("model.safetensors")
    for t in layout.tensors:
        print(t.name, t.dtype, t.shape, t.begin, t.nbytes)"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import os
import stat as stat_module
from pathlib import Path
from typing import Any

from ...core.errors import XferscopeError
from ...core.units import format_bytes

# bytes an element of each safetensors dtype takes (the package's names)
DTYPE_BYTES: dict[str, int] = {
    "BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "F8_E8M0": 1,
    "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
    "I32": 4, "U32": 4, "F32": 4,
    "I64": 8, "U64": 8, "F64": 8, "C64": 8,
}  # fmt: skip
HEADER_MOST = 100_000_000  # the package refuses a longer header (its MAX_HEADER_SIZE)
METADATA = "__metadata__"


class CheckpointError(XferscopeError):
    """A checkpoint xferscope will not load: the message names the file, and the tensor or
    shard, and what is wrong with it."""


@dataclasses.dataclass(frozen=True)
class Tensor:
    """One tensor of a file: `begin` is its first byte's offset in the file."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    begin: int
    nbytes: int

    @property
    def end(self) -> int:
        return self.begin + self.nbytes


@dataclasses.dataclass(frozen=True)
class Layout:
    """A file's tensors in the order they lie, where its data begins, its size, and what
    identifies this version of it (a file replaced or rewritten during a load is told)."""

    path: Path
    size: int
    data_begin: int
    tensors: tuple[Tensor, ...]
    metadata: dict[str, str]
    version: tuple[int, int, int]  # inode, size, modification time in ns

    @property
    def data_bytes(self) -> int:
        return self.size - self.data_begin


def version_of(stat: os.stat_result) -> tuple[int, int, int]:
    return (stat.st_ino, stat.st_size, stat.st_mtime_ns)


def read_layout(path: str | os.PathLike[str]) -> Layout:
    """`path`'s layout, checked; CheckpointError for a file that is not a safetensors file or
    whose header does not fit its data."""
    path = Path(path)
    try:
        if not stat_module.S_ISREG(os.stat(path).st_mode):  # a FIFO's open would wait
            raise CheckpointError(f"{path}: not a regular file (a safetensors file is one)")
        with path.open("rb") as f:
            stat = os.fstat(f.fileno())
            head = f.read(8)
            if len(head) < 8:
                raise CheckpointError(
                    f"{path}: {stat.st_size} B, too short for a safetensors file (8 bytes of "
                    "header length, then the header)"
                )
            n = int.from_bytes(head, "little")
            if n > min(HEADER_MOST, stat.st_size - 8):
                raise CheckpointError(
                    f"{path}: its header length says {format_bytes(n)}, longer than "
                    f"{'the file allows' if n <= HEADER_MOST else 'safetensors allows'} "
                    f"({format_bytes(stat.st_size)} in all): not a safetensors file, or "
                    "truncated"
                )
            text = f.read(n)
    except OSError as exc:
        raise CheckpointError(f"{path}: {exc.strerror or exc}") from None
    try:
        header = json.loads(text.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"{path}: its header is not JSON ({exc})") from None
    if not isinstance(header, dict):
        raise CheckpointError(f"{path}: its header is not a JSON object of tensors")
    data_begin = 8 + n
    tensors = sorted(
        (_tensor(path, name, entry, data_begin) for name, entry in header.items()
         if name != METADATA),
        key=lambda t: (t.begin, t.nbytes),
    )  # fmt: skip
    for before, after in itertools.pairwise(tensors):
        if after.begin < before.end:
            raise CheckpointError(
                f"{path}: tensors {before.name!r} and {after.name!r} overlap (bytes "
                f"{before.begin - data_begin}-{before.end - data_begin} and "
                f"{after.begin - data_begin}-{after.end - data_begin} of the data): its "
                "header's offsets are wrong"
            )
    end = max((t.end for t in tensors), default=data_begin)
    if end > stat.st_size:
        last = max(tensors, key=lambda t: t.end)
        raise CheckpointError(
            f"{path}: tensor {last.name!r} ends at byte {last.end}, past the file's end "
            f"({stat.st_size} B): the file is truncated"
        )
    return Layout(path, stat.st_size, data_begin, tuple(tensors), _metadata(path, header),
                  version_of(stat))  # fmt: skip


def _tensor(path: Path, name: str, entry: Any, data_begin: int) -> Tensor:
    def bad(what: str) -> CheckpointError:
        return CheckpointError(f"{path}: tensor {name!r}: {what}")

    if not isinstance(entry, dict):
        raise bad("its header entry is not an object of dtype, shape and data_offsets")
    dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
    if dtype not in DTYPE_BYTES:
        raise bad(f"dtype {dtype!r} is not one xferscope loads ({', '.join(DTYPE_BYTES)})")
    if not isinstance(shape, list) or not all(_count(d) for d in shape):
        raise bad(f"shape {shape!r} is not a list of sizes (integers from 0)")
    if (
        not isinstance(offsets, list)
        or len(offsets) != 2
        or not all(_count(o) for o in offsets)
        or offsets[0] > offsets[1]
    ):
        raise bad(f"data_offsets {offsets!r} is not [begin, end] with 0 <= begin <= end")
    nbytes = math.prod(shape) * DTYPE_BYTES[dtype]
    if offsets[1] - offsets[0] != nbytes:
        raise bad(
            f"data_offsets {offsets} hold {offsets[1] - offsets[0]} B, and a {dtype} tensor "
            f"of shape {shape} is {nbytes} B: its header's offsets are wrong"
        )
    return Tensor(name, dtype, tuple(shape), data_begin + offsets[0], nbytes)


def _count(value: Any) -> bool:
    return type(value) is int and value >= 0


def _metadata(path: Path, header: dict[str, Any]) -> dict[str, str]:
    metadata = header.get(METADATA, {})
    if not isinstance(metadata, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()
    ):
        raise CheckpointError(f"{path}: its {METADATA} is not an object of strings")
    return dict(metadata)
