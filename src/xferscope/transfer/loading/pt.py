"""A PyTorch `.pt` file (torch.save's zip format) loaded the way a safetensors file is: its
storages are records stored uncompressed in the zip, each at an offset the zip's local headers
give, so they are read with pread into one GPU buffer (read_file) and each tensor made as a
strided view of it. `torch.load(mmap=True, weights_only=True)` tells the tensors (dtype, shape,
stride, storage offset) without reading their bytes; its storages are slices of one mapping of
the file, so their addresses, less the mapping's, are the records' offsets: storages are matched
to records that way, and the match is checked (every storage a record of its size, at the same
distances), else the file is refused with one line.

    layout = pt_layout("model.pt")    # the storages' records, as a Layout
    state = load_pt(torch, "model.pt", 0, copier)"""

from __future__ import annotations

import os
import struct
import threading
import zipfile
from pathlib import Path
from typing import Any

from .layout import PT_SUFFIXES, CheckpointError, Layout, Tensor, version_of
from .reads import read_file

LOCAL_HEADER = struct.Struct("<4sHHHHHIIIHH")  # a zip entry's local file header, 30 bytes
ALIGNMENT = 64  # torch.save's records begin at multiples of this
SAMPLED = 32  # local headers read to check where the records begin


def is_pt(path: Path) -> bool:
    """Whether `path` is a file torch.save wrote (a zip) by its name and first bytes."""
    return path.suffix in PT_SUFFIXES and path.is_file() and zipfile.is_zipfile(path)


def pt_layout(path: str | os.PathLike[str]) -> Layout:
    """The storages' records of `path` (the entries under `<archive>/data/`), each a U8 'tensor'
    named by its record, in file order; CheckpointError for a zip it cannot read them from."""
    path = Path(path)
    try:
        with path.open("rb") as f:
            stat = os.fstat(f.fileno())
            with zipfile.ZipFile(f) as z:
                infos = [i for i in z.infolist() if i.filename.split("/")[-2:-1] == ["data"]]
            for info in infos:
                if info.compress_type != zipfile.ZIP_STORED:
                    raise CheckpointError(
                        f"{path}: record {info.filename} is compressed: torch.save stores its "
                        "storages as they are"
                    )
            begins = _begins(path, f, infos)
            records = [Tensor(i.filename, "U8", (i.file_size,), b, i.file_size)
                       for i, b in zip(infos, begins, strict=True)]  # fmt: skip
    except (OSError, zipfile.BadZipFile) as exc:
        raise CheckpointError(f"{path}: not a zip torch.save wrote ({exc})") from None
    records.sort(key=lambda t: t.begin)
    for t in records:
        if t.end > stat.st_size:
            raise CheckpointError(f"{path}: record {t.name} ends past the file's end: truncated")
    begin = records[0].begin if records else stat.st_size
    return Layout(path, stat.st_size, begin, tuple(records), {}, version_of(stat))


def _read(layout: Layout, copier: Any, address: int, failed: list[BaseException]) -> None:
    try:
        read_file(layout, copier, address)
    except BaseException as exc:  # raised on the program's thread
        failed.append(exc)


def _begins(path: Path, f: Any, infos: list[zipfile.ZipInfo]) -> list[int]:
    """Where each record's bytes begin: torch.save pads each local header's extra field so that
    its record begins at a multiple of 64 bytes, which the central directory alone then tells.
    That is checked against the local headers of up to SAMPLED records, evenly spread, and each
    local header is read where one of them differs: on a cold file, 18,000 reads of one each
    cost more than the records' bytes."""
    predicted = [_padded(i) for i in infos]
    step = max(1, -(-(len(infos) - 1) // (SAMPLED - 1)))
    sample = sorted({*range(0, len(infos), step), len(infos) - 1} - {-1})
    if all(_local_begin(path, f, infos[k]) == predicted[k] for k in sample):
        return predicted
    return [_local_begin(path, f, i) for i in infos]


def _padded(info: zipfile.ZipInfo) -> int:
    """Where torch.save's writer puts a record's first byte: past the local header, the name,
    the extra field's own 4 bytes (and a zip64 field's 20 for a record of 4 GiB or more), at the
    next multiple of 64."""
    start = info.header_offset + LOCAL_HEADER.size + len(info.filename.encode()) + 4
    start += 20 if info.file_size >= 0xFFFFFFFF else 0
    return -(-start // ALIGNMENT) * ALIGNMENT


def _local_begin(path: Path, f: Any, info: zipfile.ZipInfo) -> int:
    """Where a record's bytes begin, as its local header says."""
    f.seek(info.header_offset)
    head = f.read(LOCAL_HEADER.size)
    if len(head) < LOCAL_HEADER.size or head[:4] != b"PK\x03\x04":
        raise CheckpointError(f"{path}: record {info.filename} has no local header")
    *_, name_length, extra_length = LOCAL_HEADER.unpack(head)
    return int(info.header_offset + LOCAL_HEADER.size + name_length + extra_length)


def load_pt(torch: Any, path: Path, index: int, copier: Any, out: dict[str, Any]) -> None:
    """`path`'s state dict (names to tensors) into `out`, on GPU `index`, read by `copier`
    (its GPU buffer goes with the frames xferscope.load clears on an error)."""
    layout = pt_layout(path)
    first = layout.data_begin
    span = max((t.end for t in layout.tensors), default=first) - first
    buffer = torch.empty(span, dtype=torch.uint8, device=f"cuda:{index}")
    # the copier's streams are not ordered after PyTorch's: what the memory held before is done
    torch.cuda.current_stream(index).synchronize()
    # the records read on a thread while torch.load tells the tensors: on a cold file its reads
    # of each record's local header then meet pages the read brought in
    failed: list[BaseException] = []
    reading = threading.Thread(target=_read, args=(layout, copier, buffer.data_ptr(), failed),
                               name="xferscope-load-pt")  # fmt: skip
    reading.start()
    try:
        state = torch.load(path, mmap=True, weights_only=True, map_location="cpu")
    except Exception as exc:  # what torch says of a file it will not load
        raise CheckpointError(
            f"{path}: torch.load refused it ({type(exc).__name__}: {exc})"
        ) from None
    finally:
        reading.join()
    if failed:
        raise failed[0]
    if not isinstance(state, dict) or not all(
        isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state.items()
    ):
        raise CheckpointError(f"{path}: not a state dict of names to tensors: torch.load it")
    offsets = _matched(path, layout, state)
    for name, t in state.items():
        storage = t.untyped_storage()
        if storage.nbytes() == 0 or t.numel() == 0:
            out[name] = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype,
                                            device=buffer.device)  # fmt: skip
            continue
        at, size = offsets[storage.data_ptr()] - first, t.element_size()
        if at % size:  # a fresh, aligned block (torch.save aligns records to 64 bytes)
            raw = buffer[at : at + storage.nbytes()].clone().view(t.dtype)
            out[name] = raw.as_strided(t.shape, t.stride(), t.storage_offset())
        else:
            typed = buffer[: span // size * size].view(t.dtype)
            out[name] = typed.as_strided(t.shape, t.stride(), at // size + t.storage_offset())


def _matched(path: Path, layout: Layout, state: dict[str, Any]) -> dict[int, int]:
    """Each storage's address to its record's offset in the file: storages in address order
    against records in file order, at the same distances and of the same sizes."""
    storages: dict[int, int] = {}
    for t in state.values():
        s = t.untyped_storage()
        if s.nbytes():
            storages[s.data_ptr()] = s.nbytes()
    addresses = sorted(storages)
    records = [r for r in layout.tensors if r.nbytes]  # an empty tensor's record is empty
    if len(addresses) != len(records) or any(
        storages[a] != r.nbytes or a - addresses[0] != r.begin - records[0].begin
        for a, r in zip(addresses, records, strict=False)
    ):
        raise CheckpointError(
            f"{path}: its storages ({len(addresses)}) do not match its records ({len(records)}) "
            "as torch.load(mmap=True) maps them: torch.load it"
        )
    return {a: r.begin for a, r in zip(addresses, records, strict=True)}
