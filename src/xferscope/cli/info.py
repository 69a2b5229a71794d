"""`xferscope info`: the GPUs, their links, driver and runtime, NUMA placement."""

from __future__ import annotations

import json
from typing import Any

import click
from rich.table import Table

from ..core.engine import Engine
from ..core.units import format_bytes, format_rate
from . import common
from .app import cli, stdout
from .common import resolve_devices

# ---- info --------------------------------------------------------------------------------------


@cli.command()
@click.option("-g", "--device", default=None, help="GPU indices, comma-separated [default: all].")
@click.option("--json", "as_json", is_flag=True, help="Print the facts as JSON.")
@click.option("--simulate", is_flag=True, help="Describe the simulated GPU instead.")
def info(device: str | None, as_json: bool, simulate: bool) -> None:
    """GPUs, their PCIe links (current against max, with the theoretical peak), driver and
    runtime versions, NUMA node and CPU affinity."""
    from ..core.machine import collect

    engine: Engine = common.open_engine(simulate)
    facts = collect(engine, list(resolve_devices(engine, device)))
    if as_json:
        stdout.print_json(json.dumps(facts))
        return
    print_info(facts)


def _link(gen: Any, width: Any) -> str:
    return f"Gen{gen} x{width}" if gen and width else "unknown"


def print_info(facts: dict[str, Any]) -> None:
    if facts["simulated"]:
        stdout.print("[bold red]SIMULATED: a modelled GPU, not this machine's[/bold red]")
    host = facts["host"]
    stdout.print(
        f"host {host['hostname']}: {host['cpu']}, {host['cores']} cores, "
        f"{host['numa_nodes']} NUMA node(s), {host['os']}"
    )
    stdout.print(
        f"driver {facts['driver'] or 'unknown'} (CUDA {facts['cuda_driver_api']}), "
        f"CUDA runtime {facts['cuda_runtime']}, xferscope {facts['tool_version']}"
    )
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
