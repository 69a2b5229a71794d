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
import operator
import os
import stat as stat_module
from pathlib import Path
from typing import Any, NamedTuple

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


PT_SUFFIXES = (".pt", ".pth", ".bin")  # what torch.save's files are called


class CheckpointError(XferscopeError):
    """A checkpoint xferscope will not load: the message names the file, and the tensor or
    shard, and what is wrong with it."""


class Tensor(NamedTuple):
    """One tensor of a file: `begin` is its first byte's offset in the file (a tuple: an MoE's
    file holds tens of thousands, made in a few microseconds each)."""

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


def opened(path: Path) -> int:
    """A descriptor of `path` open for reading; CheckpointError naming it where it is not a
    regular file or cannot be opened."""
    try:
        if not stat_module.S_ISREG(os.stat(path).st_mode):  # a FIFO's open would wait
            raise CheckpointError(f"{path}: not a regular file (a safetensors file is one)")
        return os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise CheckpointError(f"{path}: {exc.strerror or exc}") from None


def version_of(stat: os.stat_result) -> tuple[int, int, int]:
    return (stat.st_ino, stat.st_size, stat.st_mtime_ns)


def read_layout(path: str | os.PathLike[str]) -> Layout:
    """`path`'s layout, checked; CheckpointError for a file that is not a safetensors file or
    whose header does not fit its data."""
    path = Path(path)
    fd = opened(path)
    try:
        with os.fdopen(fd, "rb") as f:
            stat = os.fstat(f.fileno())
            n = header_length(path, f.read(8), stat.st_size)
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
    tensors = sorted(_tensors(path, header, data_begin), key=operator.itemgetter(3, 4))
    ends = [t.end for t in tensors]
    if not all(map(operator.le, ends, [t.begin for t in tensors[1:]])):
        for before, after in itertools.pairwise(tensors):
            if after.begin < before.end:
                raise CheckpointError(
                    f"{path}: tensors {before.name!r} and {after.name!r} overlap (bytes "
                    f"{before.begin - data_begin}-{before.end - data_begin} and "
                    f"{after.begin - data_begin}-{after.end - data_begin} of the data): its "
                    "header's offsets are wrong"
                )
    end = max(ends, default=data_begin)
    if end > stat.st_size:
        last = max(tensors, key=lambda t: t.end)
        raise CheckpointError(
            f"{path}: tensor {last.name!r} ends at byte {last.end}, past the file's end "
            f"({stat.st_size} B): the file is truncated"
        )
    return Layout(path, stat.st_size, data_begin, tuple(tensors), _metadata(path, header),
                  version_of(stat))  # fmt: skip


def header_length(path: Path, head: bytes, size: int) -> int:
    """The header's length, from `head` (the first 8 bytes of `path`, `size` bytes in all),
    checked against the file: its data begin 8 bytes after the header."""
    if len(head) < 8:
        raise CheckpointError(
            f"{path}: {size} B, too short for a safetensors file (8 bytes of header length, "
            "then the header)"
        )
    n = int.from_bytes(head, "little")
    if n > min(HEADER_MOST, size - 8) and path.suffix in PT_SUFFIXES:
        raise CheckpointError(
            f"{path}: not a zip archive, so not torch.save's format since PyTorch 1.6 (the "
            "legacy format, or _use_new_zipfile_serialization=False, is not read): save it "
            "again with torch.save, or as safetensors"
        )
    if n > min(HEADER_MOST, size - 8):
        raise CheckpointError(
            f"{path}: its header length says {format_bytes(n)}, longer than "
            f"{'the file allows' if n <= HEADER_MOST else 'safetensors allows'} "
            f"({format_bytes(size)} in all): not a safetensors file, or truncated"
        )
    return n


def _tensors(path: Path, header: dict[str, Any], data_begin: int) -> list[Tensor]:
    """The header's tensors, checked: all at once where all are well formed (an MoE's 18,000
    in a few milliseconds), else one by one to name the first that is not."""
    names = [k for k in header if k != METADATA]
    entries = [header[k] for k in names]
    try:
        if set(map(type, entries)) <= {dict}:
            dtypes = [e.get("dtype") for e in entries]
            shapes = [e.get("shape") for e in entries]
            offsets = [e.get("data_offsets") for e in entries]
            if (
                set(dtypes) <= DTYPE_BYTES.keys()
                and set(map(type, shapes)) | set(map(type, offsets)) <= {list}
                and set(map(len, offsets)) <= {2}
            ):
                flat = list(itertools.chain.from_iterable(offsets))
                if _counts(list(itertools.chain.from_iterable(shapes))) and _counts(flat):
                    sizes = map(DTYPE_BYTES.__getitem__, dtypes)
                    nbytes = list(map(operator.mul, map(math.prod, shapes), sizes))
                    begins = flat[0::2]
                    if list(map(operator.sub, flat[1::2], begins)) == nbytes:
                        return list(map(Tensor, names, dtypes, map(tuple, shapes),
                                        map(data_begin.__add__, begins), nbytes))  # fmt: skip
    except TypeError:  # an unhashable dtype: told below
        pass
    return [_tensor(path, name, header[name], data_begin) for name in names]


def _tensor(path: Path, name: str, entry: Any, data_begin: int) -> Tensor:
    def bad(what: str) -> CheckpointError:
        return CheckpointError(f"{path}: tensor {name!r}: {what}")

    if type(entry) is not dict:
        raise bad("its header entry is not an object of dtype, shape and data_offsets")
    dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
    size = DTYPE_BYTES.get(dtype) if type(dtype) is str else None
    if size is None:
        raise bad(f"dtype {dtype!r} is not one xferscope loads ({', '.join(DTYPE_BYTES)})")
    if type(shape) is not list or not _counts(shape):
        raise bad(f"shape {shape!r} is not a list of sizes (integers from 0)")
    if (
        type(offsets) is not list
        or len(offsets) != 2
        or not _counts(offsets)
        or (offsets[0] > offsets[1])
    ):
        raise bad(f"data_offsets {offsets!r} is not [begin, end] with 0 <= begin <= end")
    nbytes = math.prod(shape) * size
    if offsets[1] - offsets[0] != nbytes:
        raise bad(
            f"data_offsets {offsets} hold {offsets[1] - offsets[0]} B, and a {dtype} tensor "
            f"of shape {shape} is {nbytes} B: its header's offsets are wrong"
        )
    return Tensor(name, str(dtype), tuple(shape), data_begin + offsets[0], nbytes)


def _counts(values: list[Any]) -> bool:
    """Whether every one of `values` is an int (not a bool) from 0."""
    return (not values) or (set(map(type, values)) == {int} and min(values) >= 0)


def _metadata(path: Path, header: dict[str, Any]) -> dict[str, str]:
    metadata = header.get(METADATA, {})
    if not isinstance(metadata, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()
    ):
        raise CheckpointError(f"{path}: its {METADATA} is not an object of strings")
    return dict(metadata)
