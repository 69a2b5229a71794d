"""The records of `xferscope gemm` (seed 003's GEMM study): its options, one GEMM's measured
point (compute only, with its transfers, padded), the whole result with the offload ladder and
the CPU's points, the peaks it is set against, the alignment classes of seed 003's Table III,
and the JSON (schema xferscope-gemm) and CSV forms. Measuring is gemm/measure.py; the findings,
gemm/findings.py."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from ..core import stats
from ..core.cases import DEFAULT_SEED
from ..core.compiled import engine_module
from ..documents.envelope import (
    Envelope,
    document_header,
    dumps_document,
    dumps_table,
    header_fields,
)
from ..documents.reader import Field, check_schema
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
# GEMMs run for this long before the trials, so the GPU's clocks have settled (the first trials
# of a cold GPU ran up to 20% slower on an H200)
WARMUP_S = 0.3
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
    warmup_s: float = WARMUP_S  # GEMMs run before the first precision's trials
    tune: int = DEFAULT_TUNE  # heuristic algorithms timed per GEMM (0: its first choice)

    def layout(self, precision: str) -> tuple[bool, bool]:
        """op(A), op(B) transposed? The asked layout, or the precision's natural one."""
        default = (True, False) if precision == "fp8" else (False, False)
        return (
            default[0] if self.trans_a is None else self.trans_a,
            default[1] if self.trans_b is None else self.trans_b,
        )

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["shapes"] = [[s.m, s.n, s.k] for s in self.shapes]
        d["cpu_shapes"] = (
            None if self.cpu_shapes is None else [[s.m, s.n, s.k] for s in self.cpu_shapes]
        )
        d["ladder"] = list(self.ladder)
        return d

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

    def to_dict(self) -> dict[str, Any]:
        return {
            "precision": self.precision,
            "m": self.m,
            "n": self.n,
            "k": self.k,
            "trans_a": self.trans_a,
            "trans_b": self.trans_b,
            "status": self.status,
            "error": self.error,
            "seconds": list(self.seconds),
            "iterations": self.iterations,
            "verification": self.verification,
            "algorithm": self.algorithm,
            "copies": self.copies,
            "transfers": [dict(t) for t in self.transfers],
            "padded": self.padded,
            # derived, for readers; ignored when loading
            "alignment": self.alignment,
            "tflops": None if self.flops is None else self.flops / 1e12,
            "spread": self.spread,
            "pad_gain": self.pad_gain,
        }

    @classmethod
    def read(cls, x: Field) -> GemmPoint:
        return cls(
            precision=x["precision"].string(),
            m=x["m"].integer(),
            n=x["n"].integer(),
            k=x["k"].integer(),
            trans_a=x["trans_a"].boolean(),
            trans_b=x["trans_b"].boolean(),
            status=x["status"].string(),
            error=x["error"].optional_string(),
            seconds=x["seconds"].numbers(),
            iterations=x["iterations"].integer(),
            verification=None if x["verification"].null else x["verification"].object(),
            algorithm=None if x["algorithm"].null else x["algorithm"].object(),
            copies=x["copies"].integer(),
            transfers=tuple(t.object() for t in x["transfers"].items()),
            padded=None if "padded" not in x or x["padded"].null else x["padded"].object(),
        )


@dataclass(frozen=True, slots=True)
class GemmResult(Envelope):
    device: int
    blas: dict[str, Any]  # the library and its version
    points: tuple[GemmPoint, ...]
    cpu: tuple[CpuPoint, ...] = ()
    cpu_blas: dict[str, Any] | None = None
    ladder: tuple[GemmPoint, ...] = ()  # the offload ladder's GPU points

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


def _point_dict(result: GemmResult, p: GemmPoint) -> dict[str, Any]:
    of_peak, of_best = result.shares(p)
    return p.to_dict() | {"share_of_peak": of_peak, "share_of_best": of_best}


def to_dict(result: GemmResult) -> dict[str, Any]:
    precisions = result.precisions
    return document_header(SCHEMA_NAME, SCHEMA_VERSION, result) | {
        "device": result.device,
        "blas": result.blas,
        "points": [_point_dict(result, p) for p in result.points],
        "ladder": [p.to_dict() for p in result.ladder],
        "peak": {
            precision: None if (top := result.peak(precision)) is None else top.to_dict()
            for precision in precisions
        },
        "cpu_blas": result.cpu_blas,
        "cpu": [c.to_dict() for c in result.cpu],
        "classes": {
            precision: [
                {"alignment": c, "mean_tflops": f / 1e12, "points": n}
                for c, f, n in classes(result, precision)
            ]
            for precision in precisions
        },
    }


def from_dict(d: dict[str, Any]) -> GemmResult:
    check_schema(d, SCHEMA_NAME, SCHEMA_VERSION, oldest=1)
    r = Field(d)
    return GemmResult(
        **header_fields(r),
        device=r["device"].integer(),
        blas=r["blas"].object(),
        points=tuple(GemmPoint.read(p) for p in r["points"].items()),
        cpu=tuple(CpuPoint.read(c) for c in r["cpu"].items()),
        cpu_blas=None if r["cpu_blas"].null else r["cpu_blas"].object(),
        ladder=tuple(GemmPoint.read(p) for p in r["ladder"].items()) if "ladder" in r else (),
    )


def dumps_json(result: GemmResult) -> str:
    return dumps_document(to_dict(result), indent=2)


CSV_COLUMNS = (
    "simulated",
    "device",
    "precision",
    "m",
    "n",
    "k",
    "trans_a",
    "trans_b",
    "alignment",
    "status",
    "median_s",
    "tflops",
    "spread",
    "verified",
    "worst_error",
    "algorithm_id",
    "tile",
    "copies",
    "pinned_sequence_tflops",
    "pinned_tiled_tflops",
    "pageable_sequence_tflops",
    "pageable_tiled_tflops",
    "share_of_peak",
    "share_of_best",
    "padded_shape",
    "pad_gain",
    "error",
)


def dumps_csv(result: GemmResult) -> str:
    def rows() -> Iterator[Sequence[object]]:
        for p in result.points:
            v = p.verification or {}
            a = p.algorithm or {}
            yield (
                (
                    int(result.simulated),
                    result.device,
                    p.precision,
                    p.m,
                    p.n,
                    p.k,
                    int(p.trans_a),
                    int(p.trans_b),
                    p.alignment,
                    p.status,
                    "" if p.median_s is None else f"{p.median_s:.6g}",
                    "" if p.flops is None else f"{p.flops / 1e12:.6g}",
                    f"{p.spread:.4f}",
                    "" if p.verified is None else int(p.verified),
                    "" if not v else f"{v['worst_error']:.3g}",
                    a.get("id", ""),
                    a.get("tile", ""),
                    p.copies,
                    *(
                        ""
                        if (rate := p.transfer_flops(memory, tiled)) is None
                        else f"{rate / 1e12:.6g}"
                        for memory in ("pinned", "pageable")
                        for tiled in (False, True)
                    ),
                    *("" if share is None else f"{share:.4f}" for share in result.shares(p)),
                    "" if not p.padded else f"{p.padded['m']}x{p.padded['n']}x{p.padded['k']}",
                    "" if p.pad_gain is None else f"{p.pad_gain:.4f}",
                    p.error or "",
                )
            )

    return dumps_table(CSV_COLUMNS, rows())


def steps(options: GemmOptions) -> int:
    """Progress steps of a plan: each GEMM, each CPU point, and the offload ladder's."""
    cpu = len(options.cpu_scaling_shapes) * len(options.cpu_threads)  # per precision
    ladder = 0
    if options.cpu_threads:
        ladder = len(options.ladder) + len({1, max(options.cpu_threads)})
    offload = len(options.offload_precisions)
    return len(options.precisions) * (len(options.shapes) + cpu) + ladder * offload
