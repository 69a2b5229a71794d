"""GEMM on the CPU through the BLAS NumPy uses (named, with its version, by threadpoolctl), on
1, 2, 4, ... up to every core this process may use, each in a worker process whose BLAS threads
are pinned to that many cores (cpu_worker.py):
seed 003's Figure 9 (MKL on 1, 2, 4 and 8 threads) for this machine. The same shapes and method
as the GPU's (calibration, trials of a target time, the median), verified on a sample of outputs
against a double-precision dot product."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..core import interrupt, stats
from ..core.errors import XferscopeError
from ..core.native import engine_module
from ..core.progress import QUIET, Progress
from ..documents.reader import Field
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

    @property
    def shape(self) -> Shape:
        return Shape(self.m, self.n, self.k)

    @property
    def flops(self) -> float | None:
        return self.shape.flops / stats.median(self.seconds) if self.seconds else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "precision": self.precision,
            "m": self.m,
            "n": self.n,
            "k": self.k,
            "threads": self.threads,
            "status": self.status,
            "error": self.error,
            "seconds": list(self.seconds),
            "verified": self.verified,
            "tflops": None if self.flops is None else self.flops / 1e12,
        }

    @classmethod
    def read(cls, x: Field) -> CpuPoint:
        return cls(
            precision=x["precision"].string(),
            m=x["m"].integer(),
            n=x["n"].integer(),
            k=x["k"].integer(),
            threads=x["threads"].integer(),
            status=x["status"].string(),
            error=x["error"].optional_string(),
            seconds=x["seconds"].numbers(),
            verified=x["verified"].optional_boolean(),
        )


# The BLAS's thread-count variables, set for each worker process.
THREAD_VARIABLES = (
    "OPENBLAS_NUM_THREADS",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "BLIS_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
)
POLL_S = 0.05  # how often a stop is looked for while a worker runs


def run_worker(spec: dict[str, Any], threads: int) -> dict[str, Any]:
    """One measurement in a worker process with `threads` BLAS threads pinned to as many cores;
    Ctrl-C ends the worker at once and propagates."""
    env = dict(os.environ, **{name: str(threads) for name in THREAD_VARIABLES})
    proc = subprocess.Popen(
        [sys.executable, "-m", "xferscope.gemm.cpu_worker", json.dumps(spec)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        while proc.poll() is None:
            interrupt.check()
            time.sleep(POLL_S)
        out, err = proc.communicate()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if proc.returncode != 0:
        last = (err.strip().splitlines() or ["no message"])[-1]
        raise XferscopeError(f"the CPU GEMM worker failed: {last}")
    return dict(json.loads(out))


def blas_info() -> dict[str, Any]:
    """The BLAS NumPy uses (threadpoolctl's account of it, from a worker process)."""
    spec = _spec("fp64", Shape(8, 8, 8), usable_cores()[:1], 0.0, 1, 0)
    return dict(run_worker(spec, 1)["blas"])


def _spec(
    precision: str, s: Shape, cores: Sequence[int], target_s: float, trials: int, seed: int
) -> dict[str, Any]:
    return {
        "precision": precision,
        "m": s.m,
        "n": s.n,
        "k": s.k,
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
    seed: int = 0x5EED,
    progress: Progress = QUIET,
    into: list[CpuPoint] | None = None,
) -> list[CpuPoint]:
    """Every precision, shape and thread count, appended to `into` as measured (so Ctrl-C,
    which propagates, keeps them)."""
    cores = usable_cores()
    out: list[CpuPoint] = [] if into is None else into
    for precision in precisions:
        if precision not in DTYPES:
            out += [
                CpuPoint(precision, s.m, s.n, s.k, 0, "skipped", WAIVED.format(p=precision))
                for s in shapes
            ]
            continue
        for s in shapes:
            for t in threads:
                spec = _spec(precision, s, cores[:t], target_s, trials, seed)
                result = run_worker(spec, t)
                point = CpuPoint(
                    precision,
                    s.m,
                    s.n,
                    s.k,
                    t,
                    "complete",
                    None,
                    tuple(result["seconds"]),
                    bool(result["verified"]),
                )
                out.append(point)
                flops = point.flops or 0.0
                progress.step(f"CPU {precision} {s.label} {t} threads: {flops / 1e9:.0f} GFLOP/s")
    return out
