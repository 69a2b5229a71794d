"""Native engine on a real GPU: verification of every path, fault detection, physical limits,
typed errors. Skipped without a GPU."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys

import pytest

from xferscope.core.errors import AllocationError, NoDeviceError
from xferscope.core.machine import gpu_record
from xferscope.sweep.measure import run_sweep
from xferscope.sweep.options import SweepOptions

pytestmark = pytest.mark.gpu

HOST_KINDS = ("pageable", "pinned", "wc", "registered", "mapped")
MECHANISMS = ("memcpy", "async", "kernel")
# Odd sizes and sizes that are not multiples of the copy kernel's 16-byte vectors on purpose.
SIZES = (1, 7, 4097, (1 << 20) + 3, 64 << 20)


def _configs():
    for direction in ("h2d", "d2h", "roundtrip"):
        for memory, mechanism in itertools.product(HOST_KINDS, MECHANISMS):
            if not (mechanism == "kernel" and memory == "pageable"):
                yield direction, memory, mechanism
    for mechanism in MECHANISMS:
        yield "d2d", "device", mechanism


@pytest.mark.parametrize(("direction", "memory", "mechanism"), list(_configs()))
def test_every_path_verifies_and_times(native_engine, direction, memory, mechanism):
    transfer = native_engine.open_transfer(0, direction, memory, mechanism, max(SIZES), 0)
    try:
        transfer.fill(1234)
        for size in SIZES:
            v = transfer.verify(size)
            assert v.ok, (size, v)
            assert v.bytes_checked == size
            for timing in ("api", "device"):
                r = transfer.time(timing, size, 3)
                assert r.seconds > 0
                assert not r.blocking_timed_out
                expect_blocking = timing == "device" and transfer.blocks_for_device_timing
                assert r.blocking_kernel == expect_blocking
    finally:
        transfer.close()


@pytest.mark.parametrize("direction", ["h2d", "d2h", "d2d", "roundtrip"])
@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_corrupted_destination_is_detected(native_engine, direction, mechanism):
    memory = "device" if direction == "d2d" else "pinned"
    size = (1 << 20) + 5
    transfer = native_engine.open_transfer(0, direction, memory, mechanism, size, 0)
    try:
        v = transfer.verify(size, inject_fault=True)
        assert not v.ok
        assert v.mismatched_bytes == 1
        assert v.first_mismatch == size // 2
        assert transfer.verify(size).ok  # and a clean copy passes again
    finally:
        transfer.close()


def test_bandwidth_stays_under_the_physical_limit(native_engine):
    gpu = gpu_record(native_engine, 0)
    options = SweepOptions(
        directions=("h2d", "d2h", "d2d"),
        memories=("pinned",),
        mechanisms=("async", "kernel"),
        timings=("device",),
        sizes=(256 << 20,),
        target_s=0.05,
        trials=5,
        budget_s=None,
    )
    result = run_sweep(native_engine, options)
    assert not result.simulated
    for curve in result.curves:
        (point,) = curve.points
        assert point.verification is not None and point.verification.ok
        if curve.config.direction == "d2d":
            limit = gpu["memory_peak_bps"] / 2  # bytes copied: each is read and written
        else:
            limit = gpu["pcie_peak_bps"] or gpu["pcie_peak_max_bps"]
        if limit is None:
            pytest.skip("this GPU reports no link facts")
        assert 0 < point.peak_bandwidth < limit, (curve.config.label, point.peak_bandwidth, limit)
        # and it is a real transfer, not a no-op: at least a fifth of the limit
        assert point.bandwidth > limit / 5, (curve.config.label, point.bandwidth, limit)


def test_unknown_device_is_a_typed_error(native_engine):
    with pytest.raises(NoDeviceError, match="index"):
        native_engine.device_info(native_engine.device_count())


def test_impossible_allocation_is_a_typed_error(native_engine):
    _free, total = native_engine.memory_info(0)
    with pytest.raises(AllocationError, match="device"):
        native_engine.open_transfer(0, "d2d", "device", "async", 4 * total, 0)


def test_sweep_cli_on_gpu(native_engine, tmp_path):
    out = tmp_path / "r.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "xferscope",
            "sweep",
            "--quick",
            "--sizes",
            "4,1MiB,64MiB",
            "-d",
            "h2d,d2h,roundtrip",
            "-m",
            "pinned,pageable",
            "--timing",
            "api,device",
            "--json",
            str(out),
            "-o",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(out.read_text())
    assert doc["simulated"] is False
    assert doc["machine"]["gpus"][0]["name"]
    assert len(doc["curves"]) == 12
    for curve in doc["curves"]:
        assert curve["status"] == "complete"
        assert all(p["verification"]["ok"] for p in curve["points"])


def test_info_cli_on_gpu(native_engine):
    proc = subprocess.run(
        [sys.executable, "-m", "xferscope", "info", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    facts = json.loads(proc.stdout)
    assert facts["gpus"] and facts["driver"]


def test_cold_copies_rotate_and_warm_copies_stay(native_engine):
    size = 1 << 20
    for rotate, resident in ((True, False), (False, True)):
        transfer = native_engine.open_transfer(0, "d2d", "device", "async", size, 256 << 20, rotate)
        try:
            r = transfer.time("device", size, 200)
            assert (r.footprint_bytes < 2 * 60 * 10**6) == resident, r
            assert transfer.verify(size).ok
        finally:
            transfer.close()


def test_ctrl_c_on_gpu_writes_what_was_measured(native_engine, tmp_path):
    import signal
    import time

    out = tmp_path / "r.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "xferscope", "sweep", "--json", str(out), "-o", str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(8)  # well into the first curve, with its largest sizes done
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr and "interrupted" in stderr
    doc = json.loads(out.read_text())
    assert doc["interrupted"] is True
    assert doc["curves"][-1]["status"] == "interrupted"
    assert sum(len(c["points"]) for c in doc["curves"]) > 0


def test_kept_buffers_are_handed_out_again_and_copies_stay_right(native_engine):
    """While buffers are kept, a transfer like the last one gets its buffers again (no fresh
    allocation), and its copies still verify after a new fill; a corrupted copy is still
    caught; leaving frees them."""
    from xferscope.core.compiled import engine_module

    size = 96 << 20
    e = engine_module()
    e.keep_buffers(True)
    try:
        for seed, memory in ((1, "pinned"), (2, "pinned"), (3, "pageable"), (4, "pageable")):
            t = native_engine.open_transfer(0, "h2d", memory, "async", size, 0)
            try:
                t.fill(seed)
                t.time("device", size, 2)
                assert t.verify(size).ok
                assert not t.verify(size, inject_fault=True).ok
            finally:
                t.close()
    finally:
        reused = e.keep_buffers(False)
    # the second pinned and second pageable transfer each got a host and a device buffer back
    assert reused >= 3
    assert e.keep_buffers(False) == 0  # nothing kept any more
