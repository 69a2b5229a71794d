"""The host a result was measured on: its CPU, cores, NUMA nodes, OS, the CPUs this process may
use and its huge pages. The one place they are read (tests put a fixed host in host_facts, so no
test depends on the machine it runs on); machine.py records them with every result."""

from __future__ import annotations

import os
import platform
import socket
from pathlib import Path
from typing import Any


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def cpu_model() -> str:
    text = _read(Path("/proc/cpuinfo")) or ""
    for line in text.splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def cpus_of(cpulist: str | None) -> set[int]:
    """The CPUs of a cpulist ("0-15,32-47"), as the kernel writes them."""
    cpus: set[int] = set()
    for part in (cpulist or "").split(","):
        if "-" in part:
            low, high = part.split("-")
            cpus.update(range(int(low), int(high) + 1))
        elif part.strip():
            cpus.add(int(part))
    return cpus


def process_cpus() -> str:
    """The CPUs this process may run on, as a cpulist ("0-15,32-47")."""
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    ranges: list[str] = []
    for cpu in cpus:
        if ranges and cpu == int(ranges[-1].split("-")[-1]) + 1:
            ranges[-1] = f"{ranges[-1].split('-')[0]}-{cpu}"
        else:
            ranges.append(str(cpu))
    return ",".join(ranges)


def numa_nodes() -> int:
    try:
        return len([p for p in Path("/sys/devices/system/node").glob("node[0-9]*")]) or 1
    except OSError:
        return 1


def numa_cpus() -> list[str]:
    """Each NUMA node's CPUs as a cpulist, by node number ([] where the kernel lists none)."""
    base = Path("/sys/devices/system/node")
    try:
        nodes = sorted(int(p.name[4:]) for p in base.glob("node[0-9]*"))
    except OSError:
        return []
    return (
        [_read(base / f"node{n}" / "cpulist") or "" for n in range(nodes[-1] + 1)] if nodes else []
    )


def huge_pages() -> dict[str, Any]:
    """Transparent huge pages' mode (always, madvise, never; None where the kernel has none)
    and the reserved huge pages free for hugetlb memory, in bytes."""
    mode = _read(Path("/sys/kernel/mm/transparent_hugepage/enabled"))
    chosen = mode.split("[", 1)[1].split("]", 1)[0] if mode and "[" in mode else None
    fields: dict[str, int] = {}
    for line in (_read(Path("/proc/meminfo")) or "").splitlines():
        name, _, value = line.partition(":")
        parts = value.split()
        if parts and parts[0].isdigit():
            fields[name] = int(parts[0]) * (1024 if parts[1:] == ["kB"] else 1)
    page = fields.get("Hugepagesize", 0)
    return {
        "thp": chosen,
        "hugetlb_page_bytes": page or None,
        "hugetlb_free_bytes": fields.get("HugePages_Free", 0) * page,
    }


def host_facts() -> dict[str, Any]:
    """The host: name, CPU, cores, NUMA nodes, OS, Python and the CPUs this process may use.
    The one place they are read (tests put a fixed host here, so no test depends on the
    machine it runs on)."""
    return {
        "hostname": socket.gethostname(),
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "numa_nodes": numa_nodes(),
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "process_cpus": process_cpus(),
        "numa_cpus": numa_cpus(),
        "huge_pages": huge_pages(),
    }
