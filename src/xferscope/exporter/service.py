"""`xferscope exporter`: what each GPU's links can do, measured on a schedule and served as
Prometheus metrics, for an operator who deploys it once per GPU node.

Each measurement runs in a child process of its own (one GPU at a time: `run --quick`'s checks,
or the cases given, as `xferscope fleet` runs them), so the exporter holds no GPU memory between
measurements, a GPU that falls off the bus takes only that child with it, and a stop kills the
child at once. A GPU that is busy (NVML: its utilisation above the limit, or a process other
than the exporter's using it) is not measured: the measurement is deferred and retried, and the
metrics say so. The figures served are those of the last complete measurement, swapped in whole
under a lock once it is done, never half of one; after a failed one they stay, marked stale.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from ..core.cases import DEFAULT_SEED
from ..fleet.records import COMPLETE, FAILED, RankReport, Verdict

# After a deferral (a busy GPU) or a failure the GPU is tried again this soon, never later than
# its next scheduled measurement.
RETRY_S = 300.0
# A child that has not answered in this long is stopped and the measurement counted failed:
# `run --quick` takes 10-15 s on an H100, the default cases less.
MEASURE_TIMEOUT_S = 600.0
STOP_GRACE_S = 1.0  # a child asked to stop (SIGTERM) is killed after this long
NOTHING_YET = "nothing to serve for it yet"
BUSY = "busy"
OTHER_PROCESS = "other_process"


@dataclass(frozen=True, slots=True)
class ExporterOptions:
    devices: tuple[int, ...] | None = None  # None: every GPU the exporter sees
    every_s: float = 6 * 3600.0
    cases: tuple[str, ...] = ()  # () = run --quick's checks
    thresholds: tuple[tuple[str, float], ...] = ()
    busy_percent: float = 10.0
    busy_processes: int = 0  # other processes a GPU may have on it and still be measured
    retry_s: float = RETRY_S
    timeout_s: float = MEASURE_TIMEOUT_S
    simulate: bool = False
    seed: int = DEFAULT_SEED


@dataclass(slots=True)
class GpuState:
    """What the exporter knows of one GPU. `report` and `verdict` are the last complete
    measurement's, `measured_at` its end (Unix seconds)."""

    index: int
    uuid: str = ""
    report: RankReport | None = None
    verdict: Verdict | None = None
    measured_at: float | None = None
    duration_s: float | None = None
    failed_last: bool = False  # the last attempt failed: the figures served are stale
    last_error: str | None = None
    deferred_now: str | None = None  # why the last attempt was deferred (None: it was not)
    busy_percent: float | None = None
    outcomes: Counter[str] = field(default_factory=Counter)  # complete, failed, deferred
    deferrals: Counter[str] = field(default_factory=Counter)  # by reason
    measuring: bool = False
    next_s: float = 0.0  # monotonic time of the next attempt

    def stale(self, now: float, every_s: float) -> bool:
        """The figures served are stale: the last attempt failed, or none succeeded for two of
        the schedule's periods (nothing measured yet counts too)."""
        if self.measured_at is None or self.failed_last:
            return True
        return now - self.measured_at > 2 * every_s


def _child(connection: Any, device: int, options: ExporterOptions) -> None:
    """A measurement in a child process: the GPU's checks, as `xferscope fleet` makes them; its
    report (or a failed one) sent back whole."""
    from ..core import engine as engines
    from ..core.errors import XferscopeError
    from ..core.version import __version__
    from ..fleet.run import FleetOptions, check_gpu, host_name

    base = RankReport(0, host_name(), 0, device, FAILED, __version__)
    try:
        engine = engines.open_engine(options.simulate)
        fleet = FleetOptions(cases=options.cases, seed=options.seed)
        report = check_gpu(engine, base, fleet)
    except XferscopeError as exc:
        report = replace(base, error=str(exc))
    except Exception as exc:  # the GPU's own failure, whatever it raised
        report = replace(base, error=f"{type(exc).__name__}: {exc}")
    with contextlib.suppress(OSError):
        connection.send(report.to_dict())


def _gpus_in_child(connection: Any, simulate: bool) -> None:
    """The GPUs a child process sees, [(index, uuid)], or why there are none: (the error's
    class name, its message)."""
    from ..core import engine as engines

    try:
        engine = engines.open_engine(simulate)
        gpus = [
            (i, str(engine.device_info(i).get("uuid", ""))) for i in range(engine.device_count())
        ]
        connection.send(gpus)
    except Exception as exc:  # no driver, no GPU: the parent raises it again
        connection.send((type(exc).__name__, str(exc)))


class Children:
    """The one child process at a time that measures (or lists the GPUs), and how it is
    stopped."""

    def __init__(self) -> None:
        self._context = multiprocessing.get_context("spawn")
        self._lock = threading.Lock()
        self._process: Any = None

    def call(self, target: Callable[..., None], args: tuple[Any, ...], timeout_s: float) -> Any:
        """Runs target(connection, *args) in a child; its answer, or raises ChildFailed."""
        mine, theirs = self._context.Pipe(duplex=False)
        process = self._context.Process(target=target, args=(theirs, *args), daemon=True)
        with self._lock:
            process.start()
            self._process = process
        theirs.close()
        try:
            if not mine.poll(timeout_s):
                raise ChildFailed(f"no answer in {timeout_s:g} s")
            return mine.recv()
        except (EOFError, OSError):
            process.join(STOP_GRACE_S)
            status = process.exitcode
            raise ChildFailed(f"the measuring process ended (exit status {status})") from None
        finally:
            mine.close()
            self._end(process)

    def _end(self, process: Any) -> None:
        process.join(STOP_GRACE_S)
        _stop(process)
        process.join()
        with self._lock:
            self._process = None

    def stop(self) -> None:
        """Stops the child measuring now, if any."""
        with self._lock:
            process = self._process
        if process is not None:
            _stop(process)


def _stop(process: Any) -> None:
    """SIGTERM, then SIGKILL after STOP_GRACE_S, to a child still running."""
    if process.is_alive():
        process.terminate()
        process.join(STOP_GRACE_S)
    if process.is_alive():
        process.kill()


class ChildFailed(Exception):
    pass


def nvml_busy(
    uuid: str, busy_percent: float, busy_processes: int = 0
) -> tuple[str | None, float | None]:
    """Why a GPU is busy now (BUSY: utilisation above busy_percent; OTHER_PROCESS: more than
    busy_processes other processes use it, an idle CUDA context included), or None; and its
    utilisation. NVML's answer, nothing where it has none."""
    from ..core import nvml

    now = nvml.activity(uuid)
    if now is None:
        return None, None
    utilization = now["utilization_percent"]
    others = [pid for pid in now["pids"] if pid != os.getpid()]
    if utilization is not None and utilization > busy_percent:
        return BUSY, float(utilization)
    if len(others) > busy_processes:
        return OTHER_PROCESS, None if utilization is None else float(utilization)
    return None, None if utilization is None else float(utilization)


Busy = Callable[[GpuState], tuple[str | None, float | None]]


def simulated_busy() -> Busy:
    """What NVML would say of the simulated GPUs: those $XFERSCOPE_SIMULATE_BUSY names are fully
    used by another job."""
    from ..core import engine as engines

    busy = engines.simulated_busy()
    return lambda gpu: (BUSY, 100.0) if gpu.index in busy else (None, 0.0)


class Exporter:
    """The schedule, the GPUs' states, and the measurements."""

    def __init__(
        self,
        options: ExporterOptions,
        busy: Busy | None = None,
        say: Callable[[str], None] = lambda _line: None,
    ) -> None:
        self.options = options
        self.say = say  # one line for each thing an operator should know (a failure, a stop)
        self.children = Children()
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._busy = busy or (simulated_busy() if options.simulate else self._nvml_busy)
        self.gpus: dict[int, GpuState] = {}

    def _nvml_busy(self, gpu: GpuState) -> tuple[str | None, float | None]:
        return nvml_busy(gpu.uuid, self.options.busy_percent, self.options.busy_processes)

    # ---- the GPUs --------------------------------------------------------------------------

    def discover(self) -> None:
        """Lists the GPUs (in a child: the exporter opens no GPU itself) and keeps those asked
        for. Raises NoDeviceError when none can be listed (no driver, no GPU: the line every
        command gives) and OptionError when a GPU asked for is not there, as every command
        refuses one: the exporter refuses to start rather than serve an empty endpoint."""
        from ..core.engine.devices import check_index
        from ..core.errors import NoDeviceError

        try:
            answer = self.children.call(_gpus_in_child, (self.options.simulate,), 120.0)
        except ChildFailed as exc:
            raise NoDeviceError(f"cannot list the GPUs: {exc}") from None
        if isinstance(answer, tuple):
            kind, message = answer
            raise NoDeviceError(message if kind == NoDeviceError.__name__ else f"{kind}: {message}")
        if not answer:
            raise NoDeviceError("no CUDA device: the driver lists no GPU")
        for index in self.options.devices or ():
            check_index(index, len(answer))
        wanted = self.options.devices
        with self._lock:
            for index, uuid in answer:
                if wanted is None or index in wanted:
                    self.gpus[index] = GpuState(index, uuid)

    # ---- the schedule ----------------------------------------------------------------------

    def trigger(self, device: int | None = None) -> list[int]:
        """Measures now (one GPU, or every one): the GPUs it will measure."""
        with self._lock:
            chosen = [g for g in self.gpus.values() if device is None or g.index == device]
            for g in chosen:
                g.next_s = 0.0
        self._wake.set()
        return [g.index for g in chosen]

    def stop(self) -> None:
        """Stops the schedule and any measurement under way (its child killed)."""
        self._stop.set()
        self._wake.set()
        self.children.stop()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def wait(self, seconds: float) -> None:
        """Sleeps `seconds`, or until a trigger or a stop."""
        self._wake.wait(seconds)
        self._wake.clear()

    def run(self) -> None:
        """Measures each GPU discover() found when it is due, one at a time, until stop()."""
        if not self.gpus:
            raise RuntimeError("Exporter.run() before discover() found a GPU")
        while not self._stop.is_set():
            with self._lock:
                due = min(self.gpus.values(), key=lambda g: g.next_s)
            wait = due.next_s - time.monotonic()
            if wait > 0:
                self.wait(wait)
                continue
            self.attempt(due)

    def _retry_at(self) -> float:
        """When a deferred or failed measurement is tried again: after --retry, at most
        --every."""
        return time.monotonic() + min(self.options.retry_s, self.options.every_s)

    def attempt(self, gpu: GpuState) -> None:
        """One attempt at a GPU: deferred while it is busy, else measured."""
        reason, utilization = self._busy(gpu)
        if reason is not None:
            if gpu.deferred_now != reason:
                self.say(f"GPU {gpu.index} is busy ({reason}): its measurement is deferred")
            with self._lock:
                gpu.deferred_now = reason
                gpu.busy_percent = utilization
                gpu.outcomes["deferred"] += 1
                gpu.deferrals[reason] += 1
                gpu.next_s = self._retry_at()
            return
        with self._lock:
            gpu.measuring = True
            gpu.deferred_now = None
            gpu.busy_percent = utilization
        start = time.monotonic()
        try:
            answer = self.children.call(_child, (gpu.index, self.options), self.options.timeout_s)
            measured = RankReport.from_dict(answer)
            error = None if measured.status == COMPLETE else (measured.error or measured.status)
            report: RankReport | None = measured
        except ChildFailed as exc:
            report, error = None, str(exc)
        if self._stop.is_set():  # cut short by a stop: nothing of it is published
            with self._lock:
                gpu.measuring = False
            return
        self.publish(gpu, report, error, time.monotonic() - start)

    def publish(
        self, gpu: GpuState, report: RankReport | None, error: str | None, seconds: float
    ) -> None:
        """A measurement's outcome, swapped in whole: a complete report replaces the figures, a
        failure keeps the last ones and marks them stale."""
        from ..fleet import thresholds

        with self._lock:
            gpu.measuring = False
            if error is None and report is not None:
                gpu.report = report
                gpu.verdict = thresholds.judge(report, dict(self.options.thresholds))
                gpu.measured_at = time.time()
                gpu.duration_s = seconds
                gpu.failed_last = False
                gpu.last_error = None
                gpu.outcomes["complete"] += 1
                gpu.next_s = time.monotonic() + self.options.every_s
            else:
                gpu.failed_last = True
                gpu.last_error = error
                kept = "its last figures are served, marked stale" if gpu.report else NOTHING_YET
                self.say(f"GPU {gpu.index}: measurement failed ({error}); {kept}")
                gpu.outcomes["failed"] += 1
                gpu.next_s = self._retry_at()

    def snapshot(self) -> list[GpuState]:
        """The GPUs' states as they are now, consistent with one another."""
        with self._lock:
            return [replace(g, outcomes=Counter(g.outcomes), deferrals=Counter(g.deferrals))
                    for g in sorted(self.gpus.values(), key=lambda g: g.index)]  # fmt: skip
