"""The run's engine primitives and `xferscope run` on real GPUs. Skipped without a GPU; the
peer-to-peer tests need two."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from xferscope.core.errors import EngineError
from xferscope.core.machine import gpu_record
from xferscope.run.records import PINNING_KEYS

pytestmark = pytest.mark.gpu
MIB = 1 << 20


@pytest.fixture
def two_gpus(native_engine):
    if native_engine.device_count() < 2:
        pytest.skip("needs two GPUs")
    return native_engine


def test_h2d_and_d2h_run_at_once(native_engine):
    size = 64 * MIB
    h2d = native_engine.open_transfer(0, "h2d", "pinned", "async", size, 0)
    d2h = native_engine.open_transfer(0, "d2h", "pinned", "async", size, 0)
    try:
        alone = [t.time("device", size, 10).seconds for t in (h2d, d2h)]
        seconds, timed_out = native_engine.time_concurrently([h2d, d2h], size, 10)
        assert not timed_out and all(s > 0 for s in seconds)
        limit = gpu_record(native_engine, 0)["pcie_peak_bps"]
        rates = [10 * size / s for s in seconds]
        assert all(r < limit for r in rates), rates
        # PCIe is full duplex: together they move far more than either alone.
        assert sum(rates) > 1.3 * max(10 * size / a for a in alone), (rates, alone)
        assert h2d.verify(size).ok and d2h.verify(size).ok
    finally:
        h2d.close()
        d2h.close()


def test_concurrent_streams_must_be_asynchronous(native_engine):
    t = native_engine.open_transfer(0, "h2d", "pageable", "async", MIB, 0)
    try:
        with pytest.raises(EngineError, match="non-pageable"):
            native_engine.time_concurrently([t], MIB, 4)
    finally:
        t.close()


def test_pinning_costs(native_engine):
    c = native_engine.measure_pinning(0, 256 * MIB)
    assert all(getattr(c, key) > 0 for key in PINNING_KEYS), c
    assert c.pinned_copy_s < c.pageable_copy_s
    assert c.registered_copy_s < c.pageable_copy_s


@pytest.mark.parametrize(
    ("mechanism", "access"), [("async", True), ("kernel", True), ("async", False)]
)
def test_peer_to_peer_verifies_and_stays_under_nvlink(two_gpus, mechanism, access):
    size = (64 * MIB) + 3
    t = two_gpus.open_transfer(0, "p2p", "device", mechanism, size, 0, True, 1, access)
    try:
        assert t.verify(size).ok
        v = t.verify(size, inject_fault=True)
        assert not v.ok and v.mismatched_bytes == 1
        r = t.time("device", size, 10)
        assert not r.blocking_timed_out
        assert r.blocking_kernel == access  # staged copies cannot wait behind the kernel
        rate = 10 * size / r.seconds
        assert rate < 18 * 25e9  # NVLink 4, 18 links: 450 GB/s per direction
        assert rate > 5e9
    finally:
        t.close()


def test_run_quick_on_gpu(native_engine, tmp_path):
    begin = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "xferscope", "run", "--quick", "--no-history", "-o", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    wall = time.perf_counter() - begin
    assert proc.returncode == 0, proc.stderr[-3000:]
    (directory,) = tmp_path.glob("run-*")
    doc = json.loads((directory / "run.json").read_text())
    assert doc["complete"] and not doc["simulated"]
    assert len(doc["gpus"]) == native_engine.device_count()
    assert (directory / "report.html").stat().st_size > 100_000
    print(f"run --quick took {wall:.1f} s on {native_engine.device_count()} GPU(s)")
