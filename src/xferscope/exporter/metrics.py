"""The exporter's metrics, through prometheus_client: a collector that reads the GPUs' states
at each scrape (one consistent snapshot), so a scrape never sees half of a measurement.

Every GPU's series carry `gpu` (its index on the node) and `uuid`; the transfer figures also
carry the copy's direction, memory, mechanism and timing, as `run`'s Prometheus textfile does.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily
from prometheus_client.registry import Collector

from ..core.version import __version__
from .service import Exporter, GpuState

PREFIX = "xferscope"
FIGURES = {  # the fleet's headline metric's last part: (family, what)
    "bandwidth": ("bandwidth_bytes_per_second", "Bytes per second of the largest copy"),
    "latency": ("latency_seconds", "Seconds per copy of the smallest size"),
}
FACTS = (  # GPU facts of the last measurement that explain a failure: (fact, family, help)
    ("pcie_generation", "pcie_link_generation", "PCIe generation the link runs at"),
    ("pcie_generation_max", "pcie_link_generation_max", "Highest PCIe generation of the link"),
    ("pcie_width", "pcie_link_width", "PCIe lanes the link runs at"),
    ("pcie_width_max", "pcie_link_width_max", "Most PCIe lanes of the link"),
    ("numa_node", "numa_node", "NUMA node the GPU is attached to (-1: the kernel does not say)"),
    ("pcie_replay_count", "pcie_replays", "PCIe replays NVML counted (a link's retransmits)"),
    ("ecc_uncorrected_volatile", "ecc_uncorrected_errors", "Volatile uncorrected ECC errors"),
)
COPY_LABELS = ("direction", "memory", "mechanism", "timing")


def _gauge(name: str, help_text: str, labels: tuple[str, ...] = ("gpu", "uuid")) -> Any:
    return GaugeMetricFamily(f"{PREFIX}_{name}", help_text, labels=list(labels))


class ExporterCollector(Collector):
    """Reads the exporter's GPUs at each scrape."""

    def __init__(self, exporter: Exporter) -> None:
        self.exporter = exporter

    def collect(self) -> Iterator[Any]:
        yield from families(self.exporter, self.exporter.snapshot(), time.time())


def families(exporter: Exporter, gpus: list[GpuState], now: float) -> Iterator[Any]:
    every = exporter.options.every_s
    info = InfoMetricFamily(f"{PREFIX}_exporter", "The exporter's version and schedule.")
    info.add_metric([], {"version": __version__, "every_seconds": f"{every:g}",
                         "cases": ",".join(exporter.options.cases) or "run --quick"})  # fmt: skip
    yield info
    up = _gauge("exporter_gpus", "GPUs the exporter measures.", ())
    up.add_metric([], len(gpus))
    yield up
    figures = {
        what: _gauge(family, f"{text} (last complete measurement), by GPU and copy.",
                     ("gpu", "uuid", *COPY_LABELS))
        for what, (family, text) in FIGURES.items()
    }  # fmt: skip
    facts = {fact: _gauge(family, f"{text}, at the last complete measurement.")
             for fact, family, text in FACTS}  # fmt: skip
    when = _gauge("measurement_timestamp_seconds", "When the last complete measurement ended.")
    age = _gauge("measurement_age_seconds", "Seconds since the last complete measurement.")
    took = _gauge("measurement_duration_seconds", "Seconds the last complete measurement took.")
    stale = _gauge(
        "measurement_stale",
        "1 when the figures served are stale: the last attempt failed, or none succeeded for "
        "two periods of the schedule.",
    )
    measuring = _gauge("measuring", "1 while a measurement of this GPU is under way.")
    passed = _gauge("threshold_pass", "1 if the last measurement met every threshold, else 0.")
    failing = _gauge(
        "threshold_failed",
        "1 for each threshold the last measurement missed (check: the thresholds file's key).",
        ("gpu", "uuid", "check"),
    )
    deferred = _gauge("deferred", "1 while the GPU's measurement is deferred (reason: busy, "
                      "other_process).", ("gpu", "uuid", "reason"))  # fmt: skip
    utilization = _gauge("gpu_utilization_percent", "The GPU's utilisation at the last attempt.")
    attempts = CounterMetricFamily(
        f"{PREFIX}_measurements",
        "Attempts at measuring the GPU, by outcome (complete, failed, deferred).",
        labels=["gpu", "uuid", "outcome"],
    )
    for g in gpus:
        key = [str(g.index), g.uuid]
        for outcome in ("complete", "failed", "deferred"):
            attempts.add_metric([*key, outcome], g.outcomes.get(outcome, 0))
        stale.add_metric(key, 1 if g.stale(now, every) else 0)
        measuring.add_metric(key, 1 if g.measuring else 0)
        for reason in sorted(g.deferrals):
            deferred.add_metric([*key, reason], 1 if g.deferred_now == reason else 0)
        if g.busy_percent is not None:
            utilization.add_metric(key, g.busy_percent)
        report = g.report
        if report is None or g.measured_at is None:
            continue
        when.add_metric(key, g.measured_at)
        age.add_metric(key, max(0.0, now - g.measured_at))
        if g.duration_s is not None:
            took.add_metric(key, g.duration_s)
        for name, figure in sorted(report.metrics.items()):
            parts = name.split("/")
            if len(parts) == 5 and parts[4] in figures:
                figures[parts[4]].add_metric([*key, *parts[:4]], figure)
        for fact, family in facts.items():
            value: Any = report.gpu.get(fact)
            if fact == "numa_node" and value is None:
                value = -1
            if isinstance(value, int | float) and not isinstance(value, bool):
                family.add_metric(key, value)
        if g.verdict is not None:
            passed.add_metric(key, 1 if g.verdict.passed else 0)
            for failure in g.verdict.failures:
                check = failure.rsplit("(", 1)[-1].rstrip(")") if "(" in failure else "status"
                failing.add_metric([*key, check], 1)
    yield from (*figures.values(), *facts.values(), when, age, took, stale, measuring, passed,
                failing, deferred, utilization, attempts)  # fmt: skip
