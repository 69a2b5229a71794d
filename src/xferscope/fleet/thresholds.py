"""Pass/fail thresholds for a fleet health check, in the spirit of DCGM's PCIe plugin: a small
TOML file of at most these keys, each defaulting to what the GPU's own link allows, so a
scheduler's health check can run `xferscope fleet` with no file at all.

    min_h2d_gbps = 45       # pinned host-to-device copies, copy engines, device time
    min_d2h_gbps = 45
    pcie_generation = 5     # the link must run at least this generation ...
    pcie_width = 16         # ... and width
    max_latency_us = 30     # a small pinned copy, device time, either direction
    max_replay_count = 10   # NVML's PCIe replay counter
    max_ecc_errors = 0      # volatile uncorrected ECC errors
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from ..core.errors import OptionError
from ..documents.files import read_text
from .records import COMPLETE, RankReport, Verdict

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

KEYS = {
    "min_h2d_gbps": "pinned host-to-device GB/s, at least",
    "min_d2h_gbps": "pinned device-to-host GB/s, at least",
    "pcie_generation": "PCIe generation, at least",
    "pcie_width": "PCIe lanes, at least",
    "max_latency_us": "small pinned copy, microseconds, at most",
    "max_replay_count": "PCIe replays, at most",
    "max_ecc_errors": "volatile uncorrected ECC errors, at most",
}
# Defaults: a share of the link's payload limit, which healthy Gen4 and Gen5 x16 links clear
# (an H200's pinned copies reach 0.88 of Gen5's 63 GB/s); the link as the GPU can train it.
DEFAULT_SHARE_OF_LINK = 0.7
DEFAULT_MAX_LATENCY_US = 30.0
DEFAULT_MAX_ECC_ERRORS = 0

H2D = "h2d/pinned/async/device/bandwidth"
D2H = "d2h/pinned/async/device/bandwidth"
LATENCIES = ("h2d/pinned/async/device/latency", "d2h/pinned/async/device/latency")


def load(path: str | None) -> dict[str, float]:
    """The thresholds a file sets (none without a file); one OptionError naming what is wrong."""
    if path is None:
        return {}
    if not path.strip():
        raise OptionError("--thresholds", "give a file name, not an empty string")
    try:
        data = tomllib.loads(read_text(Path(path)))
    except OSError as exc:
        raise OptionError("--thresholds", f"cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise OptionError("--thresholds", f"{path} is not a text file, so not TOML") from None
    except tomllib.TOMLDecodeError as exc:
        raise OptionError("--thresholds", f"{path} is not TOML: {exc}") from None
    out: dict[str, float] = {}
    for key, value in data.items():
        if key not in KEYS:
            raise OptionError(
                "--thresholds",
                f"{path}: unknown key '{key}' (accepted: {', '.join(KEYS)})",
            )
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
            raise OptionError("--thresholds", f"{path}: {key} = {value!r} is not a number >= 0")
        out[key] = float(value)
    return out


def for_gpu(given: dict[str, float], gpu: dict[str, Any]) -> dict[str, float]:
    """The thresholds that apply to one GPU: those given, the rest from its own link."""
    out = dict(given)
    peak = gpu.get("pcie_peak_max_bps")
    if peak:
        out.setdefault("min_h2d_gbps", round(DEFAULT_SHARE_OF_LINK * peak / 1e9, 1))
        out.setdefault("min_d2h_gbps", round(DEFAULT_SHARE_OF_LINK * peak / 1e9, 1))
    if gpu.get("pcie_generation_max"):
        out.setdefault("pcie_generation", float(gpu["pcie_generation_max"]))
    if gpu.get("pcie_width_max"):
        out.setdefault("pcie_width", float(gpu["pcie_width_max"]))
    out.setdefault("max_latency_us", DEFAULT_MAX_LATENCY_US)
    out.setdefault("max_ecc_errors", float(DEFAULT_MAX_ECC_ERRORS))
    return out


def judge(report: RankReport, given: dict[str, float]) -> Verdict:
    """One GPU against its thresholds: every one it misses, in a sentence."""
    if report.status != COMPLETE:
        return Verdict(report.rank, False, (f"{report.status}: {report.error or 'no result'}",))
    t = for_gpu(given, report.gpu)
    g, m = report.gpu, report.metrics
    failures = []
    for key, metric, name in (("min_h2d_gbps", H2D, "H2D"), ("min_d2h_gbps", D2H, "D2H")):
        if key in t and metric in m and m[metric] / 1e9 < t[key]:
            failures.append(f"{name} {m[metric] / 1e9:.1f} GB/s < {t[key]:g} ({key})")
    generation = g.get("pcie_generation")
    if "pcie_generation" in t and generation is not None and generation < t["pcie_generation"]:
        failures.append(f"PCIe Gen{generation} < Gen{t['pcie_generation']:g} (pcie_generation)")
    width = g.get("pcie_width")
    if "pcie_width" in t and width is not None and width < t["pcie_width"]:
        failures.append(f"PCIe x{width} < x{t['pcie_width']:g} (pcie_width)")
    for metric in LATENCIES:
        if "max_latency_us" in t and metric in m and m[metric] * 1e6 > t["max_latency_us"]:
            failures.append(
                f"{metric.split('/')[0].upper()} latency {m[metric] * 1e6:.1f} us > "
                f"{t['max_latency_us']:g} (max_latency_us)"
            )
    replays = g.get("pcie_replay_count")
    if "max_replay_count" in t and replays is not None and replays > t["max_replay_count"]:
        failures.append(f"{replays} PCIe replays > {t['max_replay_count']:g} (max_replay_count)")
    ecc = g.get("ecc_uncorrected_volatile")
    if "max_ecc_errors" in t and ecc is not None and ecc > t["max_ecc_errors"]:
        failures.append(f"{ecc} uncorrected ECC errors > {t['max_ecc_errors']:g} (max_ecc_errors)")
    return Verdict(report.rank, not failures, tuple(failures))
