"""Every batch method on a real GPU: each delivers every byte, both ways and within the GPU,
contiguous and scattered, and the SM copy kernel beats a loop of cudaMemcpyAsync on 1024 copies
of 4 KiB.
Skipped without a GPU."""

from __future__ import annotations

import pytest

from xferscope.core.compiled import engine_module

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize(
    ("direction", "memory"),
    [("h2d", "pinned"), ("h2d", "pageable"), ("d2h", "pinned"), ("d2h", "pageable"),
     ("d2d", "device")],
)  # fmt: skip
@pytest.mark.parametrize("scattered", [False, True])
def test_every_method_delivers_every_byte(native_engine, direction, memory, scattered):
    e = engine_module()
    sizes = [1, 7, 4096, 65536 + 3, 300000] * 20
    driver = native_engine.driver_version()
    pageable = bool(native_engine.device_info(0).get("pageable_memory_access"))
    b = native_engine.batch(0, direction, memory, sizes, scattered)
    try:
        for method in e.BATCH_METHODS:
            if e.batch_refusal(direction, memory, sizes, method, driver, pageable):
                continue
            assert b.verify(method) == 0, method
    finally:
        b.close()


def test_a_kernel_beats_a_loop_of_small_copies(native_engine):
    b = native_engine.batch(0, "h2d", "pinned", [4096] * 1024)
    try:
        b.time("loop", 3)
        b.time("kernel", 3)
        loop, kernel = b.time("loop", 20)[0], b.time("kernel", 20)[0]
        assert kernel * 3 < loop
    finally:
        b.close()


def test_a_mix_of_sizes_runs_verified_end_to_end(native_engine, tmp_path, capsys, monkeypatch):
    import json

    from xferscope import cli

    monkeypatch.setenv("XFERSCOPE_HISTORY", str(tmp_path / "history.sqlite3"))
    code = cli.main(["batch", "--counts", "16,256", "--size-mix", "lognormal:8KiB:2",
                     "--target-time", "0.002", "--trials", "1", "-o", str(tmp_path)])  # fmt: skip
    _, err = capsys.readouterr()
    assert code == 0, err
    (doc,) = (json.loads(p.read_text()) for p in tmp_path.glob("batch-*/batch.json"))
    statuses = {c["method"]: c["status"] for c in doc["cells"] if c["status"] != "skipped"}
    assert statuses and set(statuses.values()) == {"complete"}, statuses
    assert "staged" in statuses
