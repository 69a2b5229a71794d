"""GEMM on the CPU through the BLAS NumPy uses (named, with its version, by threadpoolctl), on
1, 2, 4, ... up to every core this process may use, the BLAS threads pinned to that many cores:
seed 003's Figure 9 (MKL on 1, 2, 4 and 8 threads) for this machine. The same shapes and method
as the GPU's (calibration, trials of a target time, the median), verified on a sample of outputs
against a double-precision dot product."""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core import plan, stats
from ..core.native import engine_module
from ..core.progress import QUIET, Progress
from ..documents.reader import Field
from .shapes import Shape

_e = engine_module()
_TOLERANCE = {name: tol for name, _, _, _, tol, _ in _e.GEMM_PRECISIONS}
DTYPES: dict[str, Any] = {"fp64": np.float64, "fp32": np.float32}
WAIVED = "NumPy's BLAS has no {p} GEMM (CPUs run fp64 and fp32)"
MOST_TRIAL_S = 2.0  # a GEMM longer than this gets one trial


def blas_info() -> dict[str, Any]:
    """The BLAS NumPy calls: its name, version, threading layer and file."""
    from threadpoolctl import threadpool_info

    np.ones((2, 2)) @ np.ones((2, 2))  # loads the BLAS if it is not yet
    for pool in threadpool_info():
        if pool.get("user_api") == "blas":
            return {
                k: pool.get(k)
                for k in (
                    "internal_api",
                    "version",
                    "threading_layer",
                    "architecture",
                    "num_threads",
                    "filepath",
                )
            }
    return {"internal_api": None, "error": "NumPy uses no BLAS that threadpoolctl knows"}


def usable_cores() -> list[int]:
    return sorted(os.sched_getaffinity(0))


def thread_counts(cores: int) -> tuple[int, ...]:
    """1, 2, 4, ... and every core."""
    counts, n = [], 1
    while n < cores:
        counts.append(n)
        n *= 2
    return (*counts, cores)


@contextmanager
def pinned(threads: int, cores: Sequence[int]) -> Iterator[None]:
    """The BLAS limited to `threads` threads, and every thread of this process pinned to the
    first `threads` usable cores (the pool's threads included); put back afterwards."""
    from threadpoolctl import threadpool_limits

    chosen = set(cores[:threads])
    tasks = [int(t) for t in os.listdir("/proc/self/task")]
    before = {t: os.sched_getaffinity(t) for t in tasks}
    try:
        with threadpool_limits(limits=threads, user_api="blas"):
            for t in [int(x) for x in os.listdir("/proc/self/task")]:
                with suppress(OSError):  # a thread that ended meanwhile
                    os.sched_setaffinity(t, chosen)
            yield
    finally:
        for t, cpus in before.items():
            with suppress(OSError):
                os.sched_setaffinity(t, cpus)


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


def _verified(a: np.ndarray, b: np.ndarray, c: np.ndarray, precision: str, seed: int) -> bool:
    rng = np.random.default_rng(seed)
    rows = rng.integers(0, a.shape[0], 64)
    cols = rng.integers(0, b.shape[1], 64)
    a64, b64 = a[rows].astype(np.float64), b[:, cols].astype(np.float64)
    reference = np.einsum("ik,ki->i", a64, b64)
    magnitude = np.einsum("ik,ki->i", np.abs(a64), np.abs(b64))
    error = np.abs(c[rows, cols].astype(np.float64) - reference) / np.maximum(magnitude, 1e-300)
    return bool(np.all(error <= _TOLERANCE[precision]))


def _per_run(run: Callable[[int], float], repeats: int) -> float:
    return run(repeats) / repeats


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
    rng = np.random.default_rng(seed)
    for precision in precisions:
        if precision not in DTYPES:
            out += [
                CpuPoint(precision, s.m, s.n, s.k, 0, "skipped", WAIVED.format(p=precision))
                for s in shapes
            ]
            continue
        for s in shapes:
            dtype = DTYPES[precision]
            a = (rng.random((s.m, s.k)) * 2 - 1).astype(dtype)
            b = (rng.random((s.k, s.n)) * 2 - 1).astype(dtype)
            c = np.empty((s.m, s.n), dtype=dtype)
            for t in threads:

                def run(n: int, a: Any = a, b: Any = b, c: Any = c) -> float:
                    start = time.perf_counter()
                    for _ in range(n):
                        np.matmul(a, b, out=c)
                    return time.perf_counter() - start

                with pinned(t, cores):
                    calibration = plan.calibrate(run, least_s=target_s / 4)
                    per = calibration.per_iteration_s
                    repeats = plan.repeats_for(target_s, per)
                    count = 1 if per > MOST_TRIAL_S else trials
                    seconds = plan.run_trials(functools.partial(_per_run, run, repeats), count)
                ok = _verified(a, b, c, precision, seed)
                out.append(
                    CpuPoint(precision, s.m, s.n, s.k, t, "complete", None, tuple(seconds), ok)
                )
                flops = out[-1].flops or 0.0
                progress.step(f"CPU {precision} {s.label} {t} threads: {flops / 1e9:.0f} GFLOP/s")
    return out
