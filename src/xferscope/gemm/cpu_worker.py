"""One CPU GEMM measurement in a process of its own (`python -m xferscope.gemm.cpu_worker
SPEC`, or started ahead with `--ahead CORES` and given its SPEC on stdin, so that loading NumPy
overlaps the GPU's work), so the BLAS starts with exactly the threads asked for, all pinned to
that many cores:
the affinity and the BLAS's thread variables are set before NumPy loads. A BLAS that keeps idle
threads spinning would otherwise share the cores it is pinned to with them. Prints a JSON line
per shape as it is done: the seconds per GEMM of each trial, whether a sample of outputs matched
a double-precision reference; then one with the BLAS threadpoolctl saw."""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any


def main(spec: dict[str, Any] | None, cores: list[int] | None = None) -> None:
    """Measures `spec`; a worker started ahead (spec None) pins itself to `cores`, loads NumPy
    and reads its spec from stdin when it comes (the same cores)."""
    os.sched_setaffinity(0, set(spec["cores"] if spec else cores or []))  # before the BLAS starts
    import numpy as np
    from threadpoolctl import threadpool_info

    from ..core import plan

    if spec is None:
        line = sys.stdin.readline()
        if not line.strip():
            return  # not needed after all
        spec = json.loads(line)

    dtype = {"fp64": np.float64, "fp32": np.float32}[spec["precision"]]
    rng = np.random.default_rng(spec["seed"])
    beat = spec.get("beat") or []
    for index, (m, n, k) in enumerate(spec["shapes"]):
        a = (rng.random((m, k)) * 2 - 1).astype(dtype)
        b = (rng.random((k, n)) * 2 - 1).astype(dtype)
        c = np.empty((m, n), dtype=dtype)

        def run(count: int) -> float:
            start = time.perf_counter()
            for _ in range(count):
                np.matmul(a, b, out=c)  # noqa: B023 (run is called before the next shape)
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
        got = c[rows, cols].astype(np.float64)
        error = np.abs(got - reference) / np.maximum(magnitude, 1e-300)
        _emit(
            {
                "m": m,
                "n": n,
                "k": k,
                "seconds": seconds,
                "verified": bool(np.all(error <= spec["tolerance"])),
            }
        )
        if beaten(m, n, k, seconds, beat[index] if index < len(beat) else None):
            break
    blas: dict[str, Any] = next((p for p in threadpool_info() if p.get("user_api") == "blas"), {})
    keys = ("internal_api", "version", "threading_layer", "architecture", "num_threads", "filepath")
    _emit({"blas": {key: blas.get(key) for key in keys}})


def beaten(m: int, n: int, k: int, seconds: list[float], rival: float | None) -> bool:
    """The offload ladder's stop: this CPU GEMM (its median trial) ran slower than `rival`
    FLOP/s, the GPU's at that size."""
    return rival is not None and 2.0 * m * n * k / sorted(seconds)[len(seconds) // 2] < rival


def _emit(record: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(record) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    if sys.argv[1] == "--ahead":  # started ahead: `--ahead CORES`, the spec on stdin
        main(None, json.loads(sys.argv[2]))
    else:
        main(json.loads(sys.argv[1]))
