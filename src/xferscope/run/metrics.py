"""A run flattened into named metrics: what compare, Prometheus, history and the diagnosis read.

Names are hierarchical, like nvbench's summaries: `gpu0/h2d/pinned/async/device/bandwidth`,
`gpu0/concurrent/bidirectional/h2d/bandwidth`, `p2p/0-1/async/peer/one_way/bandwidth`,
`gpu0/numa/node1/h2d/pinned/async/device/bandwidth`, `gpu0/chase/pinned/read_latency`. Values
are SI (bytes per second, seconds); each metric keeps its per-trial samples so a comparison can
weigh a difference against the noise.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..core import stats
from ..gemm.records import GemmResult
from ..sweep.records import Curve
from .records import Concurrent, RunResult

# The figures a person reads first, by curve (direction, memory, mechanism, timing).
HEADLINE_CURVES = {
    ("h2d", "pinned", "async", "device"): "h2d pinned",
    ("d2h", "pinned", "async", "device"): "d2h pinned",
    ("d2d", "device", "async", "device"): "d2d",
    ("h2d", "pageable", "memcpy", "api"): "h2d pageable",
    ("d2h", "pageable", "memcpy", "api"): "d2h pageable",
}


@dataclass(frozen=True, slots=True)
class Metric:
    name: str
    value: float
    unit: str  # "B/s", "s" or "FLOP/s"
    higher_is_better: bool
    samples: tuple[float, ...]  # the same quantity, one per trial
    headline: bool = False

    @property
    def rel_noise(self) -> float:
        return stats.relative_noise(self.samples)


def _curve_metrics(prefix: str, curve: Curve, headline: bool) -> list[Metric]:
    if not curve.points:
        return []
    name = f"{prefix}/{curve.config.direction}/{curve.config.memory}/{curve.config.mechanism}"
    name += f"/{curve.config.timing}"
    largest, smallest = curve.points[-1], curve.points[0]
    return [
        Metric(
            f"{name}/bandwidth",
            largest.bandwidth,
            "B/s",
            True,
            tuple(largest.bytes / s for s in largest.samples_s),
            headline,
        ),
        Metric(f"{name}/latency", smallest.median_s, "s", False, smallest.samples_s, headline),
    ]


def _concurrent_metrics(prefix: str, c: Concurrent) -> list[Metric]:
    if c.status != "complete" or not c.streams:
        return []
    out = [
        Metric(
            f"{prefix}/{s.label}/bandwidth",
            s.bandwidth,
            "B/s",
            True,
            tuple(s.bytes / x for x in s.samples_s),
        )
        for s in c.streams
    ]
    trials = min(len(s.samples_s) for s in c.streams)
    totals = tuple(sum(s.bytes / s.samples_s[i] for s in c.streams) for i in range(trials))
    out.append(Metric(f"{prefix}/total_bandwidth", c.total_bandwidth, "B/s", True, totals))
    return out


def run_metrics(result: RunResult) -> dict[str, Metric]:
    metrics: list[Metric] = []
    for gpu in result.gpus:
        prefix = f"gpu{gpu.index}"
        for curve in gpu.curves:
            key = (
                curve.config.direction,
                curve.config.memory,
                curve.config.mechanism,
                curve.config.timing,
            )
            metrics += _curve_metrics(prefix, curve, key in HEADLINE_CURVES)
        for curve in gpu.numa:  # one size: its bandwidth (the latency of a large copy says little)
            node = curve.config.numa_node
            metrics += _curve_metrics(f"{prefix}/numa/node{node}", curve, False)[:1]
        for chase in gpu.chase:
            if chase.median_ns is not None and chase.verified:
                where = chase.memory if chase.peer is None else f"gpu{chase.peer}"
                metrics.append(
                    Metric(
                        f"{prefix}/chase/{where}/read_latency",
                        chase.median_ns * 1e-9,
                        "s",
                        False,
                        tuple(ns * 1e-9 for ns in chase.ns_per_read),
                    )
                )
        for c in gpu.concurrent:
            metrics += _concurrent_metrics(f"{prefix}/concurrent/{c.label}", c)
        if gpu.pinning is not None:
            p = gpu.pinning
            per_gb = 1e9 / p.bytes
            for name, seconds in (
                ("host_alloc", p.host_alloc_s),
                ("host_free", p.host_free_s),
                ("register", p.register_s),
                ("unregister", p.unregister_s),
            ):
                value = seconds * per_gb
                metrics.append(
                    Metric(f"{prefix}/pinning/{name}_per_gb", value, "s", False, (value,))
                )
        if gpu.gemm is not None:
            for g in gpu.gemm.points:
                if g.get("tflops") and g.get("verified"):
                    metrics.append(
                        Metric(
                            f"{prefix}/gemm/{g['precision']}/{g['size']}/flops",
                            g["tflops"] * 1e12,
                            "FLOP/s",
                            True,
                            tuple(t * 1e12 for t in g.get("trials_tflops") or ()),
                        )
                    )
    for c in result.multi:
        metrics += _concurrent_metrics(f"multi/{c.label}", c)
    return {m.name: m for m in metrics}


def gemm_metrics(result: GemmResult) -> dict[str, Metric]:
    """A GEMM study flattened: each verified GEMM's FLOP/s, compute-only and with its transfers,
    and each CPU point's, named `fp32/8192/flops`, `fp32/8192/pinned_tiled/flops`,
    `cpu/fp64/4096/16/flops`; samples per trial."""
    metrics: list[Metric] = []
    for p in result.points:
        if not (p.flops and p.verified):
            continue
        name = f"{p.precision}/{p.shape.label}"
        metrics.append(
            Metric(
                f"{name}/flops",
                p.flops,
                "FLOP/s",
                True,
                tuple(p.shape.flops / t for t in p.seconds),
            )
        )
        for t in p.transfers:
            if t.get("seconds") and t.get("delivered"):
                form = "tiled" if t["tiles"] > 1 else "seq"
                samples = tuple(p.shape.flops / x for x in t["seconds"])
                metrics.append(
                    Metric(
                        f"{name}/{t['memory']}_{form}/flops",
                        p.shape.flops / stats.median(t["seconds"]),
                        "FLOP/s",
                        True,
                        samples,
                    )
                )
    for c in result.cpu:
        if c.flops and c.role == "scaling":
            samples = tuple(c.shape.flops / t for t in c.seconds)
            name = f"cpu/{c.precision}/{c.shape.label}/{c.threads}/flops"
            metrics.append(Metric(name, c.flops, "FLOP/s", True, samples))
    return {m.name: m for m in metrics}


def result_metrics(result: RunResult | GemmResult) -> dict[str, Metric]:
    return gemm_metrics(result) if isinstance(result, GemmResult) else run_metrics(result)
