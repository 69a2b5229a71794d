"""`xferscope cases`: every case and experiment xferscope measures, with its key, what it
measures and, on this machine, whether it is waived and why (as nvbandwidth's --list does)."""

from __future__ import annotations

import json
from typing import Any

from ..core import cases, machine
from ..core.engine import Engine
from ..core.errors import XferscopeError
from ..report.fit import Column, fitted
from ..run.investigate import RUN_CASES
from . import common
from .app import cli, described, stdout
from .options import json_flag, simulate_option


def _used_by(key: str) -> list[str]:
    """The commands that measure a transfer case: sweep takes every one; run its curves and
    experiments; the others through their experiments."""
    users = ["sweep"] if not key.startswith("p2p") else []
    users += ["run"] * (key in RUN_CASES)
    users += [e.command for e in cases.EXPERIMENTS if key in e.cases]
    return list(dict.fromkeys(users))


def _machine(engine: Engine) -> tuple[dict[str, Any] | None, int, bool, str | None]:
    """GPU 0's facts, the GPU count and whether GPUs 0 and 1 reach each other, or why not."""
    try:
        count = engine.device_count()
        if count < 1:
            return None, 0, False, "no GPU"
        peer = count > 1 and engine.can_access_peer(0, 1)
        return engine.device_info(0), count, peer, None
    except XferscopeError as exc:
        return None, 0, False, str(exc)


def listing(engine: Engine) -> dict[str, Any]:
    """The case table as a document: cases, experiments and their waivers on this machine."""
    gpu, count, peer, unknown = _machine(engine)
    host = machine.host_facts()
    rows = []
    for c in cases.table():
        waiver = None if gpu is None else cases.waiver(c, gpu, count, peer, host)
        rows.append(
            {
                "key": c.key,
                "description": c.description,
                "direction": c.direction,
                "memory": c.memory,
                "mechanism": c.mechanism,
                "timing": c.timing,
                "used_by": _used_by(c.key),
                "waived": waiver,
            }
        )
    experiments = [
        {
            "key": e.key,
            "command": e.command,
            "description": e.description,
            "cases": list(e.cases),
            "min_gpus": e.min_gpus,
            "waived": None if gpu is None else e.waiver(count, peer),
        }
        for e in cases.EXPERIMENTS
    ]
    return {
        "gpus": count,
        "waivers_checked": unknown is None,
        "waivers_unchecked_because": unknown,
        "limits": dict(cases.LIMITS),
        "cases": rows,
        "experiments": experiments,
    }


@cli.command(
    name="cases",
    **described(
        "Every transfer case and whether this machine can run it.",
        "xferscope cases",
        "xferscope cases --json",
    ),
)
@json_flag("the table")
@simulate_option("Check the waivers on the simulated machine.")
def cases_command(as_json: bool, simulate: bool) -> None:
    """Every case (direction, memory, mechanism, timing) and experiment xferscope measures: its
    key, what it measures, which commands use it, and whether this machine waives it."""
    doc = listing(common.open_engine(simulate))
    if as_json:
        stdout.print_json(json.dumps(doc))
        return
    state = "runs" if doc["waivers_checked"] else "?"
    case_columns = (
        Column("key", keep=9),  # what users type into --cases: never split
        Column("measures", whole=False, keep=8, least=16),
        Column("used by", whole=False, keep=5, least=10),
        Column("on this machine", whole=False, keep=7, least=10),
    )
    rows = [
        (row["key"], row["description"], ", ".join(row["used_by"]), row["waived"] or state)
        for row in doc["cases"]
    ]
    stdout.print(fitted(f"{len(doc['cases'])} transfer cases", case_columns, rows, stdout.width))
    experiment_columns = (
        Column("key", keep=9),
        Column("command", keep=6),
        Column("measures", whole=False, keep=8, least=16),
        Column("on this machine", whole=False, keep=7, least=10),
    )
    rows = [
        (e["key"], e["command"], e["description"], e["waived"] or state) for e in doc["experiments"]
    ]
    title = f"{len(doc['experiments'])} experiments"
    stdout.print(fitted(title, experiment_columns, rows, stdout.width))
    if not doc["waivers_checked"]:
        stdout.print(f"waivers not checked: {doc['waivers_unchecked_because']}")
