"""Times and verifies every GEMM of a plan (precision x shape) on one GPU: the engine's rules
first (a precision the GPU lacks, a layout it refuses: skipped with the reason), memory checked
(a shape that does not fit says how much it needs and how much is free), then NetPIPE's method:
a calibration run long enough to trust, trials of a target time, the median. Inputs are random
(never zeros: zeros run faster) and rotated through copies when they would fit in L2; the
algorithm cuBLASLt chose is recorded; a sample of outputs is checked against a double-precision
reference. Holds the result record, its JSON and CSV forms (schema xferscope-gemm) and its
findings: the alignment classes of seed 003's Table III, and every point that failed."""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
from collections import defaultdict
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from .. import __version__
from ..core import machine, plan, stats
from ..core.engine import Engine, compute_capability
from ..core.errors import AllocationError, EngineError, OptionError
from ..core.findings import INFO, WARNING, Finding
from ..core.native import engine_module
from ..core.progress import QUIET, Progress
from ..documents.envelope import document_header, header_fields
from ..documents.reader import Field, check_schema
from .cpu import CpuPoint, blas_info, measure_cpu
from .shapes import Shape

SCHEMA_NAME = "xferscope-gemm"
SCHEMA_VERSION = 1
# Schema history (bump SCHEMA_VERSION on any change a reader must know about):
#   1  first version: compute-only points.

_e = engine_module()
PRECISIONS: tuple[str, ...] = tuple(p[0] for p in _e.GEMM_PRECISIONS)
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
    seed: int = 0x5EED
    transfers: tuple[str, ...] = ()  # host memory the GEMM's data comes from: pinned, pageable
    tiles: int = 8  # the overlapped form: B and C in this many column tiles
    streams: int = 3  # over this many streams
    cpu_threads: tuple[int, ...] = ()  # CPU thread counts (empty: no CPU GEMMs)
    cpu_shapes: tuple[Shape, ...] | None = None  # None: the GPU's shapes

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
        return d


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
            # derived, for readers; ignored when loading
            "alignment": self.alignment,
            "tflops": None if self.flops is None else self.flops / 1e12,
            "spread": self.spread,
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
        )


@dataclass(frozen=True, slots=True)
class GemmResult:
    tool_version: str
    created: str
    simulated: bool
    machine: dict[str, Any]
    options: dict[str, Any]
    device: int
    blas: dict[str, Any]  # the library and its version
    points: tuple[GemmPoint, ...]
    interrupted: bool
    wall_s: float
    findings: tuple[Finding, ...] = field(default=())
    cpu: tuple[CpuPoint, ...] = ()
    cpu_blas: dict[str, Any] | None = None

    def measured(self, precision: str) -> list[GemmPoint]:
        return [p for p in self.points if p.precision == precision and p.flops and p.verified]


# ---- measuring ---------------------------------------------------------------------------------


def refusal(options: GemmOptions, precision: str, shape: Shape, capability: int) -> str:
    trans_a, trans_b = options.layout(precision)
    return str(_e.gemm_refusal(precision, shape.m, shape.n, shape.k, trans_a, trans_b, capability))


def planned(
    options: GemmOptions, precision: str, shape: Shape, status: str, error: str | None = None
) -> GemmPoint:
    """A point of the plan, in the precision's layout, not (yet) measured."""
    trans_a, trans_b = options.layout(precision)
    return GemmPoint(precision, shape.m, shape.n, shape.k, trans_a, trans_b, status, error)


def measure_point(engine: Engine, options: GemmOptions, precision: str, shape: Shape) -> GemmPoint:
    """One GEMM: a failure is recorded in the point, and the run goes on."""
    trans_a, trans_b = options.layout(precision)
    point = planned(options, precision, shape, "interrupted")
    try:
        g = engine.gemm(
            options.device,
            precision,
            shape.m,
            shape.n,
            shape.k,
            trans_a,
            trans_b,
            options.alpha,
            options.beta,
            options.seed,
            ROTATION_BYTES,
        )
    except (AllocationError, EngineError) as exc:
        return replace(point, status="failed", error=str(exc))
    try:
        point = replace(point, algorithm=dict(g.algorithm), copies=int(g.copies))
        # warm-up and calibration: a run long enough to trust, then trials of the target time
        calibration = plan.calibrate(g.time, least_s=options.target_s / 4)
        g.time(plan.repeats_for(WARMUP_S, calibration.per_iteration_s))
        iterations = plan.repeats_for(options.target_s, calibration.per_iteration_s)
        seconds = plan.run_trials(lambda: g.time(iterations) / iterations, options.trials)
        v = g.verify(options.samples)
        verification = {
            "ok": bool(v.ok),
            "samples": int(v.samples),
            "failures": int(v.failures),
            "worst_error": float(v.worst_error),
            "worst_row": int(v.worst_row),
            "worst_column": int(v.worst_column),
        }
        point = replace(
            point,
            status="complete",
            seconds=tuple(seconds),
            iterations=iterations,
            verification=verification,
        )
        for memory in options.transfers:
            for tiles in dict.fromkeys((1, options.tiles)):
                point = replace(
                    point,
                    transfers=(*point.transfers, _with_transfers(g, options, memory, tiles)),
                )
        return point
    except (AllocationError, EngineError) as exc:
        return replace(point, status="failed", error=str(exc))
    finally:
        g.close()


def _with_transfers(g: Any, options: GemmOptions, memory: str, tiles: int) -> dict[str, Any]:
    """The GEMM with its data uploaded from `memory` and C downloaded, timed like the GEMM."""
    streams = 1 if tiles == 1 else options.streams
    record: dict[str, Any] = {"memory": memory, "tiles": tiles, "streams": streams, "seconds": []}
    pinned = memory == "pinned"

    def run(n: int) -> float:
        return float(g.time_with_transfers(pinned, tiles, streams, n, False)[0])

    try:
        calibration = plan.calibrate(run, least_s=options.target_s / 4)
        n = plan.repeats_for(options.target_s, calibration.per_iteration_s)
        seconds = plan.run_trials(lambda: run(n) / n, min(options.trials, 3))
        _, delivered = g.time_with_transfers(pinned, tiles, streams, 1)
        return record | {"seconds": seconds, "iterations": n, "delivered": bool(delivered)}
    except (AllocationError, EngineError) as exc:
        return record | {"error": str(exc), "delivered": False}


def measure(engine: Engine, options: GemmOptions, progress: Progress = QUIET) -> GemmResult:
    """Every precision and shape; refusals are skipped points with their reasons. Ctrl-C keeps
    the points measured."""
    created = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    start = engine.clock()
    capability = compute_capability(engine, options.device)
    points: list[GemmPoint] = []
    cpu: list[CpuPoint] = []
    interrupted = False
    try:
        for precision in options.precisions:
            progress.begin(precision)
            for shape in options.shapes:
                reason = refusal(options, precision, shape, capability)
                if reason:
                    points.append(planned(options, precision, shape, "skipped", reason))
                else:
                    points.append(measure_point(engine, options, precision, shape))
                p = points[-1]
                figure = f"{p.flops / 1e12:.1f} TFLOP/s" if p.flops else p.status
                progress.step(f"{precision} {shape.label}: {figure}")
        if options.cpu_threads:
            progress.begin("CPU")
            cpu = measure_cpu(
                options.precisions,
                options.cpu_shapes or options.shapes,
                options.cpu_threads,
                options.target_s,
                min(options.trials, 3),
                options.seed,
                progress,
                into=cpu,
            )
    except KeyboardInterrupt:
        interrupted = True
    blas: dict[str, Any] = {"library": "cuBLASLt"}
    if not engine.simulated:
        try:
            blas["version"] = int(_e.cublaslt_version())
        except RuntimeError as exc:
            blas["error"] = str(exc)
    result = GemmResult(
        tool_version=__version__,
        created=created,
        simulated=engine.simulated,
        machine=machine.collect(engine, [options.device]),
        options=options.to_dict(),
        device=options.device,
        blas=blas,
        points=tuple(points),
        interrupted=interrupted,
        wall_s=engine.clock() - start,
        cpu=tuple(cpu),
        cpu_blas=blas_info() if options.cpu_threads else None,
    )
    return replace(result, findings=tuple(findings(result)))


def check_plan(engine: Engine, options: GemmOptions) -> None:
    """Refuses, before measuring, a plan of which nothing can run, naming why."""
    capability = compute_capability(engine, options.device)
    reasons = [
        refusal(options, p, s, capability) for p in options.precisions for s in options.shapes
    ]
    if all(reasons):
        raise OptionError("--precision", f"nothing in this plan can run: {reasons[0]}")


# ---- alignment classes and findings -----------------------------------------------------------


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


def findings(result: GemmResult) -> list[Finding]:
    out: list[Finding] = []
    for p in result.points:
        label = f"{p.precision} {p.shape.label}"
        if p.status == "failed":
            out.append(
                Finding(
                    "gemm_failed",
                    WARNING,
                    result.device,
                    label,
                    None,
                    None,
                    f"{label}: {p.error}",
                    "",
                    "",
                )
            )
        elif p.verified is False:
            v = p.verification or {}
            out.append(
                Finding(
                    "gemm_unverified",
                    WARNING,
                    result.device,
                    label,
                    float(v.get("worst_error", 0.0)),
                    None,
                    f"{label}: {v.get('failures')} of {v.get('samples')} sampled outputs differ "
                    f"from the double-precision reference beyond the tolerance (worst at "
                    f"[{v.get('worst_row')}, {v.get('worst_column')}])",
                    "a wrong result: a failing GPU or memory, or a library fault",
                    "rerun; if it repeats, check `nvidia-smi -q` for ECC and Xid errors",
                )
            )
    out += _cpu_findings(result)
    out += _transfer_findings(result)
    for precision in dict.fromkeys(p.precision for p in result.points):
        table = classes(result, precision)
        best = max(result.measured(precision), key=lambda p: p.flops or 0.0, default=None)
        if best is not None and best.flops:
            out.append(
                Finding(
                    f"gemm_best_{precision}",
                    INFO,
                    result.device,
                    f"{precision} best",
                    best.flops,
                    None,
                    f"{precision}: best {best.flops / 1e12:.1f} TFLOP/s at {best.shape.label}",
                )
            )
        if len(table) > 1:
            (top, top_flops, _), (low, low_flops, _) = table[0], table[-1]
            if low_flops > 0:
                out.append(
                    Finding(
                        f"gemm_alignment_{precision}",
                        INFO,
                        result.device,
                        f"{precision} alignment",
                        top_flops / low_flops,
                        None,
                        f"{precision}: shapes divisible by {top} run at {top_flops / 1e12:.1f} "
                        f"TFLOP/s on average, {top_flops / low_flops:.2f}x those divisible only "
                        f"by {low} ({low_flops / 1e12:.1f})",
                        ""
                        if top_flops / low_flops < 1.1
                        else "poorly aligned shapes fall off the fastest kernels",
                        ""
                        if top_flops / low_flops < 1.1
                        else f"pad M, N and K to multiples of {top}",
                    )
                )
    return out


# Transfers that cost less than this share of the time are "paid for" (the 5%).
TRANSFER_SHARE = 0.05


def _transfer_findings(result: GemmResult) -> list[Finding]:
    """Seed 003's ratios with and without transfers, the size from which they cost less than
    5%, and where the GPU with its transfers overtakes the CPU."""
    out = []
    for precision in dict.fromkeys(p.precision for p in result.points):
        points = sorted(
            (p for p in result.measured(precision) if p.transfers), key=lambda p: p.shape.flops
        )
        if not points:
            continue
        for memory in dict.fromkeys(t["memory"] for p in points for t in p.transfers):
            big = points[-1]
            seq, tiled = big.transfer_flops(memory, False), big.transfer_flops(memory, True)
            if big.flops and seq:
                tiles = next((t["tiles"] for t in big.transfers if t["tiles"] > 1), None)
                extra = f", {tiled / big.flops:.2f} in {tiles} tiles" if tiled and tiles else ""
                out.append(
                    Finding(
                        f"gemm_transfers_{precision}_{memory}",
                        INFO,
                        result.device,
                        f"{precision} {memory}",
                        seq / big.flops,
                        None,
                        f"{precision} at {big.shape.label} with its data from {memory} memory: "
                        f"{seq / big.flops:.2f} of compute-only in sequence{extra}",
                    )
                )
            paid = None
            for p in reversed(points):
                rate = p.transfer_flops(memory)
                if not (p.flops and rate and rate >= (1 - TRANSFER_SHARE) * p.flops):
                    break
                paid = p
            if paid is not None:
                out.append(
                    Finding(
                        f"gemm_transfers_paid_{precision}_{memory}",
                        INFO,
                        result.device,
                        f"{precision} {memory}",
                        float(paid.shape.m),
                        None,
                        f"{precision}: from {paid.shape.label} on, moving the data from {memory} "
                        f"memory costs less than {TRANSFER_SHARE:.0%} of the time",
                    )
                )
        out += _break_even(result, precision, points)
    return out


def _break_even(result: GemmResult, precision: str, points: list[GemmPoint]) -> list[Finding]:
    """The smallest measured size at which the GPU, its pinned transfers included, beats the
    CPU on every thread, and one thread."""
    cpu = [c for c in result.cpu if c.precision == precision and c.flops]
    if not cpu:
        return []
    most = max(c.threads for c in cpu)
    out = []
    for threads, words in ((most, f"the CPU on {most} threads"), (1, "one CPU thread")):
        wins = [
            p
            for p in points
            if (rate := p.transfer_flops("pinned"))
            and any(
                c.shape == p.shape and c.threads == threads and rate > (c.flops or 0.0) for c in cpu
            )
        ]
        compared = [
            p for p in points if any(c.shape == p.shape and c.threads == threads for c in cpu)
        ]
        if not compared:
            continue
        first = min(wins, key=lambda p: p.shape.flops, default=None)
        message = (
            f"{precision}: the GPU, its transfers from pinned memory included, beats {words} "
            f"from {first.shape.label} on (the smallest size measured where it does)"
            if first
            else f"{precision}: the GPU with its transfers never beat {words} at the sizes measured"
        )
        out.append(
            Finding(
                f"gemm_break_even_{precision}_{threads}",
                INFO,
                result.device,
                f"{precision} break-even",
                None if first is None else float(first.shape.m),
                None,
                message,
            )
        )
    return out


def _cpu_findings(result: GemmResult) -> list[Finding]:
    """Seed 003's Figure 9 in a sentence per precision, and the GPU against the whole CPU."""
    out = []
    blas = (result.cpu_blas or {}).get("internal_api") or "the BLAS"
    for precision in dict.fromkeys(c.precision for c in result.cpu if c.flops):
        done = [c for c in result.cpu if c.precision == precision and c.flops]
        biggest = max(done, key=lambda c: c.shape.flops).shape
        at = sorted((c for c in done if c.shape == biggest), key=lambda c: c.threads)
        one, every = at[0], at[-1]
        scale = (every.flops or 0.0) / (one.flops or 1.0)
        out.append(
            Finding(
                f"gemm_cpu_{precision}",
                INFO,
                None,
                f"{precision} CPU",
                every.flops,
                one.flops,
                f"{precision} on the CPU ({blas}) at {biggest.label}: {(one.flops or 0) / 1e9:.0f} "
                f"GFLOP/s on {one.threads} thread, {(every.flops or 0) / 1e9:.0f} on "
                f"{every.threads} ({scale:.1f}x, {scale / max(every.threads, 1):.0%} per thread)",
            )
        )
        gpu = [p for p in result.measured(precision) if p.shape == biggest]
        if gpu and gpu[0].flops and every.flops:
            out.append(
                Finding(
                    f"gemm_gpu_vs_cpu_{precision}",
                    INFO,
                    result.device,
                    f"{precision} GPU/CPU",
                    gpu[0].flops / every.flops,
                    None,
                    f"{precision} at {biggest.label}: the GPU computes "
                    f"{gpu[0].flops / every.flops:.0f}x as fast as the CPU on {every.threads} "
                    "threads (transfers not counted)",
                )
            )
    return out


# ---- documents ---------------------------------------------------------------------------------


def to_dict(result: GemmResult) -> dict[str, Any]:
    precisions = list(dict.fromkeys(p.precision for p in result.points))
    return document_header(SCHEMA_NAME, SCHEMA_VERSION, result) | {
        "device": result.device,
        "blas": result.blas,
        "points": [p.to_dict() for p in result.points],
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
    check_schema(d, SCHEMA_NAME, SCHEMA_VERSION)
    r = Field(d)
    return GemmResult(
        **header_fields(r),
        device=r["device"].integer(),
        blas=r["blas"].object(),
        points=tuple(GemmPoint.read(p) for p in r["points"].items()),
        cpu=tuple(CpuPoint.read(c) for c in r["cpu"].items()),
        cpu_blas=None if r["cpu_blas"].null else r["cpu_blas"].object(),
    )


def dumps_json(result: GemmResult) -> str:
    return json.dumps(to_dict(result), indent=2, allow_nan=False) + "\n"


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
    "error",
)


def dumps_csv(result: GemmResult) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for p in result.points:
        v = p.verification or {}
        a = p.algorithm or {}
        writer.writerow(
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
                p.error or "",
            )
        )
    return out.getvalue()


def steps(options: GemmOptions) -> int:
    cpu = len(options.cpu_shapes or options.shapes) * len(options.cpu_threads)  # per precision
    return len(options.precisions) * (len(options.shapes) + cpu)
