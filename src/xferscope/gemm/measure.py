"""Times and verifies every GEMM of a plan (precision x shape) on one GPU: the engine's rules
first (a precision the GPU lacks, a layout it refuses: skipped with the reason), memory checked
(a shape that does not fit says how much it needs and how much is free), then NetPIPE's method:
a calibration run long enough to trust, trials of a target time, the median. Inputs are random
(never zeros: zeros run faster) and rotated through copies when they would fit in L2; the
algorithm cuBLASLt chose is recorded; a sample of outputs is checked against a double-precision
reference. Then, as asked: each GEMM with its data moved from host memory and back (in
sequence, and in tiles over streams); each poorly aligned shape padded to a good multiple, its
copies included; the CPU through NumPy's BLAS on 1, 2, 4, ... threads; and the offload ladder,
small to large sizes until the GPU with its transfers beats the CPU on all its cores."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

from ..core import background, libraries, machine, plan
from ..core.engine import Engine, compute_capability
from ..core.errors import AllocationError, BlasError, EngineError, OptionError
from ..core.progress import QUIET, Progress
from ..core.units import format_bytes
from ..documents.envelope import now
from . import tuning
from .cpu import CpuPoint, measure_cpu, run_worker, start_ahead, stop_ahead
from .cpu_worker import beaten
from .findings import findings
from .records import ROTATION_BYTES, GemmOptions, GemmPoint, GemmResult, _e, bytes_needed
from .shapes import Shape

# The offload ladder's trials: short, as its GEMMs are small and many (a GEMM of 256^3 with its
# transfers takes about 0.1 ms on an H100: 50 of them a trial).
LADDER_TARGET_S = 0.005
LADDER_TRIALS = 3
# The ladder's GEMMs take cuBLASLt's first choice that runs, untimed against the others: at its
# sizes (16-4096, with their transfers) the transfers decide, and timing 8 candidates cost about
# 0.16 s a size on an H100 (1.4 s of `run`'s 10 s GEMM check)
LADDER_TUNE = 0
ALIGNED = 1024  # a size every precision's rules accept: the shape that shows a shape at fault


def refusal(options: GemmOptions, precision: str, shape: Shape, capability: int) -> str:
    trans_a, trans_b = options.layout(precision)
    return str(_e.gemm_refusal(precision, shape.m, shape.n, shape.k, trans_a, trans_b, capability))


def planned(
    options: GemmOptions, precision: str, shape: Shape, status: str, error: str | None = None
) -> GemmPoint:
    """A point of the plan, in the precision's layout, not (yet) measured."""
    trans_a, trans_b = options.layout(precision)
    return GemmPoint(precision, shape.m, shape.n, shape.k, trans_a, trans_b, status, error)


def measure_point(
    engine: Engine, options: GemmOptions, precision: str, shape: Shape, first: bool = False
) -> GemmPoint:
    """One GEMM, then (when its shape is poorly aligned) the same GEMM padded: a failure is
    recorded in the point, and the run goes on. The `first` point of a precision heats the GPU
    (each precision draws its own power)."""
    point = _measure_point(engine, options, precision, shape, first)
    padded = options.padded(shape)
    if point.status == "complete" and padded is not None:
        point = replace(point, padded=_padded(engine, options, precision, shape, padded))
    return point


def _padded(
    engine: Engine, options: GemmOptions, precision: str, shape: Shape, padded: Shape
) -> dict[str, Any]:
    """The GEMM of `shape` run as one of `padded`: its A and B copied into the larger matrices,
    the GEMM, its C copied out, timed like the GEMM itself."""
    trans_a, trans_b = options.layout(precision)
    record: dict[str, Any] = {"m": padded.m, "n": padded.n, "k": padded.k, "seconds": []}
    try:
        g = engine.gemm(
            options.device,
            precision,
            padded.m,
            padded.n,
            padded.k,
            trans_a,
            trans_b,
            options.alpha,
            options.beta,
            options.seed,
            0,
            options.tune,
        )
    except (AllocationError, EngineError) as exc:
        return record | {"error": str(exc)}
    try:

        def run(n: int) -> float:
            return g.time_padded(shape.m, shape.n, shape.k, n)

        seconds, n, _ = plan.timed_trials(run, options.target_s, options.trials)
        return record | {"seconds": seconds, "iterations": n}
    except (AllocationError, EngineError) as exc:
        return record | {"error": str(exc)}
    finally:
        g.close()


def _tuning_key(engine: Engine, options: GemmOptions, precision: str, shape: Shape) -> str | None:
    """Where the rank a tuning chooses is kept between runs (tuning.py): with reuse_tuning, for
    a GEMM that times several candidates; else None."""
    if not options.reuse_tuning or options.tune <= 1 or engine.simulated:
        return None
    try:
        version = engine.blas_version()
    except BlasError:
        return None
    gemm = (precision, shape.m, shape.n, shape.k, *options.layout(precision), options.tune)
    return tuning.key(engine, options.device, version, gemm)


def _measure_point(
    engine: Engine, options: GemmOptions, precision: str, shape: Shape, first: bool
) -> GemmPoint:
    trans_a, trans_b = options.layout(precision)
    point = planned(options, precision, shape, "interrupted")
    kept_under = _tuning_key(engine, options, precision, shape)
    chosen = tuning.known(kept_under)
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
            options.tune,
            -1 if chosen is None else chosen,
        )
    except (AllocationError, EngineError) as exc:
        return replace(point, status="failed", error=str(exc))
    algorithm = dict(g.algorithm)
    if algorithm.get("candidates", 0) > 1:  # tuned now: kept for the next run
        tuning.remember(kept_under, int(algorithm["rank"]), int(algorithm["candidates"]))
    elif chosen is not None and algorithm.get("rank") == chosen:
        algorithm["reused"] = True  # an earlier run's choice, timed against none now
    try:
        least = warm_up(options.warmup_s, algorithm)
        if first:
            least = max(least, options.heat_s)
        point = replace(point, algorithm=algorithm, copies=int(g.copies))
        # calibration, warm-up until the rate holds, then trials of the target time
        seconds, iterations, warmed = plan.timed_trials(
            g.time, options.target_s, options.trials, least, options.settle_s
        )
        point = replace(
            point, warmup_s=warmed.seconds, settled=warmed.settled if least > 0 else None
        )
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


def warm_up(asked_s: float, algorithm: dict[str, Any]) -> float:
    """The warm-up a GEMM's trials still need: none where its tuning has just run its GEMMs on
    the GPU for at least as long. On an H100, seven interleaved rounds of `run`'s check with and
    without it: 2.67 against 3.09 s, every precision's median within the rounds' spread (tf32
    379 against 372 TFLOP/s, bf16 700 against 729, fp8 1236 against 1242, fp64 56.4 against
    56.0)."""
    return 0.0 if float(algorithm.get("tuned_s", 0.0)) >= asked_s else asked_s


def _with_transfers(g: Any, options: GemmOptions, memory: str, tiles: int) -> dict[str, Any]:
    """The GEMM with its data uploaded from `memory` and C downloaded, timed like the GEMM."""
    streams = 1 if tiles == 1 else options.streams
    record: dict[str, Any] = {"memory": memory, "tiles": tiles, "streams": streams, "seconds": []}
    pinned = memory == "pinned"

    def run(n: int) -> float:
        return float(g.time_with_transfers(pinned, tiles, streams, n, False)[0])

    try:
        seconds, n, _ = plan.timed_trials(run, options.target_s, min(options.trials, 3))
        _, delivered = g.time_with_transfers(pinned, tiles, streams, 1)
        return record | {"seconds": seconds, "iterations": n, "delivered": bool(delivered)}
    except (AllocationError, EngineError) as exc:
        return record | {"error": str(exc), "delivered": False}


def measure(engine: Engine, options: GemmOptions, progress: Progress = QUIET) -> GemmResult:
    """Every precision and shape; refusals are skipped points with their reasons. Ctrl-C keeps
    the points measured."""
    created = now()
    start = engine.clock()
    capability = compute_capability(engine, options.device)
    points: list[GemmPoint] = []
    ladder: list[GemmPoint] = []
    cpu: list[CpuPoint] = []
    cpu_blas: dict[str, Any] = {}
    interrupted = False
    if options.offload_precisions and not engine.simulated:
        # the ladder's CPU workers load NumPy while the GPU's GEMMs run
        start_ahead(tuple(dict.fromkeys((1, max(options.cpu_threads)))))
    background.host_free()  # the GEMMs alone are timed, on the GPU: side work may run
    try:
        for precision in options.precisions:
            progress.begin(precision)
            for shape in options.shapes:
                reason = refusal(options, precision, shape, capability)
                if reason:
                    points.append(planned(options, precision, shape, "skipped", reason))
                else:
                    first = not any(
                        p.status == "complete" and p.precision == precision for p in points
                    )
                    points.append(measure_point(engine, options, precision, shape, first))
                p = points[-1]
                figure = f"{p.flops / 1e12:.1f} TFLOP/s" if p.flops else p.status
                progress.step(f"{precision} {shape.label}: {figure}")
        if options.cpu_threads:
            background.host_timed()  # the CPU's GEMMs and the transfers are timed from here
            progress.begin("CPU")
            # without scaling shapes (`run`'s check) no worker process (one importing NumPy) is
            # started for nothing; the ladder's workers tell the BLAS
            if options.cpu_scaling_shapes:
                cpu = measure_cpu(
                    options.precisions,
                    options.cpu_scaling_shapes,
                    options.cpu_threads,
                    options.target_s,
                    min(options.trials, 3),
                    options.seed,
                    progress,
                    into=cpu,
                    blas=cpu_blas,
                    worker=cpu_worker(engine),
                )
            for precision in options.offload_precisions:
                measure_ladder(
                    engine, options, precision, capability, progress, ladder, cpu, cpu_blas
                )
    except KeyboardInterrupt:
        interrupted = True
    finally:
        stop_ahead()
    blas: dict[str, Any] = {"library": "cuBLASLt"}
    if not engine.simulated:
        try:
            blas["version"] = engine.blas_version()
        except BlasError as exc:
            blas["error"] = str(exc)
    result = GemmResult(
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
        cpu_blas=cpu_blas or None,
        ladder=tuple(ladder),
    )
    return replace(result, findings=tuple(findings(result)))


def cpu_worker(engine: Engine) -> Callable[[dict[str, Any], int], Iterator[dict[str, Any]]]:
    """Who runs the CPU's GEMMs: worker processes through NumPy's BLAS, or, for the simulated
    engine, its model of a CPU (so a simulated run gives the same figures everywhere)."""
    if engine.simulated:
        from ..core.engine.simulated_gemm import simulated_cpu_worker

        return simulated_cpu_worker
    return run_worker


def ladder_options(options: GemmOptions) -> GemmOptions:
    """The offload ladder's GEMMs: its sizes, with their data moved from pinned memory in one
    sequence (tiles do not pay at these sizes), short trials with no warm-up of their own (the
    GPU is warm from the GEMMs before), never padded."""
    return replace(
        options,
        shapes=tuple(Shape(n, n, n) for n in options.ladder),
        transfers=("pinned",),
        tiles=1,
        target_s=min(options.target_s, LADDER_TARGET_S),
        trials=min(options.trials, LADDER_TRIALS),
        tune=min(options.tune, LADDER_TUNE),
        warmup_s=0.0,
        pad=0,
    )


# Where the GPU's side of the ladder may stop (ladder_full False): after its first this many
# sizes, then after all. An H100 beat 16 cores at 128 (fp32), the fifth size of `run`'s ladder.
LADDER_FIRST_ROUND = 5


def measure_ladder(
    engine: Engine,
    options: GemmOptions,
    precision: str,
    capability: int,
    progress: Progress,
    into: list[GemmPoint],
    cpu: list[CpuPoint],
    blas: dict[str, Any] | None = None,
) -> None:
    """The offload ladder of one precision: the GPU with its transfers at every size, then the
    CPU on one thread and on every thread the options name, small to large, each stopping after
    the first size at which the GPU beats it. Without options.ladder_full the sizes go in two
    rounds, and the second is measured only for a thread count the GPU has not yet beaten.
    Appends as it goes (Ctrl-C keeps them)."""
    steps = ladder_options(options)
    shapes = steps.shapes
    progress.begin(f"{precision} offload ladder")
    gpu: list[float | None] = []
    pending = list(dict.fromkeys((1, max(options.cpu_threads))))  # thread counts not yet beaten
    rounds = (len(shapes),) if options.ladder_full else (LADDER_FIRST_ROUND, len(shapes))
    start = 0
    for stop in dict.fromkeys(min(r, len(shapes)) for r in rounds):
        for shape in shapes[start:stop]:
            if refusal(steps, precision, shape, capability):
                gpu.append(None)
                continue
            point = measure_point(engine, steps, precision, shape)
            into.append(point)
            gpu.append(point.transfer_flops("pinned") if point.verified else None)
            progress.step(f"{precision} {shape.label} with transfers")
        for t in list(pending):
            progress.begin(f"{precision} offload ladder: CPU on {t} threads")
            before = len(cpu)
            measure_cpu(
                (precision,),
                shapes[start:stop],
                (t,),
                steps.target_s,
                steps.trials,
                options.seed,
                into=cpu,
                beat={precision: gpu[start:stop]},
                role="ladder",
                blas=blas,
                worker=cpu_worker(engine),
            )
            progress.step(f"{precision} CPU on {t} threads against the GPU")
            at = {shape.m: flops for shape, flops in zip(shapes, gpu, strict=False)}
            if any(beaten(p.m, p.n, p.k, list(p.seconds), at.get(p.m)) for p in cpu[before:]):
                pending.remove(t)
        start = stop
        if not pending:
            break


def _at_fault(options: GemmOptions, capability: int) -> tuple[str, str]:
    """Which option keeps a plan from running, and what to do: --trans where the precisions'
    own layouts would run, the shapes where a well-aligned one would, else --precision."""

    def runs(given: GemmOptions, shapes: tuple[Shape, ...]) -> bool:
        return not all(refusal(given, p, s, capability) for p in given.precisions for s in shapes)

    natural = replace(options, trans_a=None, trans_b=None)
    if options.trans_a is not None and runs(natural, options.shapes):
        return "--trans", "; leave --trans out for each precision's own"
    if runs(natural, (Shape(ALIGNED, ALIGNED, ALIGNED),)):
        square = all(s.m == s.n == s.k for s in options.shapes)
        return ("--sizes" if square else "--shapes"), ""
    return "--precision", ""


def check_plan(engine: Engine, options: GemmOptions) -> None:
    """Refuses, before measuring, a plan of which nothing can run, naming why; and says which
    package to install when cuBLASLt is missing."""
    if not engine.simulated:
        libraries.point_engine_at("cublasLt", BlasError)
    capability = compute_capability(engine, options.device)
    reasons = [
        refusal(options, p, s, capability) for p in options.precisions for s in options.shapes
    ]
    if all(reasons):
        option, fix = _at_fault(options, capability)
        raise OptionError(option, f"nothing in this plan can run: {reasons[0]}{fix}")
    _, total = engine.memory_info(options.device)
    for precision in options.precisions:
        for shape in options.shapes:
            needed = bytes_needed(precision, shape.m, shape.n, shape.k)
            if needed > total:
                raise OptionError(
                    "--sizes" if shape.m == shape.n == shape.k else "--shapes",
                    f"'{shape.label}': a {precision} GEMM of this shape needs "
                    f"{format_bytes(needed)} of device memory, and GPU {options.device} has "
                    f"{format_bytes(total)} in all",
                )
