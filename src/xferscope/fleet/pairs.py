"""GPU to GPU across the fleet's ranks through NCCL: every pair of ranks in turn (a ring when
the fleet is large), both directions, bandwidth on the receiver's events after a handshake,
latency by ping-pong of small messages, every stream's data checked on arrival. Pairs on one
node (NVLink or PCIe) and across nodes (InfiniBand or RoCE, with GPUDirect RDMA where NCCL finds
it) are judged against their own kind's median."""

from __future__ import annotations

import statistics
from typing import Any

from ..core.engine import Engine
from .records import PairResult

PAIR_BYTES = 64 << 20  # nccl-tests' large end: the link's bandwidth, not its latency
PAIR_ITERATIONS = 20
WARMUP_ITERATIONS = 3
LATENCY_BYTES = 8
LATENCY_ITERATIONS = 200
ALL_PAIRS_UP_TO = 16  # more ranks than this: a ring (the pairs grow as N^2)
SLOW_PAIR = 0.8  # a pair under this share of its kind's median bandwidth is slow


def plan(size: int, mode: str) -> list[tuple[int, int]]:
    """The pairs to measure: every pair (all), each rank with the next (ring), or none."""
    if size < 2 or mode == "none":
        return []
    if mode == "auto":
        mode = "all" if size <= ALL_PAIRS_UP_TO else "ring"
    if mode == "ring":
        return sorted({tuple(sorted((r, (r + 1) % size))) for r in range(size)})  # type: ignore[misc]
    return [(a, b) for a in range(size) for b in range(a + 1, size)]


def measure(
    engine: Engine,
    rank: int,
    size: int,
    device: int,
    unique_id: bytes,
    pairs: list[tuple[int, int]],
) -> list[dict[str, Any]]:
    """This rank's part of every pair it belongs to: what it measured as receiver (bandwidth,
    data checked) and as the pair's first rank (latency)."""
    comm = engine.pair_comm(unique_id, size, rank, device, PAIR_BYTES)
    out: list[dict[str, Any]] = []
    try:
        for a, b in pairs:
            if rank not in (a, b):
                continue  # a send/recv involves its two ranks only
            for source, destination in ((a, b), (b, a)):
                comm.stream(source, destination, PAIR_BYTES, WARMUP_ITERATIONS)
                seconds = comm.stream(source, destination, PAIR_BYTES, PAIR_ITERATIONS)
                if rank == destination:
                    out.append(
                        {
                            "source": source,
                            "destination": destination,
                            "bandwidth_bps": PAIR_BYTES * PAIR_ITERATIONS / seconds,
                            "verified": comm.mismatches(PAIR_BYTES) == 0,
                        }
                    )
            comm.ping_pong(a, b, LATENCY_BYTES, 10)
            seconds = comm.ping_pong(a, b, LATENCY_BYTES, LATENCY_ITERATIONS)
            if rank == a:
                out.append(
                    {"source": a, "destination": b, "latency_s": seconds / (2 * LATENCY_ITERATIONS)}
                )
    finally:
        comm.close()
    return out


def merge(parts: list[dict[str, Any]], hosts: dict[int, str]) -> list[PairResult]:
    """Every rank's parts, one result per direction of each pair."""
    bandwidth: dict[tuple[int, int], tuple[float, bool]] = {}
    latency: dict[tuple[int, int], float] = {}
    for p in parts:
        key = (int(p["source"]), int(p["destination"]))
        if "bandwidth_bps" in p:
            bandwidth[key] = (float(p["bandwidth_bps"]), bool(p["verified"]))
        if "latency_s" in p:
            latency[key] = latency[key[::-1]] = float(p["latency_s"])
    out = []
    for key in sorted(set(bandwidth) | set(latency)):
        bw = bandwidth.get(key)
        kind = "intra-node" if hosts.get(key[0]) == hosts.get(key[1]) else "inter-node"
        out.append(
            PairResult(
                key[0], key[1], kind, bw[0] if bw else None, latency.get(key), bw[1] if bw else None
            )
        )
    return out


def slow_pairs(results: list[PairResult]) -> list[tuple[PairResult, float]]:
    """Pairs under SLOW_PAIR of their kind's median bandwidth, with that median."""
    out = []
    for kind in {r.kind for r in results}:
        mine = [r for r in results if r.kind == kind and r.bandwidth_bps]
        if len(mine) < 3:
            continue
        median = statistics.median(r.bandwidth_bps or 0.0 for r in mine)
        out += [(r, median) for r in mine if (r.bandwidth_bps or 0) < SLOW_PAIR * median]
    return out
