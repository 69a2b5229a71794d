"""A checkpoint's files read into GPU buffers of their own, file after file, by a thread that
starts before any header is parsed: a safetensors file's data lie from its header's end to the
file's end, so its length (the first 8 bytes) is all a read needs. The program's thread parses
the headers and makes the tensors meanwhile, so an MoE's 18,000 tensors cost their header and
views little beside the read. Each file is read through `read_to_device` of copy_many's copier
(pread into its pinned chunks), one file at a time, all its threads on it; where most of a
file is not in the page cache, COLD_READERS of them, in large chunks.
`read_file` reads some of a file's tensors, `runs` their ranges (a device map's share of a
file, a .pt file's storages), through the same copier.

    reads = DataReads(copier, [Path("model.safetensors")], allocate, settle)
    layout = read_layout("model.safetensors")
    buffer = reads.buffer(0, layout)   # the GPU bytes of the file's data, still being read
    reads.finish()                     # every file read, or its CheckpointError"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from . import storage
from .layout import CheckpointError, Layout, Tensor, header_length, opened, version_of

COLD_SHARE = 0.5  # a file less than this much in the page cache is cold
SAMPLES = 32  # pages of each file looked at for it
# threads reading a cold file, each in chunks of up to 64 MiB (ManyCopier.read_to_device): a
# cold 1 GB file, medians of shuffled rounds (benchmarks/load_probe.py), loaded at GB/s
#   by readers:                          1      2      4     every thread, 4 MiB chunks
#   2-GPU H100 host, 12 rounds           1.61   1.52   1.51  -     (Run:ai's streamer 1.52)
#   2-GPU H200 host, 8 rounds            1.80   1.75   1.69  1.51  (Run:ai's streamer 1.80)
#   1-GPU H100 host, 4 rounds            1.46   1.51   -     1.32
# one reader led on two hosts of three, by 3-6%, and trailed on the third by 3%
COLD_READERS = 1
# tensors nearer than this are read as one range: a .pt file's storages lie between zip headers
# of about 100 bytes (an MoE's 18,000 storages: one read, not 18,000)
JOIN_GAP = 64 << 10


def is_cold(path: Path) -> bool:
    """Whether most of `path` is not in the page cache (then read by COLD_READERS threads)."""
    return storage.resident_share(path, SAMPLES) < COLD_SHARE


def readers_for(path: Path) -> int:
    """The threads that read `path` (read_to_device's `readers`): COLD_READERS for a cold file,
    else 0, every thread of the copier."""
    return COLD_READERS if is_cold(path) else 0


def changed(path: Path, when: str) -> CheckpointError:
    return CheckpointError(
        f"{path}: the file changed {when} (its size, time or inode differ); load it again once "
        "it is written"
    )


class DataReads:
    """The data of `paths` read by `copier` (an engine's copy_many copier, of the GPU the
    buffers are on) into one GPU buffer each, `allocate(nbytes)` (a torch tensor, a CuPy
    array, an engine's DeviceBuffer: `address(buffer)` its address), on a thread of its own
    begun here once `settle()` has returned (what the memory was last used for is done)."""

    def __init__(
        self,
        copier: Any,
        paths: Sequence[Path],
        allocate: Callable[[int], Any],
        settle: Callable[[], None] = lambda: None,
        address: Callable[[Any], int] = lambda buffer: int(buffer.data_ptr()),
    ) -> None:
        self._copier = copier
        self._address = address
        self._thread: threading.Thread | None = None
        self._stop = False
        self._error: BaseException | None = None
        self._files: list[tuple[Path, int, int, tuple[int, int, int]]] = []  # path fd begin ver
        self._readers: list[int] = []  # each file's readers (0: every thread of the copier)
        self.buffers: list[Any] = []
        try:
            for path in paths:
                fd = opened(path)
                self._files.append((path, fd, 0, (0, 0, 0)))
                stat = os.fstat(fd)
                begin = 8 + header_length(path, os.pread(fd, 8, 0), stat.st_size)
                self._files[-1] = (path, fd, begin, version_of(stat))
                self.buffers.append(allocate(stat.st_size - begin))
            settle()
            self._readers = [readers_for(p) for p in paths]
        except BaseException:
            self.close()
            raise
        self._thread = threading.Thread(target=self._run, name="xferscope-load-read")
        self._thread.start()

    def _run(self) -> None:
        for (path, fd, begin, version), buffer, readers in zip(
            self._files, self.buffers, self._readers, strict=True
        ):
            if self._stop:
                return
            try:
                ranges = (np.array([v], dtype=np.uint64) for v in (begin, version[1] - begin, 0))
                self._copier.read_to_device(fd, self._address(buffer), *ranges, readers)
                if version_of(os.fstat(fd)) != version:
                    raise changed(path, "while it was read")
            except OSError as exc:
                self._error = CheckpointError(f"{path}: {exc}")
                return
            except BaseException as exc:  # told on the program's thread
                self._error = exc
                return

    def buffer(self, k: int, layout: Layout) -> Any:
        """File `k`'s buffer (its data from byte `layout.data_begin`), once its layout is
        known to be of the version being read; the bytes may still be on their way."""
        path, _, begin, version = self._files[k]
        if layout.version != version or layout.data_begin != begin:
            raise changed(path, "since its header was read")
        return self.buffers[k]

    def finish(self) -> None:
        """Once every file is read: the first read's error, if any."""
        if self._thread is not None:
            self._thread.join()
        self._close_files()
        if self._error is not None:
            raise self._error

    def close(self) -> None:
        """Stops after the file being read, and gives back every buffer (closing those that
        close)."""
        self._stop = True
        if self._thread is not None:
            self._thread.join()
        self._close_files()
        for buffer in self.buffers:
            getattr(buffer, "close", lambda: None)()
        self.buffers.clear()

    def _close_files(self) -> None:
        for _, fd, _, _ in self._files:
            os.close(fd)
        self._files = []


def runs(
    layout: Layout, names: set[str] | None = None
) -> tuple[int, list[int], list[int], list[int]]:
    """What to read of `layout`'s file for its tensors `names` (None: all): (the first such
    tensor's offset, then the file offsets, sizes and buffer offsets of its ranges), tensors
    that lie end to end joined into one range; reading all, tensors less than JOIN_GAP apart too,
    with what lies between them (a buffer spans its tensors' first to last byte, so that lands
    where no tensor is). A share of the tensors (a device map's) is read alone."""
    tensors = chosen(layout, names)
    gap = JOIN_GAP if names is None else 1
    first = tensors[0].begin if tensors else layout.data_begin
    starts: list[int] = []
    sizes: list[int] = []
    for t in tensors:
        if t.nbytes == 0:
            continue
        if starts and 0 <= t.begin - (starts[-1] + sizes[-1]) < gap:
            sizes[-1] = max(sizes[-1], t.end - starts[-1])
        else:
            starts.append(t.begin)
            sizes.append(t.nbytes)
    return first, starts, sizes, [s - first for s in starts]


def chosen(layout: Layout, names: set[str] | None) -> list[Tensor]:
    return [t for t in layout.tensors if names is None or t.name in names]


def read_file(layout: Layout, copier: Any, device_ptr: int, names: set[str] | None = None) -> None:
    """`layout`'s tensors `names` (None: all) into the GPU range at `device_ptr` (from the
    first one's offset on) by `copier` (an engine's copy_many copier); CheckpointError where
    the file has changed since its layout was read, during the read, or cannot be read."""
    _, starts, sizes, offsets = runs(layout, names)
    fd = opened(layout.path)
    try:
        _unchanged(layout, fd, "since its header was read")
        if starts:
            ranges = (np.array(a, dtype=np.uint64) for a in (starts, sizes, offsets))
            copier.read_to_device(fd, device_ptr, *ranges, readers_for(layout.path))
        _unchanged(layout, fd, "while it was read")
    except OSError as exc:
        raise CheckpointError(f"{layout.path}: {exc}") from None
    finally:
        os.close(fd)


def _unchanged(layout: Layout, fd: int, when: str) -> None:
    if version_of(os.fstat(fd)) != layout.version:
        raise changed(layout.path, when)
