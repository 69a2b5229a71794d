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


def clock_event_reasons(uuid: str) -> int | None:
    """Why the GPU's clocks are below their maximum now (NVML's clock event reasons, a bit
    mask), or None where NVML cannot say."""
    nvml = _nvml()
    if nvml is None:
        return None
    handle = _query(nvml.nvmlDeviceGetHandleByUUID, uuid)
    reasons_fn = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
        nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None
    )
    if handle is None or reasons_fn is None:
        return None
    reasons = _query(reasons_fn, handle)
    return None if reasons is None else int(reasons)


def gpu_facts(uuid: str) -> dict[str, Any]:
    """PCIe generation and width (current and max), clocks and throttle reasons of one GPU.
    Values NVML cannot give are None; an empty dict when NVML is unavailable."""
    nvml = _nvml()
    if nvml is None:
        return {}
    handle = _query(nvml.nvmlDeviceGetHandleByUUID, uuid)
    if handle is None:
        return {}
    reasons_fn = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
        nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None
    )
    return {
        "pcie_generation": _query(nvml.nvmlDeviceGetCurrPcieLinkGeneration, handle),
        "pcie_generation_max": _query(nvml.nvmlDeviceGetMaxPcieLinkGeneration, handle),
        "pcie_width": _query(nvml.nvmlDeviceGetCurrPcieLinkWidth, handle),
        "pcie_width_max": _query(nvml.nvmlDeviceGetMaxPcieLinkWidth, handle),
        "sm_clock_mhz": _query(nvml.nvmlDeviceGetClockInfo, handle, nvml.NVML_CLOCK_SM),
        "memory_clock_mhz": _query(nvml.nvmlDeviceGetClockInfo, handle, nvml.NVML_CLOCK_MEM),
        "sm_clock_max_mhz": _query(nvml.nvmlDeviceGetMaxClockInfo, handle, nvml.NVML_CLOCK_SM),
        "memory_clock_max_mhz": _query(nvml.nvmlDeviceGetMaxClockInfo, handle, nvml.NVML_CLOCK_MEM),
        "clock_event_reasons": _query(reasons_fn, handle) if reasons_fn else None,
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
    nvml = _nvml()
    if nvml is None:
        return None
    handle = _query(nvml.nvmlDeviceGetHandleByUUID, uuid)
    if handle is None:
        return None
    rates = _query(nvml.nvmlDeviceGetUtilizationRates, handle)
    pids: set[int] = set()
    for query in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
        for process in _query(getattr(nvml, query), handle) or []:
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
    state = _query(getattr(nvml, "nvmlSystemGetConfComputeState", None) or (lambda: None))
    if state is None:
        return None
    caps = _query(getattr(nvml, "nvmlSystemGetConfComputeCapabilities", None) or (lambda: None))

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
