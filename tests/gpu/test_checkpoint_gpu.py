"""`xferscope checkpoint` on a real GPU: every stage and load measured, the last load's bytes
read back equal to the file's, and a fault written into the GPU's copy found. Skipped without
a GPU."""

from __future__ import annotations

import numpy as np
import pytest

from tests.unit.test_checkpoint_layout import write
from xferscope.checkpoint import measure as module
from xferscope.transfer.loading import read_layout

pytestmark = pytest.mark.gpu


@pytest.fixture
def checkpoint(tmp_path):
    rng = np.random.default_rng(9)
    tensors = {f"w{i}": rng.random((512, 256 + i), dtype=np.float32) for i in range(12)}
    return write(tmp_path / "model.safetensors", tensors)


def test_a_checkpoint_is_measured_and_its_load_checked(native_engine, checkpoint):
    result = module.measure(native_engine, [str(checkpoint)], repeats=2)
    s = result.samples
    assert len(s.load_cold_s) == len(s.load_warm_s) == len(s.link_bps) == 2
    assert result.verified is True
    assert all(f.code == "cache_not_dropped" for f in result.findings)  # tmp may be tmpfs
    assert {b.state for b in result.bounds()} == {"cold", "warm"}


def test_a_fault_in_the_gpus_copy_is_found(native_engine, checkpoint):
    """The load's bytes, then one byte changed on the GPU through the staged copier."""
    copier = native_engine.many_copier(0)
    kept: list = []
    files, _ = module.opened([str(checkpoint)])
    module.load_once(native_engine, copier, 0, [str(checkpoint)], files, kept)
    layouts, buffers = kept
    try:
        assert module.checked(native_engine, 0, layouts, buffers)
        layout = read_layout(checkpoint)
        at = layout.data_bytes - 1  # the last byte: among the ranges read back
        wrong = np.array([np.frombuffer(checkpoint.read_bytes()[-1:], np.uint8)[0] ^ 0xFF],
                         dtype=np.uint8)  # fmt: skip
        staged = native_engine.staged_copier(0)
        staged.to_device(buffers[0].data_ptr() + at, wrong.ctypes.data, 1)
        staged.close()
        assert not module.checked(native_engine, 0, layouts, buffers)
    finally:
        for b in buffers:
            b.close()
        copier.close()
