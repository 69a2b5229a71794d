"""`xferscope checkpoint`: a checkpoint's whole path from its files to a GPU, measured stage by
stage, beside the load that takes it (xferscope.load's reading, into device memory of the
engine's own, no framework), so the load's bound is named: the disk (cold: each file's pages
dropped from the page cache with posix_fadvise(DONTNEED), checked with mincore), the page cache
(warm), host memory, or the link.

Each repeat measures, in this order: the disk's read rate from cold (4 threads of 16 MiB
preads, which read the H200 hosts' disks within the spread of the best of 1-16 threads and
16-64 MiB, buffered or O_DIRECT) and a load from cold; the page cache's read rate (the best
of 4, 8 and 16 threads of 4 MiB preads) and a load from warm; the headers read and checked;
memcpy between host buffers (the best of 4, 8 and 16 threads, 256 MiB); pinned host-to-GPU
copies of 256 MiB by device time. Sampled ranges of what the last load put on the GPU are
read back and compared with the files."""

from __future__ import annotations

import functools
import os
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..core import machine
from ..core.cases import DEFAULT_SEED
from ..core.engine import Engine, check_device
from ..core.errors import InputFileError, OptionError
from ..core.findings import WARNING, Finding, corrupted, finding
from ..core.progress import QUIET, Progress
from ..core.units import format_bytes
from ..documents.envelope import now
from ..transfer.loading import CheckpointError, Layout, storage
from ..transfer.loading.pt import is_pt, pt_layout
from ..transfer.loading.reads import DataReads, read_file
from ..transfer.loading.shards import Shard, checkpoint_files, checkpoint_layouts
from .records import CheckpointFile, CheckpointResult, Samples

DEFAULT_REPEATS = 3
MIB = 1 << 20
DISK_THREADS, DISK_BLOCK = 4, 16 * MIB
CACHE_BLOCK = 4 * MIB
THREADS = (4, 8, 16)  # the page cache and host memory: the best of these many threads
MEMCPY_BYTES = 256 * MIB
LINK_BYTES = 256 * MIB
CHECKED_RANGES, CHECKED_BYTES = 8, 64 << 10  # per file: tensors whose ends are read back
COLD_MOST = 0.1  # a share of the files left in the page cache after dropping it that is told


def steps(repeats: int, cold: bool) -> int:
    return repeats * (7 if cold else 5)


def opened(paths: Sequence[str]) -> tuple[list[Shard], list[Layout]]:
    """The checkpoint's files and layouts (a .pt file's: its storages' records); InputFileError
    naming the file it will not load (OptionError naming PATH for an empty path)."""
    if not paths or any(not str(p).strip() for p in paths):
        raise OptionError(
            "PATH", "an empty path names no file: give a file, a directory or an index"
        )
    try:
        files = checkpoint_files(list(paths))
        return files, _layouts(paths, files)
    except CheckpointError as exc:  # its message names the file
        raise InputFileError(str(exc)) from None


def _layouts(paths: Sequence[str], files: list[Shard]) -> list[Layout]:
    """The headers read and checked: safetensors', or a .pt file's zip directory."""
    if len(files) == 1 and is_pt(files[0].path):
        return [pt_layout(files[0].path)]
    return checkpoint_layouts(list(paths), files)


def check_memory(engine: Engine, device: int, layouts: Sequence[Layout]) -> None:
    free, _ = engine.memory_info(device)
    need = sum(layout.data_bytes for layout in layouts)
    if need > free:
        raise OptionError(
            "PATH",
            f"the checkpoint's data ({format_bytes(need)}) do not fit GPU {device}'s free "
            f"memory ({format_bytes(free)}); name fewer files",
        )


def load_once(engine: Engine, copier: Any, device: int, paths: Sequence[str], files: list[Shard],
              keep: list[Any] | None = None) -> float:  # fmt: skip
    """Seconds xferscope.load's reading takes for the checkpoint (headers parsed while each
    file's data are read into device memory of its own); the buffers freed after, or kept in
    `keep` with the layouts. Wall time, as the stages' rates are: the simulated engine's reads
    of the files are real too (its copies only modelled)."""
    start = time.perf_counter()
    if len(files) == 1 and is_pt(files[0].path):  # its storages' records, as xferscope.load
        layout = pt_layout(files[0].path)
        buffer = engine.device_buffer(device, layout.data_bytes)
        try:
            read_file(layout, copier, buffer.data_ptr())
        except BaseException:
            buffer.close()
            raise
        seconds = time.perf_counter() - start
        if keep is not None:
            keep += [[layout], [buffer]]
        else:
            buffer.close()
        return seconds
    reads = DataReads(copier, [f.path for f in files], lambda n: engine.device_buffer(device, n))
    try:
        layouts = checkpoint_layouts(list(paths), files)
        for k, layout in enumerate(layouts):
            reads.buffer(k, layout)
        reads.finish()
        seconds = time.perf_counter() - start
        if keep is not None:
            keep += [layouts, list(reads.buffers)]
            reads.buffers.clear()
    finally:
        reads.close()
    return seconds


def memcpy_bps(nbytes: int = MEMCPY_BYTES) -> float:
    """Bytes a second threads copy between host buffers (numpy's copy, which lets go of the
    GIL): the best of three copies by each of THREADS threads."""
    source = np.random.default_rng(DEFAULT_SEED).integers(0, 255, nbytes, dtype=np.uint8)
    target = np.empty_like(source)
    best = 0.0
    for threads in THREADS:
        share = nbytes // threads

        def part(k: int, threads: int = threads, share: int = share) -> None:
            end = nbytes if k == threads - 1 else (k + 1) * share
            np.copyto(target[k * share : end], source[k * share : end])

        for _ in range(3):
            workers = [threading.Thread(target=part, args=(k,)) for k in range(threads)]
            start = time.perf_counter()
            for w in workers:
                w.start()
            for w in workers:
                w.join()
            best = max(best, nbytes / (time.perf_counter() - start))
    return best


def page_cache_bps(names: list[str]) -> float:
    """The page cache's read rate: the best of THREADS threads of CACHE_BLOCK preads."""
    return max(storage.read_rate(names, t, False, CACHE_BLOCK) for t in THREADS)


def headers_bps(paths: Sequence[str], files: list[Shard], data_bytes: int) -> float:
    """The data's bytes over the time the headers take to read and check."""
    start = time.perf_counter()
    _layouts(paths, files)
    return data_bytes / (time.perf_counter() - start)


def link_bps(engine: Engine, device: int, nbytes: int = LINK_BYTES) -> float:
    """Pinned host-to-GPU copies' rate by device time, the engine's (a warm-up, then three)."""
    transfer = engine.open_transfer(device, "h2d", "pinned", "memcpy", nbytes, 0, rotate=False)
    try:
        transfer.fill(DEFAULT_SEED)
        transfer.time("device", nbytes, 1)
        timing = transfer.time("device", nbytes, 3)
        return nbytes * 3 * transfer.copies_per_iteration / timing.seconds
    finally:
        transfer.close()


def checked(engine: Engine, device: int, layouts: list[Layout], buffers: list[Any]) -> bool:
    """The first and last bytes of tensors spread over each file (its first and last among
    them) read back from the GPU with the staged copier and compared with the file."""
    copier = engine.staged_copier(device)
    try:
        for layout, buffer in zip(layouts, buffers, strict=True):
            spans = [t for t in layout.tensors if t.nbytes]
            picked = [*spans[:: max(1, len(spans) // CHECKED_RANGES)][:CHECKED_RANGES], *spans[-1:]]
            fd = os.open(layout.path, os.O_RDONLY)
            try:
                for t in picked:
                    n = min(CHECKED_BYTES, t.nbytes)
                    host = np.empty(n, dtype=np.uint8)
                    for at in {t.begin, t.end - n}:
                        copier.to_host(
                            host.ctypes.data, buffer.data_ptr() + at - layout.data_begin, n
                        )
                        if host.tobytes() != os.pread(fd, n, at):
                            return False
            finally:
                os.close(fd)
    finally:
        copier.close()
    return True


def measure(
    engine: Engine,
    paths: Sequence[str],
    device: int = 0,
    repeats: int = DEFAULT_REPEATS,
    cold: bool = True,
    progress: Progress = QUIET,
) -> CheckpointResult:
    """Measures the checkpoint's path `repeats` times (the module's docstring); Ctrl-C keeps
    the repeats' figures measured so far."""
    if repeats < 1:
        raise OptionError("--repeats", f"{repeats} is not a count of at least 1")
    check_device(engine, device)
    files, layouts = opened(paths)
    check_memory(engine, device, layouts)
    created = now()
    meta = machine.collect(engine, [device])
    start = engine.clock()
    names = [str(f.path) for f in files]
    data = sum(layout.data_bytes for layout in layouts)
    figures: dict[str, list[float]] = {f: [] for f in Samples.__dataclass_fields__}
    verified: bool | None = None
    interrupted = False
    copier = engine.many_copier(device)
    copier.prepare_staged()  # its threads and pinned chunks: made once, as a program's first load
    kept: list[Any] = []

    def step(label: str, figure: str, value: Callable[[], float]) -> None:
        progress.begin(label)
        figures[figure].append(value())
        progress.step(label)

    try:
        for r in range(repeats):
            tag = f"repeat {r + 1}/{repeats}"
            if cold:
                figures["resident_after_drop"].append(storage.cached(names, warm=False))
                step(f"{tag}: disk from cold", "disk_bps",
                     lambda: storage.read_rate(names, DISK_THREADS, False, DISK_BLOCK))  # fmt: skip
                storage.cached(names, warm=False)
                step(f"{tag}: load from cold", "load_cold_s",
                     lambda: load_once(engine, copier, device, paths, files))  # fmt: skip
            storage.cached(names, warm=True)
            step(f"{tag}: page cache", "page_cache_bps", lambda: page_cache_bps(names))
            keep = kept if r == repeats - 1 else None  # the last load's bytes are checked
            warm = functools.partial(load_once, engine, copier, device, paths, files, keep)
            step(f"{tag}: load from warm", "load_warm_s", warm)
            step(f"{tag}: headers", "headers_bps", lambda: headers_bps(paths, files, data))
            step(f"{tag}: host memory", "host_memory_bps", memcpy_bps)
            step(f"{tag}: link", "link_bps", lambda: link_bps(engine, device))
        if kept and not engine.simulated:  # the simulated engine moves no bytes
            verified = checked(engine, device, kept[0], kept[1])
    except KeyboardInterrupt:
        interrupted = True
    finally:
        for buffer in kept[1] if kept else ():
            buffer.close()
        copier.close()
    found: list[Finding] = []
    warm_after_drop = max(figures["resident_after_drop"], default=0.0)
    if warm_after_drop > COLD_MOST:
        found.append(finding(
            "cache_not_dropped", WARNING, "disk",
            f"{warm_after_drop:.0%} of the files stayed in the page cache after "
            "posix_fadvise(DONTNEED): the cold figures are partly warm",
            "a filesystem that keeps its pages (tmpfs, overlay, a network filesystem's cache)",
            "put the checkpoint on a disk's filesystem, or read the warm figures only "
            "(--no-cold)", value=warm_after_drop))  # fmt: skip
    if verified is False:
        found.append(corrupted("load", "the GPU's bytes after a load differ from the file's: "
                                       "its times are invalid"))  # fmt: skip
    return CheckpointResult(
        created=created,
        simulated=engine.simulated,
        machine=meta,
        options={"paths": list(paths), "device": device, "repeats": repeats, "cold": cold},
        device=device,
        files=tuple(
            CheckpointFile(str(layout.path), layout.size, layout.data_bytes, len(layout.tensors))
            for layout in layouts
        ),
        samples=Samples(**{k: tuple(v) for k, v in figures.items()}),
        verified=verified,
        interrupted=interrupted,
        wall_s=engine.clock() - start,
        findings=tuple(found),
    )
