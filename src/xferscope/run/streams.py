"""Concurrent streams for `xferscope run`: several transfers timed alone, then all at once (H2D
beside D2H, the peer-to-peer matrix, every GPU to and from the host), each result recorded as a
Concurrent measurement, a failure included."""

from __future__ import annotations

from typing import Any

from ..core import cases, plan
from ..core.engine import Engine, Transfer
from ..core.errors import AllocationError, EngineError
from .plans import RunPlan
from .records import Concurrent, Stream


def _stream_iterations(transfer: Transfer, size: int, target_s: float) -> tuple[int, float]:
    """Iterations so one trial lasts about target_s (within what can be held), and the per-copy
    device time of one stream alone (plan.calibrate, after a warm-up copy)."""
    transfer.time("device", size, 1)  # warm-up
    copies = transfer.copies_per_iteration
    most = int(cases.LIMITS["most_held_copies"]) // copies
    calibration = plan.calibrate(
        lambda n: transfer.time("device", size, n).seconds, first=3, most=most
    )
    alone = calibration.per_iteration_s / copies
    return max(1, min(most, round(target_s / alone))), alone


def measure_streams(
    engine: Engine, transfers: list[Transfer], labels: list[str], size: int, plan_: RunPlan
) -> tuple[Stream, ...]:
    """Each transfer's copies alone, then all at once; verified afterwards."""
    iterations, alones = int(cases.LIMITS["most_held_copies"]), []
    for t in transfers:
        n, alone = _stream_iterations(t, size, plan_.stream_target_s)
        iterations = min(iterations, n)
        alones.append(alone)

    def trial() -> list[float]:
        """Every stream's per-copy time in one trial, all at once."""
        if len(transfers) == 1:
            r = transfers[0].time("device", size, iterations)
            seconds, timed_out = [r.seconds], r.blocking_timed_out
        else:
            seconds, timed_out = engine.time_concurrently(transfers, size, iterations)
        if timed_out:
            raise EngineError("the blocking kernel timed out while streams were queued")
        return [
            s / (iterations * t.copies_per_iteration)
            for s, t in zip(seconds, transfers, strict=True)
        ]

    trials = plan.run_trials(trial, plan_.stream_trials)
    samples = [[t[i] for t in trials] for i in range(len(transfers))]
    for t, label in zip(transfers, labels, strict=True):
        if not t.verify(size).ok:
            raise EngineError(f"{label}: verification failed after concurrent copies")
    return tuple(
        Stream(
            label,
            t.device,
            t.direction,
            t.peer,
            size,
            tuple(s),
            alone if len(transfers) > 1 else None,
        )
        for t, label, s, alone in zip(transfers, labels, samples, alones, strict=True)
    )


def _open(
    engine: Engine,
    device: int,
    direction: str,
    mechanism: str,
    size: int,
    peer: int = -1,
    peer_access: bool = True,
) -> Transfer:
    memory = "device" if direction == "p2p" else "pinned"
    return engine.open_transfer(
        device, direction, memory, mechanism, size, 0, True, peer, peer_access
    )


def concurrent(
    engine: Engine,
    kind: str,
    label: str,
    specs: list[tuple[Any, ...]],
    size: int,
    plan_: RunPlan,
    mechanism: str = "async",
    peer_access: bool | None = None,
) -> Concurrent:
    """Opens one transfer per spec (device, direction, stream label[, peer]), measures them
    together and closes them. A failure is recorded in the result, not raised."""
    cases.experiment(kind)  # every experiment is declared in the case table
    transfers: list[Transfer] = []
    try:
        for spec in specs:
            device, direction, _ = spec[:3]
            peer = spec[3] if len(spec) > 3 else -1
            transfers.append(
                _open(engine, device, direction, mechanism, size, peer, peer_access is not False)
            )
        streams = measure_streams(engine, transfers, [s[2] for s in specs], size, plan_)
        return Concurrent(kind, label, mechanism, peer_access, streams=streams)
    except (AllocationError, EngineError) as exc:
        return Concurrent(kind, label, mechanism, peer_access, "failed", str(exc), streams=())
    finally:
        for t in transfers:
            t.close()
