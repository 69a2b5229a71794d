"""`xferscope run`: the default investigation of every GPU.

Per GPU: host<->device curves for every host memory kind, both directions, API and device time;
device-to-device copies; copy engines against SM copy kernels; H2D while D2H runs; what pinning
costs. With two or more GPUs: the peer-to-peer matrix and every GPU moving data to and from the
host at once. Python orchestrates; every timed loop runs in the engine. How much a run measures
is in plans.py, the concurrent streams in streams.py.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from typing import Any

from ..core import background, cases, machine, plan
from ..core.cases import DEFAULT_SEED
from ..core.engine import Engine
from ..core.engine.placement import numa_nodes
from ..core.errors import AllocationError, CudaError, EngineError
from ..core.progress import QUIET, Progress
from ..documents.envelope import now
from ..gemm.check import gemm_check
from ..gl.check import gl_check
from ..sweep.chase import chase_points
from ..sweep.measure import CurveRun, measure_curve
from ..sweep.options import SweepOptions
from ..sweep.records import Curve, CurveConfig
from .metrics import HEADLINE_CURVES
from .plans import DEFAULT_PLAN, QUICK_PLAN, RunPlan
from .records import Concurrent, GpuSection, OverlapPoint, PinningCost, RunResult
from .streams import concurrent

HOST_KINDS = ("pageable", "pinned", "wc", "registered")


def gpu_curves(device: int, scope: str = "full") -> list[CurveConfig]:
    """What an application sees (cudaMemcpy, API time) and what the link does (copy engines,
    device time) for every host kind and direction; device-to-device; SM copy kernels; the
    staged copy of pageable memory. The headline scope: the headline curves only."""
    if scope == "headline":
        return [CurveConfig(device, *key) for key in HEADLINE_CURVES]
    configs = [
        CurveConfig(device, direction, memory, mechanism, timing)
        for direction in ("h2d", "d2h")
        for memory in HOST_KINDS
        for mechanism, timing in (("memcpy", "api"), ("async", "device"))
    ]
    configs += [
        CurveConfig(device, "d2d", "device", m, t)
        for m, t in (("memcpy", "api"), ("async", "device"))
    ]
    configs += [
        CurveConfig(device, d, m, "kernel", "device")
        for d, m in (("h2d", "pinned"), ("d2h", "pinned"), ("d2d", "device"))
    ]
    # xferscope's staged copy of the same pageable memory, for the pageable-memory advice.
    configs += [CurveConfig(device, d, "pageable", "staged", "api") for d in ("h2d", "d2h")]
    return configs


# The run's curves as keys of the case table; importing this checks that every one is a case.
RUN_CASES: tuple[str, ...] = tuple(
    cases.case(cases.label(c.direction, c.memory, c.mechanism, c.timing).replace(" ", "_")).key
    for c in gpu_curves(0)
)


class Interrupted(Exception):
    """Carries what a GPU had measured when the user pressed Ctrl-C."""

    def __init__(self, section: GpuSection) -> None:
        self.section = section


# `run --quick` on more GPUs than this measures every check on the first GPU only and the
# headline curves on the others, so 8 GPUs fit in a minute (the simulated H200 model: 99 s
# with every check on every GPU, 11 s a GPU; the GPUs of one node are alike, and what differs
# between them - a link trained down, a slow copy engine - shows in the headline). Between two
# headline GPUs only copy-engine peer copies are made: the 8-GPU matrix falls from 196
# measurements to 112, and the model from 32.5 s to 29.2 s.
QUICK_FULL_GPUS_UP_TO = 2


@dataclass(frozen=True, slots=True)
class RunOptions:
    devices: tuple[int, ...]
    quick: bool = False
    seed: int = DEFAULT_SEED

    @property
    def plan(self) -> RunPlan:
        return QUICK_PLAN if self.quick else DEFAULT_PLAN

    def scope(self, device: int) -> str:
        """full: every check on `device`; headline: its headline curves only."""
        many = self.quick and len(self.devices) > QUICK_FULL_GPUS_UP_TO
        return "headline" if many and device != self.devices[0] else "full"

    def pair_modes(self, src: int, dst: int, access: bool) -> list[tuple[str, bool]]:
        """The one-way peer copies measured from `src` to `dst` (mechanism, peer access): copy
        engines and SM kernel with peer access, and copy engines without it (staged through the
        host). Where a quick run on many GPUs keeps to the headline, a pair without the full
        GPU copies by copy engines with peer access only (without access: without it)."""
        every = [("async", True), ("kernel", True)] if access else []
        every.append(("async", False))
        if self.scope(src) == "headline" and self.scope(dst) == "headline":
            return every[:1]
        return every

    def to_dict(self) -> dict[str, object]:
        return {
            "devices": list(self.devices),
            "quick": self.quick,
            "seed": self.seed,
            "plan": asdict(self.plan),
        }


def steps(options: RunOptions, earlier: RunResult | None = None) -> int:
    """Progress units: one per curve size, per concurrent measurement, per pinning run, per
    overlap measurement, per placement curve (one size each), per chase check, per GL check and
    per GEMM check; less the GPUs an interrupted run being continued completed (`earlier`)."""
    sizes = len(options.plan.sizes)
    nodes = len(numa_nodes())
    placed = len(NUMA_CURVES) * nodes if nodes > 1 else 0
    per_gpu = {
        "full": len(gpu_curves(0)) * sizes + 5 + placed + (1 if options.plan.chase_trials else 0),
        "headline": len(gpu_curves(0, "headline")) * sizes + 1,
    }
    n = len(options.devices)
    pairs = [(a, b) for a in options.devices for b in options.devices if a != b]
    one_way = sum(len(options.pair_modes(a, b, True)) for a, b in pairs)
    multi = (one_way + n * (n - 1) // 2 + 3) if n > 1 else 0
    kept, _ = completed(earlier)
    return sum(per_gpu[options.scope(d)] for d in options.devices if d not in kept) + multi


# ---- per GPU -----------------------------------------------------------------------------------


def overlap_point(engine: Engine, device: int, memory: str, size: int) -> OverlapPoint:
    """A D2H readback alone, then with CPU work of half its time before the wait: the median of
    three of each."""
    t = engine.open_transfer(device, "d2h", memory, "async", size, 0)
    try:
        t.overlap_cpu(size, 0.0)  # warm-up
        alone = sorted(plan.run_trials(lambda: t.overlap_cpu(size, 0.0).total_s, 3))[1]
        samples = plan.run_trials(lambda: t.overlap_cpu(size, alone / 2), 3)
        o = sorted(samples, key=lambda o: o.total_s)[1]
        return OverlapPoint(device, "d2h", memory, size, alone, o.work_s, o.issue_s, o.total_s)
    finally:
        t.close()


# What run chases: its own device memory and pinned host memory, and a peer's where one is
# reachable (chase_points adds it).
RUN_CHASES = ("device", "pinned")
# Host memory on each NUMA node: these curves, one size (the plan's stream_bytes), per node.
NUMA_CURVES = (
    ("h2d", "pinned", "async", "device"),
    ("d2h", "pinned", "async", "device"),
    ("h2d", "pageable", "memcpy", "api"),
    ("d2h", "pageable", "memcpy", "api"),
)


def numa_runs(
    engine: Engine, device: int, sweep: SweepOptions, progress: Progress
) -> Iterator[CurveRun]:
    """Each of NUMA_CURVES with its host memory, and the thread copying it, on each node in turn
    (placement.py), measured as the run's curves are, as it ends. None on a host of one node."""
    nodes = numa_nodes()
    if len(nodes) < 2:
        return
    for key in NUMA_CURVES:
        for node in nodes:
            yield measure_curve(engine, CurveConfig(device, *key, numa_node=node), sweep, progress)


def _gather(
    section: GpuSection, runs: Iterable[CurveRun], add: Callable[[GpuSection, Curve], GpuSection]
) -> GpuSection:
    """Each curve run added to the section (`add`) as it ends. A stop raises Interrupted with
    what was measured; a CUDA error (the GPU itself in trouble) ends the section, failed."""
    for run in runs:
        section = add(section, run.curve)
        if run.interrupted:
            raise Interrupted(replace(section, status="interrupted"))
        if isinstance(run.error, CudaError):
            return replace(section, status="failed", error=run.curve.error)
    return section


def numa_notes() -> tuple[str, ...]:
    """A host of one NUMA node says so: there is no far memory to measure."""
    if len(numa_nodes()) >= 2:
        return ()
    return ("This host has one NUMA node: host memory placement was not measured.",)


# Told of a GPU whose curves are measured (the section so far), before its other checks.
CurvesDone = Callable[[GpuSection], None]


def _nothing(_section: GpuSection) -> None:
    pass


def investigate_gpu(
    engine: Engine,
    device: int,
    options: RunOptions,
    progress: Progress,
    curves_done: CurvesDone = _nothing,
) -> GpuSection:
    """Every check of one GPU, with the seconds each kind of check took (phases_s)."""
    phases: dict[str, float] = {}
    try:
        section = _investigate_gpu(engine, device, options, progress, phases, curves_done)
    except Interrupted as stop:
        raise Interrupted(replace(stop.section, phases_s=dict(phases))) from None
    return replace(section, phases_s=dict(phases))


@contextmanager
def _phase(phases: dict[str, float], name: str, clock: Callable[[], float]) -> Iterator[None]:
    """Adds the seconds the block takes by `clock` (the engine's: the host's for a GPU, the
    model's when simulated) to phases[name], Ctrl-C and errors included."""
    start = clock()
    try:
        yield
    finally:
        phases[name] = phases.get(name, 0.0) + clock() - start


def _investigate_gpu(
    engine: Engine,
    device: int,
    options: RunOptions,
    progress: Progress,
    phases: dict[str, float],
    curves_done: CurvesDone,
) -> GpuSection:
    p = options.plan
    sweep = SweepOptions(
        devices=(device,),
        sizes=p.sizes,
        target_s=p.target_s,
        trials=p.trials,
        max_trials=p.max_trials,
        budget_s=p.curve_budget_s,
        seed=options.seed,
        early_trials=p.early_trials,
    )
    scope = options.scope(device)
    section = GpuSection(device, "complete", None, (), (), None, scope=scope)
    try:
        # the curves share their buffers (the same sizes, kind after kind), freed before the
        # other checks, which need the GPU's memory
        background.host_timed()  # side work begun during another GPU's GEMMs is done
        # the checks' libraries load while a curve times the GPU alone
        loading = background.Ahead(engine.preload)
        background.attach(loading)
        try:
            with _phase(phases, "curves", engine.clock), engine.keeping_buffers():
                runs = (
                    measure_curve(engine, c, sweep, progress) for c in gpu_curves(device, scope)
                )
                section = _gather(section, runs, lambda g, c: replace(g, curves=(*g.curves, c)))
                if section.status == "failed":
                    return section
            background.host_timed()  # a curve timing the GPU alone may have freed it
        finally:
            loading.pause()
            background.detach(loading)
        section = replace(section, clock_event_reasons=machine.clock_event_reasons(engine, device))
        curves_done(section)
        with _phase(phases, "concurrent", engine.clock):
            bidirectional = concurrent(
                engine,
                "bidirectional",
                "bidirectional",
                [(device, "h2d", "h2d"), (device, "d2h", "d2h")],
                p.stream_bytes,
                p,
            )
        section = replace(section, concurrent=(bidirectional,))
        progress.step(f"gpu{device} H2D while D2H")
        if scope == "headline":
            return section
        with _phase(phases, "pinning", engine.clock):
            costs = engine.measure_pinning(device, p.pinning_bytes)
        section = replace(section, pinning=PinningCost.of(device, p.pinning_bytes, costs))
        progress.step(f"gpu{device} pinning costs")
        with _phase(phases, "overlap", engine.clock):
            overlap = tuple(
                overlap_point(engine, device, memory, p.stream_bytes)
                for memory in ("pinned", "pageable")
            )
        section = replace(section, overlap=overlap)
        progress.step(f"gpu{device} CPU work during a readback")
        with _phase(phases, "numa", engine.clock):
            one_size = replace(sweep, sizes=(p.stream_bytes,))
            placed = numa_runs(engine, device, one_size, progress)
            section = _gather(section, placed, lambda g, c: replace(g, numa=(*g.numa, c)))
            if section.status == "failed":
                return section
        if p.chase_trials:
            with _phase(phases, "chase", engine.clock):
                for point in chase_points(
                    engine, device, p.chase_trials, RUN_CHASES, options.devices
                ):
                    section = replace(section, chase=(*section.chase, point))
            progress.step(f"gpu{device} latency seen from the GPU")
        with _phase(phases, "gl", engine.clock):
            gl = gl_check(engine, device)
        section = replace(section, gl=gl)
        progress.step(f"gpu{device} OpenGL check")
        with _phase(phases, "gemm", engine.clock):
            gemm = gemm_check(engine, device)
        section = replace(section, gemm=gemm)
        progress.step(f"gpu{device} GEMM check")
    except KeyboardInterrupt:
        raise Interrupted(replace(section, status="interrupted")) from None
    except (AllocationError, EngineError) as exc:
        return replace(section, status="failed", error=str(exc))
    return section


# ---- several GPUs ------------------------------------------------------------------------------


def investigate_multi(
    engine: Engine,
    devices: tuple[int, ...],
    options: RunOptions,
    progress: Progress,
    healthy: Callable[[int], bool],
    results: list[Concurrent],
    done: dict[str, Concurrent] | None = None,
) -> None:
    """The peer-to-peer matrix (copy engines and SMs, peer access on and off, one direction and
    both) and every GPU to and from the host at once, appended to `results` as they are
    measured, so Ctrl-C keeps what was done. `done`: measurements an earlier, interrupted run
    completed, by label, kept instead of measured again (--resume)."""
    p = options.plan
    size = p.stream_bytes
    gpus = [d for d in devices if healthy(d)]
    done = done or {}

    def measured(*args: Any, **kw: Any) -> Concurrent:
        label = args[2]
        return done[label] if label in done else concurrent(*args, **kw)

    for src in gpus:
        for dst in gpus:
            if src == dst:
                continue
            access = engine.can_access_peer(src, dst)
            for mechanism, peer_access in options.pair_modes(src, dst, access):
                label = f"{src}-{dst}/{mechanism}/{'peer' if peer_access else 'nopeer'}/one_way"
                results.append(
                    measured(
                        engine,
                        "p2p",
                        label,
                        [(src, "p2p", f"gpu{src}->gpu{dst}", dst)],
                        size,
                        p,
                        mechanism,
                        peer_access,
                    )
                )
                progress.step(label)
            if access and src < dst:
                label = f"{src}-{dst}/async/peer/both"
                results.append(
                    measured(
                        engine,
                        "p2p",
                        label,
                        [
                            (src, "p2p", f"gpu{src}->gpu{dst}", dst),
                            (dst, "p2p", f"gpu{dst}->gpu{src}", src),
                        ],
                        size,
                        p,
                        "async",
                        True,
                    )
                )
                progress.step(label)
    for name, directions in (("h2d", ("h2d",)), ("d2h", ("d2h",)), ("both", ("h2d", "d2h"))):
        specs = [(d, direction, f"{direction} gpu{d}") for d in gpus for direction in directions]
        results.append(measured(engine, "all_gpus_host", f"all_gpus/{name}", specs, size, p))
        progress.step(f"all GPUs {name}")


# ---- the run -----------------------------------------------------------------------------------


def run_investigation(
    engine: Engine,
    options: RunOptions,
    progress: Progress = QUIET,
    earlier: RunResult | None = None,
    curves_done: CurvesDone = _nothing,
) -> RunResult:
    """The run. `earlier`: an interrupted run of the same options on the same GPUs, continued
    (--resume): what it completed is kept, the rest measured now. `curves_done` is told of each
    GPU whose curves are measured (cli/run.py draws its plots meanwhile)."""
    from .diagnose import diagnose

    created = now()
    start, real_start = engine.clock(), time.perf_counter()
    sections: list[GpuSection] = []
    multi: list[Concurrent] = []
    interrupted = False
    kept, done = completed(earlier)
    before_s = earlier.wall_s if earlier else 0.0
    before_real_s = (earlier.elapsed_s or 0.0) if earlier else 0.0
    try:
        for device in options.devices:
            if device in kept:
                sections.append(kept[device])
                continue
            try:
                sections.append(investigate_gpu(engine, device, options, progress, curves_done))
            except Interrupted as stop:
                sections.append(stop.section)
                raise KeyboardInterrupt from None
        if len(options.devices) > 1:
            status = {s.index: s.status for s in sections}
            investigate_multi(
                engine,
                options.devices,
                options,
                progress,
                lambda d: status.get(d) == "complete",
                multi,
                done,
            )
    except KeyboardInterrupt:
        interrupted = True
        reached = {s.index for s in sections}
        sections += [
            GpuSection(d, "not_run", None, (), (), None)
            for d in options.devices
            if d not in reached
        ]
    # Read after measuring: an idle GPU may have trained its link down to save power, and
    # clock throttling shows while it is busy.
    meta = machine.collect(engine, list(options.devices))
    result = RunResult(
        created=created,
        simulated=engine.simulated,
        mode=options.plan.mode,
        machine=meta,
        options=options.to_dict(),
        gpus=tuple(sections),
        multi=tuple(multi),
        findings=(),
        interrupted=interrupted,
        wall_s=engine.clock() - start + before_s,
        elapsed_s=time.perf_counter() - real_start + before_real_s,
        notes=scope_notes(options) + numa_notes() + resumed_notes(earlier, options),
    )
    return replace(result, findings=tuple(diagnose(result)))


def completed(earlier: RunResult | None) -> tuple[dict[int, GpuSection], dict[str, Concurrent]]:
    """What an interrupted run completed: its GPU sections by index and its several-GPU
    measurements by label."""
    if earlier is None:
        return {}, {}
    kept = {g.index: g for g in earlier.gpus if g.status == "complete"}
    done = {c.label: c for c in earlier.multi if c.status == "complete"}
    return kept, done


def resumed_notes(earlier: RunResult | None, options: RunOptions) -> tuple[str, ...]:
    """What a resumed run says of its two parts (none for a run started afresh)."""
    return () if earlier is None else (resumed_note(earlier, options),)


def resumed_note(earlier: RunResult, options: RunOptions) -> str:
    kept = [g.index for g in earlier.gpus if g.status == "complete"]
    several = sum(c.status == "complete" for c in earlier.multi)
    parts = []
    if kept:
        parts.append(f"GPU{'s' if len(kept) > 1 else ''} {', '.join(map(str, kept))}")
    if several:
        parts.append(f"{several} of the several-GPU measurements")
    what = " and ".join(parts) or "nothing"
    rest = [d for d in options.devices if d not in kept]
    plural = "s" if len(rest) > 1 else ""
    again = f"; GPU{plural} {', '.join(map(str, rest))} measured now" if rest else ""
    return (
        f"Resumed: {what} from the interrupted run of {earlier.created}{again}. The wall time "
        "adds both parts."
    )


def scope_notes(options: RunOptions) -> tuple[str, ...]:
    """What a quick run on many GPUs left out, in a sentence."""
    headline = [d for d in options.devices if options.scope(d) == "headline"]
    if not headline:
        return ()
    return (
        f"--quick on {len(options.devices)} GPUs: every check on GPU {options.devices[0]}; on "
        f"GPU{'s' if len(headline) > 1 else ''} {', '.join(map(str, headline))} the headline "
        "curves (pinned and pageable both ways, device to device) and H2D beside D2H only, and "
        "between two of them peer copies by the copy engines only (every ordered pair, and both "
        "ways at once). Without --quick every GPU gets every check.",
    )
