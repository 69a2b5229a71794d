"""What misalignment costs (`sweep --host-offset/--device-offset`, `sweep --alignment`): each
curve whose copies start off a page-aligned place against its aligned twin, size by size. One
computation for the findings, the console table and the plot."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..core.findings import INFO, WARNING, Finding, finding
from ..core.units import format_bytes
from .records import Curve, CurveConfig

# A misaligned copy this much slower than the aligned one is worth a warning: above the
# trial-to-trial noise of pageable copies (5-10%).
COSTLY = 0.10


@dataclass(frozen=True, slots=True)
class Misalignment:
    """One misaligned curve: per size, its median time over the aligned curve's, less one."""

    config: CurveConfig
    costs: tuple[tuple[int, float], ...]  # (bytes, cost), sizes both curves measured
    # sizes at which the two curves' trials do not overlap: the cost is beyond the noise
    clear: frozenset[int] = frozenset()

    @property
    def case(self) -> str:
        return self.config.aligned.label

    @property
    def worst(self) -> tuple[int, float]:
        """The largest cost beyond the noise (or, when none is, the largest)."""
        clear = [c for c in self.costs if c[0] in self.clear]
        return max(clear or self.costs, key=lambda c: c[1])

    def costly(self, size: int, cost: float) -> bool:
        return cost > COSTLY and size in self.clear


def misalignments(curves: Sequence[Curve]) -> list[Misalignment]:
    """Every misaligned curve that has an aligned twin with sizes in common."""
    aligned = {c.config: c for c in curves if not c.config.offset_label}
    out: list[Misalignment] = []
    for curve in curves:
        twin = aligned.get(curve.config.aligned)
        if not curve.config.offset_label or twin is None:
            continue
        reference = {p.bytes: p for p in twin.points if p.median_s > 0}
        mine = [p for p in curve.points if p.bytes in reference and p.median_s > 0]
        costs = tuple((p.bytes, p.median_s / reference[p.bytes].median_s - 1) for p in mine)
        clear = frozenset(
            p.bytes
            for p in mine
            if p.min_s > reference[p.bytes].max_s or p.max_s < reference[p.bytes].min_s
        )
        if costs:
            out.append(Misalignment(curve.config, costs, clear))
    return out


def alignment_findings(curves: Sequence[Curve]) -> list[Finding]:
    """Per case: the costliest offset and size, a warning when it is above COSTLY."""
    by_case: dict[str, list[Misalignment]] = {}
    for m in misalignments(curves):
        by_case.setdefault(m.case, []).append(m)
    found = []
    for case, rows in by_case.items():
        worst = max(rows, key=lambda m: (m.costly(*m.worst), m.worst[1]))
        size, cost = worst.worst
        where = f"{worst.config.offset_label.strip()} at {format_bytes(size)}"
        if worst.costly(size, cost):
            found.append(
                finding(
                    "misaligned",
                    WARNING,
                    case,
                    f"{case}: misaligned buffers cost up to {cost:.0%} ({where}) against "
                    "page-aligned ones",
                    cause="copies that start off a cache line or a 16-byte boundary take a "
                    "slower path in the driver or the copy engine",
                    fix="allocate host and device buffers aligned (cudaHostAlloc, cudaMalloc "
                    "and posix_memalign give page-aligned starts) and keep offsets into them "
                    "multiples of 64 bytes",
                    value=cost,
                    reference=COSTLY,
                )
            )
        else:
            found.append(
                finding(
                    "misaligned",
                    INFO,
                    case,
                    f"{case}: misalignment costs at most {max(cost, 0.0):.0%} ({where}): "
                    f"nothing both above {COSTLY:.0%} and beyond the trials' spread",
                    value=cost,
                    reference=COSTLY,
                )
            )
    return found
