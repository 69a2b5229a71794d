"""The records of `xferscope gemm` (seed 003's GEMM study): its options, one GEMM's measured
point (compute only, with its transfers, padded), the whole result with the offload ladder and
the CPU's points, the peaks it is set against, the alignment classes of seed 003's Table III,
and the JSON (schema xferscope-gemm) and CSV forms. Measuring is gemm/measure.py; the findings,
gemm/findings.py."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

from ..core import stats
from ..core.cases import DEFAULT_SEED
from ..core.compiled import engine_module
from ..documents.envelope import Envelope, dumps_document
from ..documents.records import (
    Column,
    Derived,
    dumps_columns,
    read_result,
    result_document,
    to_plain,
)
from .cpu import DTYPES as CPU_DTYPES
from .cpu import CpuPoint
from .peak import Peak, peak
from .shapes import Shape

SCHEMA_NAME = "xferscope-gemm"
SCHEMA_VERSION = 2
# Schema history (bump SCHEMA_VERSION on any change a reader must know about):
#   1  first version: compute-only points, with transfers, the CPU's.
#   2  points padded to a good multiple ("padded"), the offload ladder ("ladder"), the CPU
#      points' "role", and the derived "peak" and shares; version 1 files read with none.

_e = engine_module()
PRECISIONS: tuple[str, ...] = tuple(p[0] for p in _e.GEMM_PRECISIONS)
# bytes of one element of A and B, and of C, per precision (the engine's table)
ELEMENT_BYTES: dict[str, tuple[int, int]] = {p[0]: (p[1], p[2]) for p in _e.GEMM_PRECISIONS}


def bytes_needed(precision: str, m: int, n: int, k: int, copies: int = 1) -> int:
    """Device memory a GEMM holds: A, B, C and D `copies` times and the workspace (the
    engine's rule, for both engines and the plan's check)."""
    return int(_e.gemm_bytes_needed(precision, m, n, k, copies))


DEFAULT_TARGET_S = 0.1
QUICK_TARGET_S = 0.02
DEFAULT_TRIALS = 5
DEFAULT_SAMPLES = 256
# GEMMs run for at least this long before each point's trials, so the GPU's clocks have settled
# (the first trials of a cold GPU ran up to 20% slower on an H200) ...
WARMUP_S = 0.3
# ... and on, in chunks of a trial, until their rate holds (plan.settle), for at most this long:
# a GEMM that heats the GPU to its power limit slows well after it starts
SETTLE_S = 3.0
# The first point of each precision runs at least this long before its trials: the GPU reaches
# the power limit that precision's GEMMs meet (an H100's bf16 8192^3 GEMM held 735 TFLOP/s for
# 0.3-0.9 s, then fell to 603-632; a rate that holds for three chunks before that fall is no
# steady state)
HEAT_S = 1.5
# Inputs smaller than this (twice a Hopper L2) rotate through copies, so each GEMM reads them
# from memory as a large one does.
ROTATION_BYTES = 128 << 20
# How many of cuBLASLt's heuristic algorithms each GEMM times, keeping the fastest: its first
# choice ran FP64 8192^3 at 0.92 of torch.matmul on an H200.
DEFAULT_TUNE = 8
# A shape whose alignment class is below this is padded to its multiples, and the padded GEMM
# (the copies in and out included) timed against it: seed 003's sizes divisible by 64 ran fastest.
DEFAULT_PAD = 64
# The offload ladder: square sizes at which the GPU with its transfers is set against the CPU
# on one thread and on all, to find where offloading starts to pay.
LADDER: tuple[int, ...] = (
    16,
    24,
    32,
    48,
    64,
    96,
    128,
    192,
    256,
    384,
    512,
    768,
    1024,
    1536,
    2048,
    3072,
    4096,
)


def _triples(shapes: tuple[Shape, ...]) -> list[list[int]]:
    return [[s.m, s.n, s.k] for s in shapes]


@dataclass(frozen=True, slots=True)
class GemmOptions:
    precisions: tuple[str, ...]
    shapes: tuple[Shape, ...]
    trans_a: bool | None = None  # None: the precision's own layout (fp8: TN), else NN
    trans_b: bool | None = None
    alpha: float = 1.0
    beta: float = 0.0
    target_s: float = DEFAULT_TARGET_S
    trials: int = DEFAULT_TRIALS
    samples: int = DEFAULT_SAMPLES
    device: int = 0
    seed: int = DEFAULT_SEED
    transfers: tuple[str, ...] = ()  # host memory the GEMM's data comes from: pinned, pageable
    tiles: int = 8  # the overlapped form: B and C in this many column tiles
    streams: int = 3  # over this many streams
    cpu_threads: tuple[int, ...] = ()  # CPU thread counts (empty: no CPU GEMMs)
    cpu_shapes: tuple[Shape, ...] | None = None  # the CPU's scaling; None: the GPU's, (): none
    offload: tuple[str, ...] | None = None  # the offload ladder's precisions; None: the CPU's
    pad: int = DEFAULT_PAD  # pad shapes of a smaller alignment class to this multiple; 0: never
    ladder: tuple[int, ...] = LADDER  # the offload ladder's sizes (with cpu_threads)
    # False: the GPU's side of the ladder stops at the round of sizes in which it beat the CPU
    # on every thread count (`run`'s check, which keeps only the break-even sizes)
    ladder_full: bool = True
    warmup_s: float = WARMUP_S  # GEMMs run at least this long before each point's trials
    settle_s: float = SETTLE_S  # ... and on until their rate holds, for at most this long
    heat_s: float = HEAT_S  # the warm-up of each precision's first point: at least this long
    tune: int = DEFAULT_TUNE  # heuristic algorithms timed per GEMM (0: its first choice)
    # take the algorithm an earlier tuning of the same GEMM on this GPU, driver and cuBLASLt
    # chose, untimed (tuning.py: `run`'s check)
    reuse_tuning: bool = False

    def layout(self, precision: str) -> tuple[bool, bool]:
        """op(A), op(B) transposed? The asked layout, or the precision's natural one."""
        default = (True, False) if precision == "fp8" else (False, False)
        return (
            default[0] if self.trans_a is None else self.trans_a,
            default[1] if self.trans_b is None else self.trans_b,
        )

    def to_dict(self) -> dict[str, Any]:
        """The options in the result's document: their fields, each shape as [M, N, K]."""
        return to_plain(self) | {
            "shapes": _triples(self.shapes),
            "cpu_shapes": None if self.cpu_shapes is None else _triples(self.cpu_shapes),
        }

    @property
    def cpu_scaling_shapes(self) -> tuple[Shape, ...]:
        return self.shapes if self.cpu_shapes is None else self.cpu_shapes

    @property
    def offload_precisions(self) -> tuple[str, ...]:
        """The precisions of the offload ladder (with cpu_threads): those the CPU runs."""
        if not self.cpu_threads:
            return ()
        asked = self.precisions if self.offload is None else self.offload
        return tuple(p for p in asked if p in CPU_DTYPES)

    def padded(self, shape: Shape) -> Shape | None:
        """The shape padded to multiples of `pad`, or None when it is already aligned that well
        (or padding is off)."""
        if not self.pad or shape.alignment >= self.pad:
            return None
        up = self.pad
        return Shape(-(-shape.m // up) * up, -(-shape.n // up) * up, -(-shape.k // up) * up)


@dataclass(frozen=True, slots=True)
class GemmPoint:
    precision: str
    m: int
    n: int
    k: int
    trans_a: bool
    trans_b: bool
    status: str  # complete, failed, skipped, interrupted
    error: str | None = None
    seconds: tuple[float, ...] = ()  # per GEMM, each trial
    iterations: int = 0  # GEMMs per trial
    verification: dict[str, Any] | None = None
    algorithm: dict[str, Any] | None = None
    copies: int = 1
    # with transfers: {memory, tiles, streams, seconds (per GEMM, each trial), delivered, error}
    transfers: tuple[dict[str, Any], ...] = ()
    # padded: {m, n, k (the padded shape), seconds (per GEMM with its copies), iterations, error}
    padded: dict[str, Any] | None = None
    # the warm-up run before the trials, in seconds: 0 where the tuning's GEMMs, just run for
    # longer than the warm-up (algorithm["tuned_s"]), stood for it; and whether the rate held
    # at its end (plan.settle; False: SETTLE_S stopped it; None: no warm-up)
    warmup_s: float | None = None
    settled: bool | None = None
    # Derived, for readers; ignored when loading (a study point's shares: to_dict).
    DERIVED: ClassVar[tuple[Derived, ...]] = (
        Derived("alignment", lambda p: p.alignment),
        Derived("tflops", lambda p: None if p.flops is None else p.flops / 1e12),
        Derived("spread", lambda p: p.spread),
        Derived("pad_gain", lambda p: p.pad_gain),
    )

    @property
    def shape(self) -> Shape:
        return Shape(self.m, self.n, self.k)

    @property
    def alignment(self) -> int:
        return self.shape.alignment

    @property
    def median_s(self) -> float | None:
        return stats.median(self.seconds) if self.seconds else None

    @property
    def flops(self) -> float | None:
        """FLOP/s of the median trial."""
        t = self.median_s
        return self.shape.flops / t if t else None

    @property
    def spread(self) -> float:
        return stats.relative_range(self.seconds) if len(self.seconds) > 1 else 0.0

    @property
    def verified(self) -> bool | None:
        return None if self.verification is None else bool(self.verification["ok"])

    def transfer_flops(self, memory: str, tiled: bool | None = None) -> float | None:
        """FLOP/s with the data moved from `memory` and back: in sequence, tiled, or the better
        of the two (None)."""
        rates = [
            self.shape.flops / stats.median(t["seconds"])
            for t in self.transfers
            if t["memory"] == memory
            and t["seconds"]
            and t.get("delivered")
            and (tiled is None or (t["tiles"] > 1) == tiled)
        ]
        return max(rates, default=None)

    @property
    def pad_gain(self) -> float | None:
        """How many times as fast the GEMM runs padded (its copies in and out included): above 1,
        padding pays."""
        padded = self.padded or {}
        t = self.median_s
        return t / stats.median(padded["seconds"]) if t and padded.get("seconds") else None


@dataclass(frozen=True, slots=True)
class GemmResult(Envelope):
    device: int
    blas: dict[str, Any]  # the library and its version
    points: tuple[GemmPoint, ...]
    ladder: tuple[GemmPoint, ...] = ()  # the offload ladder's GPU points
    cpu_blas: dict[str, Any] | None = None
    cpu: tuple[CpuPoint, ...] = ()
    # Derived, for readers; ignored when loading.
    DERIVED: ClassVar[tuple[Derived, ...]] = (
        Derived("peak", lambda r: _peaks(r), "ladder"),
        Derived("classes", lambda r: _classes(r)),
    )

    def measured(self, precision: str) -> list[GemmPoint]:
        return [p for p in self.points if p.precision == precision and p.flops and p.verified]

    @property
    def precisions(self) -> list[str]:
        return list(dict.fromkeys(p.precision for p in (*self.points, *self.ladder)))

    @property
    def gpu(self) -> dict[str, Any]:
        """The machine record of the GPU measured."""
        gpus = self.machine.get("gpus") or [{}]
        return next((g for g in gpus if g.get("index") == self.device), gpus[0])

    def peak(self, precision: str) -> Peak | None:
        return peak(self.gpu, precision)

    def best(self, precision: str) -> GemmPoint | None:
        return max(self.measured(precision), key=lambda p: p.flops or 0.0, default=None)

    def shares(self, point: GemmPoint) -> tuple[float | None, float | None]:
        """The point's throughput as a share of the GPU's peak and of the best this run
        measured in its precision."""
        if not point.flops:
            return None, None
        top, best = self.peak(point.precision), self.best(point.precision)
        return (
            point.flops / top.flops if top else None,
            point.flops / best.flops if best and best.flops else None,
        )

    def offload(
        self, precision: str, threads: int
    ) -> tuple[list[tuple[Shape, float, float]], int | None]:
        """The offload comparison against the CPU on `threads` threads: (shape, CPU FLOP/s,
        GPU FLOP/s with its transfers from pinned memory included) for every size both
        measured (the study's and the offload ladder's), smallest first, and the index of the
        first at which the GPU wins (None: it never did)."""
        gpu = {
            p.shape: p
            for p in (*self.points, *self.ladder)
            if p.precision == precision and p.verified and p.transfers
        }
        pairs = sorted(
            (
                (c.shape, c.flops or 0.0, rate)
                for c in self.cpu
                if c.precision == precision
                and c.flops
                and c.threads == threads
                and c.shape in gpu
                and (rate := gpu[c.shape].transfer_flops("pinned"))
            ),
            key=lambda x: x[0].flops,
        )
        first = next((i for i, (_, cpu, rate) in enumerate(pairs) if rate > cpu), None)
        return pairs, first

    # what compare reads of any result
    @property
    def complete(self) -> bool:
        return not self.interrupted

    @property
    def mode(self) -> str:
        return (
            "quick" if self.options.get("target_s", DEFAULT_TARGET_S) < DEFAULT_TARGET_S else "full"
        )


# Alignment classes are compared only among shapes this close in size (seed 003's 8128-8180),
# so the class, not the size, makes the difference.
MOST_SIZE_RATIO = 1.25


def classes(result: GemmResult, precision: str) -> list[tuple[int, float, int]]:
    """Seed 003's Table III for one precision: (alignment class, mean FLOP/s, points), largest
    class first, over the verified points; empty when the shapes differ too much in size for
    their classes to be compared."""
    points = result.measured(precision)
    sizes = [p.shape.flops for p in points]
    if not sizes or (max(sizes) / min(sizes)) ** (1 / 3) > MOST_SIZE_RATIO:
        return []
    groups: dict[int, list[float]] = defaultdict(list)
    for p in points:
        groups[p.alignment].append(p.flops or 0.0)
    return [(c, sum(v) / len(v), len(v)) for c, v in sorted(groups.items(), reverse=True)]


# ---- documents ---------------------------------------------------------------------------------


def _peaks(result: GemmResult) -> dict[str, Any]:
    """The GPU's peak in each precision the result measured (null where it is not known)."""
    return {
        precision: None if (top := result.peak(precision)) is None else top.to_dict()
        for precision in result.precisions
    }


def _classes(result: GemmResult) -> dict[str, Any]:
    """Seed 003's Table III in each precision the result measured (classes())."""
    return {
        precision: [
            {"alignment": c, "mean_tflops": f / 1e12, "points": n}
            for c, f, n in classes(result, precision)
        ]
        for precision in result.precisions
    }


def to_dict(result: GemmResult) -> dict[str, Any]:
    """The result's document: its fields and derived entries, each study point's with its
    shares of the GPU's peak and of the best in its precision (which the whole result, not the
    point, knows: GemmResult.shares)."""
    d = result_document(SCHEMA_NAME, SCHEMA_VERSION, result)
    for p, point in zip(result.points, d["points"], strict=True):
        point["share_of_peak"], point["share_of_best"] = result.shares(p)
    return d


def from_dict(d: dict[str, Any]) -> GemmResult:
    """A gemm document read back; SchemaError names the field that is wrong."""
    return read_result(GemmResult, d, SCHEMA_NAME, SCHEMA_VERSION, oldest=1)


def dumps_json(result: GemmResult) -> str:
    return dumps_document(to_dict(result), indent=2)


class _Row(NamedTuple):
    """A row of the CSV: a study point of a result."""

    result: GemmResult
    point: GemmPoint


def _point_column(name: str) -> Column[_Row]:
    return Column(name, lambda r: getattr(r.point, name))


def _text(value: float | None, spec: str = ".6g", scale: float = 1.0) -> str:
    """A figure in a CSV cell: empty when there is none."""
    return "" if value is None else format(value / scale, spec)


def _transfer_column(memory: str, tiled: bool) -> Column[_Row]:
    """FLOP/s with the data moved from `memory` and back, in sequence or tiled."""
    name = f"{memory}_{'tiled' if tiled else 'sequence'}_tflops"
    return Column(name, lambda r: _text(r.point.transfer_flops(memory, tiled), scale=1e12))


def _padded_shape(p: GemmPoint) -> str:
    return "" if not p.padded else f"{p.padded['m']}x{p.padded['n']}x{p.padded['k']}"


CSV_COLUMNS: tuple[Column[_Row], ...] = (
    Column("simulated", lambda r: int(r.result.simulated)),
    Column("device", lambda r: r.result.device),
    *(_point_column(name) for name in ("precision", "m", "n", "k")),
    Column("trans_a", lambda r: int(r.point.trans_a)),
    Column("trans_b", lambda r: int(r.point.trans_b)),
    *(_point_column(name) for name in ("alignment", "status")),
    Column("median_s", lambda r: _text(r.point.median_s)),
    Column("tflops", lambda r: _text(r.point.flops, scale=1e12)),
    Column("spread", lambda r: f"{r.point.spread:.4f}"),
    Column("verified", lambda r: "" if r.point.verified is None else int(r.point.verified)),
    Column(
        "worst_error",
        lambda r: "" if not r.point.verification else f"{r.point.verification['worst_error']:.3g}",
    ),
    Column("algorithm_id", lambda r: (r.point.algorithm or {}).get("id", "")),
    Column("tile", lambda r: (r.point.algorithm or {}).get("tile", "")),
    _point_column("copies"),
    *(
        _transfer_column(memory, tiled)
        for memory in ("pinned", "pageable")
        for tiled in (False, True)
    ),
    Column("share_of_peak", lambda r: _text(r.result.shares(r.point)[0], ".4f")),
    Column("share_of_best", lambda r: _text(r.result.shares(r.point)[1], ".4f")),
    Column("padded_shape", lambda r: _padded_shape(r.point)),
    Column("pad_gain", lambda r: _text(r.point.pad_gain, ".4f")),
    Column("error", lambda r: r.point.error or ""),
)


def dumps_csv(result: GemmResult) -> str:
    """One row per study point."""
    return dumps_columns(CSV_COLUMNS, (_Row(result, p) for p in result.points))


def steps(options: GemmOptions) -> int:
    """Progress steps of a plan: each GEMM, each CPU point, and the offload ladder's."""
    cpu = len(options.cpu_scaling_shapes) * len(options.cpu_threads)  # per precision
    ladder = 0
    if options.cpu_threads:
        ladder = len(options.ladder) + len({1, max(options.cpu_threads)})
    offload = len(options.offload_precisions)
    return len(options.precisions) * (len(options.shapes) + cpu) + ladder * offload
