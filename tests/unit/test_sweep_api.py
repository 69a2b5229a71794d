"""`sweep --api`: the driver API's cuMemcpy forms beside the runtime's, on the same curves."""

from __future__ import annotations

import json

import pytest

from xferscope import cli
from xferscope.cli.sweep import with_api
from xferscope.core.errors import OptionError


def test_api_maps_mechanisms_to_their_driver_forms():
    assert with_api(("memcpy", "async"), "runtime") == ("memcpy", "async")
    assert with_api(("memcpy", "async"), "driver") == ("driver", "driver-async")
    assert with_api(("memcpy", "kernel"), "runtime,driver") == ("memcpy", "driver", "kernel")
    with pytest.raises(OptionError, match="--api"):
        with_api(("kernel",), "driver")
    with pytest.raises(OptionError, match="--api"):
        with_api(("memcpy",), "cuda")


def test_both_apis_on_the_same_curves(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("XFERSCOPE_HISTORY", str(tmp_path / "h.sqlite3"))
    code = cli.main(["sweep", "--simulate", "--api", "runtime,driver", "--mechanism", "memcpy",
                     "-m", "pinned", "--direction", "h2d,d2d", "--sizes", "4KiB,1MiB",
                     "--json", str(tmp_path / "s.json"), "-o", str(tmp_path / "out")])  # fmt: skip
    _, err = capsys.readouterr()
    assert code == 0, err
    doc = json.loads((tmp_path / "s.json").read_text())
    labels = {(c["config"]["direction"], c["config"]["mechanism"]) for c in doc["curves"]}
    assert labels == {("h2d", "memcpy"), ("h2d", "driver"), ("d2d", "memcpy"), ("d2d", "driver")}
    code = cli.main(["sweep", "--simulate", "--api", "driver", "--mechanism", "staged"])
    _, err = capsys.readouterr()
    assert code != 0 and len(err.strip().splitlines()) == 1 and "--api" in err
