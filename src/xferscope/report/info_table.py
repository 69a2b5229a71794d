"""What `xferscope info` prints: the host, the driver, and each GPU's link against its best."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from ..core.units import format_bytes, format_rate
from .style import print_simulated


def _link(gen: Any, width: Any) -> str:
    return f"Gen{gen} x{width}" if gen and width else "unknown"


def print_info(facts: dict[str, Any], stdout: Console) -> None:
    if facts["simulated"]:
        print_simulated(stdout)
    host = facts["host"]
    stdout.print(
        f"host {host['hostname']}: {host['cpu']}, {host['cores']} cores, "
        f"{host['numa_nodes']} NUMA node(s), {host['os']}"
    )
    stdout.print(
        f"driver {facts['driver'] or 'unknown'} (CUDA {facts['cuda_driver_api']}), "
        f"CUDA runtime {facts['cuda_runtime']}, xferscope {facts['tool_version']}"
    )
    stdout.print(f"confidential computing: {confidential_text(facts)}", soft_wrap=True)
    stdout.print(f"host memory: {host_memory_text(facts)}", soft_wrap=True)
    table = Table()
    for name in (
        "GPU",
        "name",
        "PCIe now",
        "PCIe max",
        "peak/dir now",
        "peak/dir max",
        "memory",
        "NUMA",
        "CPUs",
        "bus id",
    ):
        table.add_column(name)
    for g in facts["gpus"]:
        now = _link(g.get("pcie_generation"), g.get("pcie_width"))
        best = _link(g.get("pcie_generation_max"), g.get("pcie_width_max"))
        downgraded = now != best and "unknown" not in (now, best)
        table.add_row(
            str(g["index"]),
            g["name"],
            f"[yellow]{now}[/yellow]" if downgraded else now,
            best,
            format_rate(g["pcie_peak_bps"]) if g.get("pcie_peak_bps") else "",
            format_rate(g["pcie_peak_max_bps"]) if g.get("pcie_peak_max_bps") else "",
            format_bytes(g["total_memory_bytes"]),
            "" if g.get("numa_node") is None else str(g["numa_node"]),
            g.get("cpu_affinity") or "",
            g["pci_bus_id"],
        )
    stdout.print(table)
    if any(
        _link(g.get("pcie_generation"), g.get("pcie_width"))
        != _link(g.get("pcie_generation_max"), g.get("pcie_width_max"))
        for g in facts["gpus"]
    ):
        stdout.print(
            "note: an idle GPU may train its link down to save power; run a transfer "
            "and look again before calling it a fault"
        )


def host_memory_text(facts: dict[str, Any]) -> str:
    """What the host and GPUs offer the memory kinds beyond pinned and pageable (sweep -m), in
    a phrase: huge pages, and per GPU what it reads in place."""
    pages = facts["host"].get("huge_pages") or {}
    thp = pages.get("thp")
    free = pages.get("hugetlb_free_bytes") or 0
    parts = [
        "transparent huge pages " + (thp or "absent"),
        (f"{format_bytes(free)} of huge pages free" if free else "no huge pages reserved"),
    ]
    for g in facts["gpus"]:
        yes = [
            what
            for key, what in (
                ("pageable_memory_access", "malloc memory in place (HMM/ATS)"),
                ("host_register_read_only", "read-only registered memory"),
                ("concurrent_managed_access", "managed memory in place"),
            )
            if g.get(key)
        ]
        parts.append(
            f"GPU {g['index']} reads " + (", ".join(yes) if yes else "none of the extra kinds")
        )
    return "; ".join(parts)


def confidential_text(facts: dict[str, Any]) -> str:
    """What the machine's confidential computing mode means for copies, in a phrase."""
    cc = facts.get("confidential_computing")
    if not cc:
        return "unknown (NVML cannot say)"
    if not cc.get("enabled"):
        return "off"
    how = ", ".join(str(v) for v in (cc.get("cpu_tee"), cc.get("environment")) if v)
    return (
        f"on ({how}): every copy between host and GPU is encrypted and goes through bounce "
        "buffers in shared host memory"
    )
