"""2D and 3D copies on a GPU: every method places every row, both ways, pinned and pageable,
pitched and packed device rows, at widths that are and are not multiples of the kernel's words;
a readback leaves the host's gaps between rows untouched."""

from __future__ import annotations

import pytest

from xferscope.core.compiled import engine_module
from xferscope.pitch.measure import METHODS

pytestmark = pytest.mark.gpu
_e = engine_module()
WIDTHS = (1, 3, 64, 1000, 4096, 1 << 16)
TOTAL = 1 << 16


@pytest.mark.parametrize("direction", ["h2d", "d2h"])
@pytest.mark.parametrize("memory", ["pinned", "pageable"])
@pytest.mark.parametrize("pitched", [True, False])
def test_every_method_places_every_row(native_engine, direction, memory, pitched):
    for width in WIDTHS:
        rows = TOTAL // width
        for factor in (1, 3):
            p = native_engine.pitched(0, direction, memory, width, rows, width * factor, pitched)
            try:
                if pitched:
                    assert p.device_pitch >= width and p.device_pitch % 256 == 0
                else:
                    assert p.device_pitch == width
                assert rows % p.depth == 0
                for method in METHODS:
                    reason = _e.pitch_refusal(
                        direction, memory, width, rows, width * factor, pitched, method
                    )
                    if reason:
                        continue
                    assert p.verify(method) == (0, 0), (method, width, factor)
                    host_s, device_s = p.time(method, 2)
                    assert host_s > 0 and device_s > 0
            finally:
                p.close()


def test_the_cli_runs_on_the_gpu(native_engine, tmp_path, capsys, monkeypatch):
    from xferscope import cli

    monkeypatch.setenv("XFERSCOPE_HISTORY", str(tmp_path / "h.sqlite3"))
    code = cli.main(["pitch", "--total", "256KiB", "--widths", "1,64,4KiB,256KiB",
                     "--target-time", "0.005", "-o", str(tmp_path)])  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "GB/s by row width" in out
