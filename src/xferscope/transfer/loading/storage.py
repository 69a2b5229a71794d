"""What a checkpoint's files cost to read, apart from the GPU: how much of each is in the page
cache (mincore over a mapping never touched), dropping a file's pages from it
(posix_fadvise(DONTNEED): only files a program may drop, never the whole machine's cache), and
the rate threads reading them with pread reach, buffered or with O_DIRECT. The ceilings a load
is set against (`benchmarks/load_bench.py`)."""

from __future__ import annotations

import contextlib
import ctypes
import mmap
import os
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

BLOCK = 16 << 20  # bytes a reader asks for at once

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                       ctypes.c_int, ctypes.c_long]  # fmt: skip
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
_FAILED = ctypes.c_void_p(-1).value


def resident_share(path: str | os.PathLike[str], samples: int = 0) -> float:
    """The share of `path`'s pages in the page cache (1.0 for an empty file): of all of them,
    or where `samples`, of that many pages spread evenly over it (a 1 GB file's 244,000 pages
    took 27 ms to count, a sample of 32 well under one)."""
    size = os.stat(path).st_size
    if size == 0:
        return 1.0
    pages = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
    fd = os.open(path, os.O_RDONLY)
    try:
        if samples <= 0 or samples >= pages:
            return _resident(path, fd, 0, pages) / pages
        picked = {i * (pages - 1) // (samples - 1) for i in range(samples)} if samples > 1 else {0}
        return sum(_resident(path, fd, page, 1) for page in picked) / len(picked)
    finally:
        os.close(fd)


def _resident(path: str | os.PathLike[str], fd: int, first: int, pages: int) -> int:
    """How many of `pages` pages of `fd` from page `first` are in the page cache (mincore over
    a mapping never touched)."""
    length = pages * mmap.PAGESIZE
    address = _libc.mmap(None, length, mmap.PROT_READ, mmap.MAP_SHARED, fd,
                         first * mmap.PAGESIZE)  # fmt: skip
    if address is None or address == _FAILED:
        raise OSError(ctypes.get_errno(), f"mmap of {path} failed")
    vec = ctypes.create_string_buffer(pages)
    try:
        if _libc.mincore(address, length, vec) != 0:
            raise OSError(ctypes.get_errno(), f"mincore of {path} failed")
        return int((np.frombuffer(vec.raw, dtype=np.uint8, count=pages) & 1).sum())
    finally:
        _libc.munmap(address, length)


def cached(paths: Sequence[str | os.PathLike[str]], warm: bool) -> float:
    """Makes the files cold (their pages dropped from the page cache) or warm (read in whole,
    but where every page is resident already); the share of all their bytes resident after."""
    for p in paths:
        if warm and resident_share(p) == 1.0:
            continue  # not read again
        fd = os.open(p, os.O_RDONLY)
        try:
            if warm:
                while os.read(fd, BLOCK):
                    pass
            else:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    sizes = [os.stat(p).st_size for p in paths]
    total = sum(sizes)
    if total == 0:
        return 1.0
    return sum(resident_share(p) * s for p, s in zip(paths, sizes, strict=True)) / total


class Ahead:
    """A thread bringing `paths` into the page cache ahead of their readers, `window` bytes at
    a time, file after file: by asking the kernel (posix_fadvise(WILLNEED), which returns once
    the reads are queued), or where `read`, by reading each window with one pread into a
    buffer of its own (large requests, which a disk serves faster than its readers' chunks).
    Stops (after the window at hand) when the `with` block ends."""

    def __init__(
        self, paths: Sequence[str | os.PathLike[str]], window: int = 64 << 20, read: bool = False
    ) -> None:
        self._paths, self._window, self._read = list(paths), window, read
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="xferscope-ahead", daemon=True)

    def __enter__(self) -> Ahead:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        for path in self._paths:
            try:
                fd = os.open(path, os.O_RDONLY)
            except OSError:
                continue  # its reader tells
            buffer = mmap.mmap(-1, self._window) if self._read else None
            try:
                size = os.fstat(fd).st_size
                for at in range(0, size, self._window):
                    if self._stop.is_set():
                        return
                    if buffer is not None:
                        os.preadv(fd, [buffer], at)
                    else:
                        n = min(self._window, size - at)
                        os.posix_fadvise(fd, at, n, os.POSIX_FADV_WILLNEED)
            except OSError:
                return  # ahead only: the readers still read, and tell
            finally:
                os.close(fd)
                if buffer is not None:
                    buffer.close()


def read_rate(
    paths: Sequence[str | os.PathLike[str]],
    threads: int,
    direct: bool,
    block: int = BLOCK,
    ahead: int = 0,
    ranges: bool = False,
) -> float:
    """Bytes a second `threads` threads read the files at, each taking the next `block` with
    pread (O_DIRECT into page-aligned buffers where `direct`), from the state the page cache is
    in; `ahead`: the kernel asked to read ahead in windows of that many bytes (Ahead); `ranges`:
    each thread reads its own contiguous share of each file in order, block by block (as
    Run:ai's streamer does), rather than the next block of all."""
    sizes = [os.stat(p).st_size for p in paths]
    # no larger a buffer than the largest file, no more threads than blocks (small files)
    block = min(block, -(-max(sizes, default=0) // mmap.PAGESIZE) * mmap.PAGESIZE) or block
    jobs = [(Path(p), at) for p, size in zip(paths, sizes, strict=True)
            for at in range(0, size, block)]  # fmt: skip
    threads = max(1, min(threads, len(jobs)))
    # each thread's own jobs where `ranges` (thread i: the i-th share of each file's blocks),
    # else one list all take from; taken from the end: in order
    shares = [jobs]
    if ranges:
        shares = [[] for _ in range(threads)]
        for p, size in zip(paths, sizes, strict=True):
            starts = range(0, size, block)
            for i in range(threads):
                k, n = i * len(starts) // threads, (i + 1) * len(starts) // threads
                shares[i] += [(Path(p), at) for at in starts[k:n]]
    for share in shares:
        share.reverse()
    flags = os.O_RDONLY | (getattr(os, "O_DIRECT", 0) if direct else 0)
    fds = {Path(p): os.open(p, flags) for p in paths}
    lock = threading.Lock()
    done: list[int] = []
    failed: list[OSError] = []

    def reader(mine: list[tuple[Path, int]]) -> None:
        buffer = mmap.mmap(-1, block)  # page-aligned, as O_DIRECT needs
        n = 0
        try:
            while True:
                with lock:
                    if not mine or failed:
                        break
                    path, at = mine.pop()
                n += os.preadv(fds[path], [buffer], at)
        except OSError as exc:
            failed.append(exc)
        finally:
            buffer.close()
            with lock:
                done.append(n)

    start = time.perf_counter()
    workers = [threading.Thread(target=reader, args=(shares[i % len(shares)],),
                                name=f"xferscope-read-{i}") for i in range(threads)]  # fmt: skip
    try:
        with Ahead(paths, ahead) if ahead > 0 else contextlib.nullcontext():
            for w in workers:
                w.start()
            for w in workers:
                w.join()
    finally:
        for fd in fds.values():
            os.close(fd)
    seconds = time.perf_counter() - start
    if failed:
        raise failed[0]
    return sum(done) / seconds if seconds > 0 else 0.0
