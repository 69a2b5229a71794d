"""GEMM through cuBLASLt on a real GPU: every precision the GPU has runs and verifies, an
injected wrong output is caught, the chosen algorithm is recorded, small shapes rotate their
inputs, and a shape that does not fit says so. Skipped without a GPU."""

from __future__ import annotations

import pytest

from xferscope.core.errors import AllocationError
from xferscope.gemm import measure as gm
from xferscope.gemm import records as gr
from xferscope.gemm.shapes import Shape

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("precision", gr.PRECISIONS)
def test_every_precision_runs_verifies_and_catches_a_fault(native_engine, precision):
    capability = gm.compute_capability(native_engine, 0)
    options = gr.GemmOptions(precisions=(precision,), shapes=(Shape(1024, 512, 768),))
    reason = gm.refusal(options, precision, Shape(1024, 512, 768), capability)
    if reason:
        pytest.skip(reason)
    trans_a, trans_b = options.layout(precision)
    g = native_engine.gemm(0, precision, 1024, 512, 768, trans_a, trans_b, 1.5, 0.5)
    try:
        assert g.time(3) > 0
        assert g.verify(512).ok
        bad = g.verify(512, inject_fault=True)
        assert not bad.ok and bad.failures >= 1 and (bad.worst_row, bad.worst_column) == (0, 0)
        assert g.algorithm["id"] >= 0
    finally:
        g.close()


def test_small_shapes_rotate_and_big_ones_do_not(native_engine):
    small = native_engine.gemm(0, "fp32", 256, 256, 256, rotation_bytes=gr.ROTATION_BYTES)
    big = native_engine.gemm(0, "fp32", 4096, 4096, 4096, rotation_bytes=gr.ROTATION_BYTES)
    try:
        assert small.copies > 1 and big.copies == 1
    finally:
        small.close()
        big.close()


def test_a_shape_too_large_names_what_it_needs(native_engine):
    with pytest.raises(AllocationError, match="MiB free"):
        native_engine.gemm(0, "fp64", 300000, 300000, 300000)


def test_a_measured_run_is_verified_with_a_sensible_rate(native_engine):
    options = gr.GemmOptions(
        precisions=("fp32", "bf16"), shapes=(Shape(4096, 4096, 4096),), target_s=0.05, trials=3
    )
    result = gm.measure(native_engine, options)
    for p in result.points:
        assert p.status == "complete" and p.verified, p
        assert 1e12 < (p.flops or 0) < 3e15


def test_transfers_deliver_c_and_tiles_overlap_copies_with_the_gemm(native_engine):
    g = native_engine.gemm(0, "fp32", 8192, 8192, 8192)
    try:
        g.time_with_transfers(True, 8, 3, 1)  # warm-up: host buffers, tile algorithms
        sequence, delivered = g.time_with_transfers(True, 1, 1, 3)
        assert delivered
        tiled, delivered = g.time_with_transfers(True, 8, 3, 3)
        assert delivered and tiled < sequence
        compute = g.time(3)
        assert compute < tiled
        pageable, delivered = g.time_with_transfers(False, 1, 1, 1)
        assert delivered and pageable > sequence / 3
        assert g.verify(256).ok  # the uploads put back the same inputs
    finally:
        g.close()


def test_padding_times_the_small_shape_inside_the_large_one(native_engine):
    from xferscope.core.errors import EngineError

    g = native_engine.gemm(0, "fp32", 8192, 8192, 8192)
    try:
        g.time_padded(8136, 8136, 8136, 1)  # warm-up: the unpadded buffers
        alone, padded = g.time(5) / 5, g.time_padded(8136, 8136, 8136, 5) / 5
        # the copies in and out cost something, but far less than the GEMM
        assert alone < padded < 1.5 * alone
        with pytest.raises(EngineError, match="must fit"):
            g.time_padded(8200, 8136, 8136, 1)
    finally:
        g.close()


def test_the_run_check_takes_under_10_s_and_verifies(native_engine):
    import time

    from xferscope.gemm.check import gemm_check

    start = time.monotonic()
    check = gemm_check(native_engine, 0)
    wall = time.monotonic() - start
    assert check.status == "complete", check
    ran = [p for p in check.points if p["status"] != "skipped"]
    assert {"fp64", "fp32", "bf16"} <= {p["precision"] for p in ran}
    assert all(p["verified"] and 0.2 < p["share_of_peak"] < 1.05 for p in ran), ran
    assert check.break_even and check.break_even["one_thread"]
    assert wall < 10, f"the GEMM check took {wall:.1f} s"


@pytest.mark.parametrize("size", [4096, 8192])
def test_a_tuning_times_every_candidate_and_stands_for_the_warm_up(native_engine, size):
    """A tuning of 8 candidates times them and reports the GPU time of the GEMMs it timed, both
    where a pass holds several GEMMs (4096^3 fp32) and where one GEMM outlasts it (8192^3: each
    candidate's first launch is its forward pass); a GEMM given the rank chosen takes it, timed
    against none; the trials need no warm-up after a tuning longer than it."""
    tuned = native_engine.gemm(0, "fp32", size, size, size, tune=8)
    try:
        algorithm = dict(tuned.algorithm)
        assert algorithm["candidates"] > 1, algorithm
        # at least one GEMM or kTuningPassSeconds a candidate forward
        least = min(0.01, 2 * size**3 / 100e12)
        assert least * algorithm["candidates"] <= algorithm["tuned_s"] < 2.0, algorithm
        assert gm.warm_up(0.05, algorithm) == 0.0
        assert tuned.verify(256).ok
    finally:
        tuned.close()
    kept = native_engine.gemm(0, "fp32", size, size, size, tune=8, rank=algorithm["rank"])
    try:
        assert kept.algorithm["rank"] == algorithm["rank"]
        assert kept.algorithm["candidates"] == 0 and kept.algorithm["tuned_s"] == 0.0
        assert gm.warm_up(0.05, dict(kept.algorithm)) == 0.05
    finally:
        kept.close()
