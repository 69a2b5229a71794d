"""GEMM on the CPU through the BLAS NumPy uses (named, with its version, by threadpoolctl), on
1, 2, 4, ... up to every core this process may use, each in a worker process whose BLAS threads
are pinned to that many cores (cpu_worker.py):
seed 003's Figure 9 (MKL on 1, 2, 4 and 8 threads) for this machine. The same shapes and method
as the GPU's (calibration, trials of a target time, the median), verified on a sample of outputs
against a double-precision dot product."""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from ..core import interrupt, stats
from ..core.cases import DEFAULT_SEED
from ..core.compiled import engine_module
from ..core.errors import OptionError, XferscopeError
from ..core.progress import QUIET, Progress
from ..documents.records import Derived
from .shapes import Shape

_e = engine_module()
_TOLERANCE = {name: tol for name, _, _, _, tol, _ in _e.GEMM_PRECISIONS}
DTYPES = ("fp64", "fp32")  # what NumPy's BLAS multiplies
WAIVED = "NumPy's BLAS has no {p} GEMM (CPUs run fp64 and fp32)"
MOST_TRIAL_S = 2.0  # a GEMM longer than this gets one trial


def usable_cores() -> list[int]:
    return sorted(os.sched_getaffinity(0))


def thread_counts(cores: int) -> tuple[int, ...]:
    """1, 2, 4, ... and every core."""
    counts, n = [], 1
    while n < cores:
        counts.append(n)
        n *= 2
    return (*counts, cores)


@dataclass(frozen=True, slots=True)
class CpuPoint:
    precision: str
    m: int
    n: int
    k: int
    threads: int
    status: str  # complete, skipped, interrupted
    error: str | None = None
    seconds: tuple[float, ...] = ()
    verified: bool | None = None
    role: str = "scaling"  # scaling: seed 003's Figure 9; ladder: the offload ladder
    # Derived, for readers; ignored when loading.
    DERIVED: ClassVar[tuple[Derived, ...]] = (
        Derived("tflops", lambda c: None if c.flops is None else c.flops / 1e12),
    )

    @property
    def shape(self) -> Shape:
        return Shape(self.m, self.n, self.k)

    @property
    def flops(self) -> float | None:
        return self.shape.flops / stats.median(self.seconds) if self.seconds else None


# The BLAS's thread-count variables, set for each worker process.
THREAD_VARIABLES = (
    "OPENBLAS_NUM_THREADS",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "BLIS_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
)
POLL_S = 0.05  # how often a stop is looked for while a worker runs


def _spawn(threads: int, args: list[str], stdin: bool) -> subprocess.Popen[bytes]:
    env = dict(os.environ, **{name: str(threads) for name in THREAD_VARIABLES})
    return subprocess.Popen(
        [sys.executable, "-m", "xferscope.gemm.cpu_worker", *args],
        stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )


# Workers started ahead (start_ahead), by their cores: each takes one spec.
_ahead: dict[tuple[int, ...], subprocess.Popen[bytes]] = {}


def start_ahead(threads: Sequence[int]) -> None:
    """Starts a worker for each thread count now, pinned and with NumPy loaded by the time
    run_worker gives it a spec (a worker's start took 0.4 s of an H100 run's GEMM check)."""
    cores = usable_cores()
    for t in threads:
        key = tuple(cores[:t])
        if key not in _ahead:
            _ahead[key] = _spawn(t, ["--ahead", json.dumps(list(key))], stdin=True)


def stop_ahead() -> None:
    """Ends the workers started ahead that no spec came for."""
    for proc in _ahead.values():
        with contextlib.suppress(OSError):
            proc.kill()
        proc.wait()
    _ahead.clear()


def run_worker(spec: dict[str, Any], threads: int) -> Iterator[dict[str, Any]]:
    """The measurements of a worker process with `threads` BLAS threads pinned to as many cores
    (one started ahead for them, if any), one shape at a time as each is done, then its BLAS
    ({"blas": ...}); Ctrl-C ends the worker at once and propagates, the shapes done already
    delivered."""
    proc = _ahead.pop(tuple(spec["cores"]), None)
    if proc is not None and proc.poll() is None and proc.stdin is not None:
        try:
            proc.stdin.write((json.dumps(spec) + "\n").encode())
            proc.stdin.close()
        except OSError:
            proc.kill()
            proc.wait()
            proc = None
    elif proc is not None:  # it ended before its spec came: a fresh one says why
        proc.wait()
        proc = None
    if proc is None:
        proc = _spawn(threads, [json.dumps(spec)], stdin=False)
    assert proc.stdout is not None and proc.stderr is not None
    pending = b""
    try:
        with selectors.DefaultSelector() as selector:
            selector.register(proc.stdout, selectors.EVENT_READ)
            while True:
                interrupt.check()
                if not selector.select(POLL_S):
                    continue
                chunk = os.read(proc.stdout.fileno(), 1 << 16)
                if not chunk:
                    break
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    if line.strip():
                        yield dict(json.loads(line))
        err = proc.stderr.read().decode(errors="replace")
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if proc.returncode != 0:
        last = (err.strip().splitlines() or ["no message"])[-1]
        raise XferscopeError(f"the CPU GEMM worker failed: {last}")


def check_blas() -> dict[str, Any]:
    """The BLAS NumPy uses, from a worker process (threadpoolctl's account); refuses `--cpu` in
    one line when NumPy, threadpoolctl or a BLAS is missing."""
    spec = _spec("fp64", [Shape(8, 8, 8)], usable_cores()[:1], 0.0, 1, 0)
    try:
        blas = next(dict(r["blas"]) for r in run_worker(spec, 1) if "blas" in r)
    except XferscopeError as exc:
        raise OptionError("--cpu", f"no CPU GEMM here: {str(exc).split(': ', 1)[-1]}") from None
    if not blas.get("internal_api"):
        raise OptionError(
            "--cpu",
            "NumPy uses no BLAS that threadpoolctl can name; install numpy with OpenBLAS or MKL",
        )
    return blas


def _spec(
    precision: str,
    shapes: Sequence[Shape],
    cores: Sequence[int],
    target_s: float,
    trials: int,
    seed: int,
    beat: Sequence[float | None] = (),
) -> dict[str, Any]:
    """A worker's task: `shapes` in order; with `beat` (a FLOP/s per shape), it stops after the
    first shape it runs slower than that."""
    return {
        "precision": precision,
        "shapes": [[s.m, s.n, s.k] for s in shapes],
        "beat": list(beat),
        "cores": list(cores),
        "target_s": target_s,
        "trials": trials,
        "most_trial_s": MOST_TRIAL_S,
        "tolerance": _TOLERANCE[precision],
        "seed": seed,
    }


def measure_cpu(
    precisions: Sequence[str],
    shapes: Sequence[Shape],
    threads: Sequence[int],
    target_s: float = 0.1,
    trials: int = 3,
    seed: int = DEFAULT_SEED,
    progress: Progress = QUIET,
    into: list[CpuPoint] | None = None,
    beat: dict[str, Sequence[float | None]] | None = None,
    role: str = "scaling",
    blas: dict[str, Any] | None = None,
    worker: Callable[[dict[str, Any], int], Iterator[dict[str, Any]]] | None = None,
) -> list[CpuPoint]:
    """Every precision, thread count and shape, appended to `into` as measured (so Ctrl-C,
    which propagates, keeps them). With `beat` (per precision, a FLOP/s per shape), each thread
    count stops after the first shape it runs slower than that: the offload ladder. `blas` gets
    the BLAS the workers used (threadpoolctl's account). `worker` runs one worker's task
    (run_worker; the simulated engine's model)."""
    cores = usable_cores()
    out: list[CpuPoint] = [] if into is None else into
    for precision in precisions:
        if precision not in DTYPES:
            out += [
                CpuPoint(
                    precision, s.m, s.n, s.k, 0, "skipped", WAIVED.format(p=precision), role=role
                )
                for s in shapes
            ]
            continue
        for t in threads:
            spec = _spec(
                precision,
                shapes,
                cores[:t],
                target_s,
                trials,
                seed,
                (beat or {}).get(precision, ()),
            )
            for r in (worker or run_worker)(spec, t):
                if "blas" in r:
                    if blas is not None:
                        blas.update(r["blas"])
                    continue
                point = CpuPoint(
                    precision,
                    r["m"],
                    r["n"],
                    r["k"],
                    t,
                    "complete",
                    None,
                    tuple(r["seconds"]),
                    bool(r["verified"]),
                    role,
                )
                out.append(point)
                flops = point.flops or 0.0
                progress.step(
                    f"CPU {precision} {point.shape.label} {t} threads: {flops / 1e9:.0f} GFLOP/s"
                )
    return out
