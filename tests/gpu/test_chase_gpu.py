"""The pointer chase on a real GPU: every chain ends where it should, device memory is read
faster than host memory over the link, reads 0 picks a trial of about 20 ms, and what the engine
refuses it refuses with its own words. Skipped without a GPU."""

from __future__ import annotations

import statistics

import pytest

from xferscope.core.errors import EngineError
from xferscope.sweep.chase import CHASE_BYTES, CHASE_STRIDE

pytestmark = pytest.mark.gpu


def test_device_and_pinned_chases_end_where_the_chain_says(native_engine):
    device = native_engine.chase(0, "device", CHASE_BYTES, CHASE_STRIDE, 20_000, 3)
    pinned = native_engine.chase(0, "pinned", CHASE_BYTES, CHASE_STRIDE, 5_000, 3)
    assert device.verified and pinned.verified
    assert device.reads == 20_000 and device.slots == CHASE_BYTES // CHASE_STRIDE
    d, p = statistics.median(device.ns_per_read), statistics.median(pinned.ns_per_read)
    # HBM on an H100: 140 ns; a read over PCIe 5: 1.2 us
    assert 30 < d < 2_000 and 200 < p < 20_000 and p > 2 * d, (d, p)


def test_reads_zero_chooses_a_trial_of_about_20_ms(native_engine):
    r = native_engine.chase(0, "mapped", 64 << 20, 256, 0, 2)
    assert r.verified
    trial_s = r.reads * statistics.median(r.ns_per_read) * 1e-9
    assert 0.005 < trial_s < 0.08, trial_s


@pytest.mark.parametrize(
    "args, words",
    [
        (("pageable", 1 << 20, 4096, 100, 1), "cannot read pageable memory"),
        (("device", 1 << 20, 12, 100, 1), "multiple of 8"),
        (("device", 4096, 4096, 100, 1), "two strides"),
        (("pinned", 1 << 20, 4096, 100, 0), "trials 1 or more"),
    ],
)
def test_what_the_engine_refuses(native_engine, args, words):
    with pytest.raises(EngineError, match=words):
        native_engine.chase(0, *args)


def test_sweep_chases_on_the_gpu(native_engine, capsys, tmp_path):
    from pathlib import Path

    from xferscope import cli

    args = ["sweep", "--quick", "--sizes", "1MiB", "--no-history", "--chase", "-m"]
    code = cli.main([*args, "pinned,managed,pageable", "-o", str(tmp_path)])
    assert code == 0, capsys.readouterr()
    (document,) = Path(tmp_path).glob("*/sweep.json")
    import json

    chases = {c["memory"]: c for c in json.loads(document.read_text())["chases"]}
    assert set(chases) == {"device", "pinned", "managed"}
    assert all(c["verified"] for c in chases.values())
    assert chases["device"]["median_ns"] < chases["pinned"]["median_ns"]
