"""copy_many's `non_blocking` and `stream=` without a GPU: which stream the copies are queued
on (the one given, or the current one), what goes there (only queued methods: any other
decided goes by the loop, and the Choice says why), and bad streams as one clear line.
tests/gpu/test_copy_stream_gpu.py orders real copies behind a kernel on the caller's stream."""

from __future__ import annotations

import sys
import types

import numpy as np
import pytest

from xferscope import copy_many
from xferscope.transfer import calibration, streams
from xferscope.transfer.choice import ON_STREAM
from xferscope.transfer.copy import copies_of

from .test_copy_many import engine_with, gpu_blocks


@pytest.fixture(autouse=True)
def places(tmp_path, monkeypatch):
    monkeypatch.setenv("XFERSCOPE_HISTORY", str(tmp_path / "history.sqlite3"))
    monkeypatch.setenv(calibration.CALIBRATION_ENV, str(tmp_path / "calibration"))


def _batch(count: int, size: int):
    host = np.random.default_rng(3).integers(1, 255, count * size, dtype=np.uint8)
    engine = engine_with(pinned=host)
    pieces = [host[i * size : (i + 1) * size] for i in range(count)]
    return engine, list(zip(gpu_blocks(count, size), pieces, strict=True))


def test_a_method_that_stages_goes_by_the_loop_on_the_callers_stream_and_says_so():
    """1024 pinned pieces of 4 KiB go by the kernel (staging of copy_many's, waited for); queued
    on the caller's stream they go by the loop, which reads nothing of copy_many's."""
    engine, pairs = _batch(1024, 4096)
    assert copy_many(pairs, engine=engine).method == "kernel"
    queued = copy_many(pairs, engine=engine, non_blocking=True, stream=7)
    assert queued.method == "loop" and queued.reason == ON_STREAM
    assert "caller's stream" in queued.explain()
    assert copies_of(engine).copier(0).calls[-1][:3] == ("loop", True, 1024)


@pytest.mark.parametrize(
    ("stream", "fragment"),
    [
        ("cuda:0", "'cuda:0' is not a CUDA stream"),
        (-1, "-1 is not a CUDA stream"),
        (True, "True is not a CUDA stream"),
        (1 << 64, "is not a CUDA stream"),
        (types.SimpleNamespace(ptr="x"), "is not a CUDA stream"),
    ],
)
def test_a_bad_stream_is_one_clear_line_naming_the_option(stream, fragment):
    engine, pairs = _batch(2, 64)
    with pytest.raises(ValueError, match=r"^stream: ") as raised:
        copy_many(pairs, engine=engine, non_blocking=True, stream=stream)
    assert fragment in str(raised.value) and "cupy.cuda.Stream" in str(raised.value)


def test_a_stream_without_non_blocking_is_refused_before_anything_is_copied():
    engine, pairs = _batch(2, 64)
    with pytest.raises(ValueError, match=r"^stream: .*non_blocking=True"):
        copy_many(pairs, engine=engine, stream=5)
    assert copies_of(engine).copier(0).calls == []


def test_a_frameworks_stream_object_names_its_handle():
    """PyTorch's Stream (and ExternalStream) by .cuda_stream, CuPy's by .ptr; 0 is CUDA's
    legacy default stream, a stream too."""
    assert streams.handle(types.SimpleNamespace(cuda_stream=0x55AA), 0) == 0x55AA
    assert streams.handle(types.SimpleNamespace(ptr=0x1234), 0) == 0x1234
    assert streams.handle(0, 0) == 0


def test_the_current_stream_is_pytorchs_where_it_is_imported_else_cupys_else_cudas(monkeypatch):
    asked: list[object] = []

    def raw(index: int) -> int:
        asked.append(index)
        return 0xBEEF + index

    cuda = types.SimpleNamespace(current_device=lambda: 3)
    torch = types.SimpleNamespace(
        cuda=cuda, _C=types.SimpleNamespace(_cuda_getCurrentRawStream=raw)
    )
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    monkeypatch.delitem(sys.modules, "cupy", raising=False)
    assert streams.current(None) == 0  # neither imported: the legacy default stream
    cupy_stream = types.SimpleNamespace(ptr=0xC0C0)
    cupy = types.SimpleNamespace(cuda=types.SimpleNamespace(get_current_stream=lambda: cupy_stream))
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    assert streams.current(None) == 0xC0C0
    monkeypatch.setitem(sys.modules, "torch", torch)
    assert streams.current(None) == 0xBEEF + 3 and streams.current(1) == 0xBEEF + 1
    assert asked == [3, 1]
