"""Validated, typed options. The CLI turns strings into these; every error names its option."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from ..core import cases, limits, plan
from ..core.cases import DEFAULT_SEED
from ..core.errors import OptionError
from .records import CurveConfig

CACHE_STATES = ("cold", "warm")
# A sweep measures one GPU's curves: every direction but p2p, which `run` measures in pairs.
DIRECTIONS = tuple(d for d in cases.DIRECTIONS if d != "p2p")


@dataclass(frozen=True, slots=True)
class SweepOptions:
    directions: tuple[str, ...] = ("h2d", "d2h")
    memories: tuple[str, ...] = ("pageable", "pinned")
    mechanisms: tuple[str, ...] = ("memcpy",)
    timings: tuple[str, ...] = ("api",)
    devices: tuple[int, ...] = (0,)
    sizes: tuple[int, ...] = tuple(plan.log_sizes(plan.DEFAULT_MIN_SIZE, plan.DEFAULT_MAX_SIZE))
    target_s: float = plan.DEFAULT_TARGET_S
    trials: int = plan.DEFAULT_TRIALS
    max_trials: int = 2 * plan.DEFAULT_TRIALS
    noise_bound: float = plan.DEFAULT_NOISE_BOUND
    # stop a size after this many trials when every one lies within early_noise of their median
    # (None: never); the curve's budget is then planned for this many trials a size, and its
    # largest and smallest sizes, whose figures are its headline, are measured first
    early_trials: int | None = None
    early_noise: float = plan.EARLY_NOISE
    budget_s: float | None = plan.DEFAULT_BUDGET_S  # per curve; None = no limit
    seed: int = DEFAULT_SEED
    verify: bool = True
    rotation_bytes: int = plan.ROTATION_BYTES
    # cold: copies of 64 KiB and more rotate through buffers larger than the caches; warm: every
    # copy reuses one place, as a loop over one buffer does (its points are cache-resident).
    cache: str = "cold"
    quick: bool = False
    # the alignment study: one curve per (host offset, device offset) pair of each case
    host_offsets: tuple[int, ...] = (0,)
    device_offsets: tuple[int, ...] = (0,)
    # every curve measured this many times, in alternating order, its trials pooled
    rounds: int = 1
    # host memory (and the measuring thread) placed on each of these NUMA nodes in turn, one
    # curve per node; () leaves it where the operating system puts it
    numa_nodes: tuple[int, ...] = ()
    # also chase pointers through each memory a GPU thread can read, and device memory (chase.py)
    chase: bool = False

    def __post_init__(self) -> None:
        if not self.sizes or min(self.sizes) < 1:
            raise OptionError("--sizes", "give one or more sizes of at least 1 byte")
        limits.TRIALS.check("--trials", self.trials)
        limits.TRIALS.check("--max-trials", self.max_trials)
        if self.max_trials < self.trials:
            raise OptionError(
                "--max-trials", f"{self.max_trials} is fewer than --trials {self.trials}"
            )
        limits.TARGET_TIME.check("--target-time", self.target_s)
        if self.budget_s is not None:
            limits.BUDGET.check("--budget", self.budget_s)
        if self.cache not in CACHE_STATES:
            raise OptionError("--cache", f"'{self.cache}' is not one of {', '.join(CACHE_STATES)}")
        limits.ROUNDS.check("--rounds", self.rounds)
        most = int(cases.LIMITS["most_offset"])
        for option, offsets in (
            ("--host-offset", self.host_offsets),
            ("--device-offset", self.device_offsets),
        ):
            if not offsets or any(not 0 <= o <= most for o in offsets):
                raise OptionError(option, f"give offsets in bytes from 0 to {most}")
        limits.NOISE_BOUND.check("--noise-bound", self.noise_bound)

    def configs(self) -> tuple[list[CurveConfig], list[str]]:
        """Every curve the options ask for, and a note for each combination that cannot run.
        Device-to-device curves use device memory whatever host kinds were asked for."""
        configs: list[CurveConfig] = []
        skipped: list[str] = []

        def skip(
            reason: str, direction: str, memory: str, mechanism: str, timing: str | None = None
        ) -> None:
            note = f"{cases.label(direction, memory, mechanism, timing)}: {reason}"
            if note not in skipped:
                skipped.append(note)

        for device in self.devices:
            for direction in self.directions:
                # Device-to-device copies move device memory, whatever host kinds were asked for.
                device_side = direction in cases.DEVICE_DIRECTIONS
                for memory in cases.memories_for(direction) if device_side else self.memories:
                    for mechanism in self.mechanisms:
                        reason = cases.refusal(direction, memory, mechanism)
                        if reason:
                            skip(reason, direction, memory, mechanism)
                            continue
                        for timing in self.timings:
                            reason = cases.refusal(direction, memory, mechanism, timing)
                            if reason:
                                skip(reason, direction, memory, mechanism, timing)
                                continue
                            # Device-to-device copies have no host side to misalign or place.
                            hosts = (0,) if device_side else self.host_offsets
                            nodes = (
                                (None,) if device_side or not self.numa_nodes else self.numa_nodes
                            )
                            for host_offset in hosts:
                                for device_offset in self.device_offsets:
                                    for node in nodes:
                                        config = CurveConfig(
                                            device,
                                            direction,
                                            memory,
                                            mechanism,
                                            timing,
                                            host_offset,
                                            device_offset,
                                            node,
                                        )
                                        if config not in configs:
                                            configs.append(config)
        return configs, skipped

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        return {k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}


__all__ = ["DIRECTIONS", "SweepOptions"]
