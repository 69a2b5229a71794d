"""How much `xferscope run` measures: RunPlan, and the default and --quick plans, their trial
lengths chosen for the run's curves and concurrent streams."""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..sweep.chase import CHASE_TRIALS

MIB = 1 << 20


@dataclass(frozen=True, slots=True)
class RunPlan:
    """How much one run measures: the default took 28.9 s on one H100, --quick 8.4 s (the
    median of six first runs; 8.3 s with the GEMM check's tuning kept), from the command to its
    last file (cli/run.py; benchmarks/results/run-h100-20261126.json)."""

    mode: str
    max_size: int
    size_step: int  # sizes are powers of this from 1 B to max_size
    curve_budget_s: float  # seed 000's limiter, per curve: a bound, rarely reached
    target_s: float  # one trial's copies last about this long (device or API time)
    trials: int
    max_trials: int  # a size's trials go on to this many while their spread is above the bound
    stream_bytes: int  # per copy, for concurrent and peer-to-peer streams
    stream_target_s: float  # how long one concurrent trial lasts
    stream_trials: int
    pinning_bytes: int
    # a size stops after this many trials when each lies within plan.EARLY_NOISE of their
    # median (None: every trial), the rest taken only when they do not
    early_trials: int | None = 3
    # trials of each GPU-side pointer chase (device memory, pinned host memory, a peer's
    # memory); 0: none (--quick, whose 10 s they would pass: their JSON says so)
    chase_trials: int = CHASE_TRIALS

    @property
    def sizes(self) -> tuple[int, ...]:
        count = round(math.log(self.max_size, self.size_step))
        return tuple(self.size_step**i for i in range(count + 1))


# Trials of milliseconds: a trial's timer reads to 0.5 us (CUDA events) or better (the host's
# steady clock), and a copy of 1 GiB takes 20 ms on PCIe Gen5 (one copy a trial however short).
# NetPIPE's 0.25 s trials are made for networks; before, the budget stretched every trial to
# fill it (2.4 s a curve: 58 s of curves on an H100).
RUN_TARGET_S = 0.005
QUICK_RUN_TARGET_S = 0.001
# The budgets bound a pageable curve (7 to 14 copies of 1 GiB at 7-14 GB/s, and the sizes
# below; --quick: 7 of 256 MiB): with 2.4 s (0.35 s) an H100's H2D pageable curve had sizes
# estimated or cut short. A pinned curve takes 0.6 s (0.15 s).
DEFAULT_PLAN = RunPlan("default", 1 << 30, 4, 4.0, RUN_TARGET_S, 7, 14, 256 * MIB, 0.05, 5, 1 << 30)
QUICK_PLAN = RunPlan(
    "quick", 256 * MIB, 16, 0.6, QUICK_RUN_TARGET_S, 7, 7, 64 * MIB, 0.01, 3, 256 * MIB, 3, 0
)
