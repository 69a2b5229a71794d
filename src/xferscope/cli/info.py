"""`xferscope info`: the GPUs, their links, driver and runtime, NUMA placement."""

from __future__ import annotations

import json

from ..core.engine import Engine
from ..report.info_table import print_info
from . import common
from .app import cli, described, stdout
from .common import resolve_devices
from .options import gpus_option, json_flag, simulate_option

# ---- info --------------------------------------------------------------------------------------


@cli.command(
    **described(
        "The GPUs and their links: PCIe, NUMA node, clocks, memory.",
        "xferscope info",
        "xferscope info --json",
    )
)
@gpus_option
@json_flag("the facts")
@simulate_option("Describe the simulated GPU instead.")
def info(device: str | None, as_json: bool, simulate: bool) -> None:
    """GPUs, their PCIe links (current against max, with the theoretical peak), driver and
    runtime versions, NUMA node and CPU affinity."""
    from ..core.machine import collect

    engine: Engine = common.open_engine(simulate)
    facts = collect(engine, list(resolve_devices(engine, device)))
    if as_json:
        stdout.print_json(json.dumps(facts))
        return
    print_info(facts, stdout)
