"""The machine a result was measured on, recorded with every result."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from . import host as hostinfo
from . import links, nvml
from .engine import Engine, format_cuda_version
from .engine.simulated_link import SIMULATED_LINK
from .host import _read
from .version import __version__

# Where launchers put a process's rank before MPI is opened: Open MPI, PMIx, MPICH/Hydra, Slurm.
RANK_VARIABLES = ("OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID")


def launch_rank() -> int:
    """This process's rank as its launcher (mpirun, srun) announced it, 0 when started alone:
    which rank speaks for all when `xferscope fleet` refuses an option before opening MPI."""
    for name in RANK_VARIABLES:
        value = os.environ.get(name, "").strip()
        if value.isdigit():
            return int(value)
    return 0


def pci_locality(bus_id: str) -> dict[str, Any]:
    """NUMA node and local CPUs of a PCI device from sysfs (None where the kernel says nothing,
    as in many virtual machines)."""
    device = Path("/sys/bus/pci/devices") / bus_id.lower()
    node = _read(device / "numa_node")
    return {
        "numa_node": int(node) if node not in (None, "", "-1") else None,
        "cpu_affinity": _read(device / "local_cpulist"),
    }


def gpu_record(engine: Engine, index: int, process_cpus: str = "") -> dict[str, Any]:
    """One GPU's facts. A simulated GPU is placed near `process_cpus`, the CPUs this process
    runs on."""
    info = engine.device_info(index)
    if engine.simulated:
        facts: dict[str, Any] = {
            "pcie_generation": SIMULATED_LINK["generation"],
            "pcie_generation_max": SIMULATED_LINK["generation"],
            "pcie_width": info.get("pcie_width", SIMULATED_LINK["width"]),
            "pcie_width_max": SIMULATED_LINK["width"],
        }
        # The modelled GPU is well placed: near whatever CPUs this process runs on.
        locality: dict[str, Any] = {"numa_node": 0, "cpu_affinity": process_cpus}
    else:
        facts = nvml.gpu_facts(info["uuid"])
        locality = pci_locality(info["pci_bus_id"])
    record = dict(info)
    record.update(facts)
    record.update(locality)
    record["pcie_peak_bps"] = links.pcie_peak(facts.get("pcie_generation"), facts.get("pcie_width"))
    record["pcie_peak_max_bps"] = links.pcie_peak(
        facts.get("pcie_generation_max"), facts.get("pcie_width_max")
    )
    record["memory_peak_bps"] = links.hbm_peak(
        int(info.get("memory_clock_khz") or 0), int(info.get("memory_bus_width_bits") or 0)
    )
    return record


def clock_event_reasons(engine: Engine, index: int) -> int | None:
    """Why a GPU's clocks are below their maximum now (nvml.clock_event_reasons); None for a
    simulated GPU or where NVML cannot say."""
    if engine.simulated:
        return None
    return nvml.clock_event_reasons(str(engine.device_info(index)["uuid"]))


def host_facts() -> dict[str, Any]:
    """The host's facts (host.py, where tests fix them)."""
    return hostinfo.host_facts()


def collect(engine: Engine, devices: list[int]) -> dict[str, Any]:
    """Host, software and GPU facts. For a simulated engine the GPUs are the model's and the
    record says so."""
    driver = None if engine.simulated else nvml.driver_version()
    host = host_facts()
    if engine.simulated:
        host["hostname"] = "simulated"
    return {
        "simulated": engine.simulated,
        "host": host,
        "tool_version": __version__,
        "cuda_runtime": format_cuda_version(engine.runtime_version()),
        "cuda_driver_api": format_cuda_version(engine.driver_version()),
        "driver": driver,
        "confidential_computing": confidential_computing(engine),
        "gpus": [gpu_record(engine, i, host["process_cpus"]) for i in devices],
    }


def confidential_computing(engine: Engine) -> dict[str, Any] | None:
    """The system's confidential computing mode (nvml.confidential_computing); the simulated
    engine's says what it models (off, unless it models a CC system)."""
    if engine.simulated:
        on = bool(getattr(engine, "confidential_computing", False))
        cpu = "intel_tdx" if on else "none"
        return {"enabled": on, "environment": "simulated", "devtools": False, "cpu_tee": cpu}
    return nvml.confidential_computing()


def host_memory_total() -> int | None:
    """MemTotal in bytes. Used only to refuse sizes that cannot fit at all: MemAvailable would
    refuse too much on virtual machines that grow their memory as it is used, and an allocation
    that fails later is reported as a typed error anyway."""
    text = _read(Path("/proc/meminfo")) or ""
    for line in text.splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024
    return None
