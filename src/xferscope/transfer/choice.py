"""What copy_many did with a batch and why (`Choice`), and what decided it (`Shape`): kept apart
from policy.py, which loads the native engine, so that a program's first copies can answer
before the engine is loaded (first.py)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

# the reason of a staged batch that the loop made while the staged copier was being made
MADE_BY_LOOP = (
    "the staged copy's threads and pinned chunks were still being made on another thread "
    "(this process's first staged batch begins it), so the batch went as one cudaMemcpyAsync a "
    "piece, as PyTorch's copy makes it"
)
# the reason of a batch queued on the caller's stream by another method than decided
ON_STREAM = (
    "it was queued on the caller's stream, which takes only copies that use no staging of "
    "copy_many's (the loop, and the batch API except on the legacy default stream, which the "
    "batch API refuses), so it went as one cudaMemcpyAsync a piece, as PyTorch's copy makes it"
)


@dataclass(frozen=True, slots=True)
class Shape:
    """What decides a batch's method: its direction (h2d, d2h), its host memory (pinned, or
    pageable if any piece is), its count of pieces, its bytes in all and its GPU."""

    direction: str
    memory: str
    count: int
    bytes: int
    device: int


@dataclass(frozen=True, slots=True)
class Choice:
    """What copy_many did with a batch, and why (explain())."""

    method: str
    direction: str  # h2d, d2h
    memory: str  # pinned, pageable (the host side; pageable if any piece is)
    count: int
    bytes: int
    device: int
    source: str  # calibration, rule, asked
    reason: str
    # the nearest calibrated batch (count, size) and each method's seconds there
    cell: tuple[int, int] | None = None
    measured: dict[str, float] = field(default_factory=dict)

    def explain(self) -> str:
        from ..core.units import format_bytes  # the engine's one rule, loaded when explained

        size = format_bytes(self.bytes // max(self.count, 1))
        head = (
            f"{self.count} copies of {size} on average ({format_bytes(self.bytes)} in all), "
            f"{self.direction} with {self.memory} host memory on GPU {self.device}: "
            f"{self.method}, because {self.reason}."
        )
        if not self.measured:
            return head
        best = min(self.measured.values())
        ranked = sorted(self.measured.items(), key=lambda kv: kv[1])
        times = ", ".join(
            f"{m} {s * 1e6:.1f} us" + ("" if s == best else f" ({s / best:.2f}x)")
            for m, s in ranked
        )
        return f"{head} Measured here for that batch: {times}."

    def made_by(self, method: str, on_stream: bool = False) -> Choice:
        """This Choice, as made by `method` instead: the loop, while the staged copier is being
        made, or on the caller's stream (`on_stream`)."""
        return replace(self, method=method, reason=ON_STREAM if on_stream else MADE_BY_LOOP)
