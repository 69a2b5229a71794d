"""cuBLASLt's choice among its algorithms for a GEMM, kept between runs.

Timing 8 of the heuristic's algorithms for each of the 6 GEMMs of `run`'s check took about
1.6 s of an H100 run (fp64 and fp32 8192^3 take 18-22 ms each), and 0.5 s since each long
GEMM's first launch is also its forward pass and a tuning stands for the trials' warm-up
(check 2.29 s on a first run against 1.78 s with the ranks kept,
benchmarks/results/run-h100-20261126.json). The heuristic's list, and so an
algorithm's rank in it, is the same for the same GEMM on the same GPU, driver and cuBLASLt, as
PyTorch's TunableOp assumes when it keeps its results in a file: a check that tuned a GEMM once
keeps the rank it chose here, and the next run takes that algorithm without timing the others
(its point says so: "reused"). A rank that no longer runs is tuned again.

The file is $XFERSCOPE_CACHE/gemm-algorithms.json ($XDG_CACHE_HOME/xferscope, or
~/.cache/xferscope, by default); deleting it makes the next check time every candidate again.
A file that does not parse, a rank out of range and a path that is not a regular file are
treated as nothing kept (the GEMM is tuned); one that cannot be written costs only the time the
next run spends tuning. The simulated engine keeps none.
"""

from __future__ import annotations

from typing import Any

from ..core import cache, nvml
from ..core.engine import Engine

FILE = "gemm-algorithms.json"


def key(engine: Engine, device: int, blas_version: int | None, gemm: tuple[Any, ...]) -> str | None:
    """What a choice is kept under: the GPU (its UUID), the driver, cuBLASLt's version and the
    GEMM (precision, m, n, k, op(A), op(B), candidates timed); None where one is unknown (the
    simulated engine, no NVML), and then nothing is kept."""
    if engine.simulated or blas_version is None:
        return None
    driver = nvml.driver_version()
    uuid = engine.device_info(device).get("uuid")
    if not driver or not uuid:
        return None
    return "|".join(str(part) for part in (uuid, driver, blas_version, *gemm))


# cuBLASLt's heuristic is asked for 8 algorithms (engine/src/gemm/algorithm.cpp); a rank beyond any
# list it could give is not one it chose
MOST_RANK = 64


def known(name: str | None) -> int | None:
    """The rank kept for `name`, if any."""
    if name is None:
        return None
    entry = cache.load(FILE).get(name)
    rank = entry.get("rank") if isinstance(entry, dict) else None
    valid = isinstance(rank, int) and not isinstance(rank, bool) and 0 <= rank < MOST_RANK
    return rank if valid else None


def remember(name: str | None, rank: int, candidates: int) -> None:
    """Keeps the rank a tuning chose; a file that cannot be written costs nothing but the time
    the next run spends tuning again."""
    if name is None:
        return
    data = cache.load(FILE)
    data[name] = {"rank": rank, "candidates": candidates}
    cache.store(FILE, data)
