"""Confidential computing mode: read from NVML, said by `info`, and in `run` what it cost the
copies (the simulated engine models a CC system with XFERSCOPE_SIMULATE_CC=1)."""

from __future__ import annotations

import json
import types

from xferscope.core import nvml

from .test_cli import run


def _fake_nvml(feature: int, cpu: int | None) -> types.SimpleNamespace:
    state = types.SimpleNamespace(ccFeature=feature, environment=1, devToolsMode=0)
    return types.SimpleNamespace(
        NVML_CC_SYSTEM_FEATURE_ENABLED=1,
        NVML_CC_SYSTEM_DEVTOOLS_MODE_ON=1,
        NVML_CC_SYSTEM_ENVIRONMENT_SIM=1,
        NVML_CC_SYSTEM_ENVIRONMENT_PROD=2,
        NVML_CC_SYSTEM_CPU_CAPS_NONE=0,
        NVML_CC_SYSTEM_CPU_CAPS_INTEL_TDX=2,
        nvmlSystemGetConfComputeState=lambda: state,
        nvmlSystemGetConfComputeCapabilities=lambda: (
            None if cpu is None else types.SimpleNamespace(cpuCaps=cpu)
        ),
    )


def test_nvml_says_whether_confidential_computing_is_on(monkeypatch):
    monkeypatch.setattr(nvml, "_nvml", lambda: _fake_nvml(1, 2))
    assert nvml.confidential_computing() == {
        "enabled": True, "environment": "sim", "devtools": False, "cpu_tee": "intel_tdx"
    }  # fmt: skip
    monkeypatch.setattr(nvml, "_nvml", lambda: _fake_nvml(0, None))
    assert nvml.confidential_computing() == {
        "enabled": False, "environment": "sim", "devtools": False, "cpu_tee": None
    }  # fmt: skip
    older = types.SimpleNamespace()  # a driver before 535: no such query
    monkeypatch.setattr(nvml, "_nvml", lambda: older)
    assert nvml.confidential_computing() is None
    monkeypatch.setattr(nvml, "_nvml", lambda: None)
    assert nvml.confidential_computing() is None


def test_info_says_it(capsys, monkeypatch):
    code, out, _ = run(capsys, "info", "--simulate")
    assert code == 0 and "confidential computing: off" in out
    monkeypatch.setenv("XFERSCOPE_SIMULATE_CC", "1")
    code, out, _ = run(capsys, "info", "--simulate", "--json")
    assert code == 0
    assert json.loads(out)["confidential_computing"]["enabled"] is True


def test_a_run_says_what_it_cost_the_copies(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("XFERSCOPE_SIMULATE_CC", "1")
    code, _, err = run(capsys, "run", "--simulate", "--quick", "--no-history", "-o", str(tmp_path))
    assert code == 0, err
    (directory,) = tmp_path.iterdir()
    doc = json.loads((directory / "run.json").read_text())
    findings = {f["code"]: f for f in doc["findings"]}
    cc = findings["confidential_computing"]
    assert cc["severity"] == "info" and "pinned H2D reached" in cc["message"]
    assert 0.1 < cc["value"] / cc["reference"] < 0.4  # the model's cost: a quarter of the link
    slow = [f for f in doc["findings"] if f["code"] == "verdict" and f["severity"] == "warning"]
    assert slow and all("confidential computing is on" in f["cause"] for f in slow)


def test_without_it_a_run_says_nothing_of_it(capsys, tmp_path):
    code, _, err = run(capsys, "run", "--simulate", "--quick", "--no-history", "-o", str(tmp_path))
    assert code == 0, err
    (directory,) = tmp_path.iterdir()
    doc = json.loads((directory / "run.json").read_text())
    assert doc["machine"]["confidential_computing"]["enabled"] is False
    assert not [f for f in doc["findings"] if f["code"] == "confidential_computing"]


def test_a_bad_simulation_variable_is_one_line(capsys, monkeypatch):
    monkeypatch.setenv("XFERSCOPE_SIMULATE_CC", "yes")
    code, _, err = run(capsys, "info", "--simulate")
    assert code == 2 and err.strip().startswith("Error: XFERSCOPE_SIMULATE_CC: 'yes' is not 1")
