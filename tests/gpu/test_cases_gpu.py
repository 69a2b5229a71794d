"""The case table's contract on a GPU: the native engine accepts and refuses every combination
of the axes exactly as the simulated engine does (tests/unit/test_cases.py), with the same
words; and errors keep their types across the boundary, a failed held copy included."""

from __future__ import annotations

import time

import numpy as np
import pytest

from xferscope.core import cases
from xferscope.core.engine.simulated import SimulatedEngine
from xferscope.core.errors import CudaError

from ..unit.test_cases import COMBINATIONS, expected, outcome

pytestmark = pytest.mark.gpu
MIB = 1 << 20


def test_the_native_engine_keeps_the_contract(native_engine):
    gpus = native_engine.device_count()
    seen = []
    waived = 0
    model = SimulatedEngine(devices=max(gpus, 2))
    for combination in COMBINATIONS:
        direction, *_ = combination
        accepted = expected(*combination) == "ok"
        if direction == "p2p" and accepted and gpus < 2:
            continue  # waived: a peer copy needs two GPUs
        native = outcome(native_engine, *combination)
        mine, theirs = expected(*combination, eng=native_engine), expected(*combination, eng=model)
        assert native == mine, combination
        if mine != theirs:  # a kind this machine has and the model's lacks, or the reverse
            waived += 1
            continue
        assert outcome(model, *combination) == mine, combination
        seen.append(combination)
    print(
        f"{len(seen)} of {len(COMBINATIONS)} combinations agree on {gpus} GPU(s); "
        f"{sum(expected(*c, eng=native_engine) == 'ok' for c in seen)} measured, the others "
        f"refused alike; {waived} where this machine and the model differ in what they have"
    )


def test_a_held_copy_that_fails_lets_the_kernel_go(native_engine):
    """A CUDA error while copies are queued behind the blocking kernel: the call raises a
    CudaError with its name at once, and the next measurement runs normally, not behind a
    kernel spinning to its 5 s timeout."""
    t = native_engine.open_transfer(0, "h2d", "pinned", "async", MIB, 0)
    try:
        t.time("device", MIB, 20)  # warm-up
        t.inject_copy_failure()
        start = time.monotonic()
        with pytest.raises(CudaError) as info:
            t.time("device", MIB, 50)
        assert info.value.name == "cudaErrorInvalidValue"
        after = t.time("device", MIB, 50)
        elapsed = time.monotonic() - start
        assert elapsed < 1.0, elapsed
        assert after.blocking_kernel and not after.blocking_timed_out
        assert t.verify(MIB).ok
    finally:
        t.close()


def test_a_failed_concurrent_batch_lets_every_kernel_go(native_engine):
    a = native_engine.open_transfer(0, "h2d", "pinned", "async", MIB, 0)
    b = native_engine.open_transfer(0, "d2h", "pinned", "async", MIB, 0)
    try:
        b.inject_copy_failure()
        start = time.monotonic()
        with pytest.raises(CudaError):
            native_engine.time_concurrently([a, b], MIB, 20)
        seconds, timed_out = native_engine.time_concurrently([a, b], MIB, 20)
        assert time.monotonic() - start < 1.0 and not timed_out and all(s > 0 for s in seconds)
    finally:
        a.close()
        b.close()


def test_a_staged_workers_cuda_error_keeps_its_type(native_engine):
    copier = native_engine.staged_copier(0)
    host = np.ones(4 * MIB, dtype=np.uint8)
    try:
        with pytest.raises(CudaError) as info:
            copier.to_device(0x1000, host.ctypes.data, host.nbytes)  # not device memory
        assert info.value.name.startswith("cudaError")
    finally:
        copier.close()


def test_limits_hold_on_the_gpu(native_engine):
    most = int(cases.LIMITS["most_held_copies"])
    t = native_engine.open_transfer(0, "h2d", "pinned", "async", MIB, 0)
    try:
        with pytest.raises(Exception, match=f"1..{most} copies"):
            native_engine.time_concurrently([t], MIB, most + 1)
    finally:
        t.close()
