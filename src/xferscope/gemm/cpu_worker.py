"""One CPU GEMM measurement in a process of its own (`python -m xferscope.gemm.cpu_worker
SPEC`), so the BLAS starts with exactly the threads asked for, all pinned to that many cores:
the affinity and the BLAS's thread variables are set before NumPy loads. A BLAS that keeps idle
threads spinning would otherwise share the cores it is pinned to with them. Prints one JSON
object: the seconds per GEMM of each trial, whether a sample of outputs matched a
double-precision reference, and the BLAS threadpoolctl saw."""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any


def main(spec: dict[str, Any]) -> dict[str, Any]:
    os.sched_setaffinity(0, set(spec["cores"]))  # before the BLAS starts its threads
    import numpy as np
    from threadpoolctl import threadpool_info

    from ..core import plan

    dtype = {"fp64": np.float64, "fp32": np.float32}[spec["precision"]]
    m, n, k = spec["m"], spec["n"], spec["k"]
    rng = np.random.default_rng(spec["seed"])
    a = (rng.random((m, k)) * 2 - 1).astype(dtype)
    b = (rng.random((k, n)) * 2 - 1).astype(dtype)
    c = np.empty((m, n), dtype=dtype)

    def run(count: int) -> float:
        start = time.perf_counter()
        for _ in range(count):
            np.matmul(a, b, out=c)
        return time.perf_counter() - start

    calibration = plan.calibrate(run, least_s=spec["target_s"] / 4)
    per = calibration.per_iteration_s
    repeats = plan.repeats_for(spec["target_s"], per)
    trials = 1 if per > spec["most_trial_s"] else spec["trials"]
    seconds = [run(repeats) / repeats for _ in range(trials)]
    rows, cols = rng.integers(0, m, 64), rng.integers(0, n, 64)
    a64, b64 = a[rows].astype(np.float64), b[:, cols].astype(np.float64)
    reference = np.einsum("ik,ki->i", a64, b64)
    magnitude = np.einsum("ik,ki->i", np.abs(a64), np.abs(b64))
    error = np.abs(c[rows, cols].astype(np.float64) - reference) / np.maximum(magnitude, 1e-300)
    blas: dict[str, Any] = next((p for p in threadpool_info() if p.get("user_api") == "blas"), {})
    return {
        "seconds": seconds,
        "verified": bool(np.all(error <= spec["tolerance"])),
        "blas": {
            key: blas.get(key)
            for key in (
                "internal_api",
                "version",
                "threading_layer",
                "architecture",
                "num_threads",
                "filepath",
            )
        },
    }


if __name__ == "__main__":
    print(json.dumps(main(json.loads(sys.argv[1]))))
