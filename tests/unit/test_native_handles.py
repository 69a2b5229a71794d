"""The native engine's simple handles (batch, 2D copy, NCCL communicator) over fake bindings:
each call goes through the engine's measuring guard, results come back as Python numbers, and
close() closes the binding and forgets the handle."""

from __future__ import annotations

from contextlib import contextmanager
from types import SimpleNamespace

from xferscope.core.engine import native_handles


class Guard:
    def __init__(self) -> None:
        self.calls = 0

    @contextmanager
    def _measuring(self):
        self.calls += 1
        yield


class Binding:
    bytes = 4096
    device_pitch = 512
    depth = 4

    def __init__(self, verify: object) -> None:
        self._verify = verify
        self.closed = False

    def time(self, *args: object) -> tuple[float, float]:
        return (2e-6, 1e-6)

    def verify(self, *args: object) -> object:
        return self._verify

    def stream(self, *args: object) -> float:
        return 0.5

    def ping_pong(self, *args: object) -> float:
        return 0.25

    def mismatches(self, *args: object) -> int:
        return 3

    def close(self) -> None:
        self.closed = True


def test_each_handle_is_guarded_converted_and_closed():
    guard = Guard()
    pitched = native_handles._NativePitched(
        Binding(SimpleNamespace(wrong_rows=1, gap_bytes=2)), guard
    )
    assert (pitched.bytes, pitched.device_pitch, pitched.depth) == (4096, 512, 4)
    assert pitched.time("2d", 3) == (2e-6, 1e-6) and pitched.verify("2d") == (1, 2)
    batch = native_handles._NativeBatch(Binding(5), guard)
    assert batch.time("loop", 1) == (2e-6, 1e-6) and batch.verify("loop") == 5
    pairs = native_handles._NativePairComm(Binding(None), guard)
    assert (pairs.stream(0, 1, 8, 1), pairs.ping_pong(0, 1, 8, 1), pairs.mismatches(8)) == (
        0.5, 0.25, 3,
    )  # fmt: skip
    assert guard.calls == 7
    assert {pitched, batch, pairs} <= set(native_handles._open_handles)
    for handle in (pitched, batch, pairs):
        handle.close()
        assert handle._handle.closed and handle not in native_handles._open_handles
