"""Prometheus: a run's headline figures in the text exposition format, for node_exporter's
textfile collector (`--collector.textfile.directory`; the file name must end in .prom).

Every family is a gauge with its # HELP and # TYPE lines, and all of a family's samples are
written together, as the format requires. Label values are escaped (backslash, double quote,
newline). The file is replaced atomically so that node_exporter never reads half of it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ..core.findings import SEVERITIES
from ..run.metrics import run_metrics
from ..run.records import RunResult
from .files import atomic_write

PREFIX = "xferscope"

# Headline metrics are curve metrics: gpu<index>/<direction>/<memory>/<mechanism>/<timing>/<what>
_CURVE_METRIC = re.compile(
    r"^gpu(?P<gpu>\d+)/(?P<direction>[^/]+)/(?P<memory>[^/]+)/(?P<mechanism>[^/]+)"
    r"/(?P<timing>[^/]+)/(?P<what>bandwidth|latency)$"
)

_HELP = {
    "bandwidth_bytes_per_second": "Bytes per second of one copy of the largest size measured "
    "(median of the trials), by GPU and copy configuration.",
    "latency_seconds": "Seconds per copy of the smallest size measured (median of the trials), "
    "by GPU and copy configuration.",
    "gpu_complete": "1 if every measurement on this GPU completed, else 0.",
    "run_complete": "1 if the run completed on every GPU without interruption, else 0.",
    "run_simulated": "1 if the figures come from the simulated engine, not from a GPU.",
    "run_wall_seconds": "Wall-clock seconds the run took.",
    "run_timestamp_seconds": "When the run was made, in seconds since the Unix epoch.",
    "run_info": "Always 1; the labels describe the run.",
    "findings": "Number of findings of the run, by severity.",
}


def escape_label_value(value: str) -> str:
    """Backslash, double quote and newline escaped, as the exposition format asks."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def format_value(value: float) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


def _labels(labels: dict[str, Any]) -> str:
    if not labels:
        return ""
    inner = ",".join(
        f'{k}="{escape_label_value("" if v is None else str(v))}"' for k, v in labels.items()
    )
    return "{" + inner + "}"


def _family(name: str, samples: Iterable[tuple[dict[str, Any], float]]) -> list[str]:
    full = f"{PREFIX}_{name}"
    help_text = _HELP[name].replace("\\", "\\\\").replace("\n", "\\n")
    lines = [f"# HELP {full} {help_text}", f"# TYPE {full} gauge"]
    lines += [f"{full}{_labels(labels)} {format_value(value)}" for labels, value in samples]
    return lines


def _timestamp(created: str) -> float | None:
    """Seconds since the epoch of an ISO 8601 time; a time without a zone is taken as UTC."""
    try:
        when = datetime.fromisoformat(created.strip().replace("Z", "+00:00"))
    except (AttributeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return when.timestamp()


def _uuids(result: RunResult) -> dict[int, str]:
    gpus = result.machine.get("gpus") if isinstance(result.machine, dict) else None
    out: dict[int, str] = {}
    for position, gpu in enumerate(gpus or []):
        if isinstance(gpu, dict):
            index = gpu.get("index")
            out[index if isinstance(index, int) else position] = str(gpu.get("uuid") or "")
    return out


def render_prometheus(result: RunResult) -> str:
    """The run's headline metrics and run-level gauges in the text exposition format."""
    uuids = _uuids(result)
    by_family: dict[str, list[tuple[dict[str, Any], float]]] = {
        "bandwidth_bytes_per_second": [],
        "latency_seconds": [],
    }
    for metric in run_metrics(result).values():
        match = _CURVE_METRIC.match(metric.name)
        if not metric.headline or match is None:
            continue
        gpu = int(match["gpu"])
        labels = {
            "gpu": str(gpu),
            "uuid": uuids.get(gpu, ""),
            "direction": match["direction"],
            "memory": match["memory"],
            "mechanism": match["mechanism"],
            "timing": match["timing"],
        }
        family = "bandwidth_bytes_per_second" if match["what"] == "bandwidth" else "latency_seconds"
        by_family[family].append((labels, metric.value))

    lines: list[str] = []
    for family, samples in by_family.items():
        if samples:
            lines += _family(family, samples)
    if result.gpus:
        lines += _family(
            "gpu_complete",
            [
                ({"gpu": str(g.index), "uuid": uuids.get(g.index, "")}, g.status == "complete")
                for g in result.gpus
            ],
        )
    lines += _family("run_complete", [({}, result.complete)])
    lines += _family("run_simulated", [({}, result.simulated)])
    lines += _family("run_wall_seconds", [({}, float(result.wall_s))])
    timestamp = _timestamp(result.created)
    if timestamp is not None:
        lines += _family("run_timestamp_seconds", [({}, timestamp)])
    machine = result.machine if isinstance(result.machine, dict) else {}
    info = {
        "version": result.tool_version,
        "mode": result.mode,
        "driver": machine.get("driver") or "",
        "cuda_runtime": machine.get("cuda_runtime") or "",
    }
    lines += _family("run_info", [(info, 1)])
    lines += _family(
        "findings",
        [({"severity": s}, sum(1 for f in result.findings if f.severity == s)) for s in SEVERITIES],
    )
    return "\n".join(lines) + "\n"


def file_mode(path: Path) -> int:
    """The mode a textfile gets: that of the file it replaces, or 0644 for a new one, whatever
    the umask: node_exporter usually runs as another user."""
    try:
        return Path(path).stat().st_mode & 0o777
    except OSError:
        return 0o644


def write_prometheus(result: RunResult, path: Path) -> None:
    """Writes render_prometheus(result) to `path` atomically (files.atomic_write):
    node_exporter, which reads only *.prom files, so never the temporary one, sees the old file
    or the new one, never half of one."""
    atomic_write(path, render_prometheus(result), mode=file_mode(path))
