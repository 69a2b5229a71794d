"""Fleet statistics: per metric the median and spread over every GPU that reported it, each
GPU's robust z-score (Iglewicz and Hoaglin's modified z: 0.6745 (x - median) / MAD), and the
outliers on the bad side, each with the likely cause read from that GPU's own diagnosis and
facts (a link trained down, the wrong NUMA node, throttling, PCIe replays, ECC errors)."""

from __future__ import annotations

import statistics

from .records import COMPLETE, MetricStats, Outlier, RankReport

OUTLIER_Z = 3.5  # Iglewicz and Hoaglin's cut-off for the modified z-score
# Differences under this share of the median are never outliers, however tight the fleet is
# (a MAD of 0 would make any difference infinitely many MADs).
LEAST_SPREAD = 0.01
LEAST_RANKS = 3  # fewer GPUs than this have no "typical" to stand out from


def unit_of(metric: str) -> tuple[str, bool]:
    """(unit, higher is better) from the metric's name."""
    if metric.endswith("/latency"):
        return "s", False
    return "B/s", True


def fleet_stats(reports: list[RankReport]) -> list[MetricStats]:
    done = [r for r in reports if r.status == COMPLETE]
    names = sorted({name for r in done for name in r.metrics})
    out = []
    for name in names:
        values = {r.rank: r.metrics[name] for r in done if name in r.metrics}
        median = statistics.median(values.values())
        mad = statistics.median(abs(v - median) for v in values.values())
        scale = max(mad, LEAST_SPREAD * abs(median) / 0.6745, 1e-300)
        z = {rank: 0.6745 * (v - median) / scale for rank, v in values.items()}
        unit, higher = unit_of(name)
        out.append(
            MetricStats(
                name, unit, higher, median, mad, min(values.values()), max(values.values()), z
            )
        )
    return out


def likely_cause(report: RankReport) -> str:
    """What the GPU's own facts and findings point at, most specific first."""
    g = report.gpu
    causes = []
    width, width_max = g.get("pcie_width"), g.get("pcie_width_max")
    if width and width_max and width < width_max:
        causes.append(f"PCIe link trained down to x{width} of x{width_max}")
    gen, gen_max = g.get("pcie_generation"), g.get("pcie_generation_max")
    if gen and gen_max and gen < gen_max:
        causes.append(f"PCIe link at Gen{gen} of Gen{gen_max}")
    codes = {f.get("code") for f in report.findings}
    if "numa_affinity" in codes or "numa" in codes:
        causes.append("the process ran away from the GPU's NUMA node")
    if "throttled" in codes or g.get("clock_event_reasons"):
        causes.append("clocks throttled")
    if g.get("pcie_replay_count"):
        causes.append(f"{g['pcie_replay_count']} PCIe replays (a marginal link)")
    if g.get("ecc_uncorrected_volatile"):
        causes.append(f"{g['ecc_uncorrected_volatile']} uncorrected ECC errors")
    if "verification_failed" in codes:
        causes.append("copies arrived corrupted")
    return "; ".join(causes) or "no cause in its facts: compare its node's BIOS, drivers and load"


def outliers(reports: list[RankReport], stats: list[MetricStats]) -> list[Outlier]:
    by_rank = {r.rank: r for r in reports}
    out = []
    for s in stats:
        if len(s.z) < LEAST_RANKS:
            continue
        for rank, z in s.z.items():
            bad = z < -OUTLIER_Z if s.higher_is_better else z > OUTLIER_Z
            if bad:
                report = by_rank[rank]
                out.append(
                    Outlier(rank, s.name, report.metrics[s.name], s.median, z, likely_cause(report))
                )
    return sorted(out, key=lambda o: -abs(o.z))
