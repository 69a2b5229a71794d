"""Link and clock facts from NVML, through nvidia-ml-py. The library is loaded on first use,
so the package imports and runs its simulated paths where no driver is installed."""

from __future__ import annotations

from functools import cache
from typing import Any


@cache
def _nvml() -> Any | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        return pynvml
    except Exception:  # no library, no driver: NVML facts are simply absent
        return None


def driver_version() -> str | None:
    nvml = _nvml()
    if nvml is None:
        return None
    try:
        version = nvml.nvmlSystemGetDriverVersion()
        return version.decode() if isinstance(version, bytes) else str(version)
    except Exception:
        return None


def _query(fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except Exception:
        return None


def _call(nvml: Any, name: str, *args: Any) -> Any:
    """NVML's `name`(*args), None where this NVML lacks it (an older driver) or it fails."""
    fn = getattr(nvml, name, None)
    return None if fn is None else _query(fn, *args)


def _device(uuid: str) -> tuple[Any, Any] | None:
    """NVML and the handle of the GPU with this UUID; None where NVML cannot reach it."""
    nvml = _nvml()
    if nvml is None:
        return None
    handle = _query(nvml.nvmlDeviceGetHandleByUUID, uuid)
    return None if handle is None else (nvml, handle)


def _clock_event_reasons(nvml: Any, handle: Any) -> int | None:
    """NVML's clock event reasons (throttle reasons before driver 535), a bit mask."""
    for name in (
        "nvmlDeviceGetCurrentClocksEventReasons",
        "nvmlDeviceGetCurrentClocksThrottleReasons",
    ):
        if hasattr(nvml, name):
            reasons = _call(nvml, name, handle)
            return None if reasons is None else int(reasons)
    return None


def clock_event_reasons(uuid: str) -> int | None:
    """Why the GPU's clocks are below their maximum now (NVML's clock event reasons, a bit
    mask), or None where NVML cannot say."""
    device = _device(uuid)
    return None if device is None else _clock_event_reasons(*device)


def gpu_facts(uuid: str) -> dict[str, Any]:
    """PCIe generation and width (current and max), clocks and throttle reasons of one GPU.
    Values NVML cannot give are None; an empty dict when NVML is unavailable."""
    device = _device(uuid)
    if device is None:
        return {}
    nvml, handle = device
    return {
        "pcie_generation": _query(nvml.nvmlDeviceGetCurrPcieLinkGeneration, handle),
        "pcie_generation_max": _query(nvml.nvmlDeviceGetMaxPcieLinkGeneration, handle),
        "pcie_width": _query(nvml.nvmlDeviceGetCurrPcieLinkWidth, handle),
        "pcie_width_max": _query(nvml.nvmlDeviceGetMaxPcieLinkWidth, handle),
        "sm_clock_mhz": _query(nvml.nvmlDeviceGetClockInfo, handle, nvml.NVML_CLOCK_SM),
        "memory_clock_mhz": _query(nvml.nvmlDeviceGetClockInfo, handle, nvml.NVML_CLOCK_MEM),
        "sm_clock_max_mhz": _query(nvml.nvmlDeviceGetMaxClockInfo, handle, nvml.NVML_CLOCK_SM),
        "memory_clock_max_mhz": _query(nvml.nvmlDeviceGetMaxClockInfo, handle, nvml.NVML_CLOCK_MEM),
        "clock_event_reasons": _clock_event_reasons(nvml, handle),
        "temperature_c": _query(nvml.nvmlDeviceGetTemperature, handle, nvml.NVML_TEMPERATURE_GPU),
        "power_w": (lambda mw: None if mw is None else mw / 1000)(
            _query(nvml.nvmlDeviceGetPowerUsage, handle)
        ),
        # health counters for a fleet's thresholds (DCGM's PCIe plugin checks the same)
        "serial": _text(_query(nvml.nvmlDeviceGetSerial, handle)),
        "pcie_replay_count": _query(nvml.nvmlDeviceGetPcieReplayCounter, handle),
        "ecc_uncorrected_volatile": _query(
            nvml.nvmlDeviceGetTotalEccErrors,
            handle,
            nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
            nvml.NVML_VOLATILE_ECC,
        ),
        "ecc_corrected_volatile": _query(
            nvml.nvmlDeviceGetTotalEccErrors,
            handle,
            nvml.NVML_MEMORY_ERROR_TYPE_CORRECTED,
            nvml.NVML_VOLATILE_ECC,
        ),
    }


def _text(value: Any) -> str | None:
    if value is None:
        return None
    return value.decode() if isinstance(value, bytes) else str(value)


def activity(uuid: str) -> dict[str, Any] | None:
    """What the GPU is doing now: its utilisation (percent of the last sample period in which a
    kernel ran) and the processes using it (compute and graphics, by pid); None where NVML
    cannot say."""
    device = _device(uuid)
    if device is None:
        return None
    nvml, handle = device
    rates = _call(nvml, "nvmlDeviceGetUtilizationRates", handle)
    pids: set[int] = set()
    for query in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
        for process in _call(nvml, query, handle) or []:
            pids.add(int(process.pid))
    return {"utilization_percent": None if rates is None else int(rates.gpu), "pids": sorted(pids)}


def confidential_computing() -> dict[str, Any] | None:
    """Whether the system runs GPUs in confidential computing mode (NVML's system state, driver
    535 and later): `enabled`, its `environment` (prod, sim) and `devtools` mode, and the CPU's
    trusted execution technology (`cpu_tee`: intel_tdx, amd_sev_snp, ...); None where NVML
    cannot say. With it on, every copy between host and GPU is encrypted and staged through
    bounce buffers in shared host memory."""
    nvml = _nvml()
    if nvml is None:
        return None
    state = _call(nvml, "nvmlSystemGetConfComputeState")
    if state is None:
        return None
    caps = _call(nvml, "nvmlSystemGetConfComputeCapabilities")

    def named(prefix: str, value: Any) -> str | None:
        names = {
            getattr(nvml, n): n[len(prefix) :].lower() for n in dir(nvml) if n.startswith(prefix)
        }
        return None if value is None else names.get(value, str(value))

    return {
        "enabled": state.ccFeature == getattr(nvml, "NVML_CC_SYSTEM_FEATURE_ENABLED", 1),
        "environment": named("NVML_CC_SYSTEM_ENVIRONMENT_", state.environment),
        "devtools": state.devToolsMode == getattr(nvml, "NVML_CC_SYSTEM_DEVTOOLS_MODE_ON", 1),
        "cpu_tee": named("NVML_CC_SYSTEM_CPU_CAPS_", None if caps is None else caps.cpuCaps),
    }
