"""A checkpoint's files apart from the GPU (xferscope.transfer.loading.storage): the page
cache's share of a file as mincore tells it, a file made warm, and the rate threads read files
at, buffered and, where the filesystem takes it, with O_DIRECT; every byte counted."""

from __future__ import annotations

import os
import threading

import pytest

from xferscope.transfer.loading import storage


def test_a_file_read_in_whole_is_resident_and_an_empty_one_counts_as_resident(tmp_path):
    path = tmp_path / "f.bin"
    path.write_bytes(os.urandom(3 << 20))
    assert storage.cached([path], warm=True) == 1.0
    assert 0.0 <= storage.cached([path], warm=False) <= 1.0  # dropping is the kernel's call
    (tmp_path / "empty").write_bytes(b"")
    assert storage.resident_share(tmp_path / "empty") == 1.0
    storage.cached([path], warm=True)
    assert storage.resident_share(path, samples=5) == storage.resident_share(path, 1) == 1.0


def test_warming_reads_only_the_files_not_wholly_resident(tmp_path, monkeypatch):
    files = [tmp_path / "resident.bin", tmp_path / "cold.bin"]
    for f in files:
        f.write_bytes(os.urandom(1 << 20))
    shares = {str(files[0]): 1.0, str(files[1]): 0.5}
    monkeypatch.setattr(storage, "resident_share", lambda p, samples=0: shares[str(p)])
    opened = []
    real = storage.os.open
    mine = {str(f) for f in files}  # another thread's opens are not the test's

    def watched(p, *a):
        if str(p) in mine:
            opened.append(str(p))
        return real(p, *a)

    monkeypatch.setattr(storage.os, "open", watched)
    storage.cached(files, warm=True)
    assert opened == [str(files[1])]
    opened.clear()
    storage.cached(files, warm=False)  # dropping drops every file
    assert opened == [str(f) for f in files]


def test_a_sample_looks_at_pages_spread_evenly_over_the_file(tmp_path, monkeypatch):
    path = tmp_path / "f.bin"
    path.write_bytes(os.urandom(100 * 4096 + 10))  # 101 pages
    looked = []
    monkeypatch.setattr(storage.mmap, "PAGESIZE", 4096)
    monkeypatch.setattr(
        storage, "_resident", lambda p, fd, first, n: looked.append((first, n)) or 1
    )
    assert storage.resident_share(path, samples=5) == 1.0
    assert sorted(looked) == [(0, 1), (25, 1), (50, 1), (75, 1), (100, 1)]
    looked.clear()
    assert storage.resident_share(path) == 1 / 101 and looked == [(0, 101)]


@pytest.mark.parametrize("ranges", [False, True])
@pytest.mark.parametrize("threads", [1, 3])
def test_threads_read_every_byte_of_every_file(tmp_path, monkeypatch, threads, ranges):
    paths = []
    for i, size in enumerate((5 << 20, (2 << 20) + 123, 0)):
        paths.append(tmp_path / f"{i}.bin")
        paths[-1].write_bytes(os.urandom(size))
    counted = []
    by_thread: dict[str, list[tuple[int, int]]] = {}
    real = os.preadv

    def preadv(fd: int, buffers: list, offset: int) -> int:
        n = real(fd, buffers, offset)
        counted.append(n)
        by_thread.setdefault(threading.current_thread().name, []).append((fd, offset))
        return n

    monkeypatch.setattr(os, "preadv", preadv)
    assert storage.read_rate(paths, threads, False, 1 << 20, ranges=ranges) > 0
    assert sum(counted) == sum(p.stat().st_size for p in paths)
    if ranges:  # each thread its own share of a file: one run of blocks, in order
        for reads in by_thread.values():
            for fd in {f for f, _ in reads}:
                starts = [at for f, at in reads if f == fd]
                assert starts == list(range(starts[0], starts[-1] + 1, 1 << 20))
        assert len(by_thread) == threads


def test_o_direct_reads_where_the_filesystem_takes_it(tmp_path):
    path = tmp_path / "d.bin"
    path.write_bytes(os.urandom(1 << 20))
    try:
        assert storage.read_rate([path], 2, direct=True) > 0
    except OSError as exc:  # tmpfs and some others refuse O_DIRECT: said as an OSError
        assert exc.errno is not None


def test_reading_ahead_asks_the_kernel_for_each_window_and_stops_when_told(tmp_path, monkeypatch):
    paths = [tmp_path / "a.bin", tmp_path / "b.bin"]
    for p in paths:
        p.write_bytes(os.urandom(300 << 10))
    asked = []
    real = os.posix_fadvise
    monkeypatch.setattr(os, "posix_fadvise", lambda fd, at, n, advice: asked.append((at, n, advice))
                        or real(fd, at, n, advice))  # fmt: skip
    assert storage.read_rate(paths, 2, direct=False, block=64 << 10, ahead=128 << 10) > 0
    wanted = [(0, 128 << 10), (128 << 10, 128 << 10), (256 << 10, 44 << 10)] * 2
    # two files read by two threads: each file's windows in order, the files' in any order
    assert sorted((a, n) for a, n, _ in asked) == sorted(wanted)
    assert {advice for *_, advice in asked} == {os.POSIX_FADV_WILLNEED}
    read = []
    real_read = os.preadv
    monkeypatch.setattr(os, "preadv", lambda fd, bufs, at: read.append((at, len(bufs[0])))
                        or real_read(fd, bufs, at))  # fmt: skip
    with storage.Ahead(paths, 128 << 10, read=True):
        pass
    with storage.Ahead(paths, 128 << 10, read=True) as ahead:
        ahead._thread.join()
    assert sorted(read[-6:]) == sorted([(0, 128 << 10), (128 << 10, 128 << 10),
                                        (256 << 10, 128 << 10)] * 2)  # fmt: skip
    asked.clear()
    ahead = storage.Ahead(paths, 1 << 10)
    ahead._stop.set()  # told to stop before it began: it asks for nothing
    with ahead:
        pass
    assert asked == []
